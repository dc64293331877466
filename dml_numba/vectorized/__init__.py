"""The "numpy" device: every operator vectorised with NumPy, the executable specification.

Written independently of the operator modules' shape helpers (it derives what it needs from the
arrays and the descriptor's parameters). Convolution and pooling accumulate in float64 and cast
once, so this device is at least as accurate as the jitted ones it checks.
"""
from .._registry import register, register_device
from ..ops import (ConvolutionOperatorDesc, LpPooling1OperatorDesc, Padding1OperatorDesc,
                   Slice1OperatorDesc, TileOperatorDesc)
from ..tensor import HostDevice
from . import convolution, lp_pooling, padding, slice, tile

register_device(HostDevice("numpy"))


class VectorizedKernel:
    """Runs ``fn(desc, *inputs)`` and stores the result into the bound output."""

    source = None

    def __init__(self, fn, desc):
        self.fn = fn
        self.desc = desc

    def __call__(self, inputs, out):
        out[...] = self.fn(self.desc, *inputs)


for _desc_type, _fn in ((Padding1OperatorDesc, padding.padding),
                        (LpPooling1OperatorDesc, lp_pooling.lp_pooling),
                        (ConvolutionOperatorDesc, convolution.convolution),
                        (TileOperatorDesc, tile.tile),
                        (Slice1OperatorDesc, slice.slice1)):
    register(_desc_type, "numpy")(lambda desc, options, _fn=_fn: VectorizedKernel(_fn, desc))
