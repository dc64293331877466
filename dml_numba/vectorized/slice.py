"""Slice1, vectorised: NumPy basic slicing, one Python slice per axis."""
from __future__ import annotations

from ..ops.slice import Slice1OperatorDesc
from ._kernel import vectorized


def _axis_slice(offset, size, stride, count):
    start = offset + (size - 1 if stride < 0 else 0)
    stop = start + stride * count  # one step past the last element read
    return slice(start, stop if stop >= 0 else None, stride)


@vectorized(Slice1OperatorDesc)
def slice1(desc, x):
    return x[tuple(_axis_slice(o, n, s, c) for o, n, s, c in
                   zip(desc.input_window_offsets, desc.input_window_sizes,
                       desc.input_window_strides, desc.output_tensor.sizes))]
