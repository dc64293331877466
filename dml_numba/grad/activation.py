"""The activations' gradient: the output's gradient times the activation's derivative at the
input (its formula's, :meth:`ActivationDesc.derivative`, evaluated as the numpy device
evaluates the formula)."""
from __future__ import annotations

import numpy as np

from ..ops.activation import FUSABLE_ACTIVATIONS
from ..vectorized._activation import apply_formula
from . import gradient


def activation_backward(d, inputs, grad):
    (x,) = inputs
    slope = apply_formula(d.derivative("x"), x.astype(np.float64))
    return [(grad * slope).astype(x.dtype)]


for _type in FUSABLE_ACTIVATIONS:
    gradient(_type)(activation_backward)
