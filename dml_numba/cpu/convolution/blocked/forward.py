"""FORWARD convolution in register-blocked tiles (dense, grouped; 1-D to 3-D).

``kernel(x, wp, [b,] y, xp)``, every argument a flat float32 array: phase 1 copies the input
into ``xp`` with its zero padding (skipped when nothing is padded); phase 2 runs a (p)range over
(n, group, channel block, outer spatial, row block), the threads claiming its items
(:mod:`dml_numba.cpu._share`); a plane of one axis (a pointwise layer's
pixels flattened) has no rows to share out and is cut into chunks of its runs instead
(``plan.chunks_of``: enough iterations for every thread, each chunk's input small enough to stay
in a core's cache while the channel blocks read it, the chunks outside the blocks where that
moves fewer bytes). Each iteration walks the row in vectors;
for one tile it keeps ``mb x rows x vectors`` accumulators in vector registers and, per input
channel and tap, loads ``rows x vectors`` input vectors and broadcasts ``mb`` weights from
``wp`` (the filter packed once per call as [g][channel block][c][tap][mb]): ``mb * rows *
vectors`` fused multiply-adds per ``rows * vectors + mb`` loads. Taps are unrolled with constant
offsets. The last row block and vector overlap the previous ones instead of running a remainder
loop (the same values are stored twice). Bias is added in registers; a fused activation runs
over the stored tile.

Staged plans (``blocked-staged``): ``kernel(x, wp, [b,] y, xp, slots)`` instead; each of
``slots`` (p)range iterations takes pairs (n, group) (:mod:`dml_numba.cpu._share`: its own
share first, then what the others left) and, for each, pads the
group's input planes into its own part of ``xp`` (``pad``) and runs every tile of the pair from
there, so the padded copy stays in cache instead of going through memory.

Channels plans (``blocked-channels``, ``blocked-channels-staged``: ``plan.pixels``): the same
kernels and padded copy, the tile ``mb / lanes`` vectors of output channels x ``pixels``
consecutive outputs of one row (``tile.emit_channel_tile``), each input value broadcast from the
padded row (by stride phase where it is split, as above), each vector of channels' pixels
transposed in registers and stored as rows of their output planes (a masked store a plane,
or plain stores of power-of-two pieces where the host has no native masked store); the last
run of pixels overlaps the one before. Streamed plans (``plan.streamed``, 16-register hosts)
walk the taps outermost, holding per tap the smaller of its weight vectors and input values
(``tile.emit_channel_tile``), and on rows of two or more axes store each pixel's vectors whole
into a scratch for the row, transposed into the planes a block of ``lanes`` pixels at a time
after the row's last tile (:func:`row_scratch`).

Woven plans (``plan.woven``: a channels tile of a 2-D layer of unit strides over fewer than 64
input channels a multiple of the lanes, its copy made whole: :func:`.plan.weaves`): phase 1
stores each block of ``lanes`` input channels side by side, a padded pixel's channels in one
line (the depthwise lanes kernel's layout), so that a tile's rows of every input channel are
a few runs of memory instead of one run a channel a plane apart (the layout's column step,
``Layout.step``, is the lanes); the tiles' sums are the planar copy's, bit for bit.

Flat plans (unit strides over the last two axes): a tile is a run of ``vectors`` consecutive
vectors of the padded plane flattened (row by row, padding columns included) instead of rows x
vectors; taps are constant offsets in the flat plane, the stores skip the padding columns
(``vstore_rows``), the last run ends at the plane's last output, overlapping the one before.
"""
from __future__ import annotations

import dataclasses
from contextlib import ExitStack

from ...._codegen import SourceWriter, affine, decompose
from ...._dims import prod
from ....ops.convolution import geometry
from ..._emit import header, helper_header
from ..._share import IMPORT as SHARE_IMPORT
from ..._share import shares
from .padding import emit_lane_row, emit_pad_phase
from .plan import Layout, chunks_of, fold_of, needs_copy
from .tile import (
    SIMD_IMPORT,
    TileSpec,
    Vec,
    activation_import,
    call_tiles,
    emit_activation_pass,
    emit_tile,
    emit_tile_functions,
    leading_tap_offsets,
    row_block_terms,
    slot_elements,
    tile_arrays,
    vector_activation,
)


@dataclasses.dataclass(frozen=True)
class Runs:
    """How a plane is walked: ``row_tiles`` row blocks (flat: runs of the flattened padded
    plane, ``flat_size`` positions up to its last output) and ``column_tiles`` runs of
    ``lanes * vectors`` pixels along a row. A plane of one axis has no rows: its runs are cut
    into ``row_tiles`` chunks of ``chunk`` runs (:func:`chunks_of`), and ``chunk_outer`` puts
    the chunks outside the channel blocks in the (p)range (each chunk's input read once, while
    cached, by every block; the filter read once a chunk)."""

    row_tiles: int
    column_tiles: int
    flat_size: int
    chunk: int = 0  # runs a chunk of a one-axis plane (0: rows, or flat runs)
    chunk_outer: bool = False

    @classmethod
    def of(cls, lay: Layout, flat: bool) -> Runs:
        out, step, columns = lay.out, lay.run, lay.runs
        if flat:
            flat_size = (out[-2] - 1) * lay.padded[-1] + out[-1]
            return cls(-(-flat_size // step), columns, flat_size)
        if lay.rank >= 2:
            return cls(-(-out[-2] // lay.rows), columns, 0)
        chunks, chunk_outer = chunks_of(lay)
        return cls(chunks, columns, 0, -(-columns // chunks), chunk_outer)


#: a 2-D plane's row tiles go outside its channel blocks where the group's whole filter is at
#: most this many bytes (see :func:`rows_outside`): the stems of the CNNs (3 -> 32 3 x 3 a
#: 3.5 KB filter, 3 -> 64 7 x 7 37.6 KB)
ROWS_OUTSIDE_FILTER_BYTES = 64 * 1024


def rows_outside(lay: Layout) -> bool:
    """Whether the tiles of a 2-D plane go row tile by row tile, each row tile's channel blocks
    one after another, instead of block by block: where the group's filter is small (at most
    :data:`ROWS_OUTSIDE_FILTER_BYTES`, held whichever block comes) and the input is not, a
    thread's consecutive tiles then read the same padded rows while its core holds them, and
    each thread reads its share of the rows once instead of the whole input once a block.
    Measured on an AMD EPYC (Zen 5, 2 threads), paired in one process: MobileNetV2's stem (3 ->
    32, 3 x 3, stride 2, 224 x 224) 0.767x the time alone, the model at batch 1 0.981x;
    ResNet-18 at batch 1 0.987x, at batch 8 0.993x; the U-Net level (1.001x at batch 1, 1.002x
    at batch 8)."""
    filter_bytes = 4 * (lay.cin // lay.groups) * lay.mg * prod(lay.kernel)
    return lay.rank == 2 and lay.blocks > 1 and filter_bytes <= ROWS_OUTSIDE_FILTER_BYTES


def emit(key) -> str:
    """The forward blocked kernel of ``key`` (its plan: whole input or staged, rows or flat)."""
    d, plan, lay = key.desc, key.plan, Layout.of(key)
    split = d.strides[-1]  # > 1: rows stored by stride phase, a window's taps read consecutively
    w = SourceWriter()
    loop = header(w, key, imports=(SIMD_IMPORT + (", vload_stride, vstore_raw" if split > 1
                                                  else "")
                                   + (", vstore_rows" if plan.flat else "")
                                   + (", vstore_transposed" if plan.pixels else "")
                                   + (", opaque" if plan.streamed else "")
                                   + activation_import(d), SHARE_IMPORT))
    runs = Runs.of(lay, plan.flat)
    outer = [f"o{i}" for i in range(lay.rank - 2)]
    coords = ["n", "g", "mbi"] + outer + ["rt"] + (["xs"] if plan.staged else [])
    if (runs.chunk_outer or rows_outside(lay)) and not plan.staged:
        coords = ["n", "g", "rt", "mbi"]  # (the staged kernel walks a pair's tiles itself)
    if plan.staged:
        _emit_staged_kernel(w, loop, d, lay, coords, outer, runs)
    else:
        _emit_whole_input_kernel(w, loop, d, lay, coords, runs)
    emit_tile_functions(w, lambda mb, names: _tile(w, names, d, lay, plan, mb, runs, outer),
                        lay, coords, tile_arrays(d, lay))
    return w.text()




def _emit_whole_input_kernel(w, loop, d, lay: Layout, coords, runs: Runs) -> None:
    """The input padded whole first (phase 1), then the tiles in one (p)range (phase 2)."""
    with w.block(f"def kernel(x, wp, {tile_arrays(d, lay)}, xp):"):
        if lay.step > 1:  # woven: an image at a time, its copy while it is in the caches
            with w.block(f"for n in range({lay.batch}):"):
                _emit_woven_phase(w, loop, lay)
                w("# phase 2: the image's register-blocked tiles")
                _emit_tiles(w, loop, d, lay, coords, runs, every_image=False)
            return
        if needs_copy(d):
            emit_pad_phase(w, loop, lay.batch * lay.cin, lay.size_in, lay.front, lay.padded,
                           d.strides[-1], geometry(d).padded_sizes()[-1], lanes=lay.lanes,
                           fold=fold_of(lay, d))
        else:
            w("xp = x  # nothing to pad")
        w("# phase 2: register-blocked tiles")
        _emit_tiles(w, loop, d, lay, coords, runs, every_image=True)


def _emit_tiles(w, loop, d, lay: Layout, coords, runs: Runs, every_image: bool) -> None:
    """The tiles in one (p)range over ``coords`` (the row tiles before or after the channel
    blocks, as ``coords`` has them): every image's, or (``every_image`` false) image ``n``'s
    only, the loop around it giving ``n``."""
    tiles = [lay.groups] + ([runs.row_tiles, lay.blocks] if coords[2] == "rt" else
                            [lay.blocks] + list(lay.out[:-2]) + [runs.row_tiles])
    names, sizes = (coords, [lay.batch] + tiles) if every_image else (coords[1:], tiles)
    with shares(w, loop, prod(sizes)):
        decompose(w, "f", names, sizes)
        call_tiles(w, lay, coords, tile_arrays(d, lay))


def _emit_woven_phase(w, loop, lay: Layout) -> None:
    """Phase 1 of a woven plan (:attr:`~.plan.BlockPlan.woven`) for image ``n``: each block of
    ``lanes`` channels padded into ``xp`` (one image's copy, read by the image's tiles right
    after, while it is in the caches: the U-Net at batch 8, its 16- and 32-channel layers on
    256 x 256 copying 34-67 MB whole, wrote and read the copy through memory) with its
    channels side by side (padded pixel ``(i, j)`` of the block's channel ``c`` at
    ``((block * P0 + i) * P1 + j) * lanes + c``),
    one padded row per iteration (:func:`.padding.emit_lane_row`): the row's runs of ``q``
    pixels (the widest power of two, at most the lanes, the row holds; the last run
    overlapping the one before) from each of the ``lanes`` planes, transposed (rows of under
    four pixels element by element)."""
    L, (h, wd), (top, left), (p0, p1) = lay.step, lay.size_in, lay.front, lay.padded
    rows, cols = max(0, min(h, p0 - top)), max(0, min(wd, p1 - left))  # what the copy holds

    def fill(w, left, cols):
        q = min(L, 1 << (cols.bit_length() - 1))
        if q < 4:  # rows of under four pixels: element by element
            with w.block(f"for c in range({cols}):"), w.block(f"for g in range({L}):"):
                w(f"xp[dst + (c + {left}) * {L} + g] = x[src + c + g * {h * wd}]")
            return
        with w.block(f"for ct in range({-(-cols // q)}):"):
            w(f"c = min(ct * {q}, {cols - q})  # the run's first pixel")
            for g0 in range(0, L, q):
                vecs = ", ".join(f"vload(x, src + c + {(g0 + k) * h * wd}, {q})"
                                 for k in range(q))
                w(f"vstore_transposed(xp, dst + (c + {left}) * {L} + {g0}, {L}, ({vecs}))")

    w("# phase 1: the image padded, each block of its channels side by side, a row an item")
    with w.block(f"for r in {loop}({lay.cin // L * p0}):"):
        w(f"i = r % {p0}  # the padded row")
        w(f"src = (n * {lay.cin // L} + r // {p0}) * {L * h * wd} + (i - {top}) * {wd}"
          "  # the block's first plane")
        w(f"dst = r * {p1 * L}")
        emit_lane_row(w, f"i < {top} or i >= {top + rows}" if rows else None, p1, L, left,
                      cols, fill)


def _emit_staged_kernel(w, loop, d, lay: Layout, coords, outer, runs: Runs) -> None:
    """Slots sharing the (image, group) pairs; each pads a pair's planes (``pad``, a function
    of its own: a short parallel loop body compiles faster), then runs the pair's tiles."""
    cg = lay.cin // lay.groups
    items = lay.batch * lay.groups
    slot = slot_elements(cg * lay.plane_in)
    with w.block(f"def kernel(x, wp, {tile_arrays(d, lay)}, xp, slots):"):
        w(f"# each slot takes a share of the {items} (image, group) pairs, pads the group's "
          f"{cg} input planes into xp[slot * {slot}:] and runs every tile of the "
          "group")
        with shares(w, loop, items, "slots"):  # slot s: its own part of xp
            decompose(w, "f", ["n", "g"], [lay.batch, lay.groups])
            w(f"xs = s * {slot}")
            w("pad(x, xp, n, g, xs)")
            tiles = [lay.blocks] + list(lay.out[:-2]) + [runs.row_tiles]
            with w.block(f"for t in range({prod(tiles)}):"):
                decompose(w, "t", ["mbi"] + outer + ["rt"], tiles)
                call_tiles(w, lay, coords, tile_arrays(d, lay))
    helper_header(w)
    with w.block("def pad(x, xp, n, g, xs):"):
        with w.block(f"for c in range({cg}):"):
            emit_pad_phase(w, "range", 1, lay.size_in, lay.front, lay.padded, d.strides[-1],
                           geometry(d).padded_sizes()[-1], plane=f"n * {lay.cin} + g * {cg} + c",
                           base=f"xs + c * {lay.plane_in}", lanes=lay.lanes,
                           fold=fold_of(lay, d))


def _tile(w, names, d, lay: Layout, plan, mb: int, runs: Runs, outer) -> None:
    """A tile function's body: its rows' offsets, the runs along the row, the tile."""
    span, flat = lay.run, plan.flat
    names.let("m0", f"g * {lay.mg} + mbi * {lay.mb}")
    two_d = lay.rank >= 2
    terms_x, terms_y = row_block_terms(d, outer + (["r0"] if two_d and not flat else []),
                                       lay.pstride, lay.ostride)
    if flat:  # one run of lanes * vectors positions of the flattened padded plane, from j;
        # the last run ends where the plane's last output does, overlapping the one before
        names.let("xr0", affine(terms_x))
        names.let("yr0", affine(terms_y))
        names.let("j", f"min(rt * {span}, {runs.flat_size - span})")
    else:
        if two_d:
            names.let("r0", f"min(rt * {lay.rows}, {lay.out[-2] - lay.rows})")
        for r in range(lay.rows):
            names.let(f"xr{r}", affine(terms_x, r * d.strides[-2] * lay.pstride[-2] if two_d
                                       else 0))
            names.let(f"yr{r}", affine(terms_y, r * lay.ostride[-2] if two_d else 0))
    rows_kept = row_scratch(lay, plan)
    if rows_kept:
        names.let("rs", f"np.empty({lay.out[-1] * mb}, np.float32)")
    chunked = runs.chunk and runs.row_tiles > 1
    with ExitStack() as run_loop:
        if plan.cblock:  # the tiles pass by pass over the input channels (plan.cblock)
            tiles = runs.chunk if chunked else runs.column_tiles
            names.let("ps", f"np.empty({tiles * mb * lay.pixels}, np.float32)  # partial sums")
            run_loop.enter_context(names.loop(
                "c0", f"range(0, {lay.cin // lay.groups}, {plan.cblock})"))
        if chunked:  # chunk rt's runs of a one-axis plane
            run_loop.enter_context(names.loop(
                "jt", f"range(rt * {runs.chunk}, min(rt * {runs.chunk} + {runs.chunk}, "
                      f"{runs.column_tiles}))"))
            names.let("j", f"min(jt * {span}, {lay.out[-1] - span})")
        elif not flat:
            run_loop.enter_context(names.loop("jt", f"range({runs.column_tiles})"))
            names.let("j", f"min(jt * {span}, {lay.out[-1] - span})")
        if plan.cblock:
            names.let("so", f"{f'(jt - rt * {runs.chunk})' if chunked else 'jt'} * "
                            f"{mb * lay.pixels}")
        spec = (_channel_spec if plan.pixels else _spec)(w, names, d, lay, plan, mb)
        tail = narrow_tail(lay, plan)
        if tail:  # the row's last run in fewer vectors (the remainder, overlapping less)
            with w.block(f"if jt < {runs.column_tiles - 1}:"):
                emit_tile(w, names, d, spec)
            with w.block("else:"):
                names.let("j", f"{lay.out[-1] - tail * lay.lanes}")
                emit_tile(w, names, d, dataclasses.replace(
                    spec, columns=spec.columns[:tail], span=tail * lay.lanes))
        else:
            emit_tile(w, names, d, spec)
    if rows_kept:
        _emit_row_out(w, names, d, lay, mb)


def narrow_tail(lay: Layout, plan) -> int:
    """Vectors of the last run along a row where fewer than the tile's cover what the others
    leave (0: the last run is a whole tile, overlapping the one before): a pixels tile whose
    row is no multiple of its ``lanes * vectors`` outputs. A whole tile there computes up to
    ``vectors - 1`` vectors twice (on 14 x 14 planes flattened, 196 = 12 x 16 + 4 outputs: 208
    computed, 6% more); the tail computes at most ``lanes - 1`` outputs twice."""
    if plan.pixels or plan.flat:
        return 0
    rest = lay.out[-1] % lay.run
    vectors = -(-rest // lay.lanes)
    return vectors if rest and lay.runs > 1 and vectors < lay.vectors else 0


def row_scratch(lay: Layout, plan) -> bool:
    """Whether a channels tile stores its row through a scratch (``rs``, pixel-major: each
    pixel's vectors of channels whole) and the row is transposed into its output planes after
    its last tile, a block of ``lanes`` pixels at a time: the streamed plans (the 16-register
    hosts, where it was measured) on rows of two or more axes at least a vector long. Stored
    tile by tile instead, each channel's few pixels go to a plane of their own: on planes of
    a power-of-two size, all in the same set of the first-level cache (32 -> 32 channels on 128
    x 128, AVX2: 2.18 ms with them, 1.83 stored whole)."""
    return bool(plan.pixels and plan.streamed and lay.rank >= 2
                and lay.out[-1] >= lay.lanes)


def _emit_row_out(w, names, d, lay: Layout, mb: int) -> None:
    """The row from the scratch into the output planes: per vector of channels, blocks of
    ``lanes`` pixels transposed in registers and stored a plane's row at a time (whole
    vectors; the last block overlaps the one before where the row is not a multiple), then
    the fused activation that has no vector form, over the row (``mb`` the tile's channels).
    """
    L, W = lay.lanes, lay.out[-1]
    full, rest = divmod(W, L)
    for o in range(mb // L):
        y0 = f"(n * {lay.cout} + {names['m0']} + {o * L}) * {lay.plane_out} + {names['yr0']}"

        def block(q):
            vecs = ", ".join(f"vload(rs, ({q} + {i}) * {mb} + {o * L}, {L})" for i in range(L))
            w(f"vstore_transposed(y, {y0} + {q}, {lay.plane_out}, ({vecs}))")

        if full > 1:
            with names.loop("qt", f"range({full})"):
                block(f"qt * {L}")
        else:
            block("0")
        if rest:
            block(str(W - L))
    if lay.addend or (d.fused_activation is not None and vector_activation(d) is None):
        emit_activation_pass(w, d, [("m", mb), ("q", W)],
                             f"(n * {lay.cout} + m0 + m) * {lay.plane_out} + yr0 + q", lay=lay)


def _last_taps(d, lay: Layout) -> list:
    """``(tap, offset)`` of the last axis's taps: where output pixel ``j`` reads each in its
    padded row (by stride phase where the rows are split: offset + ``j`` either way)."""
    split, dil, P = d.strides[-1], d.dilations[-1], lay.padded
    return [(t, (t * dil) % split * (P[-1] // split) + t * dil // split)
            for t in range(lay.kernel[-1])]


def _spec(w, names, d, lay: Layout, plan, mb: int) -> TileSpec:
    """The forward tile: the last axis's taps at constant offsets (by stride phase where the
    rows are split), the stores (skipping the padding columns of a flat run)."""
    flat = plan.flat
    vec, P = Vec(lay.lanes), lay.padded
    last = _last_taps(d, lay)

    def store(m, r, values):
        y0 = f"(n * {lay.cout} + {names['m0']} + {m}) * {lay.plane_out} + {names[f'yr{r}']}"
        for v, value in enumerate(values):
            if flat:  # the padding columns the run covers are not written
                w(f"vstore_rows(y, {y0}, j + {v * lay.lanes}, {value}, {lay.out[-1]}, {P[-1]})")
            else:
                w(vec.store("y", f"{y0} + {names['j']} + {v * lay.lanes}", value))

    y0 = f"(n * {lay.cout} + m0 + m) * {lay.plane_out} + yr0"
    row_step = lay.ostride[-2] if lay.rank >= 2 else 0
    return TileSpec(
        lay, mb, lay.rows, [[(t, off + v * lay.lanes) for t, off in last]
                            for v in range(lay.vectors)],
        lambda stack, names: leading_tap_offsets(w, names, lay, d, stack),
        lambda r: f"xr{r}", store,
        f"{y0} + (j + q) // {P[-1]} * {lay.out[-1]} + (j + q) % {P[-1]}" if flat
        else f"{y0} + r * {row_step} + j + q", lay.lanes * lay.vectors,
        staged=plan.staged, keep=f"(j + q) % {P[-1]} < {lay.out[-1]}" if flat else None)


def _channel_spec(w, names, d, lay: Layout, plan, mb: int) -> TileSpec:
    """The channels tile (:func:`.tile.emit_channel_tile`): ``columns[p]`` the taps pixel
    ``j + p`` reads; the vectors of channels (one a pixel, one lane per output plane) of up to
    ``lanes`` pixels transposed in registers and stored a plane's row at a time
    (``vstore_transposed``)."""
    rows_kept = row_scratch(lay, plan)

    def store(o, values):
        if rows_kept:  # each pixel's vector whole into the row's scratch (:func:`row_scratch`)
            for p, value in enumerate(values):
                w(f"vstore(rs, ({names['j']} + {p}) * {mb} + {o * lay.lanes}, {value})")
            return
        for p0 in range(0, len(values), lay.lanes):
            chunk = values[p0:p0 + lay.lanes]
            w(f"vstore_transposed(y, (n * {lay.cout} + {names['m0']} + {o * lay.lanes}) * "
              f"{lay.plane_out} + {names['yr0']} + {names['j']} + {p0}, {lay.plane_out}, "
              f"({', '.join(chunk)}{',' if len(chunk) == 1 else ''}))")

    return TileSpec(
        lay, mb, 1, [[(t, (off + p) * lay.step) for t, off in _last_taps(d, lay)]
                     for p in range(lay.pixels)],
        lambda stack, names: leading_tap_offsets(w, names, lay, d, stack),
        lambda r: f"xr{r}", store,
        None if rows_kept else f"(n * {lay.cout} + m0 + m) * {lay.plane_out} + yr0 + j + q",
        lay.pixels, staged=plan.staged, streamed=plan.streamed, cblock=plan.cblock)
