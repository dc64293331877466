"""Loops from index maps: the source that makes output coordinate ``o`` read input coordinate
``i`` along one axis (:class:`dml_numba.ops._base.AxisMap`), shared by the CPU and CUDA
backends, so each index formula is written once. Modulo operands are shifted to be non-negative
first, so the emitted ``%`` means the same under Python's floor and C's truncating semantics;
constant terms are folded (no ``o * 1 + -1`` or ``(o + 0) % n``).
"""
from __future__ import annotations

import numpy as np

from ._codegen import SourceWriter, affine, literal
from ._dtypes import DataType
from .ops._base import PAD_KINDS, AxisMap, GatherPlan  # noqa: F401 - re-exported for backends


def emit_map(w: SourceWriter, m: AxisMap, o: str, i: str) -> None:
    """``i = <input coordinate read by output coordinate o>`` for one axis."""
    k, n, a = m.kind, m.n, m.a
    if k == "shift":
        w(f"{i} = {affine([(o, 1)], -a)}")
    elif k == "clamp":
        # "+ 0" where nothing is subtracted: a prange index is unsigned, and max() of an
        # unsigned and a signed integer is a float in Numba; o + 0 is signed
        w(f"{i} = min(max({affine([(o, 1)], -a) if a else f'{o} + 0'}, 0), {n - 1})")
    elif k in ("reflect", "symmetric"):
        period = 2 * (n - 1) if k == "reflect" else 2 * n
        if period == 0:
            w(f"{i} = 0")
            return
        shift = -(-a // period) * period - a  # >= 0, so the operand of % is never negative
        w(f"{i} = {_mod(affine([(o, 1)], shift), period)}")
        with w.block(f"if {i} >= {n}:"):
            w(f"{i} = {period - (0 if k == 'reflect' else 1)} - {i}")
    elif k == "wrap":
        w(f"{i} = {_mod(affine([(o, 1)], -(-a // n) * n - a), n)}")
    elif k == "modulo":
        w(f"{i} = {_mod(o, n)}" if n > 1 else f"{i} = 0")
    elif k == "affine":
        w(f"{i} = {affine([(o, m.s)], a)}")
    else:
        raise AssertionError(f"unknown AxisMap kind {k!r}")


def _mod(expr: str, n: int) -> str:
    return f"({expr}) % {n}" if " " in expr else f"{expr} % {n}"


def inside(m: AxisMap, o: str) -> str | None:
    """Condition that ``o`` reads the input (None: always), for 'shift' maps."""
    if m.kind != "shift" or (m.a == 0 and m.size == m.n):
        return None
    if m.a == 0:
        return f"{o} < {m.n}"
    return f"{o} >= {m.a} and {o} < {m.a + m.n}"


def storage_dtype(data_type: DataType) -> np.dtype:
    """What a data-movement kernel sees: float16 moves as its uint16 bits (bit-exact; Numba's CPU
    target has no half, and on CUDA it keeps the PTX plain integer moves)."""
    return np.dtype(np.uint16) if data_type == DataType.FLOAT16 else data_type.numpy


def constant_literal(value, data_type: DataType) -> str:
    """Source for the padding constant as the kernel stores it (float16 as its bit pattern)."""
    if data_type == DataType.FLOAT16:
        value = int(np.array(value, np.float16).view(np.uint16))
    return literal(value, storage_dtype(data_type))


# -- chains of data-movement operators (ops/gather_chain.py), composed axis by axis -----------

def identity(m: AxisMap) -> bool:
    """The map reads coordinate ``o`` itself (an axis the operator leaves alone)."""
    return m.size == m.n and (m.kind in PAD_KINDS and m.a == 0 or m.kind == "modulo"
                              or m.kind == "affine" and m.a == 0 and m.s == 1)


def emit_chain_axis(w: SourceWriter, plans, axis: int, o: str, i: str) -> dict[int, str]:
    """``i = <input coordinate of the chain read by output coordinate o>`` along ``axis``, the
    maps applied from the last operator to the first (each level's coordinate in its own name,
    ``{i}_{level}``). Returns, per level whose CONSTANT padding can fall outside along this
    axis, the condition that it does not (over the names emitted here)."""
    cur, conds = o, {}
    for k in range(len(plans) - 1, -1, -1):
        m = plans[k].maps[axis]
        if plans[k].constant is not None:
            cond = inside(m, cur)
            if cond:
                conds[k] = cond
        if identity(m):
            continue
        nxt = i if k == 0 else f"{i}_{k}"
        emit_map(w, m, cur, nxt)
        cur = nxt
    if cur != i:
        w(f"{i} = {cur}")
    return conds


def merge_conds(per_axis) -> dict[int, str]:
    """The per-level conditions of several axes joined: level -> 'c0 and c1 ...'."""
    levels: dict[int, list[str]] = {}
    for conds in per_axis:
        for k, c in conds.items():
            levels.setdefault(k, []).append(c)
    return {k: " and ".join(f"({c})" if " or " in c else c for c in cs)
            for k, cs in levels.items()}


def emit_select(w: SourceWriter, conds: dict[int, str], store_constant, store_input) -> None:
    """The element's value: the constant of the level nearest the output whose condition
    fails (``store_constant(level)``), else the input (``store_input()``)."""
    first = True
    for k in sorted(conds, reverse=True):
        with w.block(f"{'if' if first else 'elif'} not ({conds[k]}):"):
            store_constant(k)
        first = False
    if first:
        store_input()
        return
    with w.block("else:"):
        store_input()


def chain_constants(w: SourceWriter, plans, data_type: DataType) -> None:
    """``C{level} = <constant>`` for each level that pads with a constant (module level)."""
    for k, p in enumerate(plans):
        if p.constant is not None:
            w(f"C{k} = {constant_literal(p.constant, data_type)}")
