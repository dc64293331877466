"""Element-wise operators on the CPU (addition, multiplication; the activations' slice uses the
same kernel): one (parallel) loop over the flat elements (every tensor has the output's sizes:
broadcast inputs arrive as views, made contiguous), each element's value from the descriptor's
``elementwise`` steps (a sum and its fused activation)."""
from __future__ import annotations

import numpy as np

from .._codegen import SourceWriter
from .._dtypes import DataType
from .._registry import register
from ..ops.element_wise import ElementWiseAdd1OperatorDesc, ElementWiseMultiplyOperatorDesc
from ._emit import CpuKernel, bound_contiguous, header, make_key, run_in_accumulator


def emit(key) -> str:
    d = key.desc
    total = d.output_tensor.element_count
    args = [f.split("_")[0] for f in d.input_fields]  # a, b; input
    w = SourceWriter()
    loop = header(w, key)
    with w.block(f"def kernel({', '.join(args)}, y):"):
        for name in args + ["y"]:
            w(f"{name}f = {name}.reshape(({total},))")
        with w.block(f"for i in {loop}({total}):"):
            for step in d.elementwise([f"{name}f[i]" for name in args]):
                w(f"v = {step}")
            w("yf[i] = v")
    return w.text()


class ElementWiseKernel(CpuKernel):
    """An element-wise operator's kernel (``desc.elementwise``: addition, multiplication, the
    activations): float16 computed in float32 and rounded once; other types in their own."""

    def __init__(self, desc, options):
        dt = desc.output_tensor.data_type
        self.acc = np.dtype(np.float32) if dt == DataType.FLOAT16 else dt.numpy
        rank = desc.output_tensor.rank
        super().__init__(make_key(desc, options), emit,
                         [(self.acc, rank)] * (len(desc.input_fields) + 1), options)

    bound = bound_contiguous

    def __call__(self, inputs, out):
        run_in_accumulator(self.acc, lambda xs, y: self.fn(
            *(np.ascontiguousarray(x) for x in xs), y), inputs, out)


register(ElementWiseAdd1OperatorDesc, "cpu")(ElementWiseKernel)
register(ElementWiseMultiplyOperatorDesc, "cpu")(ElementWiseKernel)
