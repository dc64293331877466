"""Padding on CUDA: one thread per output element through the descriptor's per-axis index maps."""
from .._registry import register
from ..ops.padding import Padding1OperatorDesc
from ._emit import gather_kernel

register(Padding1OperatorDesc, "cuda")(gather_kernel)
