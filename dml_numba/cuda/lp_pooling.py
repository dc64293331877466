"""LP pooling on CUDA: one thread per output element, the shared element body."""
from .._registry import register
from ..elements.lp_pooling import pool_element
from ..ops.lp_pooling import LpPooling1OperatorDesc
from ._emit import CudaKernel, emit_reduction, make_key


def emit(key) -> str:
    return emit_reduction(key, "x, y", "c",
                          lambda w, d, o, acc, load: pool_element(w, d, o, load=load))


@register(LpPooling1OperatorDesc, "cuda")
def lower(desc, options):
    key = make_key(desc, options)
    dt, rank = desc.input_tensor.dtype, desc.input_tensor.rank
    return CudaKernel(key, emit(key), [(dt, rank)] * 2, desc.output_tensor.element_count)
