"""Batch normalization, vectorised: the formula in float64 with NumPy's broadcasting of the
parameters' sizes, the fused activation, one cast."""
from __future__ import annotations

import numpy as np

from ..ops.batch_normalization import BatchNormalizationOperatorDesc
from ._activation import apply_activation
from ._kernel import vectorized


@vectorized(BatchNormalizationOperatorDesc)
def batch_normalization(desc, x, mean, variance, scale, bias):
    f = lambda a: a.astype(np.float64)  # noqa: E731
    y = f(scale) * (f(x) - f(mean)) / np.sqrt(f(variance) + desc.epsilon) + f(bias)
    return apply_activation(desc.fused_activation, y).astype(x.dtype)
