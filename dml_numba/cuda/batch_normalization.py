"""Batch normalization on CUDA: one output element a thread (grid-stride), the formula in
float64 (the parameters read where their sizes are 1 at coordinate 0)."""
from __future__ import annotations

from .._codegen import SourceWriter, decompose, index
from .._registry import register
from ..ops.batch_normalization import PARAMETERS, BatchNormalizationOperatorDesc
from ._emit import CudaKernel, element_loop, header, make_key


def emit(key) -> str:
    d = key.desc
    sizes = d.output_tensor.sizes
    o = [f"o{i}" for i in range(len(sizes))]
    params = [p.removesuffix("_tensor") for p in PARAMETERS]
    w = SourceWriter()
    header(w, key)
    with element_loop(w, key, f"x, {', '.join(params)}, y", d.output_tensor.element_count):
        decompose(w, "f", o, sizes)

        def read(p, field):
            t = getattr(d, field)
            at = ["0"] + [oi if s > 1 else "0" for oi, s in zip(o[1:], t.sizes[1:])]
            return f"numba.float64({p}[{index(*at)}])"

        r = {p: read(p, f) for p, f in zip(params, PARAMETERS)}
        w(f"v = {r['scale']} * (numba.float64(x[{index(*o)}]) - {r['mean']}) / "
          f"math.sqrt({r['variance']} + {d.epsilon!r}) + {r['bias']}")
        if d.fused_activation is not None:
            w(f"v = {d.fused_activation.expression('v')}")
        w(f"y[{index(*o)}] = v")
    return w.text()


@register(BatchNormalizationOperatorDesc, "cuda")
def lower(desc, options):
    key = make_key(desc, options)
    t = desc.input_tensor
    return CudaKernel(key, emit(key), [(t.dtype, t.rank)] * 6, desc.output_tensor.element_count)
