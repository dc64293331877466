"""The fused activations on the "numpy" device: each activation's formula (the same text the
kernels compile) evaluated with NumPy's functions of the contract's names."""
from __future__ import annotations

import functools

import numpy as np

from ..ops.activation import FUNCTIONS

try:  # NumPy has no erf; SciPy's is vectorised and exact to double precision
    from scipy.special import erf as _erf
except ImportError:  # pragma: no cover - scipy is a dependency
    import math

    _erf = np.vectorize(math.erf, otypes=[np.float64])

#: NumPy's version of every function an activation formula may call (ops.activation.FUNCTIONS)
_FUNCTIONS = {"erf": _erf, "exp": np.exp, "expm1": np.expm1, "fabs": np.abs, "log1p": np.log1p,
              "tanh": np.tanh, "where": np.where}
if set(_FUNCTIONS) != set(FUNCTIONS):  # pragma: no cover - caught by the test suite at import
    raise ImportError(f"the numpy device binds {sorted(_FUNCTIONS)}, the activation contract "
                      f"is {sorted(FUNCTIONS)}")


@functools.cache
def _compiled(expression: str):
    return compile(expression, "<activation>", "eval")


def apply_activation(act, y: np.ndarray) -> np.ndarray:
    """The fused activation's formula (the same text the kernels compile) evaluated with NumPy."""
    if act is None:
        return y
    return apply_formula(act.expression("x"), y)


def apply_formula(expression: str, x: np.ndarray) -> np.ndarray:
    """A formula of ``x`` in the activations' contract (an activation's, its derivative's)
    evaluated with NumPy in float64, of ``x``'s shape."""
    with np.errstate(over="ignore", invalid="ignore"):
        y = eval(_compiled(expression), {"__builtins__": {}, **_FUNCTIONS, "x": x})
    return np.broadcast_to(np.asarray(y, dtype=np.float64), np.shape(x))
