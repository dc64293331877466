"""A chain of data-movement operators on the CPU, fused: one pass over the output, no
intermediate. A flat (p)range over the output's rows works out each outer axis's composed map
(the operators' maps applied from the last to the first); the last axis is laid out once, at
generation time, as runs (a strided copy of the input, or a padding's constant), each run one
loop. Where the runs would be many (a last axis tiled many times), the row applies the
composed map element by element instead."""
from __future__ import annotations

import dataclasses
import itertools

from .._codegen import SourceWriter, affine, decompose, index
from .._dims import prod
from .._gather import (
    chain_constants,
    chain_tables,
    emit_chain_axis,
    emit_select,
    merge_conds,
    storage_dtype,
    table_levels,
)
from .._registry import register
from ..ops.gather_chain import GatherChainDesc
from ._emit import Host, MoveKernel, RowReads, header, make_key

#: a last axis laid out in more runs than this is mapped element by element
MAX_RUNS = 16


#: copy runs with these steps are read a vector at a time (one load and a shuffle)
VECTOR_STEPS = (-4, -3, -2, -1, 1, 2, 3, 4)


def row_lanes(desc, host: Host | None = None) -> int:
    """Elements a vector of the host moves (its bytes over the element's); 0 where no copy
    run of the last axis holds a whole vector with a step read that way."""
    itemsize = storage_dtype(desc.input_tensor.data_type).itemsize
    lanes = (host or Host.current()).lanes * 4 // itemsize
    runs = desc.runs()
    fits = any(r[0] == "copy" and r[4] in VECTOR_STEPS and r[2] >= lanes for r in runs)
    return lanes if fits and len(runs) <= MAX_RUNS else 0


def trailing_tile(desc):
    """``(the chain before it, its repeats)`` where ``desc`` ends in a tile that repeats
    something after at least one other operator, on rank 2 and up; else None."""
    *rest, last = desc.operators
    last = last.canonical()
    if not rest or desc.output_tensor.rank < 2 or type(last).op_name() != "tile" \
            or all(r == 1 for r in last.repeats):
        return None
    return GatherChainDesc(desc.input_tensor, last.input_tensor, tuple(rest)), last.repeats


def emit(key) -> str:
    """The fused loop nest of the chain ``key.desc``. A chain that ends in a tile computes
    each row of the tile's input once and copies it where the tile repeats it (a row's
    repeats, then the whole row to the other rows it lands in), from the cache it was just
    written to: the gathers, the costly part, run once for all the repeats."""
    desc = key.desc
    tiled = trailing_tile(desc)
    body = tiled[0] if tiled else desc
    plans = body.gather_plans()
    sizes = body.output_tensor.sizes
    rank = len(sizes)
    lanes = key.plan.lanes
    w = SourceWriter()
    tables_src, tables = chain_tables(body, range(rank))
    loop = header(w, key, imports=(("from dml_numba.cpu._simd import vload_stride, vstore_raw",)
                                   if lanes else ()) + tuple(tables_src))
    runs = body.runs()
    with w.block("def kernel(x, y):"):
        w("# one pass for the chain " + " -> ".join(type(op).op_name() for op in desc.operators)
          + "; each axis maps the output coordinate through them, last first"
          + ("; the tile's input rows computed once, copied to their repeats" if tiled else ""))
        chain_constants(w, plans, desc.output_tensor.data_type, table_levels(tables))
        if rank == 1 and (loop != "range" or len(runs) > MAX_RUNS):
            with w.block(f"for j in {loop}({sizes[0]}):"):
                _element(w, plans, [], [], {}, "j", tables)
            return w.text()
        outer = [f"o{d}" for d in range(rank - 1)]
        inner = [f"i{d}" for d in range(rank - 1)]
        with w.block(f"for f in {loop}({prod(sizes[:-1])}):"):
            decompose(w, "f", outer, sizes[:-1])
            conds = merge_conds([emit_chain_axis(w, plans, d, outer[d], inner[d], tables)
                                 for d in range(rank - 1)])
            if len(runs) > MAX_RUNS:
                with w.block(f"for j in range({sizes[-1]}):"):
                    _element(w, plans, outer, inner, conds, "j", tables)
            else:
                emit_select(w, conds, lambda k: _row(w, runs, outer, inner, k),
                            lambda: _row(w, runs, outer, inner, -1, lanes))
            if tiled:
                _repeat(w, sizes, tiled[1], outer, lanes)
    return w.text()


def _repeat(w, sizes, repeats, outer, lanes: int) -> None:
    """The row just written (``sizes``' last axis at ``outer``) copied where a tile of
    ``repeats`` repeats it: along the row, then the whole row to each repeat of the outer
    axes."""
    n = sizes[-1]
    w(f"yr = y[{index(*outer)}]")
    for k in range(1, repeats[-1]):
        _copy(w, "yr", 0, k * n, n, lanes)
    for combo in itertools.product(*(range(r) for r in repeats[:-1])):
        if any(combo):
            at = [affine([(o, 1)], k * m) for o, k, m in zip(outer, combo, sizes)]
            w(f"zr = y[{index(*at)}]")
            _copy(w, "zr", 0, 0, n * repeats[-1], lanes, src="yr")


def _vector_copy(w, dst: str, d0: int, src: str, s0: int, n: int, step: int,
                 lanes: int) -> None:
    """``dst[d0 + t] = src[s0 + t * step]`` for ``t < n`` (``n >= lanes``), a vector of
    ``lanes`` at a time, the last vector overlapping the one before."""
    with w.block(f"for t in range({n // lanes}):"):
        w(f"vstore_raw({dst}, {affine([('t', lanes)], d0)}, vload_stride({src}, "
          f"{affine([('t', lanes * step)], s0)}, {step}, {lanes}))")
    if n % lanes:
        w(f"vstore_raw({dst}, {d0 + n - lanes}, vload_stride({src}, {s0 + (n - lanes) * step}, "
          f"{step}, {lanes}))")


def _copy(w, dst: str, s0: int, d0: int, n: int, lanes: int, src: str | None = None) -> None:
    """``dst[d0:d0+n] = src[s0:s0+n]`` (``src`` defaults to ``dst``; the two never overlap),
    a vector at a time where ``lanes``."""
    src = src or dst
    if lanes and n >= lanes:
        _vector_copy(w, dst, d0, src, s0, n, 1, lanes)
        return
    with w.block(f"for t in range({n}):"):
        w(f"{dst}[{affine([('t', 1)], d0)}] = {src}[{affine([('t', 1)], s0)}]")


def _row(w, runs, outer, inner, base: int, lanes: int = 0) -> None:
    """One output row from its runs; ``base``: the level whose constant the outer axes already
    chose (-1: none), which a run's own constant overrides only from a level nearer the output.
    Neighbouring fills of the same constant are one loop. ``lanes``: copy runs of a step in
    VECTOR_STEPS holding a vector are read and written a vector at a time on row views."""
    y = lambda j: f"y[{index(*outer, j)}]"  # noqa: E731
    if lanes:
        w(f"xr = x[{index(*inner)}]" if inner else "xr = x")
        w(f"yr = y[{index(*outer)}]" if outer else "yr = y")
    items: list = []
    for run in runs:
        if run[0] == "copy" and base < 0:
            items.append(run)
            continue
        level = max(base, run[3]) if run[0] == "fill" else base
        if items and items[-1][0] == "fill" and items[-1][3] == level:
            items[-1] = ("fill", items[-1][1], items[-1][2] + run[2], level)
        else:
            items.append(("fill", run[1], run[2], level))
    for item in items:
        j, n = item[1], item[2]
        if item[0] == "copy":
            s, step = item[3], item[4]
            if lanes and step in VECTOR_STEPS and n >= lanes:
                _vector_copy(w, "yr", j, "xr", s, n, step, lanes)
                continue
            with w.block(f"for t in range({n}):"):
                w(f"{y(affine([('t', 1)], j))} = x[{index(*inner, affine([('t', step)], s))}]")
        else:
            with w.block(f"for t in range({j}, {j + n}):"):
                w(f"{y('t')} = C{item[3]}")


def _element(w, plans, outer, inner, outer_conds, j: str, tables) -> None:
    """Output element ``j`` of the row: its last-axis map (or table), then the value."""
    conds = merge_conds([outer_conds, emit_chain_axis(w, plans, len(outer), j, "k", tables)])
    emit_select(w, conds, lambda k: w(f"y[{index(*outer, j)}] = C{k}"),
                lambda: w(f"y[{index(*outer, j)}] = x[{index(*inner, 'k')}]"))


class GatherChainKernel(MoveKernel):
    """The fused chain on the CPU."""

    def __init__(self, desc, options):
        tiled = trailing_tile(desc)
        key = dataclasses.replace(make_key(desc, options),
                                  plan=RowReads(row_lanes(tiled[0] if tiled else desc)))
        super().__init__(key, emit, desc, options)


register(GatherChainDesc, "cpu")(GatherChainKernel)
