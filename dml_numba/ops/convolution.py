"""DML_CONVOLUTION_OPERATOR_DESC (docs/SEMANTICS.md §2).

FORWARD: ``Y[n,m,o] = act(sum_{c,k} X[n, g*Cg + c, o*s + k*d - start] * Wf[m,c,k] + B[m])`` with
filter ``{C_out, C_in/G, k...}``, ``g = m // (C_out/G)``; out-of-range taps read 0. Output size
``(S + start + end - ((K-1)*d + 1)) // s + 1``.

BACKWARD (transposed): the adjoint of FORWARD with the same filter tensor and parameters, filter
``{C_in, C_out/G, k...}`` (ONNX ConvTranspose's layout, unchanged). Natural output size
``O_min = (S-1)*s + (K-1)*d + 1 - start - end``.

``Wf`` is ``W`` for CROSS_CORRELATION and ``W`` flipped along every spatial axis for
CONVOLUTION, in both directions (docs/SEMANTICS.md §2).

Choices this implementation makes [INFERRED], each pinned by a test:

* OutputPadding (BACKWARD) only enlarges the output; every output element is computed with the
  transposed formula (what ONNX/PyTorch do; DirectML's own callers always pass 0). The output
  size must be ``O_min + output_padding``; with output_padding 0 any size in
  ``[O_min, O_min + stride - 1]`` is accepted (TF's Conv2DBackpropInput shapes).
  ``output_padding[i] < max(strides[i], dilations[i])``.
* FORWARD requires OutputPadding = 0 (it has no defined meaning there).

Data types: FLOAT32, FLOAT16 as in DirectML, and FLOAT64 as a deliberate dml_numba extension.
Ranks 3-5 (1-3 spatial dimensions; 3-D from FL4.0).
"""
from __future__ import annotations

__all__ = ["ConvolutionMode", "ConvolutionDirection", "ConvolutionOperatorDesc"]

import enum
from dataclasses import dataclass

from .._dims import dilated_extent, pooled_size, prod, transposed_size
from .._dtypes import COMPUTE_TYPES
from .._errors import Checker
from ..tensor import TensorDesc
from ._base import (  # noqa: F401 - FOLDS: the input_padding option's values, kept here too
    FOLDS,
    OperatorDesc,
    Window,
    check_rank,
    check_same_rank,
    check_same_type,
    check_tensor,
    check_type,
)
from .activation import FUSABLE_ACTIVATIONS, ActivationDesc


class ConvolutionMode(enum.IntEnum):
    """DML_CONVOLUTION_MODE."""

    CONVOLUTION = 0
    CROSS_CORRELATION = 1


class ConvolutionDirection(enum.IntEnum):
    """DML_CONVOLUTION_DIRECTION."""

    FORWARD = 0
    BACKWARD = 1


def _check_activation(c: Checker, act):
    if act is not None and type(act) not in FUSABLE_ACTIVATIONS:  # no subclasses: their
        c.fail("fused_activation", type(act).__name__,  # formula becomes generated code
               "expected None or one of the fusable activation descs (not a subclass): " +
               ", ".join(t.__name__ for t in FUSABLE_ACTIVATIONS))
    if act is not None and not act.fused:
        c.fail("fused_activation.input_tensor", act.input_tensor,
               "expected None: a fused activation's tensors are null (DirectML reads only its "
               "parameters; the operator's output is its input and output)")
    return act


def output_sizes(c: Checker, input_sizes, filter_sizes, direction, strides, dilations,
                 start_padding, end_padding, output_padding, group_count):
    """The shape rule. Returns ``(sizes, ranges)``: the output sizes a caller gets by default
    and, per spatial axis, ``(lo, hi, formula)`` of the sizes a descriptor may declare.

    FORWARD: ``(in + start + end - ((k-1)*d + 1)) // stride + 1``, channels FilterBatchCount.
    BACKWARD: ``(in-1)*stride + (k-1)*d + 1 - start - end`` (+ output_padding, or up to
    ``stride - 1`` more when output_padding is 0), channels FilterChannelCount * group_count.
    Checks every parameter against the input and filter sizes."""
    direction = c.enum("direction", direction, ConvolutionDirection)
    nd = len(input_sizes) - 2
    s = c.int_tuple("strides", strides, length=nd, lo=1)
    d = c.int_tuple("dilations", dilations, length=nd, lo=1)
    a = c.int_tuple("start_padding", start_padding, length=nd, lo=0)
    b = c.int_tuple("end_padding", end_padding, length=nd, lo=0)
    out_pad = c.int_tuple("output_padding", output_padding, length=nd, lo=0)
    g = c.integer("group_count", group_count, lo=1)
    if len(filter_sizes) != len(input_sizes):
        hint = ("; is the input's batch axis missing? x[None] adds it"
                if len(filter_sizes) == len(input_sizes) + 1 else "")
        c.fail("filter_tensor.sizes", tuple(filter_sizes),
               f"expected {len(input_sizes)} dimensions, the dimension count of input_tensor"
               + hint)
    n_, cin = input_sizes[:2]
    if cin % g:
        c.fail("group_count", g, f"expected a divisor of the input channel count {cin}")
    if direction == ConvolutionDirection.FORWARD:
        cout, ranges = _forward_ranges(c, input_sizes, filter_sizes, s, d, a, b, out_pad, g)
    else:
        cout, ranges = _backward_ranges(c, input_sizes, filter_sizes, s, d, a, b, out_pad, g)
    return (n_, cout) + tuple(r[0] for r in ranges), ranges


def _forward_ranges(c, input_sizes, filter_sizes, s, d, a, b, out_pad, g):
    """FORWARD's output channels and, per spatial axis, the one size it may declare."""
    cin, (fb, fc), k = input_sizes[1], filter_sizes[:2], filter_sizes[2:]
    ranges = []
    if fc * g != cin:
        c.fail("filter_tensor.sizes", tuple(filter_sizes),
               f"expected FilterChannelCount * group_count = {fc} * {g} to equal the "
               f"input channel count {cin} (FORWARD filter: {{C_out, C_in/G, k...}})")
    cout = fb
    if cout % g:
        c.fail("filter_tensor.sizes", tuple(filter_sizes),
               f"expected FilterBatchCount ({fb}) divisible by group_count {g}")
    if any(out_pad):
        c.fail("output_padding", out_pad, "expected zeros for FORWARD (output padding only "
                                     "applies to BACKWARD convolution)")
    for i in range(len(k)):
        if dilated_extent(k[i], d[i]) > input_sizes[i + 2] + a[i] + b[i]:
            c.fail(f"filter_tensor.sizes[{i + 2}]", k[i],
                   f"the dilated kernel ({dilated_extent(k[i], d[i])}) must fit the padded"
                   f" input ({input_sizes[i + 2]} + {a[i]} + {b[i]})")
        o = pooled_size(input_sizes[i + 2], a[i], b[i], k[i], s[i], d[i])
        ranges.append((o, o, "(in + start + end - ((k-1)*dilation+1)) // stride + 1"))
    return cout, ranges


def _backward_ranges(c, input_sizes, filter_sizes, s, d, a, b, out_pad, g):
    """BACKWARD's output channels and, per spatial axis, the sizes it may declare."""
    cin, (fb, fc), k = input_sizes[1], filter_sizes[:2], filter_sizes[2:]
    ranges = []
    if fb != cin:
        c.fail("filter_tensor.sizes", tuple(filter_sizes),
               f"expected FilterBatchCount to equal the input channel count {cin} "
               "(BACKWARD filter: {C_in, C_out/G, k...})")
    cout = fc * g
    for i in range(len(k)):
        o_min = transposed_size(input_sizes[i + 2], a[i], b[i], k[i], s[i], d[i])
        if out_pad[i] >= max(s[i], d[i]):
            c.fail(f"output_padding[{i}]", out_pad[i],
                   f"expected less than max(stride, dilation) = {max(s[i], d[i])}")
        if o_min < 1:
            c.fail(f"start_padding[{i}]", a[i],
                   f"the natural transposed size (in-1)*stride + (k-1)*dilation + 1 - "
                   f"start - end = {o_min} must be >= 1")
        if out_pad[i]:
            ranges.append((o_min + out_pad[i], o_min + out_pad[i],
                           f"natural size {o_min} + output_padding"))
        else:
            ranges.append((o_min, o_min + s[i] - 1,
                           "natural size (in-1)*stride + (k-1)*dilation + 1 - start - end, "
                           "up to stride-1 more"))
    return cout, ranges


@dataclass(frozen=True)
class ConvolutionOperatorDesc(OperatorDesc):
    """DML_CONVOLUTION_OPERATOR_DESC; bind ``(input, filter[, bias])``.

    >>> x = TensorDesc(1, (1, 1, 5)); w = TensorDesc(1, (1, 1, 3))
    >>> d = ConvolutionOperatorDesc(x, w, None, TensorDesc(1, (1, 1, 3)),
    ...     ConvolutionMode.CROSS_CORRELATION, ConvolutionDirection.FORWARD,
    ...     (2,), (1,), (1,), (1,), (0,), 1)
    """

    input_tensor: TensorDesc
    filter_tensor: TensorDesc
    bias_tensor: TensorDesc | None
    output_tensor: TensorDesc
    mode: ConvolutionMode
    direction: ConvolutionDirection
    strides: tuple
    dilations: tuple
    start_padding: tuple
    end_padding: tuple
    output_padding: tuple
    group_count: int
    fused_activation: ActivationDesc | None = None

    input_fields = ("input_tensor", "filter_tensor", "bias_tensor")

    exact = False
    batch_separable = True
    takes_addend = True

    def window(self) -> Window | None:
        """FORWARD: the filter's taps over every input channel of the group, the padding read
        as zeros; BACKWARD has none (each output gathers from the inputs whose windows reach
        it)."""
        if self.direction != ConvolutionDirection.FORWARD:
            return None
        return Window(tuple(self.filter_tensor.sizes[2:]), self.strides, self.dilations,
                      self.start_padding, self.end_padding, "all", True)

    def is_pointwise(self) -> bool:
        forward = self.direction == ConvolutionDirection.FORWARD
        return forward and self.group_count == 1 and all(
            v == 1 for v in self.filter_tensor.sizes[2:] + self.strides + self.dilations) and \
            not any(self.start_padding + self.end_padding)

    def is_depthwise(self) -> bool:
        channels = self.input_tensor.sizes[1]
        return (self.direction == ConvolutionDirection.FORWARD and self.group_count == channels
                and self.output_tensor.sizes[1] == channels)

    def flops(self) -> int:
        """Two per multiply-add: every output (FORWARD) or input (BACKWARD) element takes
        ``channels per group * taps`` of them."""
        w = self.filter_tensor.sizes
        per = w[1] * prod(w[2:])
        n = (self.output_tensor if self.direction == ConvolutionDirection.FORWARD
             else self.input_tensor).element_count
        return 2 * n * per

    def _validate(self, c):
        inp = check_tensor(c, "input_tensor", self.input_tensor)
        flt = check_tensor(c, "filter_tensor", self.filter_tensor)
        bias = check_tensor(c, "bias_tensor", self.bias_tensor, optional=True)
        out = check_tensor(c, "output_tensor", self.output_tensor)
        check_rank(c, "input_tensor", inp, 3, 5)
        check_type(c, "input_tensor", inp, COMPUTE_TYPES, " (FLOAT64 is a dml_numba extension)")
        for field, t in (("filter_tensor", flt), ("bias_tensor", bias), ("output_tensor", out)):
            if t is not None:
                check_same_type(c, field, t, inp, "input_tensor")
                check_same_rank(c, field, t, inp, "input_tensor")
        self._set("mode", c.enum("mode", self.mode, ConvolutionMode))
        self._set("direction", c.enum("direction", self.direction, ConvolutionDirection))
        self._set("fused_activation", _check_activation(c, self.fused_activation))
        nd = inp.rank - 2
        sizes, ranges = output_sizes(c, inp.sizes, flt.sizes, self.direction, self.strides,
                                     self.dilations, self.start_padding, self.end_padding,
                                     self.output_padding, self.group_count)
        for name in ("strides", "dilations", "start_padding", "end_padding", "output_padding"):
            self._set(name, tuple(int(v) for v in getattr(self, name)))
        self._set("group_count", int(self.group_count))
        cout = sizes[1]
        if out.sizes[:2] != sizes[:2]:
            c.fail("output_tensor.sizes", out.sizes,
                   f"expected batch and channels {sizes[:2]} = (N, " +
                   ("FilterBatchCount)" if self.direction == ConvolutionDirection.FORWARD
                    else "FilterChannelCount * group_count)"))
        for i, (lo, hi, why) in enumerate(ranges):
            o = out.sizes[i + 2]
            if not lo <= o <= hi:
                c.fail(f"output_tensor.sizes[{i + 2}]", o,
                       f"expected {lo}" + (f" to {hi}" if hi != lo else "") + f" ({why})")
        if bias is not None:
            want = (1, cout) + (1,) * nd
            if bias.sizes != want:
                c.fail("bias_tensor.sizes", bias.sizes, f"expected {want} ({{1, C_out, 1...}})")


@dataclass(frozen=True)
class ConvolutionGeometry:
    """What every backend derives from a convolution descriptor, derived once (:func:`geometry`).
    Pure arithmetic over the descriptor's sizes and parameters; the vectorised device keeps its
    own (it is the independent specification these are checked against)."""

    desc: ConvolutionOperatorDesc

    @property
    def forward(self) -> bool:
        return self.desc.direction == ConvolutionDirection.FORWARD

    @property
    def groups(self) -> int:
        return self.desc.group_count

    @property
    def in_channels(self) -> int:
        """Input channels per group (C_in / G)."""
        return self.desc.input_tensor.sizes[1] // self.desc.group_count

    @property
    def out_channels(self) -> int:
        """Output channels per group (C_out / G)."""
        return self.desc.output_tensor.sizes[1] // self.desc.group_count

    @property
    def kernel(self) -> tuple:
        """The window's taps along each spatial axis."""
        return tuple(self.desc.filter_tensor.sizes[2:])

    @property
    def taps(self) -> int:
        return prod(self.kernel)

    @property
    def depthwise(self) -> bool:
        """FORWARD with one input channel per group (depthwise, with any channel multiplier)."""
        return self.forward and self.desc.input_tensor.sizes[1] == self.desc.group_count

    def extents(self) -> tuple:
        """Each axis's dilated window, ``(k - 1) * dilation + 1``."""
        return tuple(dilated_extent(k, d) for k, d in zip(self.kernel, self.desc.dilations))

    def padded_sizes(self) -> tuple:
        """FORWARD: the spatial sizes of the zero-padded input the windows read, up to the last
        tap of the last output, ``(out - 1) * stride + (k - 1) * dilation + 1``."""
        d = self.desc
        return tuple((o - 1) * s + e for o, s, e in zip(d.output_tensor.sizes[2:], d.strides,
                                                         self.extents()))

    def transposed_phases(self) -> tuple:
        """BACKWARD in gather form, per spatial axis and per residue ``r`` of the output
        coordinate modulo the stride: the taps ``(k, e)`` that reach outputs
        ``o = q * stride + r``, reading input ``a = q + e`` (``r + start - k * dilation``
        divisible by the stride, ``e`` the quotient)."""
        d = self.desc
        return tuple(
            tuple(tuple((k, (r + p - k * dl) // s) for k in range(k_n) if (r + p - k * dl) % s == 0)
                  for r in range(s))
            for s, dl, p, k_n in zip(d.strides, d.dilations, d.start_padding, self.kernel))


def geometry(desc: ConvolutionOperatorDesc) -> ConvolutionGeometry:
    """The :class:`ConvolutionGeometry` of ``desc``."""
    return ConvolutionGeometry(desc)
