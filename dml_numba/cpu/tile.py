"""Tile on the CPU: the shared data-movement loop nest over tile's per-axis index maps."""
from .._registry import register
from ..ops.tile import TileOperatorDesc, gather_plan
from ._emit import GatherKernel


@register(TileOperatorDesc, "cpu")
def lower(desc, options):
    return GatherKernel("tile", gather_plan, desc, options)
