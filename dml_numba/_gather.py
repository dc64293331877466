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


#: a chain of more operators than this reads each axis's composed map from tables made at
#: generation time (module constants, :func:`chain_tables`): its generated code, and so its
#: compile time, no longer grows with the chain (a map a line grows Numba's compile faster than
#: the chain: seconds at a few hundred operators, minutes at thousands)
TABLE_CHAIN = 16


def table_levels(tables: dict) -> set | None:
    """The levels whose constants a tabled chain's elements can take (None: not tabled)."""
    return set().union(*tables.values()) if tables else None


def chain_tables(desc, axes) -> tuple[list[str], dict[int, list[int]]]:
    """For a chain ``desc`` of more than :data:`TABLE_CHAIN` operators: the module-level lines
    that define, per axis in ``axes``, the input coordinate each output coordinate reads
    (``A{axis}``) and, where a CONSTANT padding can fall outside along it, the level whose
    constant the coordinate takes (``V{axis}``, -1: none; the level nearest the output, as
    :meth:`~dml_numba.ops.gather_chain.GatherChainDesc.axis_sources` says); and per tabled axis
    the levels that occur. A shorter chain: no lines, no axes (its maps are emitted as code)."""
    if len(desc.operators) <= TABLE_CHAIN:
        return [], {}
    lines, tables = [], {}
    for axis in axes:
        src, level = desc.axis_sources(axis, np.arange(desc.output_tensor.sizes[axis]))
        lines.append(f"A{axis} = np.array({src.tolist()}, np.int32)")
        tables[axis] = sorted(set(level.tolist()) - {-1})
        if tables[axis]:
            lines.append(f"V{axis} = np.array({level.tolist()}, np.int32)")
    return lines, tables


def emit_chain_axis(w: SourceWriter, plans, axis: int, o: str, i: str,
                    tables: dict | None = None) -> dict[int, str]:
    """``i = <input coordinate of the chain read by output coordinate o>`` along ``axis``, the
    maps applied from the last operator to the first (each level's coordinate in its own name,
    ``{i}_{level}``), or read from the axis's table where ``tables`` (:func:`chain_tables`)
    has one. Returns, per level whose CONSTANT padding can fall outside along this axis, the
    condition that it does not (over the names emitted here)."""
    if tables and axis in tables:
        w(f"{i} = A{axis}[{o}]")
        return {k: f"V{axis}[{o}] != {k}" for k in tables[axis]}
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


def chain_constants(w: SourceWriter, plans, data_type: DataType, levels=None) -> None:
    """``C{level} = <constant>`` for each level that pads with a constant (``levels``: only
    those, where tables say which occur)."""
    for k, p in enumerate(plans):
        if p.constant is not None and (levels is None or k in levels):
            w(f"C{k} = {constant_literal(p.constant, data_type)}")
