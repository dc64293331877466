"""Slice on the CPU: the shared data-movement loop nest over the descriptor's per-axis index
maps."""
from .._registry import register
from ..ops.slice import Slice1OperatorDesc
from ._emit import GatherKernel

register(Slice1OperatorDesc, "cpu")(GatherKernel)
