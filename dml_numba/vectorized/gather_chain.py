"""A chain of data-movement operators, vectorised: each operator's own vectorised variant in
turn (the specification the fused kernels are checked against)."""
from __future__ import annotations

import numpy as np

from .._registry import lowering_for
from ..ops.gather_chain import GatherChainDesc
from ._kernel import vectorized


@vectorized(GatherChainDesc)
def gather_chain(desc, x):
    for op in desc.operators:
        op = op.canonical().packed()
        y = np.empty(op.output_tensor.sizes, x.dtype)
        lowering_for(type(op), "numpy")(op, {})([x], y)
        x = y
    return x
