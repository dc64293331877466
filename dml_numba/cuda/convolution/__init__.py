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
  phase (:func:`~.implicit_gemm.phases_for`), so that only the taps that reach a phase are
  multiplied. Where the tiles are too few to fill the GPU (deep channels on a small image),
  the reduction is split into parts, a block each (:func:`~.implicit_gemm.split_for`); the
  last block of a tile adds the parts in a fixed order and stores it;
* plane patches for depthwise convolution (``_planes``): 256 outputs of one channel a block,
  their input region loaded into shared memory once.

Bias and the fused activation are applied as outputs are stored; float16 is loaded as half,
computed in float32. Blocks take tiles in a grid-stride loop, so any grid is correct.

``compile_operator(desc, "cuda", algorithm="direct"|"tiled")`` forces one; by default the tiled
kernels run where their reuse pays (:func:`choose_algorithm`).
"""
from __future__ import annotations

import dataclasses
from contextlib import ExitStack

from ..._codegen import index
from ..._dtypes import accumulator
from ..._errors import ValidationError
from ..._registry import register
from ...elements.convolution import channel_block, conv_element, conv_epilogue
from ...ops._base import Fold
from ...ops.convolution import (
    FOLDS,
    ConvolutionDirection,
    ConvolutionMode,
    ConvolutionOperatorDesc,
    geometry,
)
from .._emit import CudaKernel, emit_reduction, half_load, make_key
from .._planes import LAUNCH_BOUNDS as PLANE_BOUNDS
from .._planes import plane_kernel, plane_plan, shared_taps
from .implicit_gemm import GEMM_BOUNDS, THREADS, gemm_grid, split_for, tile_plan
from .implicit_gemm import emit as emit_implicit_gemm


def plane_plan_for(desc):
    """Spatial plane tiles (``_planes``) for a forward convolution with one input channel a
    group (depthwise), or None."""
    if not geometry(desc).depthwise:
        return None
    return plane_plan(desc.output_tensor.sizes[2:], desc.filter_tensor.sizes[2:], desc.strides,
                      desc.dilations, accumulator(desc.input_tensor.data_type).itemsize)


def choose_algorithm(desc) -> str:
    """``tiled`` where a tile's reuse pays: a group with at least 4 output channels and a
    reduction of at least 16 terms (implicit GEMM), or depthwise with overlapping windows
    (plane tiles); else ``direct`` (tiny filters, non-overlapping depthwise windows)."""
    geo = geometry(desc)
    if plane_plan_for(desc) is not None:
        return "tiled"
    return "tiled" if geo.out_channels >= 4 and geo.in_channels * geo.taps >= 16 else "direct"


def _fold(key):
    """``(kind, padded extent)`` of the key's folded padding (its plan a
    :class:`~dml_numba.ops._base.Fold`), or None: zeros."""
    return (key.plan.kind, geometry(key.desc).padded_sizes()) if key.plan is not None else None


def emit_direct(key) -> str:
    """One thread an output element (or a few channels of one group), every tap gathered; a
    folded padding (the key's plan a :class:`~dml_numba.ops._base.Fold`) read through its
    map."""
    args = "x, w, b, y" if key.desc.bias_tensor is not None else "x, w, y"
    fold = _fold(key)
    return emit_reduction(key, args, "m", lambda w, d, o, **kw: conv_element(w, d, o, fold=fold,
                                                                             **kw),
                          channels=channel_block(key.desc))


def emit_planes(key) -> str:
    """Depthwise: the plane of input channel ``c // (C_out/g)`` in shared memory, each thread
    one output of channel ``c`` (the padding read through a folded padding's map where the key's
    plan is a :class:`~dml_numba.ops._base.Fold`)."""
    d = key.desc
    fold = _fold(key)
    plan = plane_plan_for(d)
    mg = geometry(d).out_channels
    ksz = d.filter_tensor.sizes[2:]
    load = half_load(d.input_tensor.data_type)
    acc = accumulator(d.input_tensor.data_type).name
    args = "x, w, b, y" if d.bias_tensor is not None else "x, w, y"
    flip = d.mode == ConvolutionMode.CONVOLUTION
    with plane_kernel(key, args, plan, channels=d.output_tensor.sizes[1],
                      in_channel=f"c // {mg}" if mg > 1 else "c", pads=d.start_padding,
                      strides=d.strides, acc=acc, load=load, fold=fold) as (w, o):
        w(f"acc = numba.{acc}(0.0)")
        with ExitStack() as stack:
            tap = shared_taps(w, stack, plan, ksz, d.strides, d.dilations)
            taps = [f"{k - 1} - k{i}" if flip else f"k{i}" for i, k in enumerate(ksz)]
            w(f"acc += {tap} * {load('w[' + index('c', 0, *taps) + ']')}")
        conv_epilogue(w, d, "acc", f"y[{index('n', 'c', *o)}]", load=load, channel="c")
    return w.text()


def emit_tiled(key) -> str:
    """The tiled kernel: plane patches for depthwise, else the implicit GEMM."""
    if plane_plan_for(key.desc) is not None:
        return emit_planes(key)
    return emit_implicit_gemm(key)


@register(ConvolutionOperatorDesc, "cuda", options={"algorithm": (None, "direct", "tiled"),
                                                    "input_padding": (None,) + tuple(FOLDS)})
def lower(desc, options):
    algorithm = options.get("algorithm") or choose_algorithm(desc)
    mode = options.get("input_padding")
    if mode is not None and desc.direction != ConvolutionDirection.FORWARD:
        raise ValidationError(
            f"compile_operator.input_padding: {mode!r} is invalid; expected None for this "
            "descriptor on CUDA (a folded padding needs a FORWARD convolution)")
    key = make_key(desc, options, "tiled" if algorithm == "tiled" else "main")
    if mode is not None:
        key = dataclasses.replace(key, plan=Fold(FOLDS[mode]))
    dt, rank = desc.input_tensor.dtype, desc.input_tensor.rank
    n_args = 4 if desc.bias_tensor is not None else 3
    planes = plane_plan_for(desc)
    if algorithm == "tiled" and planes is not None:
        tiles = desc.output_tensor.sizes[0] * desc.output_tensor.sizes[1] * planes.jobs
        return CudaKernel(key, emit_planes(key), [(dt, rank)] * n_args, tiles, block=THREADS,
                          launch_bounds=PLANE_BOUNDS)
    if algorithm == "tiled":
        plan = tile_plan(desc)
        grid, split = gemm_grid(desc, plan), split_for(desc, plan)
        scratch = ()
        if split.parts > 1:  # the partial sums and the tiles' counters
            parts, counters = split.workspace(grid, plan)
            scratch = ((parts, accumulator(desc.input_tensor.data_type)), (counters, "int32"))
        return CudaKernel(key, emit_tiled(key), [(dt, rank)] * n_args, grid.tiles * split.parts,
                          block=THREADS, launch_bounds=GEMM_BOUNDS, scratch=scratch)
    return CudaKernel(key, emit_direct(key), [(dt, rank)] * n_args,
                      desc.output_tensor.element_count // channel_block(desc))
