"""Tile on CUDA: one thread per output element through the descriptor's per-axis index maps."""
from .._registry import register
from ..ops.tile import TileOperatorDesc
from ._emit import gather_kernel

register(TileOperatorDesc, "cuda")(gather_kernel)
