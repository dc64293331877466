"""Convolution on CUDA: two kernels over the same semantics.

``direct``: each thread computes one output position for a block of up to four output channels
of one group (each input tap read once for all of them, from registers); BACKWARD in gather form
(no atomics).

``tiled``: implicit GEMM. Per group, the output is a (pixels x channels) matrix, the product of
the gathered input (pixels x C/g*taps: zero outside the input, and for BACKWARD wherever the
stride test rejects the tap, the gather form of the adjoint) and the filter (C/g*taps x
channels). A block of 256 threads computes a BM x BN tile of it: each step of the reduction, the
threads load a BK-deep slab of both factors into shared memory once (consecutive threads read
consecutive pixels and consecutive filter taps: coalesced), synchronise, and each thread
accumulates a register block of RM pixels x RN channels from shared memory, so every value
loaded from global memory is used BN (input) or BM (filter) times. Bias and the fused activation
are applied to the register block as it is stored; float16 is loaded as half, computed in
float32. Blocks take tiles in a grid-stride loop, so any grid is correct.

``compile_operator(desc, "cuda", algorithm="direct"|"tiled")`` forces one; by default the tiled
kernel runs where a group has at least 4 output channels and a reduction of at least 16 terms
(:func:`choose_algorithm`).
"""
from __future__ import annotations

import math
from contextlib import ExitStack
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
from ._emit import CudaKernel, emit_reduction, half_load, header, make_key
from ._planes import LAUNCH_BOUNDS as PLANE_BOUNDS
from ._planes import plane_kernel, plane_plan, shared_taps

THREADS = 256  # a tiled block
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
    plan = tile_plan(d)
    nd = d.input_tensor.rank - 2
    forward = d.direction == ConvolutionDirection.FORWARD
    flip = d.mode == ConvolutionMode.CONVOLUTION
    g = d.group_count
    cg, mg = d.input_tensor.sizes[1] // g, d.output_tensor.sizes[1] // g
    isz, osz, ksz = d.input_tensor.sizes[2:], d.output_tensor.sizes[2:], d.filter_tensor.sizes[2:]
    pixels = d.output_tensor.sizes[0] * math.prod(osz)
    reduction = cg * math.prod(ksz)
    tiles_p, tiles_m = -(-pixels // plan.bm), -(-mg // plan.bn)
    acc = accumulator(d.input_tensor.data_type).name
    load = half_load(d.input_tensor.data_type)
    rows_a = THREADS // plan.bm  # input slab rows loaded at once (a tile spans <= 256 pixels)
    o = [f"o{i}" for i in range(nd)]
    k = [f"k{i}" for i in range(nd)]
    args = "x, w, b, y" if d.bias_tensor is not None else "x, w, y"

    w = SourceWriter()
    header(w, key)
    w(f"# implicit GEMM: tiles of {plan.bm} pixels x {plan.bn} channels, {plan.rm} x {plan.rn} a "
      f"thread, {THREADS} threads, reduction {reduction} in slabs of {BK}")
    w("@cuda.jit(cache=__dml_disk_cache__)")
    with w.block(f"def kernel({args}):"):
        w(f"As = cuda.shared.array(({BK}, {plan.bm}), numba.{acc})")
        w(f"Bs = cuda.shared.array(({BK}, {plan.bn}), numba.{acc})")
        w("t = cuda.threadIdx.x")
        w(f"tx = t % {plan.tx}")
        w(f"ty = t // {plan.tx}")
        # the pixel whose input this thread gathers (the same for every slab of a tile)
        w(f"pa = t % {plan.bm}")
        w(f"ka = t // {plan.bm}")
        with w.block(f"for tile in range(cuda.blockIdx.x, {tiles_p * tiles_m * g}, "
                     "cuda.gridDim.x):"):
            decompose(w, "tile", ["g", "tm", "tp"], [g, tiles_m, tiles_p])
            w(f"p = tp * {plan.bm} + pa")
            w(f"pin = p < {pixels}")
            with w.block("if not pin:"):
                w("p = 0")
            decompose(w, "p", ["n"] + o, [d.output_tensor.sizes[0], *osz])
            for i in range(nd):  # the pixel's window origin
                if forward:
                    w(f"b{i} = {affine([(o[i], d.strides[i])], -d.start_padding[i])}")
                else:
                    w(f"b{i} = {affine([(o[i], 1)], d.start_padding[i])}")
            for i in range(plan.rm):
                for j in range(plan.rn):
                    w(f"acc_{i}_{j} = numba.{acc}(0.0)")
            with w.block(f"for r0 in range(0, {reduction}, {BK}):"):
                _emit_load_a(w, d, rows_a, forward, cg, isz, ksz, reduction, load, acc, o, k)
                _emit_load_b(w, d, plan, forward, flip, cg, mg, ksz, reduction, load, acc, k)
                w("cuda.syncthreads()")
                with w.block(f"for kk in range({BK}):"):
                    for i in range(plan.rm):
                        w(f"xa{i} = As[kk, tx + {i * plan.tx}]" if i else "xa0 = As[kk, tx]")
                    for j in range(plan.rn):
                        w(f"wb{j} = Bs[kk, ty + {j * plan.ty}]" if j else "wb0 = Bs[kk, ty]")
                    for i in range(plan.rm):
                        for j in range(plan.rn):
                            w(f"acc_{i}_{j} += xa{i} * wb{j}")
                w("cuda.syncthreads()")
            # the register block: pixels tx + i*TX, channels ty + j*TY of the tile
            for i in range(plan.rm):
                w(f"q = tp * {plan.bm} + tx + {i * plan.tx}")
                with w.block(f"if q < {pixels}:"):
                    decompose(w, "q", ["n"] + o, [d.output_tensor.sizes[0], *osz])
                    for j in range(plan.rn):
                        w(f"mm = tm * {plan.bn} + ty + {j * plan.ty}")
                        with w.block(f"if mm < {mg}:"):
                            w(f"m = g * {mg} + mm")
                            conv_epilogue(w, d, f"acc_{i}_{j}", f"y[{index('n', 'm', *o)}]",
                                          load=load)
    return w.text()


def _emit_load_a(w, d, rows_a, forward, cg, isz, ksz, reduction, load, acc, o, k):
    """This thread's share of the input slab: rows ka, ka + 256/BM, ... of column pa, zero
    outside the input."""
    nd = len(o)
    for row in [f"ka + {r}" if r else "ka" for r in range(0, BK, rows_a)]:
        w(f"r = r0 + {row}")
        w(f"v = numba.{acc}(0.0)")
        with w.block(f"if pin and r < {reduction}:"):
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
            with w.block(f"if {' and '.join(conds) or 'True'}:"):
                w(f"v = {load('x[' + index('n', f'g * {cg} + c', *coords) + ']')}")
        w(f"As[{row}, pa] = v")


def _emit_load_b(w, d, plan, forward, flip, cg, mg, ksz, reduction, load, acc, k):
    """The filter slab: element e of BK x BN, consecutive threads along the reduction (the
    filter's contiguous taps), zero past the reduction or the group's channels."""
    with w.block(f"for e in range(t, {BK * plan.bn}, {THREADS}):"):
        w(f"kb = e % {BK}")
        w(f"nb = e // {BK}")
        w("r = r0 + kb")
        w(f"mm = tm * {plan.bn} + nb")
        w(f"v = numba.{acc}(0.0)")
        with w.block(f"if r < {reduction} and mm < {mg}:"):
            decompose(w, "r", ["c"] + k, [cg, *ksz])
            taps = [f"{ksz[i] - 1} - {k[i]}" if flip else k[i] for i in range(len(k))]
            widx = (index(f"g * {mg} + mm", "c", *taps) if forward
                    else index(f"g * {cg} + c", "mm", *taps))
            w(f"v = {load('w[' + widx + ']')}")
        w("Bs[kb, nb] = v")


ALGORITHMS = {"direct": emit_direct, "tiled": emit_tiled}


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
        plan = tile_plan(desc)
        pixels = desc.output_tensor.sizes[0] * math.prod(desc.output_tensor.sizes[2:])
        mg = desc.output_tensor.sizes[1] // desc.group_count
        tiles = -(-pixels // plan.bm) * -(-mg // plan.bn) * desc.group_count
        return CudaKernel(key, emit_tiled(key), [(dt, rank)] * n_args, tiles, block=THREADS)
    return CudaKernel(key, emit_direct(key), [(dt, rank)] * n_args,
                      desc.output_tensor.element_count // channel_block(desc))
