"""DML_SLICE1_OPERATOR_DESC and DML_SLICE_OPERATOR_DESC (SEMANTICS 5).

SLICE1: per dimension, ``start = offset + (size - 1 if stride < 0 else 0)`` and
``Out[o] = In[start + stride * o]``. The window must lie inside the input and be non-empty, the
stride non-zero, and ``1 <= Out.Sizes[i] <= 1 + (size - 1) // |stride|`` (the page's formula
forgets the ``abs``; DirectMLX and ORT use it).

SLICE: ``Out[o] = In[Offsets + Strides * o]`` with unsigned strides and ``Sizes == Out.Sizes``.
Stride 0 is not excluded by DirectML's page; dml_numba rejects it [INFERRED], as SLICE1 does.
SLICE canonicalises to SLICE1 with window ``(Sizes - 1) * Strides + 1``.

1-8 D, all 11 data types (FL4.1).
"""
from __future__ import annotations

from dataclasses import dataclass

from .._dims import strided_count
from .._dtypes import ALL_TYPES
from ..tensor import MAX_RANK, TensorDesc
from ._base import OperatorDesc, check_unary_tensors


def _tensors(c, d):
    return check_unary_tensors(c, d, ALL_TYPES, 1, MAX_RANK)


@dataclass(frozen=True)
class Slice1OperatorDesc(OperatorDesc):
    """DML_SLICE1_OPERATOR_DESC (FL2.1): strided window, negative strides reverse.

    >>> x = TensorDesc(1, (1, 1, 4, 4))
    >>> d = Slice1OperatorDesc(x, TensorDesc(1, (1, 1, 2, 2)), (0, 0, 0, 1), (1, 1, 4, 3),
    ...                        (1, 1, -2, 2))
    """

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    input_window_offsets: tuple
    input_window_sizes: tuple
    input_window_strides: tuple

    def _validate(self, c):
        inp, out = _tensors(c, self)
        r = inp.rank
        offs = c.int_tuple("input_window_offsets", self.input_window_offsets, length=r, lo=0)
        sizes = c.int_tuple("input_window_sizes", self.input_window_sizes, length=r, lo=1)
        strides = c.int_tuple("input_window_strides", self.input_window_strides, length=r,
                              nonzero=True)
        for i in range(r):
            if offs[i] + sizes[i] > inp.sizes[i]:
                c.fail(f"input_window_sizes[{i}]", sizes[i],
                       f"the window [{offs[i]}, {offs[i] + sizes[i]}) must lie inside input "
                       f"dimension {i} of size {inp.sizes[i]}")
            most = strided_count(sizes[i], strides[i])
            if not 1 <= out.sizes[i] <= most:
                c.fail(f"output_tensor.sizes[{i}]", out.sizes[i],
                       f"expected 1 to {most} = 1 + (window - 1) // |stride| elements")
        self._set("input_window_offsets", offs)
        self._set("input_window_sizes", sizes)
        self._set("input_window_strides", strides)

    def starts(self) -> tuple[int, ...]:
        """The input coordinate that output coordinate 0 reads, per dimension."""
        return tuple(o + (n - 1 if s < 0 else 0) for o, n, s in
                     zip(self.input_window_offsets, self.input_window_sizes,
                         self.input_window_strides))


@dataclass(frozen=True)
class SliceOperatorDesc(OperatorDesc):
    """DML_SLICE_OPERATOR_DESC (FL1.0): unsigned strides; canonicalises to SLICE1."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    offsets: tuple
    sizes: tuple
    strides: tuple

    def _validate(self, c):
        inp, out = _tensors(c, self)
        r = inp.rank
        offs = c.int_tuple("offsets", self.offsets, length=r, lo=0)
        sizes = c.int_tuple("sizes", self.sizes, length=r, lo=1)
        strides = c.int_tuple("strides", self.strides, length=r, lo=0, nonzero=True)
        if sizes != out.sizes:
            c.fail("sizes", sizes, f"expected the output tensor's sizes {out.sizes}")
        for i in range(r):
            last = offs[i] + (sizes[i] - 1) * strides[i]
            if last > inp.sizes[i] - 1:
                c.fail(f"offsets[{i}]", offs[i],
                       f"the last read, offset + (size-1)*stride = {last}, must be inside input "
                       f"dimension {i} of size {inp.sizes[i]}")
        self._set("offsets", offs)
        self._set("sizes", sizes)
        self._set("strides", strides)

    def canonical(self):
        return Slice1OperatorDesc(self.input_tensor, self.output_tensor, self.offsets,
                                  tuple((n - 1) * s + 1 for n, s in zip(self.sizes, self.strides)),
                                  self.strides)


def slice1(x, offsets, sizes, strides=None, *, device="cpu", out=None):
    """Slice ``x`` through an input window (offsets, sizes, signed strides); the output holds
    every element the window reaches.

    >>> import numpy as np
    >>> slice1(np.arange(10, dtype=np.int32), (1,), (3,), (-2,), device="numpy")
    array([3, 1], dtype=int32)
    """
    from .._api import run_functional
    from ..tensor import as_array

    x = as_array(x, "slice1", "x")

    def make_desc():
        inp = TensorDesc.like(x)
        window = tuple(sizes)
        steps = tuple(strides) if strides is not None else (1,) * len(window)
        try:
            out_sizes = tuple(strided_count(n, s) for n, s in zip(window, steps))
            if len(out_sizes) != inp.rank or min(out_sizes) < 1:
                raise ValueError
        except (TypeError, ValueError, ZeroDivisionError):
            out_sizes = inp.sizes
        return Slice1OperatorDesc(inp, TensorDesc(inp.data_type, out_sizes), tuple(offsets),
                                  window, steps)

    return run_functional("slice1", (x, offsets, sizes, strides), make_desc, (x,), device, out)


def gather_plan(desc: Slice1OperatorDesc):
    """Per-axis index maps for the jitted backends: ``i = start + stride * o``."""
    from .._gather import AxisMap, GatherPlan

    return GatherPlan(tuple(AxisMap("affine", n, o, a, s) for n, o, a, s in
                            zip(desc.input_tensor.sizes, desc.output_tensor.sizes, desc.starts(),
                                desc.input_window_strides)))
