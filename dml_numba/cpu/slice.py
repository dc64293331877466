"""Slice on the CPU: the shared data-movement loop nest over slice's per-axis index maps."""
from .._registry import register
from ..ops.slice import Slice1OperatorDesc, gather_plan
from ._emit import GatherKernel


@register(Slice1OperatorDesc, "cpu")
def lower(desc, options):
    return GatherKernel("slice", gather_plan, desc, options)
