"""Phase 1 of the blocked kernels: copying the input, with its zero padding, into the buffer
the tiles read (whole vectors where a run holds one; a strided last axis stored by phase: at
stride 2 a pair of vectors loaded gives a vector of each phase, two shuffles, instead of a
strided load per phase vector, and only the padding around each phase's run is zeroed)."""
from __future__ import annotations

from contextlib import contextmanager

from ...._codegen import affine, decompose
from ...._dims import prod
from ...._gather import emit_map
from ....ops._base import AxisMap, index_runs


def emit_run(w, lanes, dst, n, src=None, stride: int = 1) -> None:
    """``xp[dst + k] = x[src + k * stride]`` for ``k < n`` (zeros without ``src``): whole
    vectors of ``lanes`` and an overlapping last one where the run holds a vector (strided:
    one load spanning the lanes and a shuffle), else element by element. (Numba's scalar
    indexing wraps negative indices, which keeps LLVM from vectorising such a copy.)"""
    if n <= 0:
        return

    def vector(terms, k):  # the vector of elements k, k + 1, ... (k = terms + constant)
        if src is None:
            return f"vzero({lanes})"
        i = affine([(src, 1)] + [(t, c * stride) for t, c in terms], k * stride)
        return (f"vload(x, {i}, {lanes})" if stride == 1
                else f"vload_stride(x, {i}, {stride}, {lanes})")

    store = "vstore" if src is None or stride == 1 else "vstore_raw"
    if lanes and n >= lanes:
        with w.block(f"for t in range({n // lanes}):"):
            w(f"{store}(xp, {affine([(dst, 1), ('t', lanes)])}, {vector([('t', lanes)], 0)})")
        if n % lanes:
            w(f"{store}(xp, {affine([(dst, 1)], n - lanes)}, {vector([], n - lanes)})")
        return
    if n == 1:
        w(f"xp[{dst}] = " + (f"x[{src}]" if src else "0"))
        return
    with w.block(f"for t in range({n}):"):
        w(f"xp[{affine([(dst, 1), ('t', 1)])}] = "
          + (f"x[{affine([(src, 1), ('t', stride)])}]" if src else "0"))


def _emit_split_row(w, lanes, width, split, lo, n_copy) -> None:
    """A padded row stored by phases of ``split`` (padded element ``j`` at ``(j % split) * q +
    j // split``, ``q = width // split``): the ``n_copy`` elements from ``src`` at padded ``lo``
    on, zeros in the rest of each phase. Stride 2: one pair of vectors loaded gives a vector of
    each phase (two shuffles), where both phases have that many; the rest by strided loads."""
    q = width // split
    runs = []  # (phase, i0: the first source element, count, where it starts in the phase)
    for ph in range(split):  # padded j = i + lo in phase ph: i = i0, i0 + split, ...
        i0 = (ph - lo) % split
        count = max(0, -(-(n_copy - i0) // split))
        runs.append((ph, i0, count, (i0 + lo) // split if count else q))
    for ph, _, count, start in runs:  # the zeros around the copied run
        emit_run(w, lanes, affine([("dst", 1)], ph * q), start)
        emit_run(w, lanes, affine([("dst", 1)], ph * q + start + count), q - start - count)
    emit_run(w, lanes, affine([("dst", 1)], split * q), width - split * q)
    pairs = min(count for _, _, count, _ in runs) // lanes if split == 2 and lanes else 0
    if pairs:
        even, odd = sorted(runs, key=lambda r: r[1])
        picks = [",".join(str(2 * k + first) for k in range(lanes)) for first in (0, 1)]
        with w.block(f"for t in range({pairs}):"):
            w(f"xa = vload(x, {affine([('src', 1), ('t', 2 * lanes)])}, {lanes})")
            w(f"xb = vload(x, {affine([('src', 1), ('t', 2 * lanes)], lanes)}, {lanes})")
            for (ph, _, _, start), pick in zip((even, odd), picks):
                w(f"vstore(xp, {affine([('dst', 1), ('t', lanes)], ph * q + start)}, "
                  f"vshuffle(xa, xb, '{pick}'))")
    for ph, i0, count, start in runs:
        done = pairs * lanes
        if count - done >= lanes or not done:
            emit_run(w, lanes, affine([("dst", 1)], ph * q + start + done), count - done,
                     affine([("src", 1)], i0 + done * split), split)
        elif count > done:  # the last vector overlaps the pairs' last
            emit_run(w, lanes, affine([("dst", 1)], ph * q + start + count - lanes), lanes,
                     affine([("src", 1)], i0 + (count - lanes) * split), split)


@contextmanager
def _rows(w, loop, planes, P, plane, base, pc):
    """The loop over phase 1's padded rows: ``nc`` the plane, ``pc`` the row's coordinates,
    ``dst`` where the row starts in ``xp`` (one plane, ``plane``, from ``base`` on)."""
    if plane is not None:
        w(f"nc = {plane}")
    with w.block(f"for r in {loop}({(1 if plane is not None else planes) * prod(P[:-1])}):"):
        if plane is None:
            decompose(w, "r", ["nc"] + pc, [planes] + list(P[:-1]))
            w(f"dst = r * {P[-1]}")
        else:
            decompose(w, "r", pc, list(P[:-1]))
            w(f"dst = {base} + r * {P[-1]}")
        yield


def emit_pad_phase(w, loop, planes, size_in, front, P, split: int = 1, row=None,
                    plane=None, base=None, lanes: int = 0, fold=None) -> None:
    """Phase 1 of the blocked kernels: ``xp`` (``planes`` planes of spatial sizes ``P``) holds
    ``x`` at offset ``front`` (cropped to ``P``) and zeros elsewhere; one row per iteration.
    ``split`` > 1 stores each row by phases of that stride: padded element ``j`` of a row at
    ``(j % split) * (P[-1] // split) + j // split``, so that a strided window reads consecutive
    elements; ``row`` is then the padded row's length (at most ``P[-1]``). With ``plane`` (an
    expression), only that input plane, written from ``xp[base]`` on."""
    if fold is not None:
        _emit_fold_phase(w, loop, planes, size_in, front, P, row, plane, base, lanes, *fold)
        return
    nd = len(P)
    row = P[-1] if row is None else row
    w(f"# phase 1: the input{'' if plane is None else ' plane'} with its zero padding, one "
      "padded row per iteration" + (f", split by the stride {split}" if split > 1 else ""))
    pc = [f"p{i}" for i in range(nd - 1)]
    with _rows(w, loop, planes, P, plane, base, pc):
        conds = [f"{p} >= {front[i]} and {p} < {front[i] + size_in[i]}" for i, p in enumerate(pc)]
        lo = min(front[-1], row)
        n_copy = max(0, min(size_in[-1], row - front[-1]))
        src = "nc"
        for i, p in enumerate(pc):
            src = f"({src}) * {size_in[i]} + {affine([(p, 1)], -front[i])}"
        with w.block(f"if {' and '.join(conds)}:" if conds else "if True:"):
            w(f"src = ({src}) * {size_in[-1]}")
            if split > 1:
                _emit_split_row(w, lanes, P[-1], split, lo, n_copy)
            else:
                emit_run(w, lanes, "dst", lo)
                emit_run(w, lanes, f"dst + {lo}" if lo else "dst", n_copy, "src")
                emit_run(w, lanes, f"dst + {lo + n_copy}", P[-1] - lo - n_copy)
        with w.block("else:"):
            emit_run(w, lanes, "dst", P[-1])


def _emit_fold_phase(w, loop, planes, size_in, front, P, row, plane, base, lanes, kind,
                     extent) -> None:
    """Phase 1 with a padding operator folded in: inside the padded extent (``extent``, the
    sizes the windows reach) each padded element reads the input through the padding's map
    (``kind``: 'clamp', 'reflect', 'symmetric' or 'wrap'), so the padding never exists as a
    tensor of its own; beyond the extent (rows and columns only overhanging tiles read), zeros.
    The last axis is laid out once as runs: the interior one vector copy, the mirrored or
    repeated edges element by element."""
    nd = len(P)
    row = P[-1] if row is None else row
    w(f"# phase 1: the input{'' if plane is None else ' plane'} with a {kind} padding folded in "
      "(read through its map), one padded row per iteration")
    pc = [f"p{i}" for i in range(nd - 1)]
    sc = [f"s{i}" for i in range(nd - 1)]
    with _rows(w, loop, planes, P, plane, base, pc):
        conds = [f"{p} < {extent[i]}" for i, p in enumerate(pc) if extent[i] < P[i]]
        with w.block(f"if {' and '.join(conds)}:" if conds else "if True:"):
            src = "nc"
            for i, p in enumerate(pc):
                emit_map(w, AxisMap(kind, size_in[i], extent[i], front[i]), p, sc[i])
                src = f"({src}) * {size_in[i]} + {sc[i]}"
            w(f"src = ({src}) * {size_in[-1]}")
            cols = min(row, extent[-1])
            idx, _ = AxisMap(kind, size_in[-1], cols, front[-1]).sources(0, cols)
            for _, j, n, s, step in index_runs(idx.tolist()):
                if step == 1:
                    emit_run(w, lanes, affine([("dst", 1)], j), n, affine([("src", 1)], s))
                else:
                    with w.block(f"for t in range({n}):"):
                        w(f"xp[{affine([('dst', 1), ('t', 1)], j)}] = "
                          f"x[{affine([('src', 1), ('t', step)], s)}]")
            emit_run(w, lanes, f"dst + {cols}", P[-1] - cols)
        with w.block("else:"):
            emit_run(w, lanes, "dst", P[-1])


def emit_lane_row(w, outside, width: int, lanes: int, left: int, cols: int, fill) -> None:
    """One padded row of a copy whose pixels are vectors of ``lanes`` channels (the depthwise
    lanes kernel's slots, a woven copy), from ``xp[dst]``: all zeros where ``outside`` (a
    condition on the row; None: every row is) holds or the plane has no column to copy, else
    zeros in the ``width`` columns but the ``cols`` from ``left`` on, which ``fill(w, left,
    cols)`` writes."""
    whole = outside is None or not cols
    with w.block("if True:" if whole else f"if {outside}:"):
        with w.block(f"for t in range({width}):"):
            w(f"vstore(xp, dst + t * {lanes}, vzero({lanes}))")
    if whole:
        return
    with w.block("else:"):
        for c in range(width):
            if not left <= c < left + cols:
                w(f"vstore(xp, dst + {c * lanes}, vzero({lanes}))")
        fill(w, left, cols)
