"""Average pooling on CUDA: one thread per output element with the shared element body
(:func:`dml_numba.elements.average_pooling.pool_element`)."""
from __future__ import annotations

from .._registry import register
from ..elements.average_pooling import pool_element
from ..ops.average_pooling import AveragePooling1OperatorDesc
from ._emit import CudaKernel, emit_reduction, make_key


@register(AveragePooling1OperatorDesc, "cuda")
def lower(desc, options):
    key = make_key(desc, options)
    dt, rank = desc.input_tensor.dtype, desc.input_tensor.rank
    return CudaKernel(key, emit_reduction(key, "x, y", "c", pool_element), [(dt, rank)] * 2,
                      desc.output_tensor.element_count)
