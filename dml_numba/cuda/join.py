"""Join on CUDA: one output element a thread (grid-stride); its coordinate along the axis picks
the input (float16 moved as its bits)."""
from __future__ import annotations

from .._codegen import SourceWriter, decompose, index
from .._dtypes import DataType
from .._gather import storage_dtype
from .._registry import register
from ..ops.join import JoinOperatorDesc
from ._emit import CudaKernel, element_loop, header, make_key


def emit(key) -> str:
    d = key.desc
    sizes = d.output_tensor.sizes
    o = [f"o{i}" for i in range(len(sizes))]
    xs = [f"x{k}" for k in range(len(d.input_tensors))]
    w = SourceWriter()
    header(w, key)
    with element_loop(w, key, f"{', '.join(xs)}, y", d.output_tensor.element_count):
        decompose(w, "f", o, sizes)
        t = o[d.axis]
        for k, (x, at) in enumerate(zip(xs, d.offsets())):
            src = list(o)
            src[d.axis] = f"{t} - {at}" if at else t
            last = k == len(xs) - 1
            end = at + d.input_tensors[k].sizes[d.axis]
            head = "else:" if last else ("if" if k == 0 else "elif") + f" {t} < {end}:"
            with w.block(head):
                w(f"y[{index(*o)}] = {x}[{index(*src)}]")
    return w.text()


@register(JoinOperatorDesc, "cuda")
def lower(desc, options):
    key = make_key(desc, options)
    t = desc.output_tensor
    dt = storage_dtype(t.data_type)
    return CudaKernel(key, emit(key), [(dt, t.rank)] * (len(desc.input_tensors) + 1),
                      t.element_count, f16_bits=t.data_type == DataType.FLOAT16)
