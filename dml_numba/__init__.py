"""dml_numba: DirectML's operators as generated Numba loop nests (CPU, CUDA) and vectorised NumPy.

>>> import numpy as np, dml_numba as dml
>>> x = dml.TensorDesc(dml.DataType.FLOAT32, (1, 1, 2, 3))
>>> desc = dml.TileOperatorDesc(x, dml.TensorDesc(dml.DataType.FLOAT32, (1, 1, 4, 3)), (1, 1, 2, 1))
>>> op = dml.compile_operator(desc, device="numpy")
>>> op(np.arange(6, dtype=np.float32).reshape(1, 1, 2, 3))[0, 0, :, 0]
array([0., 3., 0., 3.], dtype=float32)
"""
from . import _compat, _threads

_compat.install()
_threads.apply()  # before Numba starts its thread pool: see dml_numba/_threads.py

import numba  # noqa: E402,F401 - the default device's compiler; the first call should not wait

from . import functional, graph, ops  # noqa: E402
from ._api import ChosenOperator, CompiledOperator, choose_operator, compile_operator  # noqa: E402
from ._cache import cache  # noqa: E402
from ._dtypes import DataType  # noqa: E402
from ._errors import DeviceUnavailableError, ValidationError  # noqa: E402
from ._registry import available_devices, device_status  # noqa: E402
from ._version import __version__  # noqa: E402
from .functional import *  # noqa: F403, E402 - padding(), lp_pooling(), ...
from .graph import *  # noqa: F403, E402 - GraphDesc, compile_graph, ...
from .ops import *  # noqa: F403, E402 - the descriptors, enums and activations
from .tensor import TensorDesc  # noqa: E402

__all__ = ["DataType", "TensorDesc", "compile_operator", "CompiledOperator", "choose_operator",
           "ChosenOperator", "ValidationError",
           "DeviceUnavailableError", "cache", "available_devices", "device_status",
           "__version__"] + graph.__all__ + ops.__all__ + functional.__all__ + \
    list(functional.OTHER_NAMES)
globals().update(functional.OTHER_NAMES)  # dml_numba.slice is dml_numba.slice1
