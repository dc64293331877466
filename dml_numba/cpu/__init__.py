"""The "cpu" device: generated Numba loop nests, prange-parallel, disk-cached. Every module of
this package registers its operator's lowering; none is listed here."""
from .._binding import HostDevice
from .._registry import import_lowerings, register_device

import_lowerings(__name__, __path__)
register_device(HostDevice("cpu", options={"parallel": (None, True, False)}))
