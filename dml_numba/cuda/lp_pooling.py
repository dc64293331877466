"""LP pooling on CUDA: one thread per output element, the shared element body."""
from .._codegen import SourceWriter, decompose, pool_element
from .._dtypes import accumulator
from .._registry import register
from ..ops.lp_pooling import LpPooling1OperatorDesc
from ._emit import CudaKernel, element_loop, half_load, header, make_key


def emit(key) -> str:
    d = key.desc
    w = SourceWriter()
    header(w, key)
    o = [f"o{i}" for i in range(d.input_tensor.rank - 2)]
    with element_loop(w, key, "x, y", d.output_tensor.element_count):
        decompose(w, "f", ["n", "c"] + o, d.output_tensor.sizes)
        pool_element(w, d, o, acc=accumulator(d.input_tensor.data_type).name,
                     load=half_load(d.input_tensor.data_type))
    return w.text()


@register(LpPooling1OperatorDesc, "cuda")
def lower(desc, options):
    key = make_key("lp_pooling", desc, options)
    dt, rank = desc.input_tensor.dtype, desc.input_tensor.rank
    return CudaKernel(key, emit(key), [(dt, rank)] * 2, desc.output_tensor.element_count)
