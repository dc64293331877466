"""The activations as operators of their own on the CPU: the element-wise kernel (one parallel
loop over the flat elements), each element's value the activation's formula."""
from __future__ import annotations

from .._registry import register
from ..ops.activation import FUSABLE_ACTIVATIONS
from .element_wise import ElementWiseKernel

for _type in FUSABLE_ACTIVATIONS:
    register(_type, "cpu")(ElementWiseKernel)
