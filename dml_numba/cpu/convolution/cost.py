"""The cost model of the CPU convolution kernels on a host: its constants (:class:`Costs`, in
units of one core's vector multiply-add) and the share of work the busiest thread gets. Each
variant's estimate (:mod:`.variants`: ``Variant.estimate``, and ``variants.estimate`` by
algorithm and plan) says what its kernel costs from the descriptor, its plan and the host's
vector width and thread count. The model makes the static choice (``DML_NUMBA_TUNE=off``:
:func:`~.choice.choose_algorithm`, the cheapest estimate) and ranks the quick tuner's
candidates; measurement decides where the tuner runs.

The work is a descriptor's multiply-adds over the host's lanes, shared out over the threads by
the kernel's parallel loop (its items: a thread that gets one item more than another sets the
pace), plus waking the thread pool where the kernel is parallel. The constants (:data:`COSTS`)
were fitted to every candidate's time on the crossover grid by ``python3 -m
benchmarks.fit_cost``; ``benchmarks/HISTORY.md`` gives the fit and how the choice it makes
compares with the best candidate.
"""
from __future__ import annotations

import dataclasses


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
    transpose: float = 4.0  # ... a channels tile's (transposed in registers, a row a plane)
    pool: float = 2000.0  # waking the thread pool for one parallel call
    # a call's fixed cost on the host side (arguments, buffers), per algorithm
    direct_call: float = 2000.0
    blocked_call: float = 2000.0
    gemm_call: float = 2000.0
    #: the gemm algorithm's BLAS set to one thread and back around its product (two libraries
    #: through threadpoolctl, ~11 us) and BLAS's own start in the calling thread, whatever
    #: Numba's thread count (BLAS's pool has the machine's threads: with NUMBA_NUM_THREADS=1
    #: MobileNetV2's projections on BLAS made the network 1.27x slower than on the tiles); not
    #: fitted: measured in a network, where the grid's shapes run alone (ResNet-18's 1x1
    #: stride-2 layers took 0.09-0.14 ms more in the network than alone, ~1.2 M of these units
    #: at their rate)
    blas_switch: float = 0.0
    #: Winograd's F(4x4, 3x3) (``winograd``): its products per vector multiply-add, per
    #: element of the products' operands and results, per vector of the transformed input and
    #: output (the transforms run in the host's vectors), per row of tiles a channel (the
    #: transforms' fixed cost), per filter element (the filter's transform, made each call
    #: unless the filter is a model's own), per element of the input read and the output
    #: written (planes beyond the caches); not fitted with the others: measured on their own
    #: (``benchmarks/HISTORY.md``). The moves and transforms fitted again (from 2.65 and 2.7 an
    #: element, on an 8-lane host) once the products ran on the blocked tiles (their filter
    #: packed once, no longer by BLAS each call) and the positions' rows were kept apart in the
    #: caches: 29 layers of the three CNNs alone on a 16-lane host, the 8-lane host's
    #: measurements still chosen right (``tests/data/crossover.json``), then the networks
    #: (ResNet-18 at batch 1 0.96x the time, the U-Net at batch 8 0.98x, the rest level)
    winograd: float = 0.95
    winograd_move: float = 0.5
    winograd_transform: float = 32.0
    winograd_row: float = 100.0
    winograd_filter: float = 40.0
    winograd_io: float = 3.8


#: fitted on the crossover grid (see the module's docstring)
COSTS = Costs(load=0.3, plane=0.17, direct=3.5, scalar=7.1, loop=3.0, row=12.0, gemm=0.7,
              column=16.0, call=38000.0, copy=3.6, gather=1.0, store=16.0, transpose=18.0,
              pool=350.0, direct_call=36.0, blocked_call=41000.0,
              gemm_call=160000.0, blas_switch=1200000.0)


def share(work: float, items: int, threads: int) -> float:
    """``work`` split into ``items`` equal parts over ``threads``: the busiest thread's part."""
    if threads <= 1 or items <= 1:
        return work
    return work * -(-items // threads) / items
