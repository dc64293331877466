"""The activations as operators of their own, vectorised: the formula in float64 (the fused
form's own evaluation), rounded once to the tensor's type."""
from __future__ import annotations

import numpy as np

from ..ops.activation import FUSABLE_ACTIVATIONS
from ._activation import apply_activation
from ._kernel import vectorized


def activation(desc, x):
    return apply_activation(desc, x.astype(np.float64)).astype(x.dtype)


for _type in FUSABLE_ACTIVATIONS:
    vectorized(_type)(activation)
