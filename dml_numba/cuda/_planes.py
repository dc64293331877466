"""Spatial tiles in shared memory for the reductions that read one input channel per output
channel (LP pooling, depthwise convolution): a block of 256 threads takes a tile of one (n,
channel) plane, 256 outputs (32 along the last axis, 8 along the one before; along the only axis
in 1-D), loads the input region those outputs read (the tile plus its halo, zero outside the
input) into shared memory once, coalesced, and each thread reduces its window from there: an
input element is read from global memory about once instead of once per window covering it.
Blocks take tiles in a grid-stride loop, so any grid is correct.

The operator supplies the per-output body; this module owns the tiling, the region load and the
window's taps in shared memory.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass

from .._codegen import SourceWriter, affine, decompose, index
from .._gather import AxisMap, emit_map
from ._emit import header, shared_memory_decorator

THREADS = 256
#: launch bounds: 3 blocks of 256 resident on an SM, so at most 80 registers (84-120 without
#: the bound, 25% occupancy; at 4 blocks, 64 registers, the depthwise kernel spills)
LAUNCH_BOUNDS = (THREADS, 3)
SHARED_LIMIT = 48 * 1024  # static shared memory a block may declare


@dataclass(frozen=True)
class PlanePlan:
    patch: tuple  # outputs a block along each spatial axis (their product is 256)
    region: tuple  # input elements the patch reads along each spatial axis
    counts: tuple  # patches along each spatial axis

    @property
    def jobs(self) -> int:
        return math.prod(self.counts)


def plane_plan(out_sizes, kernel, strides, dilations, itemsize) -> PlanePlan | None:
    """The patch for these spatial sizes, or None where shared memory does not pay: windows that
    do not overlap (every input read once anyway), or a region over the shared-memory limit."""
    if all((k - 1) * d + 1 <= s for k, d, s in zip(kernel, dilations, strides)):
        return None
    nd = len(out_sizes)
    last = min(32, 1 << max(0, math.ceil(math.log2(out_sizes[-1]))))
    patch = [1] * nd
    patch[-1] = last if nd > 1 else THREADS
    if nd > 1:
        patch[-2] = THREADS // last
    region = tuple((t - 1) * s + (k - 1) * d + 1
                   for t, s, k, d in zip(patch, strides, kernel, dilations))
    if math.prod(region) * itemsize > SHARED_LIMIT:
        return None
    counts = tuple(-(-o // t) for o, t in zip(out_sizes, patch))
    return PlanePlan(tuple(patch), region, counts)


@contextmanager
def plane_kernel(key, args: str, plan: PlanePlan, *, channels: int, in_channel: str,
                 pads, strides, acc: str, load, fold=None):
    """The kernel around one output: yields ``(w, o)`` inside ``if`` the output ``(n, c, o...)``
    exists, with the patch's input region in shared ``S`` (flat, row-major over
    ``plan.region``). ``in_channel``: the input channel of output channel ``c``. ``fold``:
    ``(kind, extent)``, the padding is not zeros but the input read through that AxisMap kind
    ('clamp', 'reflect', 'symmetric', 'wrap': a padding operator in front, folded) up to the
    padded ``extent``; zeros beyond it (where only a patch's overhang reads)."""
    d = key.desc
    sizes = d.input_tensor.sizes
    nd = len(plan.patch)
    o = [f"o{i}" for i in range(nd)]
    w = SourceWriter()
    header(w, key)
    w(f"# plane patches of {' x '.join(map(str, plan.patch))} outputs of one plane, input region "
      f"{' x '.join(map(str, plan.region))} in shared memory, {THREADS} threads")
    shared_memory_decorator(w, LAUNCH_BOUNDS)
    with w.block(f"def kernel({args}):"):
        total = math.prod(plan.region)
        w(f"S = cuda.shared.array({total}, numba.{acc})")
        w("t = cuda.threadIdx.x")
        decompose(w, "t", [f"l{i}" for i in range(nd)], plan.patch)
        with w.block(f"for job in range(cuda.blockIdx.x, "
                     f"{d.output_tensor.sizes[0] * channels * plan.jobs}, cuda.gridDim.x):"):
            decompose(w, "job", ["n", "c"] + [f"u{i}" for i in range(nd)],
                      [d.output_tensor.sizes[0], channels, *plan.counts])
            w(f"ci = {in_channel}")
            with w.block(f"for e in range(t, {total}, {THREADS}):"):
                decompose(w, "e", [f"r{i}" for i in range(nd)], plan.region)
                for i in range(nd):
                    w(f"{'p' if fold else 'a'}{i} = " + affine(
                        [(f"u{i}", plan.patch[i] * strides[i]), (f"r{i}", 1)],
                        0 if fold else -pads[i]))
                w(f"v = numba.{acc}(0.0)")
                if fold:  # the padded coordinate p read through the padding's map
                    kind, extent = fold
                    for i in range(nd):
                        emit_map(w, AxisMap(kind, sizes[2 + i], extent[i], pads[i]), f"p{i}",
                                 f"a{i}")
                    inside = " and ".join(f"p{i} < {extent[i]}" for i in range(nd))
                else:
                    inside = " and ".join(f"a{i} >= 0 and a{i} < {sizes[2 + i]}"
                                          for i in range(nd))
                with w.block(f"if {inside}:"):
                    w(f"v = {load('x[' + index('n', 'ci', *[f'a{i}' for i in range(nd)]) + ']')}")
                w("S[e] = v")
            w("cuda.syncthreads()")
            for i in range(nd):
                w(f"o{i} = " + affine([(f"u{i}", plan.patch[i]), (f"l{i}", 1)]))
            exists = " and ".join(f"o{i} < {n}" for i, n in enumerate(d.output_tensor.sizes[2:]))
            with w.block(f"if {exists}:"):
                yield w, o
            w("cuda.syncthreads()")


def shared_taps(w: SourceWriter, stack, plan: PlanePlan, kernel, strides, dilations) -> str:
    """Open loops ``k0, k1, ...`` over the window of this thread's output (``l0, l1, ...`` in
    the patch); returns the shared-memory read of the tap (padding is already in ``S``)."""
    nd = len(plan.patch)
    flat = []
    stride = 1
    for i in reversed(range(nd)):
        flat.append((f"l{i}", strides[i] * stride))
        flat.append((f"k{i}", dilations[i] * stride))
        stride *= plan.region[i]
    for i in range(nd):
        stack.enter_context(w.block(f"for k{i} in range({kernel[i]}):"))
    return f"S[{affine(list(reversed(flat)))}]"
