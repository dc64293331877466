"""A cost model of the CPU convolution kernels on a host: how long each candidate kernel should
take, in units of one core's vector multiply-add, from the descriptor, the kernel's plan and the
host's vector width and thread count. It makes the static choice (``DML_NUMBA_TUNE=off``:
:func:`~.choice.choose_algorithm`, the cheapest estimate) and ranks the quick tuner's
candidates; measurement decides where the tuner runs.

What each kernel costs (the constants, :data:`COSTS`, were fitted to every candidate's time on
the crossover grid by ``python3 -m benchmarks.fit_cost``; ``benchmarks/HISTORY.md`` gives the
fit and how the choice it makes compares with the best candidate):

* the work is a descriptor's multiply-adds over the host's lanes, shared out over the threads
  by the kernel's parallel loop (its items: a thread that gets one item more than another sets
  the pace), plus waking the thread pool where the kernel is parallel;
* ``blocked``: the positions its tiles compute for each output (rows rounded up to the tile,
  vectors narrower than the host's) and the vectors loaded per multiply-add, plus writing the
  padded copy of the input where it makes one; the depthwise (plane) kernel has a rate of its
  own;
* ``direct``: per output row and input channel, the row's vectors (as the kernel's own plan
  sums them: the whole row, or its interior with the edge pixels one by one, or scalar code on
  strided rows) times the taps, plus a read and write of the row; its rows shared out;
* ``gemm``: BLAS at its own rate in the calling thread (:mod:`dml_numba._blas`: its own pool
  would fight Numba's for the cores), its column matrix written and read through memory (by
  the parallel im2col), and a call per image and group.
"""
from __future__ import annotations

import dataclasses

from ..._dims import prod
from ...ops.convolution import geometry
from .._emit import Host, resolve_parallel
from .base import conv_work
from .blocked.plan import needs_copy, padded_geometry, pointwise_as_1d
from .direct import row_plan
from .direct_rows import Row, vector_span, vector_starts


@dataclasses.dataclass(frozen=True)
class Costs:
    """The model's constants, in one core's vector multiply-adds."""

    load: float = 0.5  # a vector load of the tile's inner loop, per multiply-add it feeds
    plane: float = 2.0  # the depthwise plane kernel, per vector multiply-add
    direct: float = 1.0  # the direct kernel's vector multiply-add
    scalar: float = 1.0  # the direct kernel's multiply-add of one edge pixel
    loop: float = 0.3  # ... of one pixel of a row without vectors (LLVM's loop: strided rows)
    row: float = 1.0  # the direct kernel's read and write of a row, per vector
    gemm: float = 1.25  # BLAS, per vector multiply-add (1 / its rate against the tiles')
    column: float = 8.0  # an element of BLAS's column matrix through memory
    call: float = 2000.0  # a BLAS call (one per image and group)
    copy: float = 1.0  # an element of the blocked kernel's padded copy of the input
    gather: float = 1.0  # ... more where a strided last axis is split into phases (gathers)
    store: float = 1.0  # a blocked kernel's output vector (stored once, with its epilogue)
    scatter: float = 4.0  # ... a channels tile's, scattered a lane per output plane
    pool: float = 2000.0  # waking the thread pool for one parallel call
    # a call's fixed cost on the host side (arguments, buffers), per algorithm
    direct_call: float = 2000.0
    blocked_call: float = 2000.0
    gemm_call: float = 2000.0


#: fitted on the crossover grid (see the module's docstring)
COSTS = Costs(load=0.3, plane=0.17, direct=3.5, scalar=7.1, loop=3.0, row=12.0, gemm=0.7,
              column=16.0, call=38000.0, copy=3.6, gather=5.6, store=16.0, scatter=18.0,
              pool=350.0, direct_call=36.0, blocked_call=41000.0,
              gemm_call=160000.0)


def _share(work: float, items: int, threads: int) -> float:
    """``work`` split into ``items`` equal parts over ``threads``: the busiest thread's part."""
    if threads <= 1 or items <= 1:
        return work
    return work * -(-items // threads) / items


def estimate(desc, algorithm: str, plan=None, host: Host | None = None, *,
             parallel: bool | None = None, costs: Costs = COSTS) -> float:
    """The modelled time of ``desc`` run by ``algorithm`` (``plan``: the blocked kernel's tile),
    on ``host``; ``parallel`` as a candidate gives it (None: by the work, as built)."""
    host = host or Host.current()
    geo = geometry(desc)
    work = conv_work(desc)
    # BACKWARD: an output takes the taps of its stride phase only
    vec = work / host.lanes / (1 if geo.forward else prod(desc.strides))
    threads = host.threads if resolve_parallel(parallel, work) else 1
    pool = costs.pool if threads > 1 else 0.0
    batch = desc.input_tensor.sizes[0]
    out = desc.output_tensor.sizes
    if algorithm == "gemm":
        # a 1x1 unit-stride unpadded FORWARD convolution multiplies the input in place
        pointwise = geo.forward and pointwise_as_1d(desc) is not None
        columns = 0 if pointwise else batch * geo.in_channels * geo.taps * prod(
            out[2:] if geo.forward else desc.input_tensor.sizes[2:]) * desc.group_count
        calls = batch * desc.group_count
        return costs.gemm * vec + costs.column * columns / host.threads \
            + costs.call * calls + (costs.pool if host.threads > 1 else 0.0) + costs.gemm_call
    if algorithm == "direct":
        rows = batch * out[1] * prod(out[2:-1])
        return _share(rows * geo.in_channels * _direct_row(desc, host, costs), rows, threads) \
            + pool + costs.direct_call
    if plan is None:
        raise ValueError(f"no tile for the blocked kernel of {desc!r}")
    kdesc = pointwise_as_1d(desc) or desc
    kout = kdesc.output_tensor.sizes[2:]
    width, height = kout[-1], kout[-2] if len(kout) > 1 else 1
    padded = padded_geometry(kdesc)[1]
    step = plan.pixels or plan.lanes * plan.vectors
    if plan.flat:
        size = (height - 1) * padded[-1] + width
        positions = -(-size // step) * step
    else:
        positions = -(-height // plan.rows) * plan.rows * -(-width // step) * step
    waste = positions / (height * width)
    narrow = host.lanes / plan.lanes  # half-width vectors do half the work an instruction
    copy = 0.0
    if needs_copy(kdesc):
        split = desc.strides[-1] > 1 and geo.forward
        copy = (costs.copy + costs.gather * split) * batch * geo.in_channels \
            * desc.group_count * prod(padded)
    if plan.depthwise:
        items = batch * desc.group_count
        # each input row loaded feeds the tile's rows that read it
        k_h = geo.kernel[-2] if len(geo.kernel) > 1 else 1
        loads = (plan.rows + k_h - 1) / (plan.rows * k_h)
        rate = costs.plane
    else:
        blocks = -(-geo.out_channels // plan.mb)
        rows = -(-height // plan.rows) if not plan.flat else 1
        items = batch * desc.group_count * (1 if plan.staged else blocks * prod(kout[:-2]) * rows)
        if plan.pixels:  # per row of taps: its weight vectors, each input pixel it reads
            k_last = geo.kernel[-1]
            read = min(plan.pixels * k_last, (plan.pixels - 1) * kdesc.strides[-1]
                       + (k_last - 1) * kdesc.dilations[-1] + 1)
            loads = (plan.vectors * k_last + read) / (plan.accumulators * k_last)
        else:  # per tap: the tile's input vectors, a weight broadcast per channel
            loads = (plan.rows * plan.vectors + plan.mb) / plan.accumulators
        rate = 1.0
    compute = rate * vec * waste * narrow * (1 + costs.load * loads)
    stores = (costs.scatter if plan.pixels else costs.store) \
        * desc.output_tensor.element_count / host.lanes
    return _share(compute + copy + stores, items, threads) + pool + costs.blocked_call


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
