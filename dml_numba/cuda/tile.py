"""Tile on CUDA: one thread per output element through tile's per-axis index maps."""
from .._registry import register
from ..ops.tile import TileOperatorDesc, gather_plan
from ._emit import gather_kernel


@register(TileOperatorDesc, "cuda")
def lower(desc, options):
    return gather_kernel("tile", gather_plan, desc, options)
