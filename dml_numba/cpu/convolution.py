"""Convolution on the CPU: a direct loop nest, parallel over (n, output channel, outer spatial).

FORWARD gathers input taps; BACKWARD is the adjoint in gather form (no scatter, no races). Bias
and the fused activation are applied in the epilogue of each output element.
"""
from __future__ import annotations

from contextlib import ExitStack

import numpy as np

from .._codegen import SourceWriter, decompose, index, open_window_loops
from .._dims import prod
from .._dtypes import DataType, accumulator
from .._registry import register
from ..ops.convolution import ConvolutionDirection, ConvolutionMode, ConvolutionOperatorDesc
from ._emit import CpuKernel, header, make_key


def emit_activation(w: SourceWriter, act, var: str) -> None:
    if act is not None:
        w(f"{var} = {act.expression(var)}")


def emit(key) -> str:
    d = key.desc
    acc_t = accumulator(d.input_tensor.data_type).name
    n_, cin = d.input_tensor.sizes[:2]
    cout = d.output_tensor.sizes[1]
    sizes_in = d.input_tensor.sizes[2:]
    out = d.output_tensor.sizes[2:]
    ksz = d.filter_tensor.sizes[2:]
    nd = len(out)
    g = d.group_count
    forward = d.direction == ConvolutionDirection.FORWARD
    o = [f"o{i}" for i in range(nd)]
    a = [f"a{i}" for i in range(nd)]
    w = SourceWriter()
    loop = header(w, key)
    args = "x, w, b, y" if d.bias_tensor is not None else "x, w, y"
    with w.block(f"def kernel({args}):"):
        with w.block(f"for f in {loop}({n_ * cout * prod(out[:-1])}):"):
            decompose(w, "f", ["n", "m"] + o[:-1], [n_, cout] + list(out[:-1]))
            cg_in = cin // g
            mg = cout // g
            w(f"g = m // {mg}")
            if not forward:
                w(f"col = m - g * {mg}")
            with w.block(f"for {o[-1]} in range({out[-1]}):"):
                w(f"acc = np.{acc_t}(0.0)")
                with ExitStack() as stack:
                    stack.enter_context(w.block(f"for c in range({cg_in}):"))
                    w(f"ci = g * {cg_in} + c")
                    fidx = open_window_loops(
                        w, stack, [f"k{i}" for i in range(nd)], a, sizes_in,
                        starts={"o": o, "k": ksz, "pad": d.start_padding}, steps=d.strides,
                        dilations=d.dilations, transposed=not forward,
                        flip=d.mode == ConvolutionMode.CONVOLUTION)
                    widx = index("m", "c", *fidx) if forward else index("ci", "col", *fidx)
                    w(f"acc += x[{index('n', 'ci', *a)}] * w[{widx}]")
                # the epilogue gets its own variable so the accumulator's type stays narrow
                bias = f" + b[{index(0, 'm', *([0] * nd))}]" if d.bias_tensor is not None else ""
                w(f"v = acc{bias}")
                emit_activation(w, d.fused_activation, "v")
                w(f"y[{index('n', 'm', *o)}] = v")
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
