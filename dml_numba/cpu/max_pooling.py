"""Max pooling on the CPU: the shared pooling loop nest (:mod:`._pooling`) with max pooling's
element body (:func:`dml_numba.elements.max_pooling.pool_element`)."""
from __future__ import annotations

from .._registry import register
from ..elements.max_pooling import pool_element
from ..ops.max_pooling import MaxPooling2OperatorDesc
from ._pooling import PoolingKernel


@register(MaxPooling2OperatorDesc, "cpu")
class MaxPoolingKernel(PoolingKernel):
    element = staticmethod(pool_element)
