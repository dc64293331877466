"""Average pooling on the CPU: the shared pooling loop nest (:mod:`._pooling`) with average
pooling's element body (:func:`dml_numba.elements.average_pooling.pool_element`)."""
from __future__ import annotations

from .._registry import register
from ..elements.average_pooling import pool_element
from ..ops.average_pooling import AveragePooling1OperatorDesc
from ._pooling import PoolingKernel


@register(AveragePooling1OperatorDesc, "cpu")
class AveragePoolingKernel(PoolingKernel):
    element = staticmethod(pool_element)
