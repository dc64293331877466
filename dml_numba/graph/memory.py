"""Where a compiled graph keeps its intermediate tensors: one arena a thread, each node output
at an offset, the offsets shared by outputs that are never needed at the same time.

A node output lives from the step that writes it to the last step that reads it (both
included). Two outputs whose lives overlap never share a byte: a step's output is placed while
its inputs are still alive, so no kernel reads memory it writes (the steps run unchecked, see
``CompiledOperator.run_checked``), and an output read by a later step keeps its bytes until then.
Outputs whose lives do not overlap may share memory, which is the point: the memory a step
frees is the memory the next step writes, still in cache, and the arena is the peak of what is
alive at once instead of the sum of every intermediate (DirectML's compiled operators ask for
one temporary resource the same way; ONNX Runtime plans its arena likewise).

Placement walks the steps in order (a linear scan): each output takes the lowest free range
that fits (first fit, over ranges kept sorted and merged), then the outputs read for the last
time at that step are freed. Every offset is a multiple of ALIGN bytes (the alignment CUDA's
allocations give, four cache lines).

A step's output may be a part of another buffer (``Step.into``: a joined tensor written where
the join would have copied it, :func:`~dml_numba.graph.plan.join_in_place`): the part has no
bytes of its own; the whole lives from the first step that writes any part of it to the last
step that reads it or any part, and each part sits at its offset in the whole (a multiple of
its element size, not necessarily of ALIGN: where the join puts it).
"""
from __future__ import annotations

import bisect

#: bytes every offset and size is rounded up to
ALIGN = 256


def key_of(ref) -> object:
    """The buffer key of a ``("buffer", node[, output])`` reference: the node, or ``(node,
    output)`` for an output after the first (as ``CompiledGraph.buffers`` names them)."""
    return ref[1:] if len(ref) > 2 else ref[1]


def parts(steps) -> dict:
    """``{key: (whole key, byte offset)}``: the buffers that are parts of another
    (``Step.into``)."""
    return {key_of(s.output): (key_of(s.into[0]), s.into[1]) for s in steps if s.into}


def _whole(key, within: dict):
    """The buffer whose bytes ``key`` has: its whole where it is a part (``within``:
    :func:`parts`), else itself."""
    return within[key][0] if key in within else key


def lifetimes(steps, within: dict | None = None) -> dict:
    """``{key: (first, last)}``: the step writing each buffer and the last step reading it
    (``first`` where nothing reads it); a whole's, of its parts too (a part has none of its
    own; ``within``: :func:`parts`, found here where not given)."""
    within = parts(steps) if within is None else within
    life = {}
    for i, s in enumerate(steps):
        for ref in (s.output, *(r for r, _ in s.more)):
            if ref[0] == "buffer":
                life.setdefault(_whole(key_of(ref), within), [i, i])
        for ref in s.inputs:
            if ref[0] == "buffer":
                life[_whole(key_of(ref), within)][1] = i
    return {k: tuple(v) for k, v in life.items()}


def _round(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def place(steps, nbytes) -> tuple[dict, int]:
    """``({key: offset}, arena bytes)`` for the buffers of ``steps`` (a part's: its whole's
    and its own offset in it); ``nbytes(key)`` is a buffer's size in bytes."""
    within = parts(steps)
    life = lifetimes(steps, within)
    ending: dict[int, list] = {}
    for k, (_, last) in life.items():
        ending.setdefault(last, []).append(k)
    free: list[list[int]] = []  # [offset, size], sorted by offset, merged where they touch
    top = 0
    offsets: dict = {}
    size = {k: _round(max(1, nbytes(k))) for k in life}
    for i, s in enumerate(steps):
        for ref in (s.output, *(r for r, _ in s.more)):
            if ref[0] != "buffer":
                continue
            k = _whole(key_of(ref), within)
            if k in offsets:  # a whole, placed with its first part
                continue
            need = size[k]
            at = next((j for j, (_, n) in enumerate(free) if n >= need), None)
            if at is not None:
                offsets[k] = free[at][0]
                free[at][0] += need
                free[at][1] -= need
                if free[at][1] == 0:
                    del free[at]
            elif free and free[-1][0] + free[-1][1] == top:  # grow the free range at the end
                offsets[k] = free[-1][0]
                top = offsets[k] + need
                del free[-1]
            else:
                offsets[k] = top
                top += need
        for k in ending.get(i, ()):
            _free(free, offsets[k], size[k])
    for k, (w, at) in within.items():
        offsets[k] = offsets[w] + at
    return offsets, top


def _free(free: list, offset: int, n: int) -> None:
    """Give ``[offset, offset + n)`` back, merged with the free ranges it touches."""
    j = bisect.bisect_left(free, [offset, n])
    if j > 0 and free[j - 1][0] + free[j - 1][1] == offset:
        j -= 1
        free[j][1] += n
    else:
        free.insert(j, [offset, n])
    if j + 1 < len(free) and free[j][0] + free[j][1] == free[j + 1][0]:
        free[j][1] += free[j + 1][1]
        del free[j + 1]
