"""Padding on the CPU: the shared data-movement loop nest over the descriptor's per-axis index
maps."""
from .._registry import register
from ..ops.padding import Padding1OperatorDesc
from ._emit import GatherKernel

register(Padding1OperatorDesc, "cpu")(GatherKernel)
