"""DML_TILE_OPERATOR_DESC (SEMANTICS 6): ``Out[o] = In[o mod In.Sizes]`` per dimension,
``Out.Sizes[i] = In.Sizes[i] * Repeats[i]``, each repeat > 0.

1-8 D, every integer type and FLOAT16/FLOAT32 as DirectML lists; FLOAT64 is a deliberate
dml_numba extension (DirectML's tables omit it).
"""
from __future__ import annotations

from dataclasses import dataclass

from .._dtypes import ALL_TYPES
from ..tensor import MAX_RANK, TensorDesc
from ._base import OperatorDesc, check_output_sizes, check_unary_tensors


@dataclass(frozen=True)
class TileOperatorDesc(OperatorDesc):
    """DML_TILE_OPERATOR_DESC; RepeatsCount is ``len(repeats)``.

    >>> d = TileOperatorDesc(TensorDesc(1, (1, 1, 2, 3)), TensorDesc(1, (1, 1, 6, 9)), (1, 1, 3, 3))
    """

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    repeats: tuple

    def _validate(self, c):
        inp, out = check_unary_tensors(c, self, ALL_TYPES, 1, MAX_RANK)
        r = c.int_tuple("repeats", self.repeats, length=inp.rank, lo=1)
        self._set("repeats", r)
        check_output_sizes(c, "output_tensor", out, (n * k for n, k in zip(inp.sizes, r)),
                           "input_tensor.sizes * repeats")


def tile(x, repeats, *, device="cpu", out=None):
    """Repeat ``x`` ``repeats[i]`` times along each axis (like ``numpy.tile`` at equal rank).

    >>> import numpy as np
    >>> tile(np.array([[1, 2]], np.int8), (2, 2), device="numpy")
    array([[1, 2, 1, 2],
           [1, 2, 1, 2]], dtype=int8)
    """
    from .._api import run_functional
    from ..tensor import as_array

    x = as_array(x, "tile", "x")

    def make_desc():
        inp = TensorDesc.like(x)
        r = tuple(repeats)
        sizes = tuple(n * k for n, k in zip(inp.sizes, r)) if len(r) == inp.rank else inp.sizes
        if min(sizes, default=1) < 1:
            sizes = inp.sizes
        return TileOperatorDesc(inp, TensorDesc(inp.data_type, sizes), r)

    return run_functional("tile", (x, repeats), make_desc, (x,), device, out)


def gather_plan(desc: TileOperatorDesc):
    """Per-axis index maps for the jitted backends: ``i = o mod n``."""
    from .._gather import AxisMap, GatherPlan

    return GatherPlan(tuple(AxisMap("tile", n, o) for n, o in
                            zip(desc.input_tensor.sizes, desc.output_tensor.sizes)))
