"""Slice on CUDA: one thread per output element through slice's per-axis index maps."""
from .._registry import register
from ..ops.slice import Slice1OperatorDesc, gather_plan
from ._emit import gather_kernel


@register(Slice1OperatorDesc, "cuda")
def lower(desc, options):
    return gather_kernel("slice", gather_plan, desc, options)
