"""GEMM, vectorised: ``numpy.matmul`` in float64 over the batch axes, then alpha, beta * C and
the fused activation."""
from __future__ import annotations

import numpy as np

from ..ops.gemm import GemmOperatorDesc
from ._activation import apply_activation
from ._kernel import vectorized


@vectorized(GemmOperatorDesc)
def gemm(desc, a, b, c=None):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    if desc.trans_a:
        a64 = np.swapaxes(a64, -1, -2)
    if desc.trans_b:
        b64 = np.swapaxes(b64, -1, -2)
    y = desc.alpha * np.matmul(a64, b64)
    if c is not None:
        y = y + desc.beta * c.astype(np.float64)
    return apply_activation(desc.fused_activation, y).astype(a.dtype)
