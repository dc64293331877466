"""Max pooling on CUDA: one thread per output element with the shared element body
(:func:`dml_numba.elements.max_pooling.pool_element`)."""
from __future__ import annotations

from .._registry import register
from ..elements.max_pooling import pool_element
from ..ops.max_pooling import MaxPooling2OperatorDesc
from ._pooling import pooling_lowering

register(MaxPooling2OperatorDesc, "cuda")(pooling_lowering(pool_element))
