"""Padding on the CPU: the shared data-movement loop nest over padding's per-axis index maps."""
from .._registry import register
from ..ops.padding import Padding1OperatorDesc, gather_plan
from ._emit import GatherKernel


@register(Padding1OperatorDesc, "cpu")
def lower(desc, options):
    return GatherKernel("padding", gather_plan, desc, options)
