"""The tiled CUDA convolution's implicit GEMM (dense, grouped and transposed): the tile plan,
the grid of tiles, one GEMM per output phase for strided BACKWARD, and the shared-memory slabs
(see :mod:`dml_numba.cuda.convolution` for the whole picture)."""
from __future__ import annotations

import math
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass

from ..._codegen import SourceWriter, affine, decompose, index
from ..._dtypes import accumulator
from ..._gather import AxisMap, emit_map
from ...elements.convolution import channel_block, conv_epilogue
from ...ops.convolution import ConvolutionDirection, ConvolutionMode, geometry
from .._emit import half_load, header, shared_memory_decorator

THREADS = 256  # a tiled block
#: launch bounds of the implicit GEMMs: 2 blocks of 256 an SM, at most 128 registers (the phased
#: transposed kernel takes 130 without, which leaves room for one block)
GEMM_BOUNDS = (THREADS, 2)
BK = 8  # reduction depth of one shared-memory slab
#: blocks a split reduction aims for: two resident blocks of 256 threads on each of the 132 SMs
#: of an H100 or H200 (SXM), so that a layer of few tiles (deep channels on a small image: a
#: ResNet's last stage has 8 tiles at batch 1) still fills the GPU
SPLIT_TARGET = 264
MIN_SPLIT = 16 * BK  # the fewest reduction terms a part takes (its slabs outweigh the hand-off)


@dataclass(frozen=True)
class TilePlan:
    """RM x RN outputs a thread, TX x TY threads: a BM x BN tile of (pixels x channels)."""

    rm: int
    rn: int
    tx: int
    ty: int

    @property
    def bm(self) -> int:
        return self.tx * self.rm

    @property
    def bn(self) -> int:
        return self.ty * self.rn


def tile_plan(desc) -> TilePlan:
    """RN from the group's channels (4, 2 or 1 dividing them), TY threads across channels up to
    16 (a power of two covering the group's channels), the rest across pixels, RM so that a tile
    spans at most 256 pixels."""
    mg = geometry(desc).out_channels
    rn = channel_block(desc)
    ty = min(16, 1 << max(0, math.ceil(math.log2(-(-mg // rn)))))
    tx = THREADS // ty
    rm = max(1, min(4, 256 // tx))
    return TilePlan(rm, rn, tx, ty)


@dataclass(frozen=True)
class AxisPhases:
    """One spatial axis of a strided transposed convolution, split by the output's residue
    ``f = (o + start) % stride`` (the phase): the taps ``k0 + t*step`` (``count`` of them)
    reach outputs ``o0 + j*stride`` (``outputs`` of them) from inputs ``base + j - t*dt``."""

    k0: tuple
    count: tuple
    o0: tuple
    outputs: tuple
    base: tuple
    step: int
    dt: int


def phases_for(desc):
    """Per-axis phases of a BACKWARD convolution with a stride above 1, or None: in gather form
    every output would test every tap and (for stride 2) reject three of four; per phase the
    implicit GEMM runs only the taps that reach it. Phase ``f = (o + start) % stride`` is the
    geometry's residue ``r = (f - start) % stride`` of the output (its taps, in order, are every
    ``step``-th one from the first)."""
    d, geo = desc, geometry(desc)
    if geo.forward or all(s == 1 for s in d.strides):
        return None
    axes = []
    for s, dil, pad, n_out, residues in zip(d.strides, d.dilations, d.start_padding,
                                            d.output_tensor.sizes[2:], geo.transposed_phases()):
        step = s // math.gcd(s, dil)
        k0, count, o0, outputs, base = [], [], [], [], []
        for f in range(s):
            first = (f - pad) % s
            taps = residues[first]
            k0.append(taps[0][0] if taps else 0)
            count.append(len(taps))
            o0.append(first)
            outputs.append(-(-(n_out - first) // s) if first < n_out else 0)
            base.append((first + pad - k0[-1] * dil) // s)
        axes.append(AxisPhases(tuple(k0), tuple(count), tuple(o0), tuple(outputs), tuple(base),
                               step, dil // math.gcd(s, dil)))
    return axes


def _phase_space(desc) -> tuple:
    """(outputs, taps) a phase spans along each axis at most: every phase's GEMM is laid out
    on these constant sizes (divisions by constants), the pixels and taps a phase lacks masked
    off."""
    axes = phases_for(desc)
    return tuple(max(ax.outputs) for ax in axes), tuple(max(ax.count) for ax in axes)


@dataclass(frozen=True)
class GemmGrid:
    """How an implicit GEMM is laid out: ``phases`` GEMMs (the strides' product for a phased
    BACKWARD, else 1) per group, each of ``pixels`` (N x the spatial ``outputs`` a GEMM spans,
    a phase's at most) by the group's channels, reducing ``reduction`` terms (C/g x ``taps``);
    tiles of BM pixels x BN channels."""

    phases: int
    groups: int
    outputs: tuple
    taps: tuple
    pixels: int
    reduction: int
    tiles_m: int
    tiles_p: int

    @property
    def tiles(self) -> int:
        return self.phases * self.groups * self.tiles_m * self.tiles_p


def gemm_grid(desc, plan) -> GemmGrid:
    d = desc
    g = d.group_count
    if phases_for(d) is not None:
        (outputs, taps), phases = _phase_space(d), math.prod(d.strides)
    else:
        outputs, taps, phases = d.output_tensor.sizes[2:], d.filter_tensor.sizes[2:], 1
    pixels = d.output_tensor.sizes[0] * math.prod(outputs)
    return GemmGrid(phases, g, tuple(outputs), tuple(taps), pixels,
                    d.input_tensor.sizes[1] // g * math.prod(taps),
                    -(-(d.output_tensor.sizes[1] // g) // plan.bn), -(-pixels // plan.bm))


@dataclass(frozen=True)
class Split:
    """The reduction cut into ``parts`` of ``chunk`` terms (a multiple of BK; the last part
    takes the rest). Each (tile, part) is a block of its own: it writes its partial sums to a
    workspace, and the block that finishes a tile's parts last (an atomic counter per tile)
    adds them up in the order of the parts -- the same order whichever block comes last, so
    the result does not depend on scheduling -- and stores the tile with bias and activation."""

    parts: int
    chunk: int

    def workspace(self, grid, plan) -> tuple:
        """(parts, tiles, terms a tile) of partial sums, and the counters' (tiles,)."""
        return (self.parts, grid.tiles, THREADS * plan.rm * plan.rn), (grid.tiles,)


def split_for(desc, plan=None) -> Split:
    """How the implicit GEMM of ``desc`` splits its reduction: into as many parts as bring its
    tiles near :data:`SPLIT_TARGET` blocks, none shorter than :data:`MIN_SPLIT` terms; one part
    where the tiles alone reach half the target, and for the phased transposed kernel."""
    plan = plan or tile_plan(desc)
    grid = gemm_grid(desc, plan)
    whole = Split(1, grid.reduction)
    if grid.phases > 1 or 2 * grid.tiles >= SPLIT_TARGET:
        return whole
    parts = min(-(-SPLIT_TARGET // grid.tiles), grid.reduction // MIN_SPLIT)
    if parts <= 1:
        return whole
    share = -(-grid.reduction // parts)
    chunk = -(-share // BK) * BK  # whole slabs
    return Split(-(-grid.reduction // chunk), chunk)


def emit(key) -> str:
    """The implicit GEMM of ``key`` (one per output phase for strided BACKWARD; FORWARD with a
    folded padding where the key's plan is a :class:`~dml_numba.ops._base.Fold`: the
    gathered input reads through its map instead of zeros)."""
    d = key.desc
    if phases_for(d) is not None:
        return emit_phases(key)
    plan = tile_plan(d)
    grid = gemm_grid(d, plan)
    split = split_for(d, plan)
    nd = d.input_tensor.rank - 2
    g, cg = d.group_count, geometry(d).in_channels
    osz, ksz = d.output_tensor.sizes[2:], d.filter_tensor.sizes[2:]
    pixels, reduction, tiles_m, tiles_p = grid.pixels, grid.reduction, grid.tiles_m, grid.tiles_p
    acc = accumulator(d.input_tensor.data_type).name
    load = half_load(d.input_tensor.data_type)
    o = [f"o{i}" for i in range(nd)]
    k = [f"k{i}" for i in range(nd)]

    w = SourceWriter()
    header(w, key)
    w(f"# implicit GEMM: tiles of {plan.bm} pixels x {plan.bn} channels, {plan.rm} x {plan.rn} a "
      f"thread, {THREADS} threads, reduction {reduction} in slabs of {BK}"
      + (f", in {split.parts} parts of {split.chunk}" if split.parts > 1 else ""))
    parts = split.parts
    with _kernel_head(w, d, plan, acc, split=parts > 1), \
            w.block(f"for {'unit' if parts > 1 else 'tile'} in range(cuda.blockIdx.x, "
                    f"{grid.tiles * parts}, cuda.gridDim.x):"):
        if parts > 1:  # the part of the reduction this block runs, of which tile
            w(f"tile = unit // {parts}")
            w(f"part = unit % {parts}")
        decompose(w, "tile", ["g", "tm", "tp"], [g, tiles_m, tiles_p])
        _emit_load_pixel(w, plan, str(pixels))
        decompose(w, "p", ["n"] + o, [d.output_tensor.sizes[0], *osz])
        _window_origins(w, d, o)
        fold = getattr(key.plan, "kind", None)  # a padding operator in front, folded

        def load_a():
            return _gathered_input(w, d, k, fold)

        def load_b():
            decompose(w, "r", ["c"] + k, [cg, *ksz])
            return _filter_taps(d, k), ""

        span = (f"part * {split.chunk}", f"min({reduction}, part * {split.chunk} + "
                 f"{split.chunk})") if parts > 1 else ("0", str(reduction))
        _emit_slabs(w, d, plan, str(reduction), acc, load, load_a, load_b, span=span)

        def output(q):
            decompose(w, q, ["n"] + o, [d.output_tensor.sizes[0], *osz])
            return o, ""

        with _split_parts(w, plan, parts, acc) if parts > 1 else nullcontext() as value:
            _emit_store(w, d, plan, str(pixels), output, load, value)
    return w.text()


@contextmanager
def _split_parts(w, plan, parts: int, acc: str):
    """The hand-off of a split reduction (:class:`Split`): this block's partial sums to the
    workspace ``ws[part, tile]`` (each thread its register block, lane by lane), then a fence
    and the tile's counter; the block that counted last stores the tile (the body, given how
    to read an output's sum: its parts added in order) and sets the counter back for the next
    launch."""
    names = [(i, jj) for i in range(plan.rm) for jj in range(plan.rn)]
    for q, (i, jj) in enumerate(names):
        w(f"ws[part, tile, {q * THREADS} + t] = acc_{i}_{jj}")
    w("cuda.threadfence()")  # the partial sums visible to the GPU before the count
    w("cuda.syncthreads()")
    with w.block("if t == 0:"):
        w(f"last[0] = 1 if cuda.atomic.add(cnt, tile, 1) == {parts - 1} else 0")
    w("cuda.syncthreads()")

    def total(i, jj) -> str:
        """The sum of output (i, jj)'s parts, one at a time (the accumulators are dead)."""
        w(f"s = numba.{acc}(0.0)")
        with w.block(f"for q in range({parts}):"):
            w(f"s += ws[q, tile, {names.index((i, jj)) * THREADS} + t]")
        return "s"

    with w.block("if last[0] == 1:"):
        w("cuda.threadfence()")  # every part's sums seen after the count
        yield total
        with w.block("if t == 0:"):
            w("cnt[tile] = 0")
    w("cuda.syncthreads()")  # ``last`` read by every thread before the next unit sets it


def _window_origins(w, d, o) -> None:
    """``b<i>``: where output pixel ``o`` starts reading along each axis (FORWARD: the stride
    times ``o`` less the start padding; BACKWARD, in the gather form: ``o`` plus it)."""
    forward = d.direction == ConvolutionDirection.FORWARD
    for i in range(len(o)):
        if forward:
            w(f"b{i} = {affine([(o[i], d.strides[i])], -d.start_padding[i])}")
        else:
            w(f"b{i} = {affine([(o[i], 1)], d.start_padding[i])}")


def _gathered_input(w, d, k, fold) -> tuple:
    """The reduction index ``r`` as (channel, taps) and the input element the pixel reads
    there: ``(condition, coordinates)`` of the load (zeros where the condition fails). FORWARD
    with a ``fold`` (an AxisMap kind): the padded coordinate read through the padding's map;
    BACKWARD: a tap is real where ``o + pad - k*dilation = a*stride``, ``0 <= a < size``."""
    nd = len(k)
    forward = d.direction == ConvolutionDirection.FORWARD
    isz, ksz = d.input_tensor.sizes[2:], d.filter_tensor.sizes[2:]
    decompose(w, "r", ["c"] + k, [geometry(d).in_channels, *ksz])
    conds, coords = [], []
    if fold:
        extent = geometry(d).padded_sizes()
        for i in range(nd):
            w(f"p{i} = " + affine([(f"b{i}", 1), (k[i], d.dilations[i])], d.start_padding[i]))
            emit_map(w, AxisMap(fold, isz[i], extent[i], d.start_padding[i]), f"p{i}", f"a{i}")
            conds.append(f"p{i} < {extent[i]}")
            coords.append(f"a{i}")
        return " and ".join(conds), coords
    for i in range(nd):
        s = 1 if forward else d.strides[i]
        w(f"a{i} = " + affine([(f"b{i}", 1), (k[i], d.dilations[i] if forward
                                             else -d.dilations[i])]))
        conds.append(f"a{i} >= 0" + (f" and a{i} % {s} == 0" if s != 1 else "")
                     + f" and a{i} < {isz[i] * s}")
        coords.append(f"a{i} // {s}" if s != 1 else f"a{i}")
    return " and ".join(conds), coords


def emit_phases(key) -> str:
    """Strided BACKWARD as one implicit GEMM per phase (:class:`AxisPhases`): a tile belongs to
    one phase; its pixels are that phase's outputs, its reduction that phase's taps, so a
    multiply-add is spent on a tap that cannot reach the output only where phases have
    different tap counts (3 taps at stride 2: 2 and 1, padded to 2; the gather form tests all
    3 for every output). Per-axis tables (first tap, taps, first output, outputs, input origin)
    are module constants indexed by the tile's phase."""
    d = key.desc
    plan = tile_plan(d)
    axes = phases_for(d)
    nd = len(axes)
    g, cg = d.group_count, geometry(d).in_channels
    grid = gemm_grid(d, plan)
    outputs, pixels, reduction = grid.outputs, grid.pixels, grid.reduction
    tiles_m, tiles_p = grid.tiles_m, grid.tiles_p
    acc = accumulator(d.input_tensor.data_type).name
    load = half_load(d.input_tensor.data_type)
    f = [f"f{i}" for i in range(nd)]
    j = [f"j{i}" for i in range(nd)]
    tp_ = [f"t{i}_" for i in range(nd)]

    w = SourceWriter()
    header(w, key)
    _emit_phase_tables(w, d, axes, plan, grid, cg)
    access = _PhaseAccess(w, d, axes, grid, cg, f, j, tp_)
    with _kernel_head(w, d, plan, acc), \
            w.block(f"for tile in range(cuda.blockIdx.x, {grid.tiles}, cuda.gridDim.x):"):
        decompose(w, "tile", ["ph", "g", "tm", "tp"],
                  [math.prod(d.strides), g, tiles_m, tiles_p])
        decompose(w, "ph", f, list(d.strides))
        _emit_load_pixel(w, plan, str(pixels))
        decompose(w, "p", ["n"] + j, [d.output_tensor.sizes[0], *outputs])
        # a pixel past its phase's outputs reads nothing (and is not stored)
        w("pin = pin and " + " and ".join(f"{j[i]} < NO_{i}[{f[i]}]" for i in range(nd)))
        for i in range(nd):
            w(f"b{i} = B0_{i}[{f[i]}] + {j[i]}")
        _emit_slabs(w, d, plan, str(reduction), acc, load, access.load_a, access.load_b)
        _emit_store(w, d, plan, str(pixels), access.output, load)
    return w.text()


def _emit_phase_tables(w, d, axes, plan, grid, cg) -> None:
    """The per-axis tables the phased kernel indexes by its tile's phase, and what it does."""
    w("# per output phase along each axis: first tap, taps, first output, outputs, input origin")
    for i, ax in enumerate(axes):
        for name, values in (("K0", ax.k0), ("NK", ax.count), ("O0", ax.o0),
                             ("NO", ax.outputs), ("B0", ax.base)):
            w(f"{name}_{i} = {values!r}")
    w()
    w()
    w(f"# implicit GEMM per phase of the strides {d.strides}: tiles of {plan.bm} pixels x "
      f"{plan.bn} channels, {plan.rm} x {plan.rn} a thread, {THREADS} threads, a phase's "
      f"{' x '.join(map(str, grid.outputs))} outputs and {cg} x "
      f"{' x '.join(map(str, grid.taps))} reduction terms at most, in slabs of {BK}")


class _PhaseAccess:
    """How the phased kernel reads its factors and finds its outputs (the callbacks of
    :func:`_emit_slabs` and :func:`_emit_store`): through the phase tables, by the tile's
    phase ``f`` and a pixel's coordinates ``j`` in its phase."""

    def __init__(self, w, d, axes, grid, cg, f, j, tp_):
        self.w, self.d, self.axes, self.grid, self.cg = w, d, axes, grid, cg
        self.f, self.j, self.tp_ = f, j, tp_

    def _terms(self):
        nd = len(self.axes)
        decompose(self.w, "r", ["c"] + self.tp_, [self.cg, *self.grid.taps])
        return [f"{self.tp_[i]} < NK_{i}[{self.f[i]}]" for i in range(nd)]

    def load_a(self):
        conds, isz = self._terms(), self.d.input_tensor.sizes[2:]
        for i in range(len(self.axes)):
            self.w(f"a{i} = " + affine([(f"b{i}", 1), (self.tp_[i], -self.axes[i].dt)]))
            conds.append(f"a{i} >= 0 and a{i} < {isz[i]}")
        return " and ".join(conds), [f"a{i}" for i in range(len(self.axes))]

    def load_b(self):
        conds, nd = self._terms(), len(self.axes)
        for i in range(nd):
            self.w(f"k{i} = " + affine([(f"K0_{i}[{self.f[i]}]", 1),
                                        (self.tp_[i], self.axes[i].step)]))
        return _filter_taps(self.d, [f"k{i}" for i in range(nd)]), " and ".join(conds)

    def output(self, q):
        nd, f, j = len(self.axes), self.f, self.j
        decompose(self.w, q, ["n"] + j, [self.d.output_tensor.sizes[0], *self.grid.outputs])
        for i in range(nd):
            self.w(f"o{i} = " + affine([(f"O0_{i}[{f[i]}]", 1), (j[i], self.d.strides[i])]))
        return [f"o{i}" for i in range(nd)], " and ".join(
            f"{j[i]} < NO_{i}[{f[i]}]" for i in range(nd))


@contextmanager
def _kernel_head(w, d, plan, acc, split: bool = False):
    """``def kernel``, the two shared slabs and each thread's place in the tile (a split
    reduction: its workspace, counters and the flag of the block that counted last)."""
    shared_memory_decorator(w, GEMM_BOUNDS)
    args = "x, w, b, y" if d.bias_tensor is not None else "x, w, y"
    with w.block(f"def kernel({args}{', ws, cnt' if split else ''}):"):
        w(f"As = cuda.shared.array(({BK}, {plan.bm}), numba.{acc})")
        w(f"Bs = cuda.shared.array(({BK}, {plan.bn}), numba.{acc})")
        if split:
            w("last = cuda.shared.array(1, numba.int32)")
        w("t = cuda.threadIdx.x")
        w(f"tx = t % {plan.tx}")
        w(f"ty = t // {plan.tx}")
        # the pixel whose input this thread gathers (the same for every slab of a tile)
        w(f"pa = t % {plan.bm}")
        w(f"ka = t // {plan.bm}")
        yield


def _emit_load_pixel(w, plan, pixels: str) -> None:
    w(f"p = tp * {plan.bm} + pa")
    w(f"pin = p < {pixels}")
    with w.block("if not pin:"):
        w("p = 0")


def _filter_taps(d, k) -> str:
    """The filter element of reduction term (c, k...) for channel ``mm`` of the group."""
    ksz = d.filter_tensor.sizes[2:]
    cg, mg = geometry(d).in_channels, geometry(d).out_channels
    taps = [f"{ksz[i] - 1} - {k[i]}" if d.mode == ConvolutionMode.CONVOLUTION else k[i]
            for i in range(len(k))]
    if d.direction == ConvolutionDirection.FORWARD:
        return "w[" + index(f"g * {mg} + mm", "c", *taps) + "]"
    return "w[" + index(f"g * {cg} + c", "mm", *taps) + "]"


def _emit_slabs(w, d, plan, reduction: str, acc, load, load_a, load_b,
                span: tuple | None = None) -> None:
    """Zeroed accumulators, then per slab of BK reduction terms (of ``span``, the first term
    and the end: the whole reduction by default): this thread's share of both factors into
    shared memory (``load_a()`` decomposes ``r`` and returns the input's validity and
    coordinates, ``load_b()`` the filter element and its validity, "" for always), and the
    register block's products."""
    cg, mg = geometry(d).in_channels, geometry(d).out_channels
    first, end = span or ("0", reduction)
    for i in range(plan.rm):
        for jj in range(plan.rn):
            w(f"acc_{i}_{jj} = numba.{acc}(0.0)")
    with w.block(f"for r0 in range({first}, {end}, {BK}):"):
        # the input slab: rows ka, ka + 256/BM, ... of column pa (a tile spans <= 256 pixels)
        for row in [f"ka + {r}" if r else "ka" for r in range(0, BK, THREADS // plan.bm)]:
            w(f"r = r0 + {row}")
            w(f"v = numba.{acc}(0.0)")
            with w.block(f"if pin and r < {reduction}:"):
                valid, coords = load_a()
                with w.block(f"if {valid or 'True'}:"):
                    w(f"v = {load('x[' + index('n', f'g * {cg} + c', *coords) + ']')}")
            w(f"As[{row}, pa] = v")
        # the filter slab: consecutive threads along the reduction (the filter's contiguous
        # taps), zero past the reduction or the group's channels
        with w.block(f"for e in range(t, {BK * plan.bn}, {THREADS}):"):
            w(f"kb = e % {BK}")
            w(f"nb = e // {BK}")
            w("r = r0 + kb")
            w(f"mm = tm * {plan.bn} + nb")
            w(f"v = numba.{acc}(0.0)")
            with w.block(f"if r < {reduction} and mm < {mg}:"):
                element, cond = load_b()
                with w.block(f"if {cond}:") if cond else nullcontext():
                    w(f"v = {load(element)}")
            w("Bs[kb, nb] = v")
        w("cuda.syncthreads()")
        with w.block(f"for kk in range({BK}):"):
            for i in range(plan.rm):
                w(f"xa{i} = As[kk, tx + {i * plan.tx}]" if i else "xa0 = As[kk, tx]")
            for jj in range(plan.rn):
                w(f"wb{jj} = Bs[kk, ty + {jj * plan.ty}]" if jj else "wb0 = Bs[kk, ty]")
            for i in range(plan.rm):
                for jj in range(plan.rn):
                    w(f"acc_{i}_{jj} += xa{i} * wb{jj}")
        w("cuda.syncthreads()")


def _emit_store(w, d, plan, pixels: str, output, load, value=None) -> None:
    """The register block: pixels tx + i*TX, channels ty + j*TY of the tile, with bias and the
    fused activation; ``output(q)`` decomposes pixel ``q`` and returns its output coordinates
    and the condition that it exists ("" for always); ``value(i, j)`` the sum of output (i, j)
    (by default its accumulator)."""
    mg = geometry(d).out_channels
    for i in range(plan.rm):
        w(f"q = tp * {plan.bm} + tx + {i * plan.tx}")
        with ExitStack() as stack:
            stack.enter_context(w.block(f"if q < {pixels}:"))
            o, cond = output("q")
            if cond:  # the pixel exists (a phase's pixels past its outputs do not)
                stack.enter_context(w.block(f"if {cond}:"))
            for jj in range(plan.rn):
                w(f"mm = tm * {plan.bn} + ty + {jj * plan.ty}")
                with w.block(f"if mm < {mg}:"):
                    w(f"m = g * {mg} + mm")
                    conv_epilogue(w, d, value(i, jj) if value else f"acc_{i}_{jj}",
                                  f"y[{index('n', 'm', *o)}]", load=load)
