"""DML_SLICE1_OPERATOR_DESC and DML_SLICE_OPERATOR_DESC (docs/SEMANTICS.md §5).

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

__all__ = ["SliceOperatorDesc", "Slice1OperatorDesc"]

from dataclasses import dataclass

from .._dims import strided_count
from .._dtypes import ALL_TYPES
from .._errors import Checker
from ..tensor import MAX_RANK, TensorDesc
from ._base import AxisMap, GatherPlan, OperatorDesc, check_unary_tensors


def _tensors(c, d):
    return check_unary_tensors(c, d, ALL_TYPES, 1, MAX_RANK)


def output_sizes(c: Checker, input_sizes, offsets, window_sizes, strides) -> tuple[int, ...]:
    """The shape rule: ``1 + (window - 1) // |stride|`` per axis, the most elements the window
    reaches. Checks that each window is non-empty and inside the input and each stride non-zero."""
    r = len(input_sizes)
    offs = c.int_tuple("input_window_offsets", offsets, length=r, lo=0)
    sizes = c.int_tuple("input_window_sizes", window_sizes, length=r, lo=1)
    steps = c.int_tuple("input_window_strides", strides, length=r, nonzero=True)
    for i in range(r):
        if offs[i] + sizes[i] > input_sizes[i]:
            c.fail(f"input_window_sizes[{i}]", sizes[i],
                   f"the window [{offs[i]}, {offs[i] + sizes[i]}) must lie inside input "
                   f"dimension {i} of size {input_sizes[i]}")
    return tuple(strided_count(n, s) for n, s in zip(sizes, steps))


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
        most = output_sizes(c, inp.sizes, self.input_window_offsets, self.input_window_sizes,
                            self.input_window_strides)
        for i, m in enumerate(most):
            if not 1 <= out.sizes[i] <= m:
                c.fail(f"output_tensor.sizes[{i}]", out.sizes[i],
                       f"expected 1 to {m} = 1 + (window - 1) // |stride| elements")
        for name in ("input_window_offsets", "input_window_sizes", "input_window_strides"):
            self._set(name, tuple(int(v) for v in getattr(self, name)))

    def gather_plan(self) -> GatherPlan:
        """Per-axis index maps: ``i = start + stride * o``."""
        return GatherPlan(tuple(AxisMap("affine", n, o, a, s) for n, o, a, s in
                                zip(self.input_tensor.sizes, self.output_tensor.sizes,
                                    self.starts(), self.input_window_strides)))

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
