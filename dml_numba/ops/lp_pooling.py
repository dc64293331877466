"""DML_LP_POOLING_OPERATOR_DESC and DML_LP_POOLING1_OPERATOR_DESC (SEMANTICS 3).

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

from dataclasses import dataclass

from .._dims import dilated_extent, pooled_size, pooled_size_ceil
from .._dtypes import COMPUTE_TYPES
from .._errors import Checker
from ..tensor import TensorDesc
from ._base import OperatorDesc, check_unary_tensors

_EXT = " (FLOAT64 is a dml_numba extension)"


def _validate_pooling(c: Checker, d, dilations):
    """Check every field; store the canonical tuples on ``d`` (dilations only if it has them)."""
    inp, out = check_unary_tensors(c, d, COMPUTE_TYPES, 3, 5, _EXT)
    nd = inp.rank - 2
    strides = c.int_tuple("strides", d.strides, length=nd, lo=1)
    window = c.int_tuple("window_size", d.window_size, length=nd, lo=1)
    start = c.int_tuple("start_padding", d.start_padding, length=nd, lo=0)
    end = c.int_tuple("end_padding", d.end_padding, length=nd, lo=0)
    dil = c.int_tuple("dilations", dilations, length=nd, lo=1)
    p = c.integer("p", d.p, lo=1)
    if out.sizes[:2] != inp.sizes[:2]:
        c.fail("output_tensor.sizes", out.sizes,
               f"expected batch and channel sizes {inp.sizes[:2]} equal to the input's")
    for i in range(nd):
        n = inp.sizes[i + 2]
        if dilated_extent(window[i], dil[i]) > n + start[i] + end[i]:
            c.fail(f"window_size[{i}]", window[i],
                   f"the dilated window ({dilated_extent(window[i], dil[i])}) must fit the padded "
                   f"input ({n} + {start[i]} + {end[i]})")
        lo = pooled_size(n, start[i], end[i], window[i], strides[i], dil[i])
        hi = pooled_size_ceil(n, start[i], end[i], window[i], strides[i], dil[i])
        o = out.sizes[i + 2]
        if not lo <= o <= hi:
            c.fail(f"output_tensor.sizes[{i + 2}]", o,
                   f"expected {lo}" + (f" to {hi} (floor to ceil mode)" if hi != lo else "") +
                   " = (in + start + end - ((window-1)*dilation+1)) // stride + 1")
    for name, v in (("strides", strides), ("window_size", window), ("start_padding", start),
                    ("end_padding", end), ("dilations", dil), ("p", p)):
        if hasattr(d, name):
            d._set(name, v)


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

    def _validate(self, c):
        _validate_pooling(c, self, self.dilations)


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

    def _validate(self, c):
        nd = self.input_tensor.rank - 2 if isinstance(self.input_tensor, TensorDesc) else 0
        _validate_pooling(c, self, (1,) * max(nd, 0))

    def canonical(self):
        return LpPooling1OperatorDesc(self.input_tensor, self.output_tensor, self.strides,
                                      self.window_size, self.start_padding, self.end_padding,
                                      (1,) * len(self.strides), self.p)


def lp_pooling(x, window_size, strides=None, start_padding=None, end_padding=None,
               dilations=None, p=2, *, device="cpu", out=None):
    """LP pooling over the spatial axes of ``x`` (N, C, spatial...). Defaults: stride 1, no
    padding, dilation 1, p = 2.

    >>> import numpy as np
    >>> lp_pooling(np.array([[[-1., -2.]]], np.float32), (2,), p=1, device="numpy")
    array([[[3.]]], dtype=float32)
    """
    from .._api import run_functional
    from ..tensor import as_array

    x = as_array(x, "lp_pooling", "x")

    def make_desc():
        inp = TensorDesc.like(x)
        nd = inp.rank - 2
        ones, zeros = (1,) * nd, (0,) * nd
        stride = tuple(strides) if strides is not None else ones
        window = tuple(window_size)
        start = tuple(start_padding) if start_padding is not None else zeros
        end = tuple(end_padding) if end_padding is not None else zeros
        dil = tuple(dilations) if dilations is not None else ones
        try:
            spatial = tuple(pooled_size(n, a, b, w, s, d) for n, a, b, w, s, d in
                            zip(inp.sizes[2:], start, end, window, stride, dil))
        except (TypeError, ZeroDivisionError):
            spatial = inp.sizes[2:]
        if any(v < 1 for v in spatial) or len(spatial) != nd:
            spatial = inp.sizes[2:]  # the desc names the offending field
        outp = TensorDesc(inp.data_type, inp.sizes[:2] + spatial)
        return LpPooling1OperatorDesc(inp, outp, stride, window, start, end, dil, p)

    return run_functional("lp_pooling", (x, window_size, strides, start_padding, end_padding,
                                         dilations, p), make_desc, (x,), device, out)
