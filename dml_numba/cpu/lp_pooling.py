"""LP pooling on the CPU: a parallel loop over (n, c, outer spatial), one fused pass per output
element over the window (|x|**p summed, then the p-th root; see
elements.lp_pooling.pool_element). ``input_padding`` (a PaddingMode name but CONSTANT): the
start/end padding is that mode's fold of the input instead of zeros (a graph's padding operator
in front, folded)."""
from __future__ import annotations

import dataclasses

from .._dims import prod
from .._dtypes import accumulator
from .._registry import register
from ..elements.lp_pooling import fold_of, pool_element
from ..ops._base import FOLDS, Fold
from ..ops.lp_pooling import LpPooling1OperatorDesc
from ._emit import CpuKernel, bound_first, make_key, run_in_accumulator
from ._pooling import emit_pooling


def emit(key) -> str:
    fold = fold_of(key)
    return emit_pooling(key, lambda w, d, o, acc: pool_element(w, d, o, fold=fold))


class LpPoolingKernel(CpuKernel):
    def __init__(self, desc, options):
        work = desc.output_tensor.element_count * prod(desc.window_size)
        key = make_key(desc, options, work=work)
        mode = options.get("input_padding")
        if mode is not None:
            key = dataclasses.replace(key, plan=Fold(FOLDS[mode]))
        self.acc = accumulator(desc.input_tensor.data_type)
        rank = desc.input_tensor.rank
        super().__init__(key, emit, [(self.acc, rank), (self.acc, rank)], options)

    bound = bound_first

    def __call__(self, inputs, out):
        run_in_accumulator(self.acc, lambda xs, y: self.fn(xs[0], y), inputs, out)


register(LpPooling1OperatorDesc, "cpu",
         options={"input_padding": (None,) + tuple(FOLDS)})(LpPoolingKernel)
