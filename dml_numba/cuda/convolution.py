"""Convolution on CUDA: each thread computes one output position for a block of up to four
output channels of one group (each input tap read once for all of them, from registers);
BACKWARD in gather form (no atomics)."""
from .._registry import register
from ..elements.convolution import channel_block, conv_element
from ..ops.convolution import ConvolutionOperatorDesc
from ._emit import CudaKernel, emit_reduction, make_key


def emit(key) -> str:
    args = "x, w, b, y" if key.desc.bias_tensor is not None else "x, w, y"
    return emit_reduction(key, args, "m", conv_element, channels=channel_block(key.desc))


@register(ConvolutionOperatorDesc, "cuda")
def lower(desc, options):
    key = make_key(desc, options)
    dt, rank = desc.input_tensor.dtype, desc.input_tensor.rank
    n_args = 4 if desc.bias_tensor is not None else 3
    return CudaKernel(key, emit(key), [(dt, rank)] * n_args,
                      desc.output_tensor.element_count // channel_block(desc))
