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
    args = [f.split("_")[0] for f in d.input_fields]  # a, b; input
    load = half_load(d.output_tensor.data_type)
    w = SourceWriter()
    header(w, key)
    with element_loop(w, key, ", ".join(args + ["y"]), d.output_tensor.element_count):
        decompose(w, "f", o, sizes)
        at = index(*o)
        for step in d.elementwise([load(f"{name}[{at}]") for name in args]):
            w(f"v = {step}")
        w(f"y[{at}] = v")
    return w.text()


def lower(desc, options):
    """An element-wise operator's kernel (the activations' slice registers it too)."""
    key = make_key(desc, options)
    t = desc.output_tensor
    return CudaKernel(key, emit(key), [(t.dtype, t.rank)] * (len(desc.input_fields) + 1),
                      desc.output_tensor.element_count)


register(ElementWiseAdd1OperatorDesc, "cuda")(lower)
register(ElementWiseMultiplyOperatorDesc, "cuda")(lower)
