"""A depthwise convolution of a pointwise convolution's result, vectorised: the two
convolutions one by one, each its own vectorised variant (the specification the fused kernels
are checked against)."""
from __future__ import annotations

import numpy as np

from .._registry import lowering_for
from ..ops.pointwise_depthwise import PointwiseDepthwiseDesc
from ._kernel import vectorized


@vectorized(PointwiseDepthwiseDesc)
def pointwise_depthwise(desc, x, w, *rest):
    pw, dw = desc.pointwise.packed(), desc.depthwise.packed()
    first = 1 if pw.bias_tensor is not None else 0
    mid = np.empty(pw.output.sizes, x.dtype)
    lowering_for(type(pw), "numpy")(pw, {})([x, w, *rest[:first]], mid)
    y = np.empty(dw.output.sizes, x.dtype)
    lowering_for(type(dw), "numpy")(dw, {})([mid, *rest[first:]], y)
    return y
