"""Padding on CUDA: one thread per output element through padding's per-axis index maps."""
from .._registry import register
from ..ops.padding import Padding1OperatorDesc, gather_plan
from ._emit import gather_kernel


@register(Padding1OperatorDesc, "cuda")
def lower(desc, options):
    return gather_kernel("padding", gather_plan, desc, options)
