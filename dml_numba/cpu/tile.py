"""Tile on the CPU: the shared data-movement loop nest over the descriptor's per-axis index maps."""
from .._registry import register
from ..ops.tile import TileOperatorDesc
from ._emit import GatherKernel

register(TileOperatorDesc, "cpu")(GatherKernel)
