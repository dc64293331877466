"""Join on the CPU: the output seen as (outer, axis * inner) rows; per row (in parallel), each
input's row copied to its place (float16 moved as its bits)."""
from __future__ import annotations

import numpy as np

from .._codegen import SourceWriter
from .._dims import prod
from .._gather import storage_dtype
from .._registry import register
from ..ops.join import JoinOperatorDesc
from ._emit import CpuKernel, header, make_key


def emit(key) -> str:
    d = key.desc
    sizes = d.output_tensor.sizes
    outer, inner = prod(sizes[:d.axis]), prod(sizes[d.axis + 1:])
    xs = [f"x{k}" for k in range(len(d.input_tensors))]
    w = SourceWriter()
    loop = header(w, key)
    with w.block(f"def kernel({', '.join(xs)}, y):"):
        w(f"yr = y.reshape(({outer}, {sizes[d.axis] * inner}))")
        for x, t in zip(xs, d.input_tensors):
            w(f"{x}r = {x}.reshape(({outer}, {t.sizes[d.axis] * inner}))")
        with w.block(f"for f in {loop}({outer}):"):
            for x, t, at in zip(xs, d.input_tensors, d.offsets()):
                lo, hi = at * inner, (at + t.sizes[d.axis]) * inner
                w(f"yr[f, {lo}:{hi}] = {x}r[f]")
    return w.text()


@register(JoinOperatorDesc, "cpu")
class JoinKernel(CpuKernel):
    def __init__(self, desc, options):
        self.dt = storage_dtype(desc.output_tensor.data_type)
        rank = desc.output_tensor.rank
        super().__init__(make_key(desc, options), emit,
                         [(self.dt, rank)] * (len(desc.input_tensors) + 1), options)

    def __call__(self, inputs, out):
        xs = [np.ascontiguousarray(a).view(self.dt) for a in inputs]
        y = out.view(self.dt) if out.flags.c_contiguous else np.empty(out.shape, self.dt)
        self.fn(*xs, y)
        if y is not out and y.base is not out:
            out[...] = y.view(out.dtype)
