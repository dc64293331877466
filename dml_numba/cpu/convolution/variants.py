"""The CPU convolution's kernel variants, one class each: the direct loop nest, BLAS (``gemm``),
Winograd's F(4x4, 3x3) and the blocked kernel's five tiles (``pixels``, ``transposed``,
``depthwise``, ``depthwise-lanes``, ``channels``).
A variant owns what one kind of kernel needs:

* ``planned(desc, host)``: the planner's plan for ``desc`` on ``host`` (a list of one; empty
  where the variant cannot run the descriptor; ``[None]`` for a kernel without a plan), and
  ``plans(desc, host)``: every valid plan, the tuner's candidates;
* ``estimate(desc, plan, host, ...)``: the cost model's time (its constants: :data:`.cost.COSTS`);
* ``kind(desc, plan)``: the kernel its key names (``key.kernel``), and ``emitters``: the source
  of each kernel it builds, by that name;
* ``build(desc, options, plan)``: the kernel (its class: ``kernel``).

The static choice (:mod:`.choice`), the tuner (:mod:`.tune`) and the cost fit
(``benchmarks/fit_cost.py``) iterate over :data:`VARIANTS`; a new tile is one new class there.
The ``algorithm`` option names a family (``"blocked"``: the five tiles), whose members are told
apart by their plans (:meth:`Variant.owns`, :func:`variant_of`); the tuner's candidates and the
wisdom file keep (algorithm, plan), so what is remembered does not depend on the classes.

The blocked tiles share one plan type, :class:`~.blocked.plan.BlockPlan` (frozen, in the key and
in the wisdom file); each tile's docstring says which of its fields it reads.
"""
from __future__ import annotations

from ..._dims import prod
from ..._errors import ValidationError
from ...ops.convolution import ConvolutionDirection, geometry
from .._emit import Host, resolve_parallel
from .base import conv_work
from .blocked import BlockedKernel, depthwise, depthwise_lanes, forward, transposed
from .blocked.plan import (
    FLAT_GAIN,
    BlockPlan,
    Layout,
    block_plan,
    channel_plan,
    chunks_of,
    depthwise_lanes_plan,
    needs_copy,
    padded_geometry,
    pointwise_as_1d,
    registers,
    takes_depthwise_lanes,
)
from .cost import COSTS, Costs, share
from .direct import DirectKernel, row_plan
from .direct import emit as direct_emit
from .direct_rows import Row, vector_span, vector_starts
from .gemm import GemmKernel
from .winograd import P as WINOGRAD_POSITIONS
from .winograd import WinogradKernel, WinogradPlan
from .winograd import takes as winograd_takes
from .winograd import tiles as winograd_tiles


class Variant:
    """One kind of CPU convolution kernel (see the module's docstring)."""

    name = ""  # in reports and the cost fit
    algorithm = ""  # the ``algorithm`` option that forces it (its family)
    blas = False  # its multiply-adds are BLAS's (at the host's ``blas`` rate)
    kernel: type = type(None)  # the kernel class that builds it
    emitters: dict = {}  # key.kernel -> the emitter of that kernel

    def planned(self, desc, host: Host) -> list:
        """The planner's plan for ``desc`` on ``host``, as a list of one (empty: the variant
        cannot run ``desc``)."""
        return [None]

    def plans(self, desc, host: Host) -> list:
        """Every valid plan for ``desc`` on ``host`` (the tuner's exhaustive candidates), the
        planner's first."""
        return self.planned(desc, host)

    def owns(self, desc, algorithm: str, plan) -> bool:
        """Whether (``algorithm``, ``plan``) is this variant's kernel for ``desc``."""
        return algorithm == self.algorithm

    def kind(self, desc, plan) -> str:
        """The kernel's name in its key (``key.kernel``)."""
        return "main"

    def emit(self, key) -> str:
        """The source of the kernel ``key`` (one of this variant's kinds)."""
        return self.emitters[key.kernel](key)

    def build(self, desc, options, plan=None):
        """The kernel of ``desc`` with ``plan`` (compiled, or loaded from the disk cache)."""
        return self.kernel(desc, options, plan=plan)

    def estimate(self, desc, plan, host: Host, *, parallel: bool | None = None,
                 costs: Costs = COSTS) -> float:  # pragma: no cover - every variant has one
        raise NotImplementedError

    def __repr__(self):
        return f"<variant {self.name}>"


def blas_rate(host: Host) -> float:
    """BLAS's multiply-add rate on ``host`` against the tiles' (``Host.blas``; unsettled: 1.0,
    the best it can be, which :func:`~.choice.ranked` settles where BLAS would win)."""
    return 1.0 if host.blas is None else host.blas


def _terms(desc, host: Host, parallel: bool | None, costs: Costs):
    """What every estimate starts from: the multiply-adds in the host's vectors (BACKWARD: an
    output takes the taps of its stride phase only), the threads the parallel loop gets, and
    waking the pool where it has more than one."""
    geo = geometry(desc)
    work = conv_work(desc)
    vec = work / host.lanes / (1 if geo.forward else prod(desc.strides))
    threads = host.threads if resolve_parallel(parallel, work) else 1
    return vec, threads, costs.pool if threads > 1 else 0.0


class Direct(Variant):
    """``algorithm="direct"``: one generated loop nest (:mod:`.direct`), every dtype, every
    descriptor. Its row plan (vectors for the rows' interiors) is made from the options when it
    is built, so the tuner's plan is None."""

    name = algorithm = "direct"
    kernel = DirectKernel
    emitters = {"main": direct_emit}

    def estimate(self, desc, plan, host, *, parallel=None, costs=COSTS):
        """Per output row and input channel, the row's vectors (as the kernel's own plan sums
        them: the whole row, or its interior with the edge pixels one by one, or scalar code
        on strided rows) times the taps, plus a read and write of the row; its rows shared
        out over the threads."""
        _, threads, pool = _terms(desc, host, parallel, costs)
        out = desc.output_tensor.sizes
        rows = desc.input_tensor.sizes[0] * out[1] * prod(out[2:-1])
        return share(rows * geometry(desc).in_channels * _direct_row(desc, host, costs), rows,
                     threads) + pool + costs.direct_call


def _direct_row(desc, host: Host, costs: Costs) -> float:
    """The direct kernel's time for one output row and one input channel: its vectors (where
    its plan sums the row in vectors) and its pixels summed one by one, each over every tap."""
    geo = geometry(desc)
    o = desc.output_tensor.sizes[-1]
    plan = row_plan(desc, {}, host)
    span = None
    if plan is not None and plan.lanes:
        row = Row(desc)
        span = vector_span(row, row.column(None), row.combos, plan.lanes)
    if span is None:
        return o * (geo.taps * costs.loop + costs.row / host.lanes)
    whole, tail = vector_starts(span, plan.lanes)
    vectors = len(whole) + (tail is not None)
    pixels = o - (span[1] - span[0])
    return (vectors * (geo.taps * costs.direct * (1 + costs.load) + costs.row)
            + pixels * geo.taps * costs.scalar)


class Gemm(Variant):
    """``algorithm="gemm"``: BLAS with generated kernels around it (:mod:`.gemm`), every
    descriptor; BLAS chooses its own blocking (no plan)."""

    name = algorithm = "gemm"
    blas = True
    kernel = GemmKernel
    emitters = GemmKernel.emitters

    def kind(self, desc, plan) -> str:  # pragma: no cover - its kernels are its helpers'
        raise ValueError("the gemm variant's kernels are named by their helpers")

    def estimate(self, desc, plan, host, *, parallel=None, costs=COSTS):
        """BLAS at its own rate in the calling thread (:mod:`dml_numba._blas`: its own pool
        would fight Numba's for the cores), its column matrix written and read through memory
        (by the parallel im2col; none for a 1x1 unit-stride unpadded FORWARD convolution,
        whose input is the matrix), the epilogue's pass over the output (bias, activation), a
        call per image and group, and BLAS set to one thread and back around the product
        (``blas_switch``, measured in networks; on one Numba thread too: BLAS's own pool has
        the machine's threads whatever Numba's count). The FORWARD product
        now runs an item a thread (image, group, slab of channels) with its epilogue in cache;
        the estimate keeps the form its constants were fitted with: refitted on the grid
        measured with that product (``benchmarks/grid/``), the model chose worse on the
        networks (``benchmarks/HISTORY.md``: "The cost model refitted, and not kept")."""
        vec, _, _ = _terms(desc, host, parallel, costs)
        geo = geometry(desc)
        batch = desc.input_tensor.sizes[0]
        pointwise = geo.forward and pointwise_as_1d(desc) is not None
        columns = 0 if pointwise else batch * geo.in_channels * geo.taps * prod(
            desc.output_tensor.sizes[2:] if geo.forward else desc.input_tensor.sizes[2:]
        ) * desc.group_count
        calls = batch * desc.group_count
        # FORWARD with bias or an activation: the epilogue kernel's pass over what BLAS wrote,
        # each output vector read and stored once more (the tiles store theirs once, with it)
        epilogue = 2 * costs.store * desc.output_tensor.element_count / (
            host.lanes * host.threads) if geo.forward and (
            desc.bias_tensor is not None or desc.fused_activation is not None) else 0.0
        return costs.gemm * vec / blas_rate(host) + costs.column * columns / host.threads \
            + epilogue + costs.call * calls + (costs.pool if host.threads > 1 else 0.0) \
            + costs.blas_switch + costs.gemm_call


class Winograd(Variant):
    """``algorithm="winograd"``: F(4x4, 3x3) (:mod:`.winograd`) for 2-D FORWARD float32
    convolutions with a 3x3 filter, unit strides and dilations and one group; its plan is the
    transforms' vector lanes (the host's)."""

    name = algorithm = "winograd"
    kernel = WinogradKernel
    emitters = WinogradKernel.emitters

    def planned(self, desc, host):
        return [WinogradPlan(host.lanes)] if winograd_takes(desc) else []

    def owns(self, desc, algorithm, plan) -> bool:
        return algorithm == "winograd"

    def kind(self, desc, plan) -> str:  # pragma: no cover - its kernels are its helpers'
        raise ValueError("the winograd variant's kernels are named by their helpers")

    def estimate(self, desc, plan, host, *, parallel=None, costs=COSTS):
        """Its 36 products (a quarter of the direct sum's multiply-adds for whole tiles, on a
        blocked tile), their operands and results through memory, the input's and output's
        transforms per vector and per row of tiles, the filter's transform, the input read and
        the output written, each shared out over the threads, and four parallel calls."""
        _, threads, pool = _terms(desc, host, parallel, costs)
        n_, cin = desc.input_tensor.sizes[:2]
        cout = desc.output_tensor.sizes[1]
        th, tw = winograd_tiles(desc)
        t = n_ * th * tw
        p = WINOGRAD_POSITIONS
        product = costs.winograd * p * cout * cin * t / host.lanes \
            + costs.winograd_move * p * (cout * cin + (cin + cout) * t)
        transforms = costs.winograd_transform * p * (cin + cout) * t / host.lanes \
            + costs.winograd_row * n_ * (cin + cout) * th + costs.winograd_filter * cout * cin \
            + costs.winograd_io * (desc.input_tensor.element_count
                                   + desc.output_tensor.element_count)
        return (product + transforms) / threads + 4 * pool + costs.blocked_call


class Tile(Variant):
    """A tile of the blocked kernel (:mod:`.blocked`): float32 and float16, planned for the
    descriptor a 1x1 convolution flattens to (:func:`~.blocked.plan.pointwise_as_1d`).
    Every tile reads the plan's ``lanes``, ``mb``, ``rows``, ``vectors``, ``padded``,
    ``staged`` and ``fold``; the rest is each tile's."""

    algorithm = "blocked"
    kernel = BlockedKernel
    #: the tile adds an addend to each output in its epilogue (``BlockPlan.addend``)
    takes_addend = False

    def owns(self, desc, algorithm, plan) -> bool:
        return algorithm == "blocked" and plan is not None and self.takes(desc, plan)

    def takes(self, desc, plan: BlockPlan) -> bool:  # pragma: no cover - every tile has one
        raise NotImplementedError

    def planned(self, desc, host):
        kdesc = pointwise_as_1d(desc) or desc
        return [p for p in self._planner(kdesc, host) if p is not None and self.takes(kdesc, p)]

    def plans(self, desc, host):
        kdesc = pointwise_as_1d(desc) or desc
        found = [p for p in self._planner(kdesc, host) + self._variations(kdesc, host)
                 if p is not None and self.takes(kdesc, p)]
        return list(dict.fromkeys(found))

    def _planner(self, kdesc, host) -> list:
        return [block_plan(kdesc, host)]

    def _variations(self, kdesc, host) -> list:
        """The tuner's variations of the planner's tile (one list for the tiles
        :func:`~.blocked.plan.block_plan` plans, each tile keeping its own): lanes (the host's,
        half), channels a tile (4, 8; the depthwise tile has no channel block), staged padding
        (the planner's, on, off) and, FORWARD, flattened tiles (as the planner decides,
        never)."""
        base = block_plan(kdesc, host)
        if base is None:
            return []
        lanes = sorted({host.lanes, max(4, host.lanes // 2)}, reverse=True)
        fwd = kdesc.direction == ConvolutionDirection.FORWARD
        return [block_plan(kdesc, host, lanes=ln, channels=ch, staged=st, flat_gain=gain)
                for ln in lanes for ch in ((None,) if base.depthwise else (4, 8))
                for st in _stagings(kdesc) for gain in ((FLAT_GAIN, 0.0) if fwd else (FLAT_GAIN,))]

    def build(self, desc, options, plan=None):
        if plan is None:
            raise ValueError(f"the {self.name} tile needs its plan")
        return self.kernel(desc, options, plan, self)

    def estimate(self, desc, plan, host, *, parallel=None, costs=COSTS):
        """The positions the tiles compute for each output (rows rounded up to the tile,
        vectors narrower than the host's), at the tile's rate with the vectors it loads per
        multiply-add (:meth:`work`), plus writing the padded copy of the input where it makes
        one and storing the output; its items shared out over the threads."""
        if plan is None:
            raise ValueError(f"no tile for the blocked kernel of {desc!r}")
        vec, threads, pool = _terms(desc, host, parallel, costs)
        geo = geometry(desc)
        batch = desc.input_tensor.sizes[0]
        kdesc = pointwise_as_1d(desc) or desc
        padded = padded_geometry(kdesc)[1]
        waste = waste_of(kdesc, plan)
        narrow = host.lanes / plan.lanes  # half-width vectors do half the work an instruction
        copy = 0.0
        if needs_copy(kdesc):
            split = self.splits(desc)
            copy = (costs.copy + costs.gather * split) * batch * geo.in_channels \
                * desc.group_count * prod(padded)
        items, loads, rate = self.work(desc, kdesc, plan, costs)
        compute = rate * vec * waste * narrow * (1 + costs.load * loads)
        stores = self.store_cost(costs) * desc.output_tensor.element_count / host.lanes
        return share(compute + copy + stores, items, threads) + pool + costs.blocked_call

    def splits(self, desc) -> bool:
        """Whether the tile's copy of the input stores its rows by stride phase (a gather)."""
        return desc.strides[-1] > 1 and geometry(desc).forward

    def work(self, desc, kdesc, plan: BlockPlan, costs: Costs) -> tuple:
        """``(items, loads, rate)``: the parallel loop's items, the vectors loaded per
        multiply-add and the tile's rate (per vector multiply-add) for the dense tiles: per
        tap, the tile's input vectors and a weight broadcast per channel."""
        return self.items(desc, kdesc, plan), \
            (plan.rows * plan.vectors + plan.mb) / plan.accumulators, 1.0

    def items(self, desc, kdesc, plan: BlockPlan) -> int:
        """The parallel loop's items: per (image, group), a staged tile's one; else each block
        of channels, outer position and block of rows (flattened plane; a one-axis plane's
        chunk)."""
        kout = kdesc.output_tensor.sizes[2:]
        blocks = -(-geometry(desc).out_channels // plan.mb)
        rows = (1 if plan.flat else -(-kout[-2] // plan.rows) if len(kout) > 1
                else chunks_of(Layout.planned(kdesc, plan))[0])
        return desc.input_tensor.sizes[0] * desc.group_count * (
            1 if plan.staged else blocks * prod(kout[:-2]) * rows)

    def store_cost(self, costs: Costs) -> float:
        """An output vector's store (with its epilogue)."""
        return costs.store


#: a one-tap convolution's pixels tile computing at most this many positions per output keeps
#: the channels tile out of the static choice on 16-register hosts (:meth:`Channels._planner`)
POINTWISE_WASTE = 1.15


def waste_of(kdesc, plan: BlockPlan) -> float:
    """The positions ``plan``'s tiles compute per output of ``kdesc`` (the kernel's view: a
    pointwise convolution's plane as one row): rows rounded up to the tile, a row to the
    tile's pixels or vectors, a flattened plane's runs to theirs."""
    kout = kdesc.output_tensor.sizes[2:]
    width, height = kout[-1], kout[-2] if len(kout) > 1 else 1
    step = plan.pixels or plan.lanes * plan.vectors
    if plan.flat:
        size = (height - 1) * padded_geometry(kdesc)[1][-1] + width
        positions = -(-size // step) * step
    else:
        positions = -(-height // plan.rows) * plan.rows * -(-width // step) * step
    return positions / (height * width)


def _stagings(kdesc) -> tuple:
    """The staged-padding settings a FORWARD tile may take where it copies the input: the
    planner's, on, off."""
    forward = kdesc.direction == ConvolutionDirection.FORWARD
    return (None, True, False) if forward and needs_copy(kdesc) else (None,)


class Pixels(Tile):
    """FORWARD, pixels in the lanes (``blocked/forward.py``): ``mb`` output channels x ``rows``
    x ``vectors`` vectors of pixels, or runs of ``vectors`` along the padded plane flattened
    (``flat``); the padding copied per (image, group) just before its tiles where ``staged``."""

    name = "pixels"
    emitters = {"blocked": forward.emit, "blocked-staged": forward.emit}
    takes_addend = True

    def takes(self, desc, plan):
        return (desc.direction == ConvolutionDirection.FORWARD and not plan.depthwise
                and not plan.pixels)

    def kind(self, desc, plan):
        return "blocked-staged" if plan.staged else "blocked"


class Transposed(Tile):
    """BACKWARD, per stride phase (``blocked/transposed.py``): the pixels tile with ``phases``
    (2: both phases of a stride-2 row in one tile, stored interleaved)."""

    name = "transposed"
    emitters = {"blocked-transposed": transposed.emit}

    def takes(self, desc, plan):
        return desc.direction == ConvolutionDirection.BACKWARD and not plan.depthwise

    def kind(self, desc, plan):
        return "blocked-transposed"


class Depthwise(Tile):
    """FORWARD with one input channel per group, plane by plane (``blocked/depthwise.py``):
    ``rows x vectors`` accumulators a tile, every tap unrolled; the planner's pick where a
    group has fewer output channels than the dense tile's channel block."""

    name = "depthwise"
    emitters = {"blocked-depthwise": depthwise.emit}

    def takes(self, desc, plan):
        return plan.depthwise and not plan.pixels

    def kind(self, desc, plan):
        return "blocked-depthwise"

    def _planner(self, kdesc, host):
        """The planner's tile, except where the depthwise lanes kernel is its pick
        (:func:`~.blocked.plan.takes_depthwise_lanes`; the tuner still tries this one)."""
        return [] if takes_depthwise_lanes(kdesc, host) else [block_plan(kdesc, host)]


    def work(self, desc, kdesc, plan, costs):
        """Each input row loaded feeds the tile's rows that read it, at the plane kernel's own
        rate; a plane per item."""
        geo = geometry(desc)
        k_h = geo.kernel[-2] if len(geo.kernel) > 1 else 1
        return (desc.input_tensor.sizes[0] * desc.group_count,
                (plan.rows + k_h - 1) / (plan.rows * k_h), costs.plane)


class DepthwiseLanes(Tile):
    """FORWARD depthwise with the channels in the lanes (``blocked/depthwise_lanes.py``): per
    item (image, block of ``lanes`` channels) the planes transposed pixel-major, then tiles of
    ``pixels`` output pixels along a row, each tap a vector load and a multiply-add, stored
    transposed back; the planner's pick on output rows narrower than a vector
    (:func:`~.blocked.plan.takes_depthwise_lanes`)."""

    name = "depthwise-lanes"
    emitters = {"blocked-depthwise-lanes": depthwise_lanes.emit}

    def takes(self, desc, plan):
        return plan.depthwise and bool(plan.pixels)

    def kind(self, desc, plan):
        return "blocked-depthwise-lanes"

    def _planner(self, kdesc, host):
        return [depthwise_lanes_plan(kdesc, host)] if takes_depthwise_lanes(kdesc, host) \
            else []

    def _variations(self, kdesc, host):
        """The planner's tile wherever the kernel applies (the tuner tries it on wide rows
        too)."""
        return [depthwise_lanes_plan(kdesc, host)]

    def items(self, desc, kdesc, plan):
        return desc.input_tensor.sizes[0] * desc.group_count // plan.lanes

    def splits(self, desc):
        """Transposed pixel-major, a strided window reads whole vectors: no stride phases."""
        return False

    def work(self, desc, kdesc, plan, costs):
        """One vector load a multiply-add; the weights held."""
        return self.items(desc, kdesc, plan), 1.0, 1.0

    def store_cost(self, costs):
        """The tile's vectors transposed into the planes, a row a plane."""
        return costs.transpose


class Channels(Tile):
    """FORWARD, output channels in the lanes (``blocked/forward.py``, the channels tile):
    ``vectors`` vectors of channels (``mb`` = vectors x lanes) x ``pixels`` pixels along a row,
    each input pixel broadcast, stored transposed; ``rows`` is 1 and ``flat`` unused."""

    name = "channels"
    emitters = {"blocked-channels": forward.emit, "blocked-channels-staged": forward.emit}
    takes_addend = True

    def takes(self, desc, plan):
        return bool(plan.pixels)

    def kind(self, desc, plan):
        return "blocked-channels-staged" if plan.staged else "blocked-channels"

    def _planner(self, kdesc, host):
        """The planner's channels tile; none for one tap where the host has 16 vector
        registers and the pixels tile runs at the host's width, computing at most
        :data:`POINTWISE_WASTE` of the outputs (AVX2, MobileNetV2's pointwise layers: 6 x 2
        pixel accumulators against 2 x 4 channel ones, 0.068 against 0.109 ms at 64 -> 384
        channels on 14 x 14, 0.26 against 0.79 at 16 -> 96 on 112 x 112; on 7 x 7 planes (49
        positions in 64) and 7-pixel rows (4 lanes) the channels tile is faster, 0.11 against
        0.14 and 0.17 against 0.30 ms, and stays; the tuner tries it everywhere)."""
        if geometry(kdesc).taps == 1 and registers(host) < 32:
            px = block_plan(kdesc, host)
            if px is not None and px.lanes == host.lanes and \
                    waste_of(kdesc, px) <= POINTWISE_WASTE:
                return []
        return [channel_plan(kdesc, host)]

    def _variations(self, kdesc, host):
        """One or two vectors of channels, staged padding on and off."""
        return [channel_plan(kdesc, host, vectors=v, staged=st) for v in (None, 1, 2)
                for st in _stagings(kdesc)]

    def work(self, desc, kdesc, plan, costs):
        """Per row of taps: its weight vectors, each input pixel it reads."""
        k_last = geometry(desc).kernel[-1]
        read = min(plan.pixels * k_last, (plan.pixels - 1) * kdesc.strides[-1]
                   + (k_last - 1) * kdesc.dilations[-1] + 1)
        return self.items(desc, kdesc, plan), \
            (plan.vectors * k_last + read) / (plan.accumulators * k_last), 1.0

    def store_cost(self, costs):
        """A vector of channels transposed with the others of its pixels, a row a plane."""
        return costs.transpose


#: every variant, in the order ties go (the simplest kernel first; of the tiles, the pixels
#: tile before the channels tile)
VARIANTS = (Direct(), Pixels(), Transposed(), Depthwise(), DepthwiseLanes(), Channels(), Gemm(),
            Winograd())

#: the algorithm option's values, in the order ties go
ALGORITHMS = ("direct", "blocked", "gemm", "winograd")


def emitter(kernel: str):
    """The emitter of the kernel named ``kernel`` in its key (``key.kernel``), from the variant
    that declares it (no two declare the same name: a test checks)."""
    for v in VARIANTS:
        if kernel in v.emitters:
            return v.emitters[kernel]
    raise KeyError(f"no CPU convolution variant emits a kernel named {kernel!r}")


def variant_of(desc, algorithm: str, plan=None) -> Variant:
    """The variant whose kernel (``algorithm``, ``plan``) is, for ``desc``."""
    for v in VARIANTS:
        if v.owns(desc, algorithm, plan):
            return v
    raise ValueError(f"no CPU convolution variant runs algorithm {algorithm!r} with plan "
                     f"{plan!r}")


def estimate(desc, algorithm: str, plan=None, host: Host | None = None, *,
             parallel: bool | None = None, costs: Costs = COSTS) -> float:
    """The modelled time of ``desc`` run by ``algorithm`` with ``plan`` (the blocked kernel's
    tile) on ``host``; ``parallel`` as a candidate gives it (None: by the work, as built)."""
    if algorithm == "blocked" and plan is None:
        raise ValueError(f"no tile for the blocked kernel of {desc!r}")
    return variant_of(desc, algorithm, plan).estimate(desc, plan, host or Host.current(),
                                                      parallel=parallel, costs=costs)


def build(desc, options, algorithm: str, plan=None):
    """The kernel of ``desc`` run by ``algorithm`` with ``plan``."""
    if algorithm == "blocked" and plan is None:
        raise ValidationError(
            "compile_operator.algorithm: 'blocked' is invalid; expected 'direct' or "
            "'gemm' for this descriptor (the blocked kernel takes float32 or float16 "
            "convolutions with at least 4 output pixels per row, per stride phase for "
            "BACKWARD, or FORWARD with a group's output channels a multiple of 4)")
    if algorithm == "winograd" and not winograd_takes(desc):
        raise ValidationError(
            "compile_operator.algorithm: 'winograd' is invalid; expected 'direct', 'gemm' or "
            "'blocked' for this descriptor (Winograd's F(4x4, 3x3) takes 2-D FORWARD float32 "
            "convolutions with a 3x3 filter, unit strides and dilations and one group)")
    return variant_of(desc, algorithm, plan).build(desc, options, plan)
