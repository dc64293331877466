"""The blocked kernels' plan (the tile the planner chooses for a host) and the layout their
emitters read off a key. Measured reasons for the planner's numbers are in
``benchmarks/HISTORY.md`` ("Convolution: the measurements behind the kernels' choices")."""
from __future__ import annotations

import dataclasses

import numpy as np

from .... import _pages
from ...._dims import prod
from ...._dtypes import DataType
from ....ops.convolution import ConvolutionDirection, ConvolutionMode, geometry
from ....tensor import TensorDesc
from ..._emit import Host

#: most multiply-adds unrolled in one depthwise tile (taps x rows x vectors): a bound on the
#: generated code, and on compile time
DEPTHWISE_UNROLL = 256

#: the flattened tiles are taken where they compute at most this fraction of the positions
#: whole-row tiles do (:func:`flat_vectors`)
FLAT_GAIN = 0.97

#: a group's padded planes staged per thread must fit this (a second-level cache)
STAGE_BYTES = 1 << 20

#: independent accumulators a core needs to keep its fused multiply-add units busy (two units,
#: four cycles' latency: Zen 2-4, Skylake and later); a tile of fewer waits on its own sums
#: (a channels tile of 2 x 2 accumulators on 14-pixel rows, AVX2: 2.7 ms, of 2 x 4: 1.8)
FMA_CHAINS = 8

#: streamed channels tiles (:func:`streamed_tile`), fitted on Zen 4 with AVX2 (3 x 3 layers of
#: 64 to 512 channels on 56 x 56 to 7 x 7): a tile of fewer than 12 accumulators runs at
#: FEW_CHAINS_RATE of a 12-accumulator one's rate per position; its loads cost LOAD_COST a
#: multiply-add per (WEIGHT_LOAD / pixels + 1 / vectors), a weight vector (32 bytes from the
#: second-level cache) costing as WEIGHT_LOAD broadcasts; the larger of the two is the tile's
#: cost a position (4 x 3: 1.01, 2 x 4: 1.1, 4 x 2: 1.38, 8 x 1: 2.3 against 1.0, 1.07, 1.3,
#: 2.5 measured)
FEW_CHAINS_RATE = 0.93
LOAD_COST = 1.1
WEIGHT_LOAD = 2


@dataclasses.dataclass(frozen=True)
class BlockPlan:
    """The tile of a blocked kernel: ``mb`` output channels x ``rows`` output rows (the
    second-to-last spatial axis) x ``vectors`` vectors of ``lanes`` pixels along the last axis,
    all held in ``mb * rows * vectors`` vector accumulators."""

    lanes: int
    mb: int
    rows: int
    vectors: int
    padded: tuple  # the spatial sizes of the zero-padded input the tiles read
    depthwise: bool = False  # one channel at a time, plane by plane (blocked/depthwise.py)
    staged: bool = False  # FORWARD: each (image, group) padded into a per-thread buffer first
    phases: int = 1  # BACKWARD: last-axis stride phases in one tile (2: stored interleaved)
    flat: bool = False  # FORWARD: tiles of ``vectors`` walk the padded plane flattened
    #: FORWARD, unit last-axis stride: the padding is not zeros but the input folded as this
    #: AxisMap kind ("clamp", "reflect", "symmetric", "wrap"): a padding operator in front,
    #: folded into phase 1 (graphs; ``compile_operator(..., input_padding=...)``)
    fold: str = ""
    #: FORWARD, > 0: a channels tile (:func:`channel_plan`): ``mb`` output channels in the
    #: lanes (``vectors`` of them) x ``pixels`` along one output row, each input pixel read as
    #: a broadcast scalar (0: the pixels tile above, pixels in the lanes)
    pixels: int = 0
    #: a channels tile whose registers hold, per tap, the smaller of its weight vectors and its
    #: input values while the other streams (:func:`streamed_tile`; 16-register hosts)
    streamed: bool = False
    #: a channels tile's input channels a pass (0: all in one): the tiles of one call (a row,
    #: or a chunk of a one-axis plane) run pass by pass, their partial sums kept in a scratch
    #: between passes, so that a pass's weights and input stay in the first-level cache while
    #: every tile reads them (:func:`channel_passes`)
    cblock: int = 0
    #: FORWARD (the pixels and channels tiles): a tensor of the output's sizes added to each
    #: output before the fused activation, over each stored tile while it is in the
    #: first-level cache (the kernel's argument ``r``: a graph's residual connection)
    addend: bool = False
    #: FORWARD, a channels tile reading the whole input's padded copy (:func:`weaves`): the
    #: copy stores each block of ``lanes`` input channels interleaved, a pixel's channels
    #: side by side, so that a tile's three rows of every channel are three runs of memory
    #: (not one run a channel, a plane apart); not applied where the plan is staged or folded
    woven: bool = False

    @property
    def accumulators(self) -> int:
        if self.pixels:
            return self.vectors * self.rows * self.pixels
        return self.mb * self.rows * self.vectors * self.phases

    @property
    def label(self) -> str:
        """The tile in the generated module's title: lanes, channels, rows, vectors[, phases]
        [, flat]; a channels tile: lanes, channels, rows, pixels "px"."""
        if self.pixels:
            return (f"{self.lanes} {self.mb} {self.rows} {self.pixels}px"
                    + (" streamed" if self.streamed else "")
                    + (f" c{self.cblock}" if self.cblock else "")
                    + (f" {self.fold}" if self.fold else "") + (" +r" if self.addend else "")
                    + (" woven" if self.woven else ""))
        return (f"{self.lanes} {self.mb} {self.rows} {self.vectors}"
                + (f" {self.phases}" if self.phases > 1 else "") + (" flat" if self.flat else "")
                + (f" {self.fold}" if self.fold else "") + (" +r" if self.addend else ""))


def budget_for(host: Host, taps: int, spatial: int) -> int:
    """Accumulator registers a tile may take: 12 leaves four of AVX2's 16 vector registers for
    the input vectors and the broadcast weight; with AVX-512's 32, 16 for 2-D and more and 24
    for one tap (pointwise)."""
    if host.lanes < 16:
        return 12
    return 24 if taps == 1 else 16 if spatial >= 2 else 12


def block_plan(desc, host: Host | None = None, *, lanes: int | None = None,
               budget: int | None = None, channels: int | None = None,
               staged: bool | None = None, flat_gain: float = FLAT_GAIN) -> BlockPlan | None:
    """The tile for ``desc`` on ``host`` (this machine by default), or None where the blocked
    kernel does not apply: float64, or fewer than 4 output pixels per row (per stride phase for
    BACKWARD).

    ``lanes`` defaults to the host's widest float32 vector, reduced to fit the row; ``budget``
    (accumulator registers) to :func:`budget_for`; ``channels`` output channels (4; for one
    tap 8 where the host has 32 vector registers, else 6) share each loaded input vector.
    ``staged`` forces the per-thread padding on or off where it applies (FORWARD with
    something to pad; default: :func:`stages`), ``flat_gain`` is the flattened tiles'
    threshold."""
    host = host or Host.current()
    d, geo = desc, geometry(desc)
    if d.input_tensor.data_type not in (DataType.FLOAT32, DataType.FLOAT16):
        return None
    out = d.output_tensor.sizes[2:]
    # BACKWARD runs per stride phase: output o = q * stride + r, the fewest q's a phase has
    width = out[-1] if geo.forward else out[-1] // d.strides[-1]
    height = (out[-2] if geo.forward else out[-2] // d.strides[-2]) if len(out) >= 2 else 1
    lanes = lanes or host.lanes
    while lanes > 4 and lanes > width:
        lanes //= 2
    if width < lanes or height < 1:
        return None
    budget = budget or budget_for(host, geo.taps, len(out))
    # one tap: 8 channels a loaded vector with AVX-512 (3 vectors of them in its 24
    # accumulators); AVX2's 12 would hold 8 x 1, 9 loads for 8 multiply-adds: 6 x 2 instead
    # (8 for 12; 144 -> 24 channels at 56 x 56: 0.20 ms against 0.32)
    channels = channels or (4 if geo.taps > 1 else 8 if registers(host) >= 32 else 6)
    padded = padded_geometry(d)[1]
    if geo.depthwise and geo.out_channels < channels and geo.taps <= DEPTHWISE_UNROLL:
        return _depthwise_plan(geo, lanes, budget, height, width, padded)
    mb = min(geo.out_channels, channels, budget)
    # BACKWARD at stride 2 with as many outputs in both phases: a tile holds both and stores
    # them interleaved (whole vectors instead of a scatter per vector)
    phases = 2 if not geo.forward and d.strides[-1] == 2 and out[-1] % 2 == 0 else 1
    room = max(1, budget // (mb * phases))
    rows = tile_rows(height, room) if len(out) >= 2 else 1
    vectors = 1 if phases > 1 else max(1, min(room // rows, width // lanes))
    staged = geo.forward and needs_copy(d) and (stages(d, padded, host) if staged is None
                                                else staged)
    flat = flat_vectors(d, padded, lanes, room, rows, vectors, flat_gain) if geo.forward else 0
    if flat:
        return BlockPlan(lanes, mb, 1, flat, padded, staged=bool(staged), flat=True)
    return BlockPlan(lanes, mb, rows, vectors, padded, phases=phases, staged=bool(staged))


def registers(host: Host) -> int:
    """Vector registers of the host's widest float vectors: AVX-512's 32, else 16 (AVX2, SSE;
    AArch64's 32 are not counted on)."""
    return 32 if host.lanes >= 16 else 16


#: the pixels two vectors of channels must leave room for in the registers (beside a row's
#: weight vectors, two a tap) for the channels tile to take two; else one vector and twice the
#: pixels. A 7-tap row's 14 weight vectors leave 8 (32 registers): ResNet-18's 7x7 stem on an
#: AVX-512 Xeon 0.849 ms with 2 x 8 accumulators against 0.688 with 1 x 16; 3-tap rows keep
#: two vectors (12 pixels: MobileNetV2's stem 0.110 ms against 0.149 with one vector)
PAIR_PIXELS = 10


def channel_plan(desc, host: Host | None = None, *, lanes: int | None = None,
                 vectors: int | None = None, staged: bool | None = None) -> BlockPlan | None:
    """The channels tile for ``desc`` on ``host``, or None where it does not apply: FORWARD,
    float32 or float16, a group's output channels a multiple of the lanes (``lanes``: the
    host's widest vector, halved down to 4 until they divide).

    The tile holds ``vectors`` vectors of output channels (2 where the group's channels divide
    into pairs and the registers leave :data:`PAIR_PIXELS` pixels, else 1) for each of
    ``pixels`` consecutive pixels of an output row: per input channel and tap each weight
    vector is loaded once and each input pixel broadcast once,
    for ``vectors x pixels`` multiply-adds; a row's taps' weight vectors stay in registers
    while its pixels pass (so a pixel read by several taps is broadcast once). ``pixels``
    fills the registers left (accumulators + weights + one broadcast), choosing among the
    upper half of that range the count whose row tiles cost least: the pixels they compute,
    a tile of fewer than :data:`FMA_CHAINS` accumulators costing as much as one of that many
    (56-pixel rows: 8 of 12 with two vectors, 28 with one; 14-pixel rows with AVX2's 16
    registers: 4 of 4, not 2, which wastes none but leaves the multiply-adds waiting), ties
    to the larger."""
    host = host or Host.current()
    d, geo = desc, geometry(desc)
    if not geo.forward or d.input_tensor.data_type not in (DataType.FLOAT32, DataType.FLOAT16):
        return None
    mg, width = geo.out_channels, d.output_tensor.sizes[-1]
    lanes = lanes or host.lanes
    while lanes > 4 and mg % lanes:
        lanes //= 2
    if mg % lanes:
        return None
    k_last = geo.kernel[-1]
    padded = padded_geometry(d)[1]
    staged = needs_copy(d) and (stages(d, padded, host) if staged is None else staged)
    if registers(host) < 32:
        tile = streamed_tile(mg // lanes, width, registers(host), vectors)
        if tile is None:
            return None
        v, p = tile
        return with_passes(d, BlockPlan(lanes, v * lanes, 1, v, padded, staged=bool(staged),
                                        pixels=p, streamed=True))
    vectors = vectors or (2 if mg % (2 * lanes) == 0
                          and registers(host) - 1 - 2 * k_last >= 2 * PAIR_PIXELS else 1)
    if mg % (vectors * lanes):
        return None
    limit = min(width, (registers(host) - 1 - vectors * k_last) // vectors)
    if limit < 1:
        return None
    pixels = min(range((limit + 1) // 2, limit + 1),
                 key=lambda p: (-(-width // p) * max(p, -(-FMA_CHAINS // vectors)), -p))
    plan = with_passes(d, BlockPlan(lanes, vectors * lanes, 1, vectors, padded,
                                    staged=bool(staged), pixels=pixels))
    return dataclasses.replace(plan, woven=True) if weaves(d, plan) else plan


#: a channels tile reads a woven copy (:func:`weaves`) below this many input channels: from
#: there its planar copy's runs are prefetched a channel ahead (``tile.channel_prefetch``)
WOVEN_CHANNELS = 64


def weaves(desc, plan: BlockPlan) -> bool:
    """Whether the channels tile ``plan`` reads a woven copy of the input
    (:attr:`BlockPlan.woven`): a 2-D FORWARD float32 convolution of one group, unit strides,
    a padded copy made whole (not staged, no folded padding, no passes over the channels, not
    streamed), its input channels a multiple of the lanes and fewer than
    :data:`WOVEN_CHANNELS`. On an AMD EPYC (2 cores, AVX-512): the 16 -> 16 tile on 256 x 256,
    its tiles alone (outside the library), 1.45-1.66 ms an image against 1.55-2.27 planar,
    eight images 12.2-13.3 against 12.6-15.9; the U-Net, its six such layers woven, 1.03-1.04x
    at batch 8 and 1.01-1.13x at batch 1 (64 input channels woven too: its 64 -> 32 layer
    0.92-0.94x)."""
    d = desc
    cg = geometry(d).in_channels
    return bool(plan.pixels and not (plan.staged or plan.fold or plan.cblock or plan.streamed)
                and d.input_tensor.rank == 4 and d.group_count == 1
                and d.input_tensor.data_type == DataType.FLOAT32
                and all(s == 1 for s in d.strides) and needs_copy(d)
                and cg % plan.lanes == 0 and cg < WOVEN_CHANNELS)


#: what one pass of a channels tile's input channels may read (:func:`channel_passes`): most
#: of a 32 KiB first-level cache (AVX2, 320 -> 1280 channels on 7 x 7, 49 pixels in one call:
#: passes of 32, 64, 128 and 320 channels (20, 10 and 5 KiB of weights, 128 KiB of input
#: and weights in one pass) 0.264, 0.257, 0.275 and 0.313 ms)
PASS_BYTES = 24 * 1024
#: a pass's fewest input channels: each pass loads and stores every accumulator once
MIN_PASS = 32
#: the fewest tiles a call runs for passes to pay: each reads a pass's weights again from
#: the first-level cache (a 7-pixel row's two tiles gain nothing)
MIN_PASS_TILES = 4


def with_passes(desc, plan: BlockPlan) -> BlockPlan:
    """``plan`` with :func:`channel_passes`' input channels a pass."""
    cb = channel_passes(desc, plan)
    return dataclasses.replace(plan, cblock=cb) if cb else plan


def channel_passes(desc, plan: BlockPlan) -> int:
    """Input channels a pass of a channels tile (0: one pass): where the group's weights and
    the input one call's tiles read (a row's input rows, or a one-axis chunk's run) exceed
    :data:`PASS_BYTES` and the call runs at least :data:`MIN_PASS_TILES` tiles, the fewest
    equal passes whose share fits, of at least :data:`MIN_PASS` channels. Without passes each
    tile streams every weight vector from the second-level cache again (4 of them a 12
    multiply-adds: that cache's bandwidth, not the multiply-adds, sets the pace)."""
    lay = Layout.planned(desc, plan)
    cg = lay.cin // lay.groups
    columns = -(-lay.out[-1] // plan.pixels)
    if lay.rank >= 2:
        tiles, span = columns, prod(lay.kernel[:-1]) * lay.padded[-1]
    else:
        chunks, _ = chunks_of(lay)
        tiles = -(-columns // chunks)
        span = min(lay.padded[-1], tiles * plan.pixels * desc.strides[-1] + lay.kernel[-1])
    per_channel = 4 * (prod(lay.kernel) * plan.mb + span)
    passes = -(-cg * per_channel // PASS_BYTES)
    if passes <= 1 or tiles < MIN_PASS_TILES or prod(lay.kernel) > 1 or not plan.streamed:
        return 0
    cb = max(MIN_PASS, -(-cg // passes))
    return cb if cb < cg else 0


def streamed_tile(blocks: int, width: int, regs: int, vectors: int | None = None):
    """``(vectors, pixels)`` of a streamed channels tile for ``blocks`` vectors of a group's
    output channels on rows of ``width`` pixels with ``regs`` vector registers, or None.

    Per tap the tile holds the smaller of its ``vectors`` weight vectors and ``pixels`` input
    values and streams the other: ``vectors x pixels`` accumulators + ``min(vectors, pixels)``
    + 1 registers (16: 4 x 3, 3 x 4, 2 x 6 and 6 x 2 keep 12 sums, where holding every tap's
    weights leaves room for 8). Chosen by the positions the row's tiles compute (the last
    overlapping the one before) x the tile's cost a position (:data:`FEW_CHAINS_RATE`,
    :data:`LOAD_COST`), ties to more sums. On Zen 4 (AVX2), ms: 64 -> 64 channels on 56 x 56
    4 x 3 1.47, 2 x 4 1.52; 256 -> 256 on 14 x 14 4 x 3 1.45, 2 x 4 1.66, 4 x 2 1.69; 512 ->
    512 on 7 x 7 2 x 4 1.77, 4 x 3 1.91, 8 x 1 3.6."""
    best, best_key = None, None
    for v in ([vectors] if vectors else range(1, regs)):
        if blocks % v:
            continue
        for p in range(1, width + 1):
            if v * p + min(v, p) + 1 > regs:
                break
            acc = v * p
            chains = 1.0 if acc >= 12 else max(1.0, FMA_CHAINS / acc) / FEW_CHAINS_RATE
            cost = max(chains, LOAD_COST * (WEIGHT_LOAD / p + 1 / v))
            key = (round(-(-width // p) * p * cost, 6), -acc)
            if best_key is None or key < best_key:
                best, best_key = (v, p), key
    return best


def depthwise_lanes(desc, host: Host) -> int:
    """The channels a vector of the depthwise lanes kernel takes for ``desc`` (the host's
    lanes, halved down to 4 until they divide the channels), or 0 where it does not apply:
    FORWARD, 2-D, float32 or float16, one input and one output channel a group, every tap's
    weight vector held in the registers with a tile's accumulators."""
    d, geo = desc, geometry(desc)
    if not (geo.forward and d.input_tensor.rank == 4 and geo.depthwise
            and geo.out_channels == 1 and geo.in_channels == 1
            and d.input_tensor.data_type in (DataType.FLOAT32, DataType.FLOAT16)
            and geo.taps + 2 <= registers(host)):
        return 0
    lanes, channels = host.lanes, d.input_tensor.sizes[1]
    while lanes > 4 and channels % lanes:
        lanes //= 2
    return lanes if channels % lanes == 0 else 0


def takes_depthwise_lanes(desc, host: Host) -> bool:
    """Whether the depthwise lanes kernel is the planner's pick for ``desc``: where it applies,
    on output rows narrower than the host's vector (where the plane-by-plane kernel narrows
    its vectors and overlaps its tiles), and at a strided last axis where it takes vectors of
    16 lanes (AVX-512). With 8 lanes (AVX2) the plane-by-plane kernel was as fast or faster on
    wider rows inside MobileNetV2, strided or not; with 16 its strided rows (a vector loaded
    over twice its width and shuffled, 64-byte loads across cache lines) lost to the lanes
    kernel inside the network (``depthwise_lanes.py``)."""
    lanes = depthwise_lanes(desc, host)
    return bool(lanes) and (desc.output_tensor.sizes[-1] < host.lanes
                            or (lanes >= 16 and desc.strides[-1] > 1))


def depthwise_lanes_plan(desc, host: Host | None = None, *, pixels: int | None = None
                         ) -> BlockPlan | None:
    """The depthwise lanes kernel's plan (``depthwise`` and ``pixels`` set): ``lanes``
    channels a vector, ``pixels`` output pixels a tile (the registers left by the held
    weights, a loaded vector and the tile's accumulators, at most the lanes (one transposed
    store), spread evenly over the row), ``padded`` the padded plane the windows read; None
    where it does not apply."""
    host = host or Host.current()
    lanes = depthwise_lanes(desc, host)
    if not lanes:
        return None
    geo = geometry(desc)
    width = desc.output_tensor.sizes[-1]
    most = min(width, lanes, registers(host) - geo.taps - 1) if pixels is None else pixels
    tiles = -(-width // most)
    return BlockPlan(lanes, 1, 1, 1, geo.padded_sizes(), depthwise=True,
                     pixels=-(-width // tiles))


def _depthwise_plan(geo, lanes, budget, height, width, padded) -> BlockPlan:
    """One input channel per group: rows share the input vectors they load (channels share
    them in the dense tile), within the unroll bound."""
    two_d = len(geo.desc.output_tensor.sizes) >= 4
    rows = min(4, height, budget) if two_d else 1
    vectors = max(1, min(budget // (3 * rows) if two_d else 4, width // lanes))
    while rows > 1 and geo.taps * rows * vectors > DEPTHWISE_UNROLL:
        rows -= 1
    vectors = max(1, min(vectors, DEPTHWISE_UNROLL // (geo.taps * rows)))
    return BlockPlan(lanes, 1, rows, vectors, padded, depthwise=True)


def flat_vectors(desc, padded, lanes, room, rows, vectors, gain: float = FLAT_GAIN) -> int:
    """Vectors a tile takes when it walks the padded plane flattened (0: keep rows): for unit
    strides over the last two axes (a padded row is never shorter than a vector: the planner's
    lanes fit the output row, which the padded row holds, so a vector's lanes fall in at most
    two rows, as ``vstore_rows`` needs), where runs of ``room`` vectors compute at most ``gain``
    of the positions tiles of whole rows do. A run covers the padding columns of the rows it
    crosses, but no row block or row is rounded up to the tile (56-pixel rows in 16-lane
    vectors compute 64 a row; flattened over rows of 58, 51 runs of 64 compute 3,264 positions
    for 3,136 outputs against 3,584)."""
    out = desc.output_tensor.sizes[2:]
    if len(out) < 2 or desc.strides[-1] != 1 or desc.strides[-2] != 1:
        return 0
    size = (out[-2] - 1) * padded[-1] + out[-1]
    by_rows = -(-out[-2] // rows) * rows * -(-out[-1] // (lanes * vectors)) * lanes * vectors
    run = lanes * room  # every accumulator: smaller runs lose more than the lanes they save
    flat = -(-size // run) * run
    return room if run <= size and flat <= gain * by_rows else 0


def stages(desc, padded, host: Host) -> bool:
    """Whether the forward kernel pads each (image, group) into a per-thread buffer just before
    its tiles instead of padding the whole input first: where every thread gets four pairs and
    a group's padded planes fit :data:`STAGE_BYTES` (the whole-input pass writes and re-reads a
    padded copy of the input through memory)."""
    cg = geometry(desc).in_channels
    return (desc.input_tensor.sizes[0] * desc.group_count >= 4 * host.threads
            and cg * prod(padded) * 4 <= STAGE_BYTES)


def tile_rows(height: int, room: int) -> int:
    """Rows of a tile, from half ``room`` to ``room`` (at most ``height``): the fewest rows
    computed twice by the overlapping last row block, ties (within 3% a row) to the taller tile,
    which loads fewer input vectors per multiply-add. 56 rows -> 4, 28 -> 4, 14 -> 2 of 4."""
    top = min(room, height)
    low = min(max(1, (room + 1) // 2), top)
    return min(range(low, top + 1),
               key=lambda r: -(-height // r) * r / height + 0.03 * (top - r))


def padded_geometry(desc) -> tuple:
    """``(front, sizes)`` of the zero-padded input the blocked kernels read: input element ``a``
    sits at ``a + front``. FORWARD: ``front`` is the start padding and the sizes reach the last
    tap of the last output (the last rounded up to a multiple of its stride, for the rows stored
    by stride phase); BACKWARD: enough in front for the most negative phase offset and
    behind for the last q plus the largest."""
    d, geo = desc, geometry(desc)
    if geo.forward:  # a strided last axis is stored by phases
        sizes = geo.padded_sizes()
        s = d.strides[-1]
        return tuple(d.start_padding), sizes[:-1] + (s * -(-sizes[-1] // s),)
    front, sizes = [], []
    for n, o, s, axis in zip(d.input_tensor.sizes[2:], d.output_tensor.sizes[2:], d.strides,
                             geo.transposed_phases()):
        es = [e for taps in axis for _, e in taps]
        f = max(0, -min(es)) if es else 0
        front.append(f)
        sizes.append(f + max(n, -(-o // s) + (max(es) if es else 0)))
    return tuple(front), tuple(sizes)


def needs_copy(desc) -> bool:
    """Whether the blocked kernel copies the input (padding, or a strided last axis) or reads
    it in place."""
    front, sizes = padded_geometry(desc)
    split = desc.strides[-1] if desc.direction == ConvolutionDirection.FORWARD else 1
    return any(front) or tuple(desc.input_tensor.sizes[2:]) != tuple(sizes) or split != 1


def pointwise_as_1d(desc):
    """A FORWARD 1x1 convolution with unit strides and no padding is the same computation over
    the flattened spatial axes: the equivalent 1-D descriptor (one long row, so the tile takes
    several vectors and no row is cut into a remainder), or None."""
    d = desc
    if (d.direction != ConvolutionDirection.FORWARD or d.input_tensor.rank <= 3
            or any(k != 1 for k in d.filter_tensor.sizes[2:]) or any(s != 1 for s in d.strides)
            or any(d.start_padding) or any(d.end_padding)):
        return None

    def flat(t):
        return TensorDesc(t.data_type, tuple(t.sizes[:2]) + (prod(t.sizes[2:]),))

    return dataclasses.replace(
        d, input_tensor=flat(d.input_tensor), filter_tensor=flat(d.filter_tensor),
        bias_tensor=flat(d.bias_tensor) if d.bias_tensor is not None else None,
        output_tensor=flat(d.output_tensor), strides=(1,), dilations=(1,), start_padding=(0,),
        end_padding=(0,), output_padding=(0,))


@dataclasses.dataclass(frozen=True)
class Layout:
    """What the blocked emitters read off a key: the tile, the sizes, the channel blocks
    (``blocks`` of ``plan.mb`` channels, ``tail`` in the last), the padded input's ``front`` and
    ``padded`` sizes with their strides, the output's strides, and the plane sizes.
    (CONVOLUTION mode needs nothing here: the host packs the filter flipped.)"""

    lanes: int
    mb: int  # output channels a full tile takes
    rows: int
    vectors: int
    pixels: int  # a channels tile's pixels (0: a pixels tile)
    batch: int
    cin: int
    cout: int
    size_in: tuple
    out: tuple
    kernel: tuple
    rank: int  # spatial axes
    groups: int
    mg: int  # output channels per group
    blocks: int  # channel blocks per group
    tail: int  # channels of the last block
    front: tuple
    padded: tuple
    pstride: tuple  # element strides of the padded planes' axes
    ostride: tuple  # element strides of the output planes' axes
    plane_in: int  # elements of one padded input plane
    plane_out: int  # elements of one output plane
    fold: str = ""  # the plan's folded padding (BlockPlan.fold)
    addend: bool = False  # the plan's addend (BlockPlan.addend)
    #: elements between two columns of the padded copy: ``lanes`` where it is woven (its
    #: ``lanes`` channels side by side: :attr:`BlockPlan.woven`, whole-input copies only), else 1
    step: int = 1

    @property
    def run(self) -> int:
        """Outputs one tile covers along a row: a channels tile's pixels, else its vectors'
        lanes."""
        return self.pixels or self.lanes * self.vectors

    @property
    def runs(self) -> int:
        """Runs of :attr:`run` outputs a row takes (the last overlapping where it must)."""
        return -(-self.out[-1] // self.run)

    @classmethod
    def of(cls, key) -> Layout:
        return cls.planned(key.desc, key.plan)

    @classmethod
    def planned(cls, d, p: BlockPlan) -> Layout:
        """The layout of descriptor ``d`` under plan ``p``."""
        out = tuple(d.output_tensor.sizes[2:])
        nd = len(out)
        mg = d.output_tensor.sizes[1] // d.group_count
        blocks = -(-mg // p.mb)
        front, padded = padded_geometry(d)
        step = p.lanes if p.woven and not (p.staged or p.fold) else 1
        return cls(p.lanes, p.mb, p.rows, p.vectors, p.pixels, d.input_tensor.sizes[0],
                   d.input_tensor.sizes[1], d.output_tensor.sizes[1],
                   tuple(d.input_tensor.sizes[2:]), out, tuple(d.filter_tensor.sizes[2:]), nd,
                   d.group_count, mg, blocks, mg - (blocks - 1) * p.mb, tuple(front),
                   tuple(padded), tuple(prod(padded[i + 1:]) * step for i in range(nd)),
                   tuple(prod(out[i + 1:]) for i in range(nd)), prod(padded), prod(out),
                   p.fold, p.addend, step)


#: a chunk of a one-axis plane (a pointwise convolution's flattened pixels) reads at most this
#: much of the input, so that it stays in a core's cache while every channel block reads it
CHUNK_BYTES = 128 * 1024
#: a one-axis plane is cut into chunks until the (p)range has at least this many iterations:
#: with a handful (3 channel blocks on 2 threads) one thread does twice the other's work
MIN_ITEMS = 8
#: what a core's cache keeps of the data one kernel call reads again (half of a 1 MiB L2)
CACHE_BYTES = 512 * 1024
#: a one-axis plane of at most RUN_CHUNK_RUNS runs over at least RUN_CHUNK_CHANNELS input
#: channels goes one run a chunk, outside the channel blocks (:func:`chunks_of`)
RUN_CHUNK_CHANNELS, RUN_CHUNK_RUNS = 256, 16


def chunks_of(lay: Layout) -> tuple:
    """``(chunks, chunk_outer)``: how many chunks the runs of a one-axis plane (``lanes *
    vectors`` or ``pixels`` outputs each) are cut into, each reading at most CHUNK_BYTES of a
    group's input and enough of them for MIN_ITEMS (p)range iterations (counted as the kernel
    cuts them: equal chunks of whole runs, the last the rest); and whether the chunks
    go outside the channel blocks: where that moves fewer bytes from beyond a core's cache
    (CACHE_BYTES) than blocks outside. Blocks outside read the input once (it stays cached) or
    once a block, and the filter once; chunks outside read the input once, and the filter once
    (it stays cached) or once a chunk.

    A small plane over many input channels (a projection layer on 14 x 14: a run's input, 256
    channels and more, outgrows the first-level cache) goes one run a chunk, chunks outside:
    a thread's consecutive iterations are every channel block of one run, which read its input
    while the core still holds it (measured in MobileNetV2 at batch 1: 384 -> 64 and 576 -> 96
    on 14 x 14 6 to 15% faster, 0.08 -> 0.07 and 0.16 -> 0.15 ms; at batch 8 level; with 144
    channels on 28 x 28 up to 19% slower, so not below RUN_CHUNK_CHANNELS). Not where the filter
    outgrows CACHE_BYTES (each chunk would read it from beyond the core's cache again)."""
    cg = lay.cin // lay.groups
    runs = lay.runs
    input_bytes = 4 * cg * lay.padded[-1]
    filter_bytes = 4 * cg * lay.mg * lay.kernel[-1]
    if (cg >= RUN_CHUNK_CHANNELS and 1 < runs <= RUN_CHUNK_RUNS and not lay.pixels
            and filter_bytes <= CACHE_BYTES):
        return runs, True
    items = lay.batch * lay.groups * lay.blocks
    wanted = min(runs, max(-(-input_bytes // CHUNK_BYTES), -(-MIN_ITEMS // items)))
    chunks = -(-runs // -(-runs // wanted))  # as many as chunks of equal runs make
    blocks_outer = filter_bytes + input_bytes * (1 if input_bytes <= CACHE_BYTES else lay.blocks)
    chunks_outer = input_bytes + filter_bytes * (1 if filter_bytes <= CACHE_BYTES else chunks)
    return chunks, chunks > 1 and chunks_outer < blocks_outer


def fold_of(lay: Layout, desc):
    """``(kind, extent)`` of phase 1's folded padding (None: zeros): the AxisMap kind and the
    padded sizes the windows reach."""
    return (lay.fold, geometry(desc).padded_sizes()) if lay.fold else None




def can_fold(desc, plan) -> bool:
    """Whether ``plan``'s phase 1 can read the padding through a map: FORWARD, a unit stride
    along the last axis (the rows are not stored by phase), a copy made at all."""
    return (plan is not None and desc.direction == ConvolutionDirection.FORWARD
            and desc.strides[-1] == 1 and needs_copy(desc))


def pack_filter(desc, w, plan: BlockPlan) -> np.ndarray:
    """The filter as the blocked kernel reads it: [g][channel block][c][tap][mb], float32,
    flipped for CONVOLUTION mode, zeros past the last block's channels."""
    d = desc
    g = d.group_count
    if d.mode == ConvolutionMode.CONVOLUTION:
        w = w[(Ellipsis,) + (slice(None, None, -1),) * (w.ndim - 2)]
    if d.direction == ConvolutionDirection.FORWARD:  # (M, C/g, k...)
        cout, cg = w.shape[0], w.shape[1]
        wg = w.reshape(g, cout // g, cg, -1)
    else:  # (C, M/g, k...): output channel m = g * M/g + col
        cg, mg_ = w.shape[0] // g, w.shape[1]
        cout = mg_ * g
        wg = w.reshape(g, cg, mg_, -1).transpose(0, 2, 1, 3)
    mg, mb = cout // g, plan.mb
    nmb = -(-mg // mb)
    if nmb * mb != mg:
        wg = np.concatenate([wg, np.zeros((g, nmb * mb - mg) + wg.shape[2:], wg.dtype)], axis=1)
    packed = _pages.contiguous(wg.reshape(g, nmb, mb, cg, -1).transpose(0, 1, 3, 4, 2),
                               np.float32).reshape(-1)
    if plan.depthwise and plan.pixels:  # the depthwise lanes kernel: [block][tap][lanes]
        return _pages.contiguous(packed.reshape(g // plan.lanes, plan.lanes, -1)
                                 .transpose(0, 2, 1), np.float32).reshape(-1)
    return packed
