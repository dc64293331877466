"""The activations as operators of their own on CUDA: the element-wise kernel (one output
element a thread), each element's value the activation's formula."""
from __future__ import annotations

from .._registry import register
from ..ops.activation import FUSABLE_ACTIVATIONS
from .element_wise import lower

for _type in FUSABLE_ACTIVATIONS:
    register(_type, "cuda")(lower)
