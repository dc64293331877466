"""Average pooling on CUDA: one thread per output element with the shared element body
(:func:`dml_numba.elements.average_pooling.pool_element`)."""
from __future__ import annotations

from .._registry import register
from ..elements.average_pooling import pool_element
from ..ops.average_pooling import AveragePooling1OperatorDesc
from ._pooling import pooling_lowering

register(AveragePooling1OperatorDesc, "cuda")(pooling_lowering(pool_element))
