"""DML_TILE_OPERATOR_DESC (docs/SEMANTICS.md §6): ``Out[o] = In[o mod In.Sizes]`` per dimension,
``Out.Sizes[i] = In.Sizes[i] * Repeats[i]``, each repeat > 0.

1-8 D, every integer type and FLOAT16/FLOAT32 as DirectML lists; FLOAT64 is a deliberate
dml_numba extension (DirectML's tables omit it).
"""
from __future__ import annotations

__all__ = ["TileOperatorDesc"]

from dataclasses import dataclass

from .._dtypes import ALL_TYPES
from .._errors import Checker
from ..tensor import MAX_RANK, TensorDesc
from ._base import (
    AxisMap,
    GatherPlan,
    OperatorDesc,
    check_output_sizes,
    check_unary_tensors,
)


def output_sizes(c: Checker, input_sizes, repeats) -> tuple[int, ...]:
    """The shape rule: ``input * repeats`` per axis (each repeat 1 <= r < 2**32)."""
    r = c.int_tuple("repeats", repeats, length=len(input_sizes), lo=1)
    return tuple(n * k for n, k in zip(input_sizes, r))


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
        sizes = output_sizes(c, inp.sizes, self.repeats)
        self._set("repeats", tuple(int(v) for v in self.repeats))
        check_output_sizes(c, "output_tensor", out, sizes, "input_tensor.sizes * repeats")

    def gather_plan(self) -> GatherPlan:
        """Per-axis index maps: ``i = o mod n``."""
        return GatherPlan(tuple(AxisMap("modulo", n, o) for n, o in
                                zip(self.input_tensor.sizes, self.output_tensor.sizes)))
