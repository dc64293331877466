"""Element-wise addition's and multiplication's gradients: the output's gradient for each
addend; times the other factor for each factor."""
from __future__ import annotations

from ..ops.element_wise import ElementWiseAdd1OperatorDesc, ElementWiseMultiplyOperatorDesc
from . import gradient


@gradient(ElementWiseAdd1OperatorDesc)
def element_wise_add_backward(d, inputs, grad):
    return [grad.copy(), grad.copy()]


@gradient(ElementWiseMultiplyOperatorDesc)
def element_wise_multiply_backward(d, inputs, grad):
    a, b = inputs
    return [grad * b, grad * a]
