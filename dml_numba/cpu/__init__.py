"""The "cpu" device: generated Numba loop nests, prange-parallel, disk-cached."""
from .._registry import register_device
from ..tensor import HostDevice
from . import convolution, lp_pooling, padding, slice, tile  # noqa: F401 - registers lowerings

register_device(HostDevice("cpu"))
