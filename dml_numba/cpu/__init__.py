"""The "cpu" device: generated Numba loop nests, prange-parallel, disk-cached. Every module of
this package registers its operator's lowering; none is listed here."""
from .._binding import HostDevice
from .._registry import import_lowerings, register_device
from ._adaptive import AdaptiveBatch
from ._native import NativeSteps
from ._scratch import reserve_for

import_lowerings(__name__, __path__)
# a compiled graph's steps decided as one run (serial or parallel kernels, by measurement),
# and run as one native call where they can; the thread's scratch reserved before binding
register_device(HostDevice("cpu", options={"parallel": (None, True, False)},
                           batch=AdaptiveBatch, steps=NativeSteps, reserve=reserve_for))
