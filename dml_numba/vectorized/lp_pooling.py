"""LP pooling, vectorised: zero-padded |x|**p (float64), one strided slice per window tap."""
from __future__ import annotations

import itertools

import numpy as np

from ..ops.lp_pooling import LpPooling1OperatorDesc
from ._kernel import vectorized


@vectorized(LpPooling1OperatorDesc)
def lp_pooling(desc, x):
    p = desc.p
    out_spatial = desc.output_tensor.sizes[2:]
    a = np.abs(x.astype(np.float64)) ** p
    pads = [(0, 0), (0, 0)]
    for n, o, s, w, d, lo in zip(x.shape[2:], out_spatial, desc.strides, desc.window_size,
                                 desc.dilations, desc.start_padding):
        reach = (o - 1) * s + (w - 1) * d + 1  # padded extent the last window touches
        pads.append((lo, max(0, reach - lo - n)))
    a = np.pad(a, pads)
    acc = np.zeros(x.shape[:2] + tuple(out_spatial))
    for taps in itertools.product(*(range(w) for w in desc.window_size)):
        acc += a[(Ellipsis,) + tuple(slice(k * d, k * d + (o - 1) * s + 1, s) for k, d, o, s in
                                     zip(taps, desc.dilations, out_spatial, desc.strides))]
    with np.errstate(over="ignore"):  # beyond the type's range is infinity, as on the kernels
        return (acc ** (1.0 / p)).astype(x.dtype)
