"""Padding, vectorised: a per-axis source-index array and one fancy-indexed gather."""
from __future__ import annotations

import numpy as np

from ..ops.padding import Padding1OperatorDesc, PaddingMode
from ._kernel import vectorized


def source_index(mode: PaddingMode, n: int, start: int, end: int) -> np.ndarray:
    """Input index read by each output position along one axis (mirror modes fold forever)."""
    i = np.arange(-start, n + end)
    if mode == PaddingMode.EDGE:
        return np.clip(i, 0, n - 1)
    if mode == PaddingMode.REFLECTION:
        if n == 1:
            return np.zeros_like(i)
        period = 2 * (n - 1)
        j = np.mod(i, period)
        return np.where(j < n, j, period - j)
    if mode == PaddingMode.SYMMETRIC:
        period = 2 * n
        j = np.mod(i, period)
        return np.where(j < n, j, period - 1 - j)
    if mode == PaddingMode.WRAP:
        return np.mod(i, n)
    raise AssertionError(mode)


@vectorized(Padding1OperatorDesc)
def padding(desc, x):
    start, end = desc.start_padding, desc.end_padding
    if desc.padding_mode == PaddingMode.CONSTANT:
        shape = tuple(n + a + b for n, a, b in zip(x.shape, start, end))
        y = np.full(shape, desc.padding_value, dtype=x.dtype)
        y[tuple(slice(a, a + n) for a, n in zip(start, x.shape))] = x
        return y
    index = [source_index(desc.padding_mode, n, a, b) for n, a, b in zip(x.shape, start, end)]
    return x[np.ix_(*index)]
