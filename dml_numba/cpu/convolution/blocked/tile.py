"""The register tile every blocked kernel is made of, and the writers it is written with.

Contracts between emitters are Python, not names agreed in the generated text:

* :class:`Names` holds the variables the generated code has bound; an emitter asks it for a
  name (``names["m0"]``) and gets a :class:`KeyError` while the source is being generated if
  nothing bound it, instead of a Numba typing error later;
* :class:`Vec` writes the SIMD helper calls of :mod:`dml_numba.cpu._simd` for one lane count;
* :class:`TileSpec` is what a tile needs from its kernel: the taps' opener returns the names it
  bound (input and weight offsets), the columns are data, the store is a callable.
"""
from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from contextlib import ExitStack, contextmanager

from ...._codegen import affine, flat_index
from ...._dims import prod
from ..._emit import helper_header
from ..base import LINE
from .plan import Layout, needs_copy

#: what the forward blocked kernels' modules import (the strided reads added where rows are split)
SIMD_IMPORT = ("from dml_numba.cpu._simd import vadd, vbroadcast, vfma, vinsert, vload, vrelu, "
               "vshuffle, vsplat, vstore, vzero, prefetch")

#: fused activations applied to the accumulators, in vectors, before their store, as the
#: expression of a vector ``{}``; exact as the scalar formulas are (the others run as a scalar
#: pass over the stored tile, :func:`emit_activation_pass`: their scalar formulas compute in
#: float64, which float32 vectors would round differently). The clip without a scale and
#: bias (ReLU6) is one of them too (:func:`vector_activation`: ``vclip``, exact by rounding's
#: monotony; with a scale and bias, the product would round otherwise)
VECTOR_ACTIVATIONS = {"ActivationReluOperatorDesc": "vrelu({})",
                      "ActivationIdentityOperatorDesc": "{}"}


def vector_activation(d) -> str | None:
    """The vector expression (a format of ``{}``) of ``d``'s fused activation, where it has
    one: with no activation, ``"{}"``; None: a scalar pass."""
    act = d.fused_activation
    if act is None:
        return "{}"
    if (type(act).__name__ == "ElementWiseClipOperatorDesc" and act.scale_bias is None
            and d.input_tensor.data_type.name in ("FLOAT32", "FLOAT16")):
        lo, hi = (repr(float(v)) if math.isfinite(v) else f"{'-' if v < 0 else ''}math.inf"
                  for v in (act.min, act.max))
        return f"vclip({{}}, {lo}, {hi})"
    return VECTOR_ACTIVATIONS.get(type(act).__name__)


def activation_import(d) -> str:
    """What the generated module imports beyond the common SIMD calls for ``d``'s vector
    activation (``", vclip"``; else nothing, so no other kernel's source changes)."""
    act = vector_activation(d)
    return ", vclip" if act is not None and act.startswith("vclip") else ""


class Names:
    """The variables bound so far in the generated function being written."""

    def __init__(self, w, *bound: str):
        self.w = w
        self._bound = set(bound)

    def let(self, name: str, expr: str) -> str:
        """Write ``name = expr``; ``name`` is bound from here on."""
        self.w(f"{name} = {expr}")
        self._bound.add(name)
        return name

    def bind(self, *names: str) -> None:
        """Names bound by the generated code itself (parameters, loop variables)."""
        self._bound.update(names)

    def has(self, name: str) -> bool:
        """Whether ``name`` is bound here."""
        return name in self._bound

    def __getitem__(self, name: str) -> str:
        if name not in self._bound:
            raise KeyError(f"generated code would read {name!r} before binding it")
        return name

    @contextmanager
    def loop(self, name: str, over: str):
        """``for name in over:``, ``name`` bound inside."""
        with self.w.block(f"for {name} in {over}:"):
            self._bound.add(name)
            yield name


@dataclasses.dataclass(frozen=True)
class Vec:
    """The SIMD helper calls for vectors of ``lanes`` float32 lanes."""

    lanes: int

    def zero(self) -> str:
        return f"vzero({self.lanes})"

    def load(self, array: str, offset) -> str:
        return f"vload({array}, {offset}, {self.lanes})"

    def splat(self, value: str) -> str:
        return f"vsplat({value}, {self.lanes})"

    def broadcast(self, array: str, offset) -> str:
        """``array[offset]`` in every lane (read without a negative-index check)."""
        return f"vbroadcast({array}, {offset}, {self.lanes})"

    @staticmethod
    def fma(a: str, b: str, c: str) -> str:
        return f"vfma({a}, {b}, {c})"

    @staticmethod
    def add(a: str, b: str) -> str:
        return f"vadd({a}, {b})"

    @staticmethod
    def store(array: str, offset, value: str) -> str:
        return f"vstore({array}, {offset}, {value})"


@dataclasses.dataclass(frozen=True)
class TileSpec:
    """One register tile of a blocked kernel: ``mb x rows x len(columns)`` accumulators.

    ``columns[v]`` lists the ``(tap, offset)`` pairs of the last axis that accumulator column
    ``v`` takes (unrolled); ``open_taps(stack, names)`` opens the leading axes' tap loops and
    returns the names it bound for the input and weight offsets; ``x_row(r)`` is tile row
    ``r``'s offset in the padded input; ``store(m, r, values)`` writes one channel's row (one
    value per column); the fused activation then runs over ``y[at]`` for ``m``, ``r``, ``q`` in
    ``mb x rows x span``, where ``keep`` holds (a channels tile whose ``at`` is None leaves it
    to its caller). ``staged``: the group's padded planes lie one
    after another from ``xp[xs]`` on."""

    lay: Layout
    mb: int
    rows: int
    columns: list
    open_taps: Callable
    x_row: Callable
    store: Callable
    at: str
    span: int
    staged: bool = False
    keep: str | None = None
    streamed: bool = False
    #: a channels tile's input channels a pass (0: all): the pass from ``c0``, the partial
    #: sums in ``ps`` from ``so`` between passes
    cblock: int = 0


def emit_tile(w, names: Names, d, spec: TileSpec) -> None:
    """The tile: accumulators zeroed, the loop over the group's input channels, the taps,
    then bias, the stores and the fused activation. Needs ``n``, ``g``, ``mbi`` and ``m0``
    bound (``xs`` too when staged). A channels tile (``lay.pixels``): :func:`emit_channel_tile`."""
    if spec.lay.pixels:
        emit_channel_tile(w, names, d, spec)
        return
    vec = Vec(spec.lay.lanes)
    J = len(spec.columns)
    accs = [[[f"a{m}_{r}_{v}" for v in range(J)] for r in range(spec.rows)] for m in range(spec.mb)]
    _zeroed(names, vec, [a for row in accs for col in row for a in col])
    emit_addend_prefetch(w, [("m", spec.mb), ("r", spec.rows), ("q", spec.span)], spec)
    ahead = prefetch_distance(d, spec)
    with _input_channels(names, spec) as (xo, wo):
        for t in _taps(spec):
            _emit_tap(names, vec, spec, accs, t, xo, wo, ahead)
    act = None if spec.lay.addend else vector_activation(d)
    for m in range(spec.mb):
        if d.bias_tensor is not None:
            names.let("bs", vec.splat(f"b[{names['m0']} + {m}]"))
        for r in range(spec.rows):
            values = [vec.add(a, "bs") if d.bias_tensor is not None else a for a in accs[m][r]]
            spec.store(m, r, [(act or "{}").format(v) for v in values])
    if act is None:
        emit_activation_pass(w, d, [("m", spec.mb), ("r", spec.rows), ("q", spec.span)],
                             spec.at, spec.keep, spec.lay)


#: a pointwise tile reading its input in place prefetches where it reads at least this many
#: input channels (one stream each) over planes of at least this many elements
PREFETCH_CHANNELS, PREFETCH_PLANE = 32, 2048
#: what the prefetched lines of all the input channels may hold of the first-level cache
PREFETCH_BYTES = 16 * 1024


def prefetch_distance(d, spec: TileSpec) -> int:
    """How far ahead (elements along the row) a tile prefetches its input rows; 0: not at all.

    A 1x1 tile reading the input in place (nothing padded: no phase-1 copy) walks one row per
    input channel of the group at once: with 32 or more, more streams than the hardware
    prefetcher follows, so over planes too big for the caches each line came from memory as
    the tile reached it (measured, MobileNetV2 at batch 8 in the network: 32 -> 16 channels at
    112x112 1.16-1.20 -> 0.75-0.80 ms, 96 -> 24 and 144 -> 24 at 56x56 -0.25 and -0.3 to -0.4
    ms; at 14x14 no gain and up to 9% lost, the lines ahead lying in the next plane). The
    distance: as many tiles ahead as keep every channel's line within :data:`PREFETCH_BYTES`,
    2 to 8 tiles. Each line of the tile's run is prefetched (with 16 lanes a run of 3 vectors
    is 3 lines, of which the first alone was before: MobileNetV2's 32 -> 16 on 112 x 112, 96 ->
    24 and 144 -> 24 on 56 x 56 in the network 17-19%, 18% and 9-11% faster at batch 1, 22%,
    32% and 22% at batch 8, on an AVX-512 Xeon)."""
    lay = spec.lay
    cg = lay.cin // lay.groups
    if (prod(lay.kernel) != 1 or spec.staged or needs_copy(d) or cg < PREFETCH_CHANNELS
            or lay.plane_in < PREFETCH_PLANE):
        return 0
    span = lay.run  # (a row's narrow last run prefetches as the others do)
    return span * min(8, max(2, PREFETCH_BYTES // (4 * cg * span)))


def _zeroed(names: Names, vec: Vec, accs: list) -> None:
    """The accumulators ``accs`` bound to zero vectors."""
    for acc in accs:
        names.let(acc, vec.zero())


def _taps(spec: TileSpec) -> list:
    """The last axis's taps the tile's columns read, in order of first use."""
    return list(dict.fromkeys(t for col in spec.columns for t, _ in col))


@contextmanager
def _input_channels(names: Names, spec: TileSpec):
    """The loop over the group's input channels and the leading axes' taps, yielding the
    names of the input and weight offsets (``xo``, ``wo``) the last axis's taps add to."""
    lay = spec.lay
    cg = lay.cin // lay.groups
    over = f"range({cg})"
    if spec.cblock:  # one pass of the input channels
        c0 = names["c0"]
        over = (f"range({c0}, {c0} + {spec.cblock})" if cg % spec.cblock == 0
                else f"range({c0}, min({c0} + {spec.cblock}, {cg}))")
    with names.loop("c", over):
        if lay.step > 1:  # a woven copy (one group, one image): block c // lanes, lane
            names.let("xc", f"(c // {lay.step}) * {lay.plane_in * lay.step} + c % {lay.step}")
        else:
            names.let("xc", f"{names['xs']} + c * {lay.plane_in}" if spec.staged
                      else f"({names['n']} * {lay.cin} + {names['g']} * {cg} + c) * "
                           f"{lay.plane_in}")
        names.let("wc", f"(({names['g']} * {lay.blocks} + {names['mbi']}) * {cg} + c) * "
                        f"{prod(lay.kernel) * lay.mb}")
        with ExitStack() as stack:
            yield spec.open_taps(stack, names)


def emit_channel_tile(w, names: Names, d, spec: TileSpec) -> None:
    """The channels tile: ``spec.mb / lanes`` vectors of output channels x ``len(columns)``
    pixels of one row. Per input channel and leading tap: the weight vectors of the row's taps
    loaded first (held while the pixels pass), then pixel by pixel each input value it reads
    multiplied into its channel vectors, broadcast where a pixel first reads it and named
    after (a value three taps read is one broadcast in the source too, which types a third as
    many calls as one per read: the compile is mostly Numba's type inference) (pixel-major:
    measured 1.5-2x faster than tap-major on 24-28 accumulators, where LLVM kept every tap's
    broadcasts alive at once). Streamed (``spec.streamed``, 16 registers: 12 accumulators
    leave no room for a row's weights): tap by tap, the smaller of the tap's weight vectors
    and its input values loaded and held while the other streams past, the tap's input read
    through its own ``opaque`` base so LLVM does not merge the broadcasts of two taps into one
    value held across both (AVX2, 64 -> 64 channels on 56 x 56: 4 x 3 streamed 1.47 ms, 3 x 4
    pixel-major 2.4, spilling its weights). Then bias (a vector load), the vector activation,
    and the pixels' vectors of each vector of channels stored together (``spec.store(o,
    values)``)."""
    lay, vec = spec.lay, Vec(spec.lay.lanes)
    nv = spec.mb // lay.lanes
    accs = [[f"a{o}_{p}" for p in range(len(spec.columns))] for o in range(nv)]
    flat_accs = [a for row in accs for a in row]
    passes = ExitStack()
    if spec.cblock:  # the first pass from zeros, the others from the partial sums
        with w.block(f"if {names['c0']} == 0:"):
            _zeroed(names, vec, flat_accs)
        with w.block("else:"):
            for i, a in enumerate(flat_accs):
                names.let(a, vec.load("ps", affine([(names["so"], 1)], i * lay.lanes)))
    else:
        _zeroed(names, vec, flat_accs)
    emit_addend_prefetch(w, [("m", spec.mb), ("q", spec.span)], spec)
    with _input_channels(names, spec) as (xo, wo):
        if spec.streamed:
            _streamed_taps(names, vec, spec, accs, xo, wo)
        else:
            for t in _taps(spec):
                for o in range(nv):
                    names.let(f"w{t}_{o}", vec.load("wp", f"{wo} + {t * lay.mb + o * lay.lanes}"))
            row = names.let("xq", affine([(xo, 1), (spec.x_row(0), 1)]))
            _emit_channel_prefetch(names, spec, row, wo)
            read: dict = {}  # each input offset broadcast once, where a pixel first reads it
            for p, col in enumerate(spec.columns):
                for t, off in col:
                    if off not in read:
                        read[off] = names.let(f"s{len(read)}",
                                              vec.broadcast("xp", affine([(row, 1)], off)))
                    for o in range(nv):
                        names.let(accs[o][p], vec.fma(names[f"w{t}_{o}"], read[off], accs[o][p]))
    if spec.cblock:  # not the last pass: the partial sums kept; the last: finished
        cg = lay.cin // lay.groups
        with w.block(f"if {names['c0']} < {cg - spec.cblock}:"):
            for i, a in enumerate(flat_accs):
                w(vec.store("ps", affine([(names["so"], 1)], i * lay.lanes), a))
        passes.enter_context(w.block("else:"))
    with passes:
        _finish_channel_tile(w, names, d, spec, vec, accs)


#: a channels tile reads a short run of one row of every input channel of the group, a plane
#: apart: one stream per channel, which no hardware prefetcher follows, so inside a network
#: (the input in a farther cache, or the other core's) each run arrived as the tile reached it.
#: With at least ``CHANNEL_PREFETCH_MIN`` input channels, the run of the channel
#: ``CHANNEL_PREFETCH_AHEAD`` channels on is prefetched as each channel is read (measured in the
#: network on an AVX-512 Xeon, MobileNetV2 at batch 1: 32 ahead 1.11-1.13x, 16 1.12x, 48-64
#: 1.09-1.10x; from 64 input channels, as fewer lost the U-Net 1-3% on its 16- and 32-channel
#: layers)
CHANNEL_PREFETCH_MIN, CHANNEL_PREFETCH_AHEAD = 64, 32


def channel_prefetch(lay) -> int:
    """Input channels ahead a channels tile prefetches its run (0: not at all)."""
    return CHANNEL_PREFETCH_AHEAD if lay.cin // lay.groups >= CHANNEL_PREFETCH_MIN else 0


def _emit_channel_prefetch(names: Names, spec: TileSpec, row: str, wo: str) -> None:
    """The lines of the run this channels tile reads from ``row`` (this input channel's row:
    the columns' first to last offset), :func:`channel_prefetch` channels on, where that
    channel is still the group's (a channel past it is another group's, image's, or nothing);
    with a 1x1 filter, that channel's weight vectors (from ``wo``, this channel's) too: a few
    multiply-adds a channel leave the weights' own stream no time to arrive (MobileNetV2 at
    batch 1, in the network: its 7 x 7 pointwise layers 12-23% faster, the network 1.02-1.03x,
    batch 8 1.02x). A larger filter's row of taps in a channel block's first row tile only
    (``rt == 0``: a thread takes a block's rows one after another, the later ones reading the
    weights from its own cache): ResNet-18 at batch 1 1.026x, its 512-channel 3x3 layers on
    7 x 7 4-7% faster (prefetched in every row tile, its 14 x 14 layers lost 8-12%)."""
    ahead, lay = channel_prefetch(spec.lay), spec.lay
    if not ahead:
        return
    offs = [off for col in spec.columns for _, off in col]
    lo, hi = min(offs), max(offs)
    cg = lay.cin // lay.groups
    with names.w.block(f"if {names['c']} < {cg - ahead}:"):
        for off in sorted(set(range(lo, hi + 1, LINE // 4)) | {hi}):
            names.w(f"prefetch(xp, {affine([(row, 1)], off + ahead * lay.plane_in)})")
        taps = prod(lay.kernel)
        if taps == 1:  # the channel's weights: mb of them, packed channel-major
            for off in range(0, lay.mb, LINE // 4):
                names.w(f"prefetch(wp, {affine([(wo, 1)], off + ahead * lay.mb)})")
        elif names.has("rt"):  # a row's taps' weights, in a block's first row tile only
            with names.w.block(f"if {names['rt']} == 0:"):
                for off in range(0, lay.kernel[-1] * lay.mb, LINE // 4):
                    names.w(f"prefetch(wp, {affine([(wo, 1)], off + ahead * taps * lay.mb)})")


def _finish_channel_tile(w, names, d, spec, vec, accs) -> None:
    """A channels tile's sums out: bias (a vector load), the vector activation, the stores
    (``spec.store``), the activation without a vector form over them."""
    lay = spec.lay
    act = None if lay.addend else vector_activation(d)
    for o in range(len(accs)):
        if d.bias_tensor is not None:
            names.let("bs", vec.load("b", f"{names['m0']} + {o * lay.lanes}"))
        spec.store(o, [(act or "{}").format(vec.add(acc, "bs") if d.bias_tensor is not None
                                            else acc) for acc in accs[o]])
    if act is None and spec.at is not None:  # (None: the caller runs it over the row)
        emit_activation_pass(w, d, [("m", spec.mb), ("q", spec.span)], spec.at, lay=lay)


def _streamed_taps(names, vec, spec, accs, xo, wo) -> None:
    """A streamed channels tile's taps for one input channel (:func:`emit_channel_tile`):
    tap by tap, the smaller of its weight vectors and input values held, the other streamed,
    the tap's input values read from its own ``opaque`` base."""
    lay, nv = spec.lay, len(accs)
    row = names.let("xq", affine([(xo, 1), (spec.x_row(0), 1)]))
    _emit_channel_prefetch(names, spec, row, wo)
    for t in _taps(spec):
        reads = [(p, off) for p, col in enumerate(spec.columns) for tt, off in col if tt == t]
        base = names.let(f"xb{t}", f"opaque({row} + {reads[0][1]})")
        bc = {p: vec.broadcast("xp", affine([(base, 1)], off - reads[0][1])) for p, off in reads}
        wl = {o: vec.load("wp", f"{wo} + {t * lay.mb + o * lay.lanes}") for o in range(nv)}
        if nv <= len(reads):  # weights held, input values streamed
            for o in range(nv):
                names.let(f"w{o}", wl[o])
            for p, _ in reads:
                s_ = names.let("s", bc[p])
                for o in range(nv):
                    names.let(accs[o][p], vec.fma(f"w{o}", s_, accs[o][p]))
        else:  # input values held, weights streamed
            for p, _ in reads:
                names.let(f"s{p}", bc[p])
            for o in range(nv):
                w_ = names.let("w", wl[o])
                for p, _ in reads:
                    names.let(accs[o][p], vec.fma(w_, f"s{p}", accs[o][p]))


def _emit_tap(names, vec, spec, accs, t, xo, wo, ahead: int = 0) -> None:
    """One tap: the input vectors it reads (one per row and column taking it), then one weight
    broadcast per channel multiplied into each of them; ``ahead`` > 0: each row's input line
    that many elements on prefetched (:func:`prefetch_distance`)."""
    cols = [(v, off) for v, col in enumerate(spec.columns) for tt, off in col if tt == t]
    for r in range(spec.rows):
        for v, off in cols:
            names.let(f"x{r}_{v}", vec.load("xp", affine([(xo, 1), (spec.x_row(r), 1)], off)))
    if ahead:
        for r in range(spec.rows):
            for q in range(0, spec.span, LINE // 4):  # each line of the tile's run
                names.w(f"prefetch(xp, {affine([(xo, 1), (spec.x_row(r), 1)], ahead + q)})")
    for m in range(spec.mb):
        names.let("ws", vec.broadcast("wp", f"{wo} + {t * spec.lay.mb + m}"))
        for r in range(spec.rows):
            for v, _ in cols:
                names.let(accs[m][r][v], vec.fma("ws", f"x{r}_{v}", accs[m][r][v]))


def emit_addend_prefetch(w, loops, spec: TileSpec) -> None:
    """With an addend (``lay.addend``), the lines of it a tile's pass will read (``ad[at]``
    over ``loops``: the last loop's first and last elements and each line between), fetched
    as the tile starts, so that they arrive while its multiply-adds run: the pass reads the
    addend where the output goes, a few lines of each of the tile's channels, which no
    hardware prefetcher follows (MobileNetV2 at batch 8: its 14 x 14 projections were 0.06-0.2
    ms slower than the convolution and the addition apart without it, level with it; the
    whole graph 1% faster). Not where the tile stores through a row scratch (``at`` None)."""
    if not spec.lay.addend or spec.at is None:
        return
    (name, count), per_line = loops[-1], LINE // 4
    firsts = sorted(set(range(0, count, per_line)) | {count - 1})
    with ExitStack() as stack:
        if spec.cblock:  # the last pass over the input channels only (the one that stores)
            cg = spec.lay.cin // spec.lay.groups
            stack.enter_context(w.block(f"if c0 >= {cg - spec.cblock}:"))
        for n, c in loops[:-1]:
            stack.enter_context(w.block(f"for {n} in range({c}):"))
        for q in firsts:
            w(f"prefetch(ad, {_at(spec.at, name, q)})")


def _at(at: str, name: str, value: int) -> str:
    """``at`` with the loop variable ``name`` bound to ``value`` (a name of its own in it)."""
    return re.sub(rf"\b{name}\b", str(value), at)


def emit_activation_pass(w, d, loops, at, keep=None, lay: Layout | None = None) -> None:
    """The fused activation over a stored tile, in place: ``y[at]`` for the loop variables
    ``loops`` (``(name, count)`` pairs), where ``keep`` holds (every element without it).
    With the layout's addend (``lay.addend``), each element first takes the addend's
    (``ad[at]``), then the activation: a vector of ``lanes`` at a time where the last loop
    walks consecutive elements a whole number of vectors (no ``keep``) and the activation has
    a vector form, else element by element."""
    addend = lay is not None and lay.addend
    if d.fused_activation is None and not addend:
        return
    act = vector_activation(d)
    L = lay.lanes if addend else 0
    vector = addend and keep is None and act is not None and loops[-1][1] % L == 0
    with ExitStack() as stack:
        for name, count in loops[:-1] if vector else loops:
            stack.enter_context(w.block(f"for {name} in range({count}):"))
        if vector:  # (the last loop's variable in steps of a vector)
            name, count = loops[-1]
            stack.enter_context(w.block(f"for {name} in range(0, {count}, {L}):"))
            w(f"v = vadd(vload(y, {at}, {L}), vload(ad, {at}, {L}))")
            w(f"vstore(y, {at}, {act.format('v')})")
            return
        if keep:
            stack.enter_context(w.block(f"if {keep}:"))
        w(f"v = y[{at}]")
        if addend:
            w(f"v = v + ad[{at}]")
        if d.fused_activation is not None:
            w(f"v = {d.fused_activation.expression('v')}")
        w(f"y[{at}] = v")


def slot_elements(elements: int) -> int:
    """A parallel iteration's slot of ``xp`` for ``elements`` float32 values: rounded up to
    whole cache lines, so that no two slots share one (the scratch starts on a line:
    :func:`~..base.line_aligned`)."""
    per_line = LINE // 4
    return -(-elements // per_line) * per_line


def row_block_terms(d, coords, pstride, ostride) -> tuple:
    """``(terms_x, terms_y)``: the :func:`affine` terms of FORWARD output coordinates
    ``coords`` (the leading spatial axes, in order; the first row of a tile as ``r0``) in the
    padded input and in the output plane."""
    return ([(o_, d.strides[i] * pstride[i]) for i, o_ in enumerate(coords)],
            [(o_, ostride[i]) for i, o_ in enumerate(coords)])


def tile_arrays(d, lay: Layout) -> str:
    """The arrays a blocked kernel's tiles take after the input and the packed filter, as
    its parameters and its tile functions' read them: the bias (``b``) and the addend
    (``ad``: :attr:`~.plan.BlockPlan.addend`) where there are, the output."""
    return ("b, " if d.bias_tensor is not None else "") + ("ad, " if lay.addend else "") + "y"


def call_tiles(w, lay: Layout, coords, arrays: str) -> None:
    """The (p)range body's call of the tile function (the remainder block's where it has one),
    on ``xp, wp`` and ``arrays`` (:func:`tile_arrays`). The tiles are functions of their own:
    Numba's parallel passes then see a short loop body, which keeps compile times down."""
    args = f"xp, wp, {arrays}, {', '.join(coords)}"
    if lay.tail == lay.mb:
        w(f"tile{lay.mb}({args})")
        return
    with w.block(f"if mbi < {lay.blocks - 1}:"):
        w(f"tile{lay.mb}({args})")
    with w.block("else:"):
        w(f"tile{lay.tail}({args})")


def emit_tile_functions(w, tile, lay: Layout, coords, arrays: str) -> None:
    """``tile{mb}(...)`` for the full channel block and the remainder, after the kernel;
    ``tile(mb, names)`` writes the body."""
    params = ["xp", "wp"] + arrays.split(", ") + list(coords)
    for mb in sorted({lay.mb, lay.tail}, reverse=True):
        helper_header(w)
        with w.block(f"def tile{mb}({', '.join(params)}):"):
            tile(mb, Names(w, *params))


def leading_tap_offsets(w, names: Names, lay: Layout, d, stack) -> tuple:
    """The FORWARD taps of the leading axes as loops (the last axis's are unrolled by the
    tile): binds and returns the input offset ``xo`` (from the channel's ``xc`` and the run's
    ``j``) and the weight offset ``wo`` (from ``wc``)."""
    ko = [f"k{i}" for i in range(lay.rank - 1)]
    for i, k in enumerate(ko):
        stack.enter_context(names.loop(k, f"range({lay.kernel[i]})"))
    xo = names.let("xo", affine([(names["xc"], 1), (names["j"], lay.step)] + [
        (k, d.dilations[i] * lay.pstride[i]) for i, k in enumerate(ko)]))
    wo = names.let("wo", f"wc + ({flat_index(ko, list(lay.kernel[:-1]))}) * "
                         f"{lay.kernel[-1] * lay.mb}" if ko else "wc")
    return xo, wo
