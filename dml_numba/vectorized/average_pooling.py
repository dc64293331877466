"""Average pooling, vectorised: the zero-padded input's taps summed in float64, divided by each
window's count: the same taps over ones (the ones padded with ones first where the padding
counts; the overhang past the padded input never does)."""
from __future__ import annotations

import numpy as np

from ..ops.average_pooling import AveragePooling1OperatorDesc
from ._kernel import vectorized
from .max_pooling import window_taps


@vectorized(AveragePooling1OperatorDesc)
def average_pooling(desc, x):
    total = sum(window_taps(desc, x.astype(np.float64), 0.0))
    ones = np.ones((1, 1) + x.shape[2:])
    if desc.include_padding:
        ones = np.pad(ones, [(0, 0), (0, 0)] + list(zip(desc.start_padding, desc.end_padding)),
                      constant_values=1.0)
        count = sum(window_taps(desc, ones, 0.0, start=(0,) * len(desc.strides)))
    else:
        count = sum(window_taps(desc, ones, 0.0))
    with np.errstate(invalid="ignore", divide="ignore"):
        return (total / count).astype(x.dtype)
