"""DML_JOIN_OPERATOR_DESC (docs/SEMANTICS.md §12): the inputs concatenated along ``axis``.

Every input has the output's rank, data type and sizes but along ``axis``, where the output's
size is their sum; input ``k`` lands at the sum of the earlier inputs' sizes there. Pure data
movement (exact). The inputs bind as ``input_tensors[0]``, ``input_tensors[1]``, ... in order.
"""
from __future__ import annotations

__all__ = ["JoinOperatorDesc"]

import re
from dataclasses import dataclass

from .._dims import prod
from .._dtypes import ALL_TYPES
from ..tensor import TensorDesc
from ._base import (
    OperatorDesc,
    check_output_sizes,
    check_same_rank,
    check_same_type,
    check_tensor,
    check_type,
)

_FIELD = re.compile(r"input_tensors\[(\d+)\]$")


@dataclass(frozen=True)
class JoinOperatorDesc(OperatorDesc):
    """DML_JOIN_OPERATOR_DESC (FL1.0); InputCount is ``len(input_tensors)``.

    >>> d = JoinOperatorDesc((TensorDesc(1, (2, 3)), TensorDesc(1, (2, 1))),
    ...                      TensorDesc(1, (2, 4)), 1)
    """

    input_tensors: tuple
    output_tensor: TensorDesc
    axis: int

    def __getattr__(self, name):
        m = _FIELD.match(name)
        if m is None:
            raise AttributeError(name)
        return self.input_tensors[int(m.group(1))]

    @property
    def input_fields(self) -> tuple:  # one slot per input, named as DirectML's array
        return tuple(f"input_tensors[{k}]" for k in range(len(self.input_tensors)))

    def _validate(self, c):
        ts = self.input_tensors
        if isinstance(ts, (str, bytes)) or not hasattr(ts, "__len__") or len(ts) == 0:
            c.fail("input_tensors", ts, "expected a non-empty sequence of TensorDesc")
        ts = tuple(ts)
        self._set("input_tensors", ts)
        first = check_tensor(c, "input_tensors[0]", ts[0])
        check_type(c, "input_tensors[0]", first, ALL_TYPES)
        axis = c.integer("axis", self.axis, lo=0, hi=first.rank - 1)
        self._set("axis", axis)
        total = 0
        for k, t in enumerate(ts):
            field = f"input_tensors[{k}]"
            t = check_tensor(c, field, t)
            check_same_type(c, field, t, first, "input_tensors[0]")
            check_same_rank(c, field, t, first, "input_tensors[0]")
            other = [s for i, s in enumerate(t.sizes) if i != axis]
            want = [s for i, s in enumerate(first.sizes) if i != axis]
            if other != want:
                c.fail(f"{field}.sizes", t.sizes, f"expected the sizes of input_tensors[0] "
                       f"{first.sizes} on every axis but {axis}")
            total += t.sizes[axis]
        out = check_tensor(c, "output_tensor", self.output_tensor)
        check_same_type(c, "output_tensor", out, first, "input_tensors[0]")
        want = first.sizes[:axis] + (total,) + first.sizes[axis + 1:]
        check_output_sizes(c, "output_tensor", out, want,
                           f"the inputs' sizes, summed along axis {axis}")

    def joined_parts(self) -> tuple | None:
        sizes = self.output_tensor.sizes
        if any(n != 1 for n in sizes[:self.axis]):
            return None
        inner = prod(sizes[self.axis + 1:]) * self.output_tensor.data_type.itemsize
        return tuple(at * inner for at in self.offsets())

    def offsets(self) -> tuple:
        """Where each input starts along the axis."""
        out, at = [], 0
        for t in self.input_tensors:
            out.append(at)
            at += t.sizes[self.axis]
        return tuple(out)

    def replace_tensors(self, **tensors):
        ins = tuple(tensors.get(f, t) for f, t in zip(self.input_fields, self.input_tensors))
        return JoinOperatorDesc(ins, tensors.get("output_tensor", self.output_tensor), self.axis)
