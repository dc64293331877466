"""Element-wise addition and multiplication on the CPU: one (parallel) loop over the flat
elements (every tensor has the output's sizes: broadcast inputs arrive as views, made
contiguous), the fused activation on each sum."""
from __future__ import annotations

import numpy as np

from .._codegen import SourceWriter
from .._dtypes import DataType
from .._registry import register
from ..ops.element_wise import ElementWiseAdd1OperatorDesc, ElementWiseMultiplyOperatorDesc
from ._emit import CpuKernel, header, make_key, run_in_accumulator


def emit(key) -> str:
    d = key.desc
    total = d.output_tensor.element_count
    w = SourceWriter()
    loop = header(w, key)
    with w.block("def kernel(a, b, y):"):
        for name in ("a", "b", "y"):
            w(f"{name}f = {name}.reshape(({total},))")
        with w.block(f"for i in {loop}({total}):"):
            w(f"v = af[i] {d.op} bf[i]")
            activation = getattr(d, "fused_activation", None)  # ADD1's; MULTIPLY has none
            if activation is not None:
                w(f"v = {activation.expression('v')}")
            w("yf[i] = v")
    return w.text()


class ElementWiseKernel(CpuKernel):
    """float16 computed in float32 and rounded once; other types in their own."""

    def __init__(self, desc, options):
        dt = desc.a_tensor.data_type
        self.acc = np.dtype(np.float32) if dt == DataType.FLOAT16 else dt.numpy
        rank = desc.a_tensor.rank
        super().__init__(make_key(desc, options), emit,
                         [(self.acc, rank)] * 3, options)

    def __call__(self, inputs, out):
        run_in_accumulator(self.acc, lambda xs, y: self.fn(
            np.ascontiguousarray(xs[0]), np.ascontiguousarray(xs[1]), y), inputs, out)


register(ElementWiseAdd1OperatorDesc, "cpu")(ElementWiseKernel)
register(ElementWiseMultiplyOperatorDesc, "cpu")(ElementWiseKernel)
