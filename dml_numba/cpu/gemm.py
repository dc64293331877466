"""GEMM on the CPU: per batch, the product through BLAS (``np.dot`` inside the kernel: Numba
calls SciPy's BLAS), then one (parallel) pass for alpha, beta * C and the fused activation."""
from __future__ import annotations

import numpy as np

from .._codegen import SourceWriter
from .._dims import prod
from .._dtypes import accumulator
from .._registry import register
from ..ops.gemm import GemmOperatorDesc
from ._emit import CpuKernel, header, make_key, run_in_accumulator


def emit(key) -> str:
    d = key.desc
    *batch, m, n = d.output_tensor.sizes
    nb = prod(batch)
    a_s, b_s = d.a_tensor.sizes[-2:], d.b_tensor.sizes[-2:]
    c = d.c_tensor is not None
    w = SourceWriter()
    loop = header(w, key)
    with w.block(f"def kernel(a, b, {'c, ' if c else ''}y):"):
        w(f"a3 = a.reshape(({nb}, {a_s[0]}, {a_s[1]}))")
        w(f"b3 = b.reshape(({nb}, {b_s[0]}, {b_s[1]}))")
        w(f"y3 = y.reshape(({nb}, {m}, {n}))")
        if c:
            w(f"c3 = c.reshape(({nb}, {m}, {n}))")
        with w.block(f"for g in range({nb}):"):
            w(f"p = np.dot(a3[g]{'.T' if d.trans_a else ''}, b3[g]{'.T' if d.trans_b else ''})")
            with w.block(f"for i in {loop}({m}):"):
                with w.block(f"for j in range({n}):"):
                    v = "p[i, j]" if d.alpha == 1.0 else f"{d.alpha!r} * p[i, j]"
                    if c and d.beta != 0.0:
                        v += " + " + ("c3[g, i, j]" if d.beta == 1.0 else
                                      f"{d.beta!r} * c3[g, i, j]")
                    w(f"v = {v}")
                    if d.fused_activation is not None:
                        w(f"v = {d.fused_activation.expression('v')}")
                    w("y3[g, i, j] = v")
    return w.text()


@register(GemmOperatorDesc, "cpu")
class GemmKernel(CpuKernel):
    def __init__(self, desc, options):
        self.acc = accumulator(desc.a_tensor.data_type)
        rank = desc.a_tensor.rank
        count = 4 if desc.c_tensor is not None else 3
        super().__init__(make_key(desc, options, desc.flops() // 2), emit,
                         [(self.acc, rank)] * count, options)

    def __call__(self, inputs, out):
        run_in_accumulator(self.acc, lambda xs, y: self.fn(
            *[np.ascontiguousarray(a) for a in xs], y), inputs, out)
