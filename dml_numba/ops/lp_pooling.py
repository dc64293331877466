"""DML_LP_POOLING_OPERATOR_DESC and DML_LP_POOLING1_OPERATOR_DESC (docs/SEMANTICS.md §3).

``Y[n,c,o] = (sum over window taps inside the input of |X[n,c,x]|**P) ** (1/P)`` with
``x = o*Strides + k*Dilations - StartPadding`` per spatial dimension; taps in the padding
contribute 0. The absolute value is DirectML's behaviour although its page omits it
(ORT issue #6302). Output size: ``(S + start + end - ((w-1)*d + 1)) // stride + 1``; the
LP_POOLING1 page forgets the dilation, real callers do not [INFERRED].

Output sizes up to the ceil-mode size are accepted (ORT's ceil_mode shapes); the taps past the
padded end read as padding [INFERRED].

dml_numba goes beyond DirectML deliberately: FLOAT64 tensors, and 3-D tensors (one spatial
dimension) besides DirectML's 4-D and 5-D.
"""
from __future__ import annotations

__all__ = ["LpPoolingOperatorDesc", "LpPooling1OperatorDesc"]

from dataclasses import dataclass

from .._dims import dilated_extent, pooled_size, pooled_size_ceil, prod
from .._dtypes import COMPUTE_TYPES
from .._errors import Checker
from ..tensor import TensorDesc
from ._base import OperatorDesc, Window, check_unary_tensors

_EXT = " (FLOAT64 is a dml_numba extension)"


def output_ranges(c: Checker, input_sizes, strides, window_size, start_padding, end_padding,
                  dilations) -> list[tuple[int, int]]:
    """The shape rule: per spatial axis, the output sizes accepted, from the floor size
    ``(in + start + end - ((w-1)*d + 1)) // stride + 1`` to the ceil-mode size. Checks every
    parameter (one per spatial axis; the dilated window must fit the padded input)."""
    nd = len(input_sizes) - 2
    strides = c.int_tuple("strides", strides, length=nd, lo=1)
    window = c.int_tuple("window_size", window_size, length=nd, lo=1)
    start = c.int_tuple("start_padding", start_padding, length=nd, lo=0)
    end = c.int_tuple("end_padding", end_padding, length=nd, lo=0)
    dil = c.int_tuple("dilations", dilations, length=nd, lo=1)
    ranges = []
    for i in range(nd):
        n = input_sizes[i + 2]
        if dilated_extent(window[i], dil[i]) > n + start[i] + end[i]:
            c.fail(f"window_size[{i}]", window[i],
                   f"the dilated window ({dilated_extent(window[i], dil[i])}) must fit the padded "
                   f"input ({n} + {start[i]} + {end[i]})")
        ranges.append((pooled_size(n, start[i], end[i], window[i], strides[i], dil[i]),
                       pooled_size_ceil(n, start[i], end[i], window[i], strides[i], dil[i])))
    return ranges


def _validate_pooling(c: Checker, d, dilations):
    """Check every field; store the canonical tuples on ``d`` (dilations only if it has them)."""
    inp, out = check_unary_tensors(c, d, COMPUTE_TYPES, 3, 5, _EXT)
    ranges = output_ranges(c, inp.sizes, d.strides, d.window_size, d.start_padding,
                           d.end_padding, dilations)
    p = c.integer("p", d.p, lo=1)
    if out.sizes[:2] != inp.sizes[:2]:
        c.fail("output_tensor.sizes", out.sizes,
               f"expected batch and channel sizes {inp.sizes[:2]} equal to the input's")
    for i, (lo, hi) in enumerate(ranges):
        o = out.sizes[i + 2]
        if not lo <= o <= hi:
            c.fail(f"output_tensor.sizes[{i + 2}]", o,
                   f"expected {lo}" + (f" to {hi} (floor to ceil mode)" if hi != lo else "") +
                   " = (in + start + end - ((window-1)*dilation+1)) // stride + 1")
    for name in ("strides", "window_size", "start_padding", "end_padding", "dilations"):
        if hasattr(d, name):
            d._set(name, tuple(int(v) for v in getattr(d, name)))
    d._set("p", p)


@dataclass(frozen=True)
class LpPooling1OperatorDesc(OperatorDesc):
    """DML_LP_POOLING1_OPERATOR_DESC (FL6.2): LP pooling with dilations.

    >>> x = TensorDesc(1, (2, 3, 5, 4))
    >>> d = LpPooling1OperatorDesc(x, TensorDesc(1, (2, 3, 2, 3)), (2, 1), (2, 2), (0, 0),
    ...                            (0, 0), (1, 1), 2)
    """

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    strides: tuple
    window_size: tuple
    start_padding: tuple
    end_padding: tuple
    dilations: tuple
    p: int

    exact = False
    batch_separable = True

    def _validate(self, c):
        _validate_pooling(c, self, self.dilations)

    def window(self) -> Window:
        """Channel by channel; taps in the padding contribute 0 (they read as zeros)."""
        return Window(self.window_size, self.strides, self.dilations, self.start_padding,
                      self.end_padding, "same", True)

    def flops(self) -> int:
        """|x|**p, the sum and the root: counted as 2 per window tap per output element."""
        return 2 * self.output_tensor.element_count * prod(self.window_size)


@dataclass(frozen=True)
class LpPoolingOperatorDesc(OperatorDesc):
    """DML_LP_POOLING_OPERATOR_DESC (FL1.0): LP pooling; canonicalises to LP_POOLING1."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    strides: tuple
    window_size: tuple
    start_padding: tuple
    end_padding: tuple
    p: int

    exact = False
    batch_separable = True

    def window(self) -> Window:
        return self.canonical().window()

    def _validate(self, c):
        nd = self.input_tensor.rank - 2 if isinstance(self.input_tensor, TensorDesc) else 0
        _validate_pooling(c, self, (1,) * max(nd, 0))

    def canonical(self):
        return LpPooling1OperatorDesc(self.input_tensor, self.output_tensor, self.strides,
                                      self.window_size, self.start_padding, self.end_padding,
                                      (1,) * len(self.strides), self.p)
