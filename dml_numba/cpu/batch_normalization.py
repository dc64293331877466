"""Batch normalization on the CPU: a (parallel) loop over (n, c); per channel, when the
parameters are per channel, the factor ``scale / sqrt(variance + epsilon)`` and the shift worked
out once (float64), then one pass over the channel's positions with the fused activation."""
from __future__ import annotations

import numpy as np

from .._codegen import SourceWriter
from .._dims import prod
from .._dtypes import accumulator
from .._registry import register
from ..ops.batch_normalization import PARAMETERS, BatchNormalizationOperatorDesc
from ._emit import CpuKernel, bound_contiguous, header, make_key, run_in_accumulator


def emit(key) -> str:
    d = key.desc
    n_, c_ = d.input_tensor.sizes[:2]
    s_ = prod(d.input_tensor.sizes[2:])
    params = [p.removesuffix("_tensor") for p in PARAMETERS]
    w = SourceWriter()
    loop = header(w, key)
    per_position = not d.spatial
    with w.block(f"def kernel(x, {', '.join(params)}, y):"):
        w(f"xr = x.reshape(({n_}, {c_}, {s_}))")
        w(f"yr = y.reshape(({n_}, {c_}, {s_}))")
        for p, field in zip(params, PARAMETERS):
            cp = getattr(d, field).sizes[1]
            w(f"{p}r = {p}.reshape(({cp}, {s_ if per_position else 1}))")
        with w.block(f"for f in {loop}({n_ * c_}):"):
            w(f"n = f // {c_}")
            w(f"c = f % {c_}")
            at = {p: ("c" if getattr(d, field).sizes[1] > 1 else "0")
                  for p, field in zip(params, PARAMETERS)}
            pos = "s" if per_position else "0"

            def factor():
                w(f"k = numba.float64(scaler[{at['scale']}, {pos}]) / math.sqrt("
                  f"numba.float64(variancer[{at['variance']}, {pos}]) + {d.epsilon!r})")
                w(f"h = numba.float64(biasr[{at['bias']}, {pos}]) - "
                  f"numba.float64(meanr[{at['mean']}, {pos}]) * k")

            if not per_position:
                factor()
            with w.block(f"for s in range({s_}):"):
                if per_position:
                    factor()
                w("v = xr[n, c, s] * k + h")
                if d.fused_activation is not None:
                    w(f"v = {d.fused_activation.expression('v')}")
                w("yr[n, c, s] = v")
    return w.text()


@register(BatchNormalizationOperatorDesc, "cpu")
class BatchNormalizationKernel(CpuKernel):
    def __init__(self, desc, options):
        self.acc = accumulator(desc.input_tensor.data_type)
        rank = desc.input_tensor.rank
        super().__init__(make_key(desc, options), emit,
                         [(self.acc, rank)] * 6, options)

    bound = bound_contiguous

    def __call__(self, inputs, out):
        run_in_accumulator(self.acc, lambda xs, y: self.fn(
            *[np.ascontiguousarray(a) for a in xs], y), inputs, out)
