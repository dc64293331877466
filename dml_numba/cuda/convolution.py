"""Convolution on CUDA: two kernels over the same semantics.

``direct``: each thread computes one output position for a block of up to four output channels
of one group (each input tap read once for all of them, from registers); BACKWARD in gather form
(no atomics).

``tiled``, in shared memory:

* implicit GEMM for dense and grouped convolution: per group, the output is a (pixels x
  channels) matrix, the product of the gathered input (pixels x C/g*taps, zero outside the
  input) and the filter (C/g*taps x channels). A block of 256 threads computes a BM x BN tile of
  it: each step of the reduction, the threads load a BK-deep slab of both factors into shared
  memory once (consecutive threads read consecutive pixels and consecutive filter taps:
  coalesced), synchronise, and each thread accumulates a register block of RM pixels x RN
  channels from shared memory, so every value loaded from global memory is used BN (input) or
  BM (filter) times. BACKWARD is the adjoint in gather form; with strides, one GEMM per output
  phase (:func:`phases_for`), so that only the taps that reach a phase are multiplied;
* plane patches for depthwise convolution (``_planes``): 256 outputs of one channel a block,
  their input region loaded into shared memory once.

Bias and the fused activation are applied as outputs are stored; float16 is loaded as half,
computed in float32. Blocks take tiles in a grid-stride loop, so any grid is correct.

``compile_operator(desc, "cuda", algorithm="direct"|"tiled")`` forces one; by default the tiled
kernels run where their reuse pays (:func:`choose_algorithm`).
"""
from __future__ import annotations

import math
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass

from .._codegen import SourceWriter, affine, decompose, index
from .._dtypes import accumulator
from .._registry import register
from ..elements.convolution import channel_block, conv_element, conv_epilogue
from ..ops.convolution import (
    ConvolutionDirection,
    ConvolutionMode,
    ConvolutionOperatorDesc,
)
from ._emit import (
    CudaKernel,
    emit_reduction,
    half_load,
    header,
    make_key,
    shared_memory_decorator,
)
from ._planes import LAUNCH_BOUNDS as PLANE_BOUNDS
from ._planes import plane_kernel, plane_plan, shared_taps

THREADS = 256  # a tiled block
#: launch bounds of the implicit GEMMs: 2 blocks of 256 an SM, at most 128 registers (the phased
#: transposed kernel takes 130 without, which leaves room for one block)
GEMM_BOUNDS = (THREADS, 2)
BK = 8  # reduction depth of one shared-memory slab


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

    def shared_bytes(self, itemsize: int) -> int:
        return BK * (self.bm + self.bn) * itemsize


def tile_plan(desc) -> TilePlan:
    """RN from the group's channels (4, 2 or 1 dividing them), TY threads across channels up to
    16 (a power of two covering the group's channels), the rest across pixels, RM so that a tile
    spans at most 256 pixels."""
    mg = desc.output_tensor.sizes[1] // desc.group_count
    rn = channel_block(desc)
    ty = min(16, 1 << max(0, math.ceil(math.log2(-(-mg // rn)))))
    tx = THREADS // ty
    rm = max(1, min(4, 256 // tx))
    return TilePlan(rm, rn, tx, ty)


def plane_plan_for(desc):
    """Spatial plane tiles (``_planes``) for a forward convolution with one input channel a
    group (depthwise), or None."""
    if desc.direction != ConvolutionDirection.FORWARD or desc.input_tensor.sizes[1] != \
            desc.group_count:
        return None
    return plane_plan(desc.output_tensor.sizes[2:], desc.input_tensor.sizes[2:],
                      desc.filter_tensor.sizes[2:], desc.strides, desc.dilations,
                      accumulator(desc.input_tensor.data_type).itemsize)


def choose_algorithm(desc) -> str:
    """``tiled`` where a tile's reuse pays: a group with at least 4 output channels and a
    reduction of at least 16 terms (implicit GEMM), or depthwise with overlapping windows
    (plane tiles); else ``direct`` (tiny filters, non-overlapping depthwise windows)."""
    cg = desc.input_tensor.sizes[1] // desc.group_count
    mg = desc.output_tensor.sizes[1] // desc.group_count
    taps = math.prod(desc.filter_tensor.sizes[2:])
    if plane_plan_for(desc) is not None:
        return "tiled"
    return "tiled" if mg >= 4 and cg * taps >= 16 else "direct"


def emit_direct(key) -> str:
    args = "x, w, b, y" if key.desc.bias_tensor is not None else "x, w, y"
    return emit_reduction(key, args, "m", conv_element, channels=channel_block(key.desc))


def emit_planes(key) -> str:
    """Depthwise: the plane of input channel ``c // (C_out/g)`` in shared memory, each thread
    one output of channel ``c``."""
    d = key.desc
    plan = plane_plan_for(d)
    mg = d.output_tensor.sizes[1] // d.group_count
    ksz = d.filter_tensor.sizes[2:]
    load = half_load(d.input_tensor.data_type)
    acc = accumulator(d.input_tensor.data_type).name
    args = "x, w, b, y" if d.bias_tensor is not None else "x, w, y"
    flip = d.mode == ConvolutionMode.CONVOLUTION
    with plane_kernel(key, args, plan, channels=d.output_tensor.sizes[1],
                      in_channel=f"c // {mg}" if mg > 1 else "c", pads=d.start_padding,
                      strides=d.strides, acc=acc, load=load) as (w, o):
        w(f"acc = numba.{acc}(0.0)")
        with ExitStack() as stack:
            tap = shared_taps(w, stack, plan, ksz, d.strides, d.dilations)
            taps = [f"{k - 1} - k{i}" if flip else f"k{i}" for i, k in enumerate(ksz)]
            w(f"acc += {tap} * {load('w[' + index('c', 0, *taps) + ']')}")
        conv_epilogue(w, d, "acc", f"y[{index('n', 'c', *o)}]", load=load, channel="c")
    return w.text()


def emit_tiled(key) -> str:
    d = key.desc
    if plane_plan_for(d) is not None:
        return emit_planes(key)
    if phases_for(d) is not None:
        return emit_tiled_phases(key)
    plan = tile_plan(d)
    grid = gemm_grid(d, plan)
    nd = d.input_tensor.rank - 2
    forward = d.direction == ConvolutionDirection.FORWARD
    g = d.group_count
    cg = d.input_tensor.sizes[1] // g
    isz, osz, ksz = d.input_tensor.sizes[2:], d.output_tensor.sizes[2:], d.filter_tensor.sizes[2:]
    pixels, reduction, tiles_m, tiles_p = grid.pixels, grid.reduction, grid.tiles_m, grid.tiles_p
    acc = accumulator(d.input_tensor.data_type).name
    load = half_load(d.input_tensor.data_type)
    o = [f"o{i}" for i in range(nd)]
    k = [f"k{i}" for i in range(nd)]

    w = SourceWriter()
    header(w, key)
    w(f"# implicit GEMM: tiles of {plan.bm} pixels x {plan.bn} channels, {plan.rm} x {plan.rn} a "
      f"thread, {THREADS} threads, reduction {reduction} in slabs of {BK}")
    with _kernel_head(w, d, plan, acc), \
            w.block(f"for tile in range(cuda.blockIdx.x, {grid.tiles}, cuda.gridDim.x):"):
        decompose(w, "tile", ["g", "tm", "tp"], [g, tiles_m, tiles_p])
        _emit_load_pixel(w, plan, str(pixels))
        decompose(w, "p", ["n"] + o, [d.output_tensor.sizes[0], *osz])
        for i in range(nd):  # the pixel's window origin
            if forward:
                w(f"b{i} = {affine([(o[i], d.strides[i])], -d.start_padding[i])}")
            else:
                w(f"b{i} = {affine([(o[i], 1)], d.start_padding[i])}")

        def load_a():
            decompose(w, "r", ["c"] + k, [cg, *ksz])
            conds, coords = [], []
            for i in range(nd):
                s = 1 if forward else d.strides[i]
                w(f"a{i} = " + affine([(f"b{i}", 1), (k[i], d.dilations[i] if forward
                                                     else -d.dilations[i])]))
                # BACKWARD: the tap is real where o + pad - k*dilation = a*stride, 0 <= a < size
                conds.append(f"a{i} >= 0" + (f" and a{i} % {s} == 0" if s != 1 else "")
                             + f" and a{i} < {isz[i] * s}")
                coords.append(f"a{i} // {s}" if s != 1 else f"a{i}")
            return " and ".join(conds), coords

        def load_b():
            decompose(w, "r", ["c"] + k, [cg, *ksz])
            return _filter_taps(d, k), ""

        _emit_slabs(w, d, plan, str(reduction), acc, load, load_a, load_b)

        def output(q):
            decompose(w, q, ["n"] + o, [d.output_tensor.sizes[0], *osz])
            return o, ""

        _emit_store(w, d, plan, str(pixels), output, load)
    return w.text()


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
    implicit GEMM runs only the taps that reach it."""
    d = desc
    if d.direction != ConvolutionDirection.BACKWARD or all(s == 1 for s in d.strides):
        return None
    axes = []
    for s, dil, kk, pad, n_out in zip(d.strides, d.dilations, d.filter_tensor.sizes[2:],
                                       d.start_padding, d.output_tensor.sizes[2:]):
        step = s // math.gcd(s, dil)
        k0, count, o0, outputs, base = [], [], [], [], []
        for f in range(s):
            taps = [k for k in range(kk) if (k * dil - f) % s == 0]
            first = (f - pad) % s
            k0.append(taps[0] if taps else 0)
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


def emit_tiled_phases(key) -> str:
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
    g = d.group_count
    cg = d.input_tensor.sizes[1] // g
    isz = d.input_tensor.sizes[2:]
    grid = gemm_grid(d, plan)
    outputs, taps, pixels, reduction = grid.outputs, grid.taps, grid.pixels, grid.reduction
    tiles_m, tiles_p = grid.tiles_m, grid.tiles_p
    acc = accumulator(d.input_tensor.data_type).name
    load = half_load(d.input_tensor.data_type)
    f = [f"f{i}" for i in range(nd)]
    j = [f"j{i}" for i in range(nd)]
    tp_ = [f"t{i}_" for i in range(nd)]

    w = SourceWriter()
    header(w, key)
    w("# per output phase along each axis: first tap, taps, first output, outputs, input origin")
    for i, ax in enumerate(axes):
        for name, values in (("K0", ax.k0), ("NK", ax.count), ("O0", ax.o0),
                             ("NO", ax.outputs), ("B0", ax.base)):
            w(f"{name}_{i} = {values!r}")
    w()
    w()
    w(f"# implicit GEMM per phase of the strides {d.strides}: tiles of {plan.bm} pixels x "
      f"{plan.bn} channels, {plan.rm} x {plan.rn} a thread, {THREADS} threads, a phase's "
      f"{' x '.join(map(str, outputs))} outputs and {cg} x {' x '.join(map(str, taps))} "
      f"reduction terms at most, in slabs of {BK}")
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

        def terms():
            decompose(w, "r", ["c"] + tp_, [cg, *taps])
            return [f"{tp_[i]} < NK_{i}[{f[i]}]" for i in range(nd)]

        def load_a():
            conds = terms()
            for i in range(nd):
                w(f"a{i} = " + affine([(f"b{i}", 1), (tp_[i], -axes[i].dt)]))
                conds.append(f"a{i} >= 0 and a{i} < {isz[i]}")
            return " and ".join(conds), [f"a{i}" for i in range(nd)]

        def load_b():
            conds = terms()
            for i in range(nd):
                w(f"k{i} = " + affine([(f"K0_{i}[{f[i]}]", 1), (tp_[i], axes[i].step)]))
            return _filter_taps(d, [f"k{i}" for i in range(nd)]), " and ".join(conds)

        _emit_slabs(w, d, plan, str(reduction), acc, load, load_a, load_b)

        def output(q):
            decompose(w, q, ["n"] + j, [d.output_tensor.sizes[0], *outputs])
            for i in range(nd):
                w(f"o{i} = " + affine([(f"O0_{i}[{f[i]}]", 1), (j[i], d.strides[i])]))
            return [f"o{i}" for i in range(nd)], " and ".join(
                f"{j[i]} < NO_{i}[{f[i]}]" for i in range(nd))

        _emit_store(w, d, plan, str(pixels), output, load)
    return w.text()


@contextmanager
def _kernel_head(w, d, plan, acc):
    """``def kernel``, the two shared slabs and each thread's place in the tile."""
    shared_memory_decorator(w, GEMM_BOUNDS)
    with w.block(f"def kernel({'x, w, b, y' if d.bias_tensor is not None else 'x, w, y'}):"):
        w(f"As = cuda.shared.array(({BK}, {plan.bm}), numba.{acc})")
        w(f"Bs = cuda.shared.array(({BK}, {plan.bn}), numba.{acc})")
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
    cg, mg = (d.input_tensor.sizes[1] // d.group_count,
              d.output_tensor.sizes[1] // d.group_count)
    taps = [f"{ksz[i] - 1} - {k[i]}" if d.mode == ConvolutionMode.CONVOLUTION else k[i]
            for i in range(len(k))]
    if d.direction == ConvolutionDirection.FORWARD:
        return "w[" + index(f"g * {mg} + mm", "c", *taps) + "]"
    return "w[" + index(f"g * {cg} + c", "mm", *taps) + "]"


def _emit_slabs(w, d, plan, reduction: str, acc, load, load_a, load_b) -> None:
    """Zeroed accumulators, then per slab of BK reduction terms: this thread's share of both
    factors into shared memory (``load_a()`` decomposes ``r`` and returns the input's validity
    and coordinates, ``load_b()`` the filter element and its validity, "" for always), and the
    register block's products."""
    cg = d.input_tensor.sizes[1] // d.group_count
    mg = d.output_tensor.sizes[1] // d.group_count
    for i in range(plan.rm):
        for jj in range(plan.rn):
            w(f"acc_{i}_{jj} = numba.{acc}(0.0)")
    with w.block(f"for r0 in range(0, {reduction}, {BK}):"):
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


def _emit_store(w, d, plan, pixels: str, output, load) -> None:
    """The register block: pixels tx + i*TX, channels ty + j*TY of the tile, with bias and the
    fused activation; ``output(q)`` decomposes pixel ``q`` and returns its output coordinates
    and the condition that it exists ("" for always)."""
    mg = d.output_tensor.sizes[1] // d.group_count
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
                    conv_epilogue(w, d, f"acc_{i}_{jj}", f"y[{index('n', 'm', *o)}]",
                                  load=load)


@register(ConvolutionOperatorDesc, "cuda", options={"algorithm": (None, "direct", "tiled")})
def lower(desc, options):
    algorithm = options.get("algorithm") or choose_algorithm(desc)
    key = make_key(desc, options, "tiled" if algorithm == "tiled" else "main")
    dt, rank = desc.input_tensor.dtype, desc.input_tensor.rank
    n_args = 4 if desc.bias_tensor is not None else 3
    planes = plane_plan_for(desc)
    if algorithm == "tiled" and planes is not None:
        tiles = desc.output_tensor.sizes[0] * desc.output_tensor.sizes[1] * planes.jobs
        return CudaKernel(key, emit_planes(key), [(dt, rank)] * n_args, tiles, block=THREADS,
                          launch_bounds=PLANE_BOUNDS)
    if algorithm == "tiled":
        tiles = gemm_grid(desc, tile_plan(desc)).tiles
        return CudaKernel(key, emit_tiled(key), [(dt, rank)] * n_args, tiles, block=THREADS,
                          launch_bounds=GEMM_BOUNDS)
    return CudaKernel(key, emit_direct(key), [(dt, rank)] * n_args,
                      desc.output_tensor.element_count // channel_block(desc))
