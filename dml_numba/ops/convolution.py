"""DML_CONVOLUTION_OPERATOR_DESC (SEMANTICS 2).

FORWARD: ``Y[n,m,o] = act(sum_{c,k} X[n, g*Cg + c, o*s + k*d - start] * Wf[m,c,k] + B[m])`` with
filter ``{C_out, C_in/G, k...}``, ``g = m // (C_out/G)``; out-of-range taps read 0. Output size
``(S + start + end - ((K-1)*d + 1)) // s + 1``.

BACKWARD (transposed): the adjoint of FORWARD with the same filter tensor and parameters, filter
``{C_in, C_out/G, k...}`` (ONNX ConvTranspose's layout, unchanged). Natural output size
``O_min = (S-1)*s + (K-1)*d + 1 - start - end``.

``Wf`` is ``W`` for CROSS_CORRELATION and ``W`` flipped along every spatial axis for
CONVOLUTION, in both directions (SEMANTICS 2.5).

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

import enum
from dataclasses import dataclass

from .._dims import dilated_extent, pooled_size, transposed_size
from .._dtypes import COMPUTE_TYPES
from .._errors import Checker
from ..tensor import TensorDesc
from ._base import (OperatorDesc, check_output_sizes, check_rank, check_same_rank,
                    check_same_type, check_tensor, check_type)
from .activation import FUSABLE_ACTIVATIONS, ActivationDesc


class ConvolutionMode(enum.IntEnum):
    """DML_CONVOLUTION_MODE."""

    CONVOLUTION = 0
    CROSS_CORRELATION = 1


class ConvolutionDirection(enum.IntEnum):
    """DML_CONVOLUTION_DIRECTION."""

    FORWARD = 0
    BACKWARD = 1


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

    @property
    def spatial_rank(self) -> int:
        return self.input_tensor.rank - 2

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
        nd = inp.rank - 2
        s = c.int_tuple("strides", self.strides, length=nd, lo=1)
        d = c.int_tuple("dilations", self.dilations, length=nd, lo=1)
        a = c.int_tuple("start_padding", self.start_padding, length=nd, lo=0)
        b = c.int_tuple("end_padding", self.end_padding, length=nd, lo=0)
        op = c.int_tuple("output_padding", self.output_padding, length=nd, lo=0)
        g = c.integer("group_count", self.group_count, lo=1)
        for name, v in zip(("strides", "dilations", "start_padding", "end_padding",
                            "output_padding", "group_count"), (s, d, a, b, op, g)):
            self._set(name, v)
        act = self.fused_activation
        if act is not None and type(act) not in FUSABLE_ACTIVATIONS:  # no subclasses: their
            c.fail("fused_activation", type(act).__name__,  # formula would be generated code
                   "expected None or one of the fusable activation descs (not a subclass): " +
                   ", ".join(t.__name__ for t in FUSABLE_ACTIVATIONS))

        n_, cin = inp.sizes[:2]
        fb, fc = flt.sizes[:2]
        k = flt.sizes[2:]
        forward = self.direction == ConvolutionDirection.FORWARD
        if cin % g:
            c.fail("group_count", g, f"expected a divisor of the input channel count {cin}")
        if forward:
            if fc * g != cin:
                c.fail("filter_tensor.sizes", flt.sizes,
                       f"expected FilterChannelCount * group_count = {fc} * {g} to equal the "
                       f"input channel count {cin} (FORWARD filter: {{C_out, C_in/G, k...}})")
            cout = fb
            if cout % g:
                c.fail("filter_tensor.sizes", flt.sizes,
                       f"expected FilterBatchCount ({fb}) divisible by group_count {g}")
            if any(op):
                c.fail("output_padding", op, "expected zeros for FORWARD (output padding only "
                                             "applies to BACKWARD convolution)")
            for i in range(nd):
                if dilated_extent(k[i], d[i]) > inp.sizes[i + 2] + a[i] + b[i]:
                    c.fail(f"filter_tensor.sizes[{i + 2}]", k[i],
                           f"the dilated kernel ({dilated_extent(k[i], d[i])}) must fit the padded"
                           f" input ({inp.sizes[i + 2]} + {a[i]} + {b[i]})")
            spatial = tuple(pooled_size(inp.sizes[i + 2], a[i], b[i], k[i], s[i], d[i])
                            for i in range(nd))
            check_output_sizes(c, "output_tensor", out, (n_, cout) + spatial,
                               "{N, FilterBatchCount, (in + start + end - ((k-1)*dilation+1)) "
                               "// stride + 1}")
        else:
            if fb != cin:
                c.fail("filter_tensor.sizes", flt.sizes,
                       f"expected FilterBatchCount to equal the input channel count {cin} "
                       "(BACKWARD filter: {C_in, C_out/G, k...})")
            cout = fc * g
            if out.sizes[:2] != (n_, cout):
                c.fail("output_tensor.sizes", out.sizes,
                       f"expected batch and channels ({n_}, {cout}) = (N, FilterChannelCount * "
                       "group_count)")
            for i in range(nd):
                o_min = transposed_size(inp.sizes[i + 2], a[i], b[i], k[i], s[i], d[i])
                if op[i] >= max(s[i], d[i]):
                    c.fail(f"output_padding[{i}]", op[i],
                           f"expected less than max(stride, dilation) = {max(s[i], d[i])}")
                o = out.sizes[i + 2]
                if o_min < 1:
                    c.fail(f"start_padding[{i}]", a[i],
                           f"the natural transposed size (in-1)*stride + (k-1)*dilation + 1 - "
                           f"start - end = {o_min} must be >= 1")
                ok = o == o_min + op[i] if op[i] else o_min <= o <= o_min + s[i] - 1
                if not ok:
                    want = (f"{o_min + op[i]} = natural size {o_min} + output_padding" if op[i]
                            else f"{o_min} to {o_min + s[i] - 1} (natural size (in-1)*stride + "
                                 "(k-1)*dilation + 1 - start - end, up to stride-1 more)")
                    c.fail(f"output_tensor.sizes[{i + 2}]", o, f"expected {want}")
        if bias is not None:
            want = (1, cout) + (1,) * nd
            if bias.sizes != want:
                c.fail("bias_tensor.sizes", bias.sizes, f"expected {want} ({{1, C_out, 1...}})")


def convolution(x, filter, bias=None, strides=None, dilations=None, start_padding=None,
                end_padding=None, output_padding=None, group_count=1,
                mode=ConvolutionMode.CROSS_CORRELATION, direction=ConvolutionDirection.FORWARD,
                fused_activation=None, *, device="cpu", out=None):
    """Convolution of ``x`` (N, C, spatial...) with ``filter``; ``bias`` is (C_out,) or
    (1, C_out, 1...). Defaults: stride 1, dilation 1, no padding, cross-correlation, forward.

    >>> import numpy as np
    >>> x = np.array([[[1, 2, 3, 4, 5]]], np.float32); w = np.array([[[1, 10, 100]]], np.float32)
    >>> convolution(x, w, strides=(2,), start_padding=(1,), end_padding=(1,), device="numpy")
    array([[[210., 432.,  54.]]], dtype=float32)
    """
    from .._api import run_functional
    from ..tensor import as_array

    x = as_array(x, "convolution", "x")
    filter = as_array(filter, "convolution", "filter")
    if bias is not None:
        bias = as_array(bias, "convolution", "bias")
    nd = getattr(x, "ndim", 0) - 2
    inputs = [x, filter]
    if bias is not None:
        if getattr(bias, "ndim", None) == 1:
            bias = bias.reshape((1, -1) + (1,) * nd)
        inputs.append(bias)

    def make_desc():
        inp = TensorDesc.like(x)
        flt = TensorDesc.like(filter)
        ones, zeros = (1,) * nd, (0,) * nd
        s = tuple(strides) if strides is not None else ones
        d = tuple(dilations) if dilations is not None else ones
        a = tuple(start_padding) if start_padding is not None else zeros
        b = tuple(end_padding) if end_padding is not None else zeros
        op = tuple(output_padding) if output_padding is not None else zeros
        c = Checker("convolution")
        m = c.enum("mode", mode, ConvolutionMode)
        direc = c.enum("direction", direction, ConvolutionDirection)
        bdesc = TensorDesc.like(bias) if bias is not None else None
        try:
            k = flt.sizes[2:]
            if direc == ConvolutionDirection.FORWARD:
                spatial = tuple(pooled_size(inp.sizes[i + 2], a[i], b[i], k[i], s[i], d[i])
                                for i in range(nd))
                cout = flt.sizes[0]
            else:
                spatial = tuple(transposed_size(inp.sizes[i + 2], a[i], b[i], k[i], s[i], d[i])
                                + op[i] for i in range(nd))
                cout = flt.sizes[1] * group_count
            out_sizes = (inp.sizes[0], cout) + spatial
            if min(out_sizes) < 1:
                raise ValueError
        except (IndexError, TypeError, ValueError, ZeroDivisionError):
            out_sizes = inp.sizes  # the desc names the offending field
        return ConvolutionOperatorDesc(inp, flt, bdesc, TensorDesc(inp.data_type, out_sizes), m,
                                       direc, s, d, a, b, op, group_count, fused_activation)

    args = (x, filter, bias, strides, dilations, start_padding, end_padding, output_padding,
            group_count, mode, direction, fused_activation)
    return run_functional("convolution", args, make_desc, tuple(inputs), device, out)
