"""Slice on CUDA: one thread per output element through the descriptor's per-axis index maps."""
from .._registry import register
from ..ops.slice import Slice1OperatorDesc
from ._emit import gather_kernel

register(Slice1OperatorDesc, "cuda")(gather_kernel)
