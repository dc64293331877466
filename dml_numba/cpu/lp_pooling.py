"""LP pooling on the CPU: a parallel loop over (n, c, outer spatial), one fused pass per output
element over the window (|x|**p summed in the accumulator type, then the p-th root)."""
from __future__ import annotations

from contextlib import ExitStack

import numpy as np

from .._codegen import SourceWriter, accumulate_power, decompose, index, lp_root
from .._codegen import open_window_loops
from .._dims import prod
from .._dtypes import DataType, accumulator
from .._registry import register
from ..ops.lp_pooling import LpPooling1OperatorDesc
from ._emit import CpuKernel, header, make_key


def emit(key) -> str:
    d = key.desc
    acc_t = accumulator(d.input_tensor.data_type).name
    n_, c_ = d.input_tensor.sizes[:2]
    sizes_in = d.input_tensor.sizes[2:]
    out = d.output_tensor.sizes[2:]
    nd = len(out)
    o = [f"o{i}" for i in range(nd)]
    w = SourceWriter()
    loop = header(w, key)
    with w.block("def kernel(x, y):"):
        with w.block(f"for f in {loop}({n_ * c_ * prod(out[:-1])}):"):
            decompose(w, "f", ["n", "c"] + o[:-1], [n_, c_] + list(out[:-1]))
            with w.block(f"for {o[-1]} in range({out[-1]}):"):
                w(f"acc = np.{acc_t}(0.0)")
                with ExitStack() as stack:
                    open_window_loops(w, stack, [f"k{i}" for i in range(nd)],
                                      [f"a{i}" for i in range(nd)], sizes_in,
                                      starts={"o": o, "k": d.window_size, "pad": d.start_padding},
                                      steps=d.strides, dilations=d.dilations, transposed=False,
                                      flip=False)
                    w(f"v = abs(x[{index('n', 'c', *[f'a{i}' for i in range(nd)])}])")
                    w(f"acc += {accumulate_power('v', d.p)}")
                w(f"y[{index('n', 'c', *o)}] = {lp_root('acc', d.p)}")
    return w.text()


class LpPoolingKernel(CpuKernel):
    def __init__(self, desc, options):
        work = desc.output_tensor.element_count * prod(desc.window_size)
        key = make_key("lp_pooling", desc, options, work)
        acc = accumulator(desc.input_tensor.data_type)
        rank = desc.input_tensor.rank
        super().__init__(key, emit(key), [(acc, rank), (acc, rank)])
        self._f16 = desc.input_tensor.data_type == DataType.FLOAT16

    def __call__(self, inputs, out):
        if self._f16:  # Numba's CPU target has no half: compute in float32, store half
            tmp = np.empty(out.shape, np.float32)
            self.fn(inputs[0].astype(np.float32), tmp)
            out[...] = tmp
        else:
            self.fn(inputs[0], out)


register(LpPooling1OperatorDesc, "cpu")(LpPoolingKernel)
