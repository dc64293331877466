"""Convolution on the CPU: a direct loop nest, parallel over (n, output channel, outer spatial).

FORWARD gathers input taps; BACKWARD is the adjoint in gather form (no scatter, no races). Bias
and the fused activation are applied in the epilogue of each output element.
"""
from __future__ import annotations

import numpy as np

from .._codegen import SourceWriter, conv_element, decompose
from .._dims import prod
from .._dtypes import DataType, accumulator
from .._registry import register
from ..ops.convolution import ConvolutionOperatorDesc
from ._emit import CpuKernel, header, make_key


def emit(key) -> str:
    d = key.desc
    n_, cout = d.output_tensor.sizes[:2]
    out = d.output_tensor.sizes[2:]
    o = [f"o{i}" for i in range(len(out))]
    w = SourceWriter()
    loop = header(w, key)
    args = "x, w, b, y" if d.bias_tensor is not None else "x, w, y"
    with w.block(f"def kernel({args}):"):
        with w.block(f"for f in {loop}({n_ * cout * prod(out[:-1])}):"):
            decompose(w, "f", ["n", "m"] + o[:-1], [n_, cout] + list(out[:-1]))
            with w.block(f"for {o[-1]} in range({out[-1]}):"):
                conv_element(w, d, o, acc=accumulator(d.input_tensor.data_type).name)
    return w.text()


class ConvolutionKernel(CpuKernel):
    def __init__(self, desc, options):
        cg = desc.input_tensor.sizes[1] // desc.group_count
        work = desc.output_tensor.element_count * cg * prod(desc.filter_tensor.sizes[2:])
        key = make_key("convolution", desc, options, work)
        acc = accumulator(desc.input_tensor.data_type)
        rank = desc.input_tensor.rank
        n_args = 4 if desc.bias_tensor is not None else 3
        super().__init__(key, emit(key), [(acc, rank)] * n_args)
        self._f16 = desc.input_tensor.data_type == DataType.FLOAT16

    def __call__(self, inputs, out):
        if self._f16:  # compute in float32, store half
            tmp = np.empty(out.shape, np.float32)
            self.fn(*(a.astype(np.float32) for a in inputs), tmp)
            out[...] = tmp
        else:
            self.fn(*inputs, out)


register(ConvolutionOperatorDesc, "cpu")(ConvolutionKernel)
