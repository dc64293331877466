"""GEMM on CUDA: one output element a thread (grid-stride), its K products summed in the
accumulator type (float32 for float16 and float32), then alpha, beta * C and the activation."""
from __future__ import annotations

from .._codegen import SourceWriter, decompose, index
from .._dtypes import accumulator
from .._registry import register
from ..ops.gemm import GemmOperatorDesc
from ._emit import CudaKernel, element_loop, header, make_key


def emit(key) -> str:
    d = key.desc
    sizes = d.output_tensor.sizes
    batch = [f"g{i}" for i in range(len(sizes) - 2)]
    acc = accumulator(d.a_tensor.data_type).name
    c = d.c_tensor is not None
    w = SourceWriter()
    header(w, key)
    with element_loop(w, key, f"a, b, {'c, ' if c else ''}y", d.output_tensor.element_count):
        decompose(w, "f", batch + ["i", "j"], sizes)
        av = index(*batch, *(("k", "i") if d.trans_a else ("i", "k")))
        bv = index(*batch, *(("j", "k") if d.trans_b else ("k", "j")))
        w(f"acc = numba.{acc}(0.0)")
        with w.block(f"for k in range({d.k}):"):
            w(f"acc += numba.{acc}(a[{av}]) * numba.{acc}(b[{bv}])")
        v = f"{d.alpha!r} * acc"
        if c and d.beta != 0.0:
            v += f" + {d.beta!r} * numba.{acc}(c[{index(*batch, 'i', 'j')}])"
        w(f"v = {v}")
        if d.fused_activation is not None:
            w(f"v = {d.fused_activation.expression('v')}")
        w(f"y[{index(*batch, 'i', 'j')}] = v")
    return w.text()


@register(GemmOperatorDesc, "cuda")
def lower(desc, options):
    key = make_key(desc, options)
    t = desc.a_tensor
    count = 4 if desc.c_tensor is not None else 3
    return CudaKernel(key, emit(key), [(t.dtype, t.rank)] * count,
                      desc.output_tensor.element_count)
