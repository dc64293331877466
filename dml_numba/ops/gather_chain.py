"""A chain of data-movement operators (padding, slice, tile, in any order and number) fused into
one gather: not a DirectML struct, but what DirectML's graph compiler makes of such a chain, and
what :func:`dml_numba.graph.compile_graph` compiles one to.

Each operator is a per-axis index map (:class:`~._base.GatherPlan`), and per-axis maps compose:
output coordinate ``o`` of the last operator reads coordinate ``m_K(o)`` of its input, which
reads ``m_{K-1}(m_K(o))`` of the one before, down to the chain's input. An element whose
coordinate falls outside a CONSTANT padding's input at some level is that padding's constant;
where it does at several levels, the level nearest the output wins (the later padding wrote its
constant over whatever the earlier ones produced). Running the operators one by one gives the
same bits.
"""
from __future__ import annotations

__all__ = ["GatherChainDesc"]

from dataclasses import dataclass

import numpy as np

from ..tensor import TensorDesc
from ._base import GatherPlan, OperatorDesc, check_tensor, index_runs


@dataclass(frozen=True)
class GatherChainDesc(OperatorDesc):
    """``operators``: data-movement descriptors in the order they run, each one's output tensor
    the next one's input (sizes and data type); ``input_tensor`` is the first one's input and
    ``output_tensor`` the last one's output.

    >>> from dml_numba import TileOperatorDesc, Slice1OperatorDesc
    >>> t = TileOperatorDesc(TensorDesc(1, (2, 3)), TensorDesc(1, (4, 6)), (2, 2))
    >>> s = Slice1OperatorDesc(TensorDesc(1, (4, 6)), TensorDesc(1, (4, 3)), (0, 0), (4, 6), (1, 2))
    >>> GatherChainDesc(TensorDesc(1, (2, 3)), TensorDesc(1, (4, 3)), (t, s)).output.sizes
    (4, 3)
    """

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    operators: tuple

    def _validate(self, c):
        inp = check_tensor(c, "input_tensor", self.input_tensor)
        out = check_tensor(c, "output_tensor", self.output_tensor)
        ops = self.operators
        if isinstance(ops, (str, bytes)) or not hasattr(ops, "__len__") or len(ops) == 0:
            c.fail("operators", ops, "expected a non-empty sequence of padding, slice or tile "
                                     "descriptors")
        ops = tuple(ops)
        for k, op in enumerate(ops):
            if not (isinstance(op, OperatorDesc) and hasattr(op.canonical(), "gather_plan")):
                c.fail(f"operators[{k}]", op, "expected a data-movement descriptor (padding, "
                                              "slice or tile)")
        prev, prev_name = inp, "input_tensor"
        for k, op in enumerate(ops):
            _same(c, f"operators[{k}].input_tensor", op.input_tensor, prev, prev_name)
            prev, prev_name = op.output_tensor, f"operators[{k}].output_tensor"
        _same(c, "output_tensor", out, prev, prev_name)
        self._set("operators", ops)

    def canonical(self):
        ops = tuple(op.canonical() for op in self.operators)
        return self if ops == self.operators else GatherChainDesc(self.input_tensor,
                                                                  self.output_tensor, ops)

    def packed(self):
        ops = tuple(op.packed() for op in self.operators)
        return GatherChainDesc(TensorDesc(self.input_tensor.data_type, self.input_tensor.sizes),
                               TensorDesc(self.output_tensor.data_type, self.output_tensor.sizes),
                               ops)

    def gather_plans(self) -> tuple[GatherPlan, ...]:
        """Each operator's plan, in the order the operators run."""
        return tuple(op.canonical().gather_plan() for op in self.operators)

    def axis_sources(self, axis: int, coords) -> tuple[np.ndarray, np.ndarray]:
        """For output coordinates ``coords`` of one axis: the input coordinate each reads and
        the level (index into ``operators``) of the nearest-to-output CONSTANT padding it falls
        outside of along this axis (-1: none)."""
        c = np.asarray(coords, dtype=np.int64)
        level = np.full(c.shape, -1, np.int64)
        plans = self.gather_plans()
        for k in range(len(plans) - 1, -1, -1):
            c, inside = plans[k].maps[axis].at(c)
            if plans[k].constant is not None:
                level = np.where((level < 0) & ~inside, k, level)
        return c, level

    def runs(self, axis: int = -1) -> list[tuple]:
        """One axis of the output as maximal runs (:func:`~._base.index_runs`)."""
        axis %= self.output_tensor.rank
        src, level = self.axis_sources(axis, np.arange(self.output_tensor.sizes[axis]))
        return index_runs(src.tolist(), level.tolist())


def _same(c, field: str, t: TensorDesc, ref: TensorDesc, ref_field: str) -> None:
    if t.data_type != ref.data_type:
        c.fail(f"{field}.data_type", t.data_type.name,
               f"expected {ref.data_type.name}, the data type of {ref_field}")
    if t.sizes != ref.sizes:
        c.fail(f"{field}.sizes", t.sizes, f"expected {ref.sizes}, the sizes of {ref_field}")
