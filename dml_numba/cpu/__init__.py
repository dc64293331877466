"""The "cpu" device: generated Numba loop nests, prange-parallel, disk-cached. Every module of
this package registers its operator's lowering; none is listed here."""
from .._binding import HostDevice
from .._registry import import_lowerings, register_device
from ._adaptive import AdaptiveBatch
from ._native import NativeSteps

import_lowerings(__name__, __path__)
# a compiled graph's steps decided as one run (serial or parallel kernels, by measurement),
# and run as one native call where they can
register_device(HostDevice("cpu", options={"parallel": (None, True, False)},
                           batch=AdaptiveBatch, steps=NativeSteps))
