"""Convolution on CUDA: one thread per output element; BACKWARD in gather form (no atomics)."""
from .._codegen import SourceWriter, conv_element, decompose
from .._dtypes import accumulator
from .._registry import register
from ..ops.convolution import ConvolutionOperatorDesc
from ._emit import CudaKernel, element_loop, half_load, header, make_key


def emit(key) -> str:
    d = key.desc
    w = SourceWriter()
    header(w, key)
    o = [f"o{i}" for i in range(d.input_tensor.rank - 2)]
    args = "x, w, b, y" if d.bias_tensor is not None else "x, w, y"
    with element_loop(w, key, args, d.output_tensor.element_count):
        decompose(w, "f", ["n", "m"] + o, d.output_tensor.sizes)
        conv_element(w, d, o, acc=accumulator(d.input_tensor.data_type).name,
                     load=half_load(d.input_tensor.data_type))
    return w.text()


@register(ConvolutionOperatorDesc, "cuda")
def lower(desc, options):
    key = make_key("convolution", desc, options)
    dt, rank = desc.input_tensor.dtype, desc.input_tensor.rank
    n_args = 4 if desc.bias_tensor is not None else 3
    return CudaKernel(key, emit(key), [(dt, rank)] * n_args, desc.output_tensor.element_count)
