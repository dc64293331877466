"""GEMM's gradients: with ``Y = alpha op(A) op(B) + beta C``, ``d op(A) = alpha G op(B)^T``,
``d op(B) = alpha op(A)^T G`` (transposed back where TransA/TransB), ``dC = beta G``."""
from __future__ import annotations

import numpy as np

from ..ops.gemm import GemmOperatorDesc
from . import gradient


def _t(m):
    return np.swapaxes(m, -1, -2)


@gradient(GemmOperatorDesc)
def gemm_backward(d, inputs, grad):
    a, b = inputs[:2]
    oa = _t(a) if d.trans_a else a
    ob = _t(b) if d.trans_b else b
    ga = d.alpha * np.matmul(grad, _t(ob))
    gb = d.alpha * np.matmul(_t(oa), grad)
    out = [_t(ga) if d.trans_a else ga, _t(gb) if d.trans_b else gb]
    if d.c_tensor is not None:
        out.append(d.beta * grad)
    return [g.astype(a.dtype) for g in out]
