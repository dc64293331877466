"""Element-wise addition and multiplication, vectorised: NumPy's operators in the tensors' type
(integers wrap around), the fused activation in float64."""
from __future__ import annotations

import numpy as np

from ..ops.element_wise import ElementWiseAdd1OperatorDesc, ElementWiseMultiplyOperatorDesc
from ._activation import apply_activation
from ._kernel import vectorized


@vectorized(ElementWiseAdd1OperatorDesc)
def element_wise_add(desc, a, b):
    with np.errstate(over="ignore"):
        y = np.add(a, b, dtype=a.dtype)
    if desc.fused_activation is None:
        return y
    return apply_activation(desc.fused_activation, y.astype(np.float64)).astype(a.dtype)


@vectorized(ElementWiseMultiplyOperatorDesc)
def element_wise_multiply(desc, a, b):
    with np.errstate(over="ignore"):
        return np.multiply(a, b, dtype=a.dtype)
