"""The "numpy" device: every operator vectorised with NumPy, the executable specification.

Written independently of the operator modules' shape helpers (it derives what it needs from the
arrays and the descriptor's parameters). Convolution and pooling accumulate in float64 and cast
once, so this device is at least as accurate as the jitted ones it checks. Every module of this
package registers its operator (``@vectorized(Desc)``); none is listed here.
"""
from .._binding import HostDevice
from .._registry import import_lowerings, register_device

import_lowerings(__name__, __path__)
register_device(HostDevice("numpy"))
