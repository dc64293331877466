"""Data movement as per-axis index maps: output coordinate ``o`` reads input coordinate ``i``.

Padding, tile and slice are each a product of one :class:`AxisMap` per dimension (plus a constant
for CONSTANT padding); the CPU and CUDA backends emit loops from these maps, so the index
formulas are written once. Modulo operands are shifted to be non-negative first, so the emitted
``%`` means the same under Python's floor and C's truncating semantics.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._codegen import SourceWriter, literal
from ._dtypes import DataType

PAD_KINDS = ("shift", "clamp", "reflect", "symmetric", "wrap")


@dataclass(frozen=True)
class AxisMap:
    """kind: 'shift' (i = o - a; outside [0, n) is the constant), 'clamp', 'reflect',
    'symmetric', 'wrap' (padding by ``a`` in front), 'tile' (i = o mod n), 'affine'
    (i = a + s*o)."""

    kind: str
    n: int
    size: int
    a: int = 0
    s: int = 1

    def emit(self, w: SourceWriter, o: str, i: str) -> None:
        k, n, a = self.kind, self.n, self.a
        if k == "shift":
            w(f"{i} = {o} - {a}" if a else f"{i} = {o}")
        elif k == "clamp":
            w(f"{i} = min(max({o} - {a}, 0), {n - 1})")
        elif k in ("reflect", "symmetric"):
            period = 2 * (n - 1) if k == "reflect" else 2 * n
            if period == 0:
                w(f"{i} = 0")
                return
            shift = -(-a // period) * period - a  # >= 0, so the operand of % is never negative
            w(f"{i} = ({o} + {shift}) % {period}")
            with w.block(f"if {i} >= {n}:"):
                w(f"{i} = {period - (0 if k == 'reflect' else 1)} - {i}")
        elif k == "wrap":
            w(f"{i} = ({o} + {-(-a // n) * n - a}) % {n}")
        elif k == "tile":
            w(f"{i} = {o} % {n}" if n > 1 else f"{i} = 0")
        elif k == "affine":
            w(f"{i} = {a} + {self.s} * {o}")
        else:  # pragma: no cover
            raise AssertionError(k)

    def inside(self, o: str) -> str | None:
        """Condition that ``o`` reads the input (None: always), for 'shift' maps."""
        if self.kind != "shift" or (self.a == 0 and self.size == self.n):
            return None
        return f"{o} >= {self.a} and {o} < {self.a + self.n}"

    @property
    def is_identity(self) -> bool:
        return (self.kind in PAD_KINDS and self.a == 0 and self.size == self.n) or \
               (self.kind == "tile" and self.size == self.n) or \
               (self.kind == "affine" and self.a == 0 and self.s == 1)


@dataclass(frozen=True)
class GatherPlan:
    maps: tuple[AxisMap, ...]
    constant: object = None  # the value outside 'shift' axes (CONSTANT padding), else None


def storage_dtype(data_type: DataType) -> np.dtype:
    """What a data-movement kernel sees: float16 moves as its uint16 bits (bit-exact; Numba's CPU
    target has no half, and on CUDA it keeps the PTX plain integer moves)."""
    return np.dtype(np.uint16) if data_type == DataType.FLOAT16 else data_type.numpy


def constant_literal(value, data_type: DataType) -> str:
    """Source for the padding constant as the kernel stores it (float16 as its bit pattern)."""
    if data_type == DataType.FLOAT16:
        value = int(np.array(value, np.float16).view(np.uint16))
    return literal(value, storage_dtype(data_type))
