"""Element-wise addition and multiplication on CUDA: one output element a thread (grid-stride),
float16 read as float32 and stored rounded once."""
from __future__ import annotations

from .._codegen import SourceWriter, decompose, index
from .._registry import register
from ..ops.element_wise import ElementWiseAdd1OperatorDesc, ElementWiseMultiplyOperatorDesc
from ._emit import CudaKernel, element_loop, half_load, header, make_key


def emit(key) -> str:
    d = key.desc
    sizes = d.output_tensor.sizes
    o = [f"o{i}" for i in range(len(sizes))]
    load = half_load(d.a_tensor.data_type)
    w = SourceWriter()
    header(w, key)
    with element_loop(w, key, "a, b, y", d.output_tensor.element_count):
        decompose(w, "f", o, sizes)
        at = index(*o)
        w(f"v = {load(f'a[{at}]')} {d.op} {load(f'b[{at}]')}")
        activation = getattr(d, "fused_activation", None)  # ADD1's; MULTIPLY has none
        if activation is not None:
            w(f"v = {activation.expression('v')}")
        w(f"y[{at}] = v")
    return w.text()


def lower(desc, options):
    key = make_key(desc, options)
    t = desc.a_tensor
    return CudaKernel(key, emit(key), [(t.dtype, t.rank)] * 3, desc.output_tensor.element_count)


register(ElementWiseAdd1OperatorDesc, "cuda")(lower)
register(ElementWiseMultiplyOperatorDesc, "cuda")(lower)
