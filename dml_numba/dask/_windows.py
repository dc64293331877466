"""Windowed operators on Dask arrays: LP, max and average pooling and convolution (forward and
transposed), each output block from its halo, its own padding where the array ends."""
from __future__ import annotations

import itertools
import operator
from fractions import Fraction
from typing import NamedTuple

import numpy as np

from .. import functional as F
from ..ops.convolution import ConvolutionDirection
from ..ops.max_pooling import no_position
from ._common import _as_dask, _boundaries, _check_device, _region_task, _regular, _spans


class _Axis(NamedTuple):
    """One output block along one spatial axis: output ``[o0, o1)`` computed from input
    ``[lo, hi)`` with the block's own ``start``/``end`` padding (and ``output_padding``,
    transposed only); ``zeros`` > 0 where the block reads no input at all along this axis (all
    padding): it is computed from that many zeros instead, which is what padding reads.
    ``extra`` (forward only): zeros to append so the block computes as many outputs as the
    axis' largest block, which lets every block share one compiled kernel."""
    o0: int
    o1: int
    lo: int
    hi: int
    start: int
    end: int
    output_padding: int = 0
    zeros: int = 0
    extra: int = 0


def _forward_axis(n, chunks, out_size, stride, k, dil, start) -> list[_Axis]:
    """Output blocks follow the input's chunks divided by the stride; block ``[o0, o1)`` reads
    the window ``[o0*s - start, (o1-1)*s + (k-1)*d + 1 - start)`` (the halo)."""
    kl = (k - 1) * dil + 1
    sizes = _regular(out_size, chunks, Fraction(1, stride))
    blocks = []
    for o0, o1 in itertools.pairwise(_boundaries(sizes)):
        lo, hi = o0 * stride - start, (o1 - 1) * stride + kl - start
        clo, chi = max(lo, 0), min(hi, n)
        extra = (sizes[0] - (o1 - o0)) * stride
        if clo < chi:
            blocks.append(_Axis(o0, o1, clo, chi, clo - lo, hi - chi, extra=extra))
        else:
            blocks.append(_Axis(o0, o1, 0, 0, 0, 0, zeros=hi - lo, extra=extra))
    return blocks


def _backward_axis(n, chunks, out_size, stride, k, dil, start) -> list[_Axis]:
    """Transposed (gather form): output ``o`` receives input ``i`` through tap ``t`` where
    ``o = i*s + t*d - start``, so block ``[o0, o1)`` reads inputs ``floor((o0 + start -
    (k-1)*d) / s)`` to ``floor((o1 - 1 + start) / s)``; the block's start padding crops what
    those inputs write before ``o0``, its end padding what they write after ``o1``, and output
    padding extends a last block past the inputs' reach (never more than the operator's)."""
    kl = (k - 1) * dil
    bounds = _boundaries(_regular(out_size, chunks, Fraction(stride)))
    blocks = []
    for o0, o1 in itertools.pairwise(bounds):
        lo, hi = (o0 + start - kl) // stride, (o1 - 1 + start) // stride + 1
        clo, chi = max(lo, 0), min(hi, n)
        a = start + o0 - clo * stride
        reach = (chi - clo - 1) * stride + kl + 1 - a  # the region's outputs from o0 on
        if clo < chi and reach >= 1:
            e = reach - (o1 - o0)
            blocks.append(_Axis(o0, o1, clo, chi, a, max(e, 0), max(-e, 0)))
        else:  # no input reaches this block (a gap of a stride wider than the kernel, or
            # output padding): zeros long enough to cover it
            m = max(1, -(-(o1 - o0 - kl - 1) // stride) + 1)
            blocks.append(_Axis(o0, o1, 0, 0, 0, (m - 1) * stride + kl + 1 - (o1 - o0),
                                zeros=m))
    return blocks


def _run_window(run_block, region, zeros_shape, dtype, starts, ends, output_padding, fill=0):
    """One output block: the operator on its input region (or, where the block reads only
    padding, on ``fill``: what its windows make of padding alone) with the block's own
    padding."""
    if region is None:
        region = np.full(zeros_shape, fill, dtype)
    return run_block(region, starts=starts, ends=ends, output_padding=output_padding)


def _run_shared(run_block, region, zeros_shape, dtype, pads, keep):
    """One output block of a forward window, on the kernel every block of its batch size
    shares: the region padded here with the zeros the block's own padding would read
    (``pads``, the extra zeros of a short last block included), the operator run unpadded, the
    block's ``keep`` outputs per axis taken. Only edge blocks pay the copy."""
    if region is None:
        region = np.zeros(zeros_shape, dtype)
    if any(a or b for a, b in pads):
        region = np.pad(region, [(0, 0), (0, 0)] + list(pads))
    nd = len(pads)
    y = run_block(region, starts=(0,) * nd, ends=(0,) * nd, output_padding=(0,) * nd)
    if all(m == n for m, n in zip(keep, y.shape[2:])):
        return y
    return y[(slice(None), slice(None)) + tuple(slice(0, m) for m in keep)]


def _run_positions(run_block, region, zeros_shape, dtype, starts, ends, offsets, shape, fill,
                   none):
    """One output block of a max pooling with its indices: the values, and each maximum's
    flat index into the whole input ``shape`` (the block's region starts at ``offsets``); a
    block that reads only padding points nowhere (``none``)."""
    if region is None:
        y = run_block(np.full(zeros_shape, fill, dtype), starts=starts, ends=ends,
                      output_padding=None)[0]
        return y, np.full(y.shape, none, np.uint64)
    y, local = run_block(region, starts=starts, ends=ends, output_padding=None)
    nowhere = local == none  # (a window of padding alone at the array's edge)
    coords = np.unravel_index(np.where(nowhere, 0, local).astype(np.intp), region.shape)
    flat = np.ravel_multi_index(tuple(c + o for c, o in zip(coords, offsets)), shape)
    return y, np.where(nowhere, np.uint64(none), flat.astype(np.uint64))


def _windowed(x, name, operands, axes, run_block, channels_out, *, shared=False, fill=0,
              positions=False):
    """The lazy output, one task per output block: (batch chunk) x (spatial blocks from
    ``axes``, one list of :class:`_Axis` per spatial axis); channels taken whole (a convolution
    needs every channel of a group). Each task reads the input chunks its region overlaps
    directly, so a block costs one task however many chunks its halo spans. ``operands`` is
    everything ``run_block`` computes with besides the block (descriptor, filter, device): it
    goes into the graph's name, so that two calls differing only there are never merged.
    ``shared`` (forward windows whose padding reads zeros): every block runs on one kernel per
    batch-chunk size (:func:`_run_shared`) instead of one per kind of edge. ``fill``: the value
    a block of padding alone is computed from (:func:`_run_window`)."""
    import dask
    from dask.array.core import Array
    from dask.highlevelgraph import HighLevelGraph

    xb = x.rechunk({1: -1})
    name = name + "-" + dask.base.tokenize(xb, operands, axes, channels_out)
    in_bounds = [_boundaries(c) for c in xb.chunks]
    nb = in_bounds[0]
    dsk = {}
    for bi in range(len(xb.chunks[0])):
        for idx in itertools.product(*(range(len(a)) for a in axes)):
            blocks = [axes[d][j] for d, j in enumerate(idx)]
            if any(b.zeros for b in blocks):  # reads only padding: no input task
                region = None
                zeros = (nb[bi + 1] - nb[bi], xb.shape[1]) + tuple(
                    b.zeros or b.hi - b.lo for b in blocks)
            else:
                spans = [[(bi, slice(0, nb[bi + 1] - nb[bi]))], [(0, slice(0, xb.shape[1]))]] + [
                    _spans(in_bounds[2 + d], b.lo, b.hi) for d, b in enumerate(blocks)]
                region, zeros = _region_task(xb, spans), None
            if positions:
                offsets = (nb[bi], 0) + tuple(b.lo for b in blocks)
                dsk[(name, bi, 0) + idx] = (
                    _run_positions, run_block, region, zeros, x.dtype,
                    tuple(b.start for b in blocks), tuple(b.end for b in blocks), offsets,
                    x.shape, fill, no_position(np.uint64))
            elif shared:
                dsk[(name, bi, 0) + idx] = (
                    _run_shared, run_block, region, zeros, x.dtype,
                    tuple((b.start, b.end + b.extra) for b in blocks),
                    tuple(b.o1 - b.o0 for b in blocks))
            else:
                dsk[(name, bi, 0) + idx] = (
                    _run_window, run_block, region, zeros, x.dtype,
                    tuple(b.start for b in blocks), tuple(b.end for b in blocks),
                    tuple(b.output_padding for b in blocks), fill)
    chunks = (xb.chunks[0], (channels_out,)) + tuple(
        tuple(b.o1 - b.o0 for b in a) for a in axes)
    graph = HighLevelGraph.from_collections(name, dsk, dependencies=[xb])
    if not positions:
        return Array(graph, name, chunks, dtype=x.dtype)
    pairs = Array(graph, name, chunks, meta=np.empty((0,) * x.ndim, object))
    return tuple(pairs.map_blocks(operator.itemgetter(k), dtype=dt,
                                  meta=np.empty((0,) * x.ndim, dt))
                 for k, dt in enumerate((x.dtype, np.dtype(np.uint64))))


def lp_pooling(x, window_size, strides=None, start_padding=None, end_padding=None,
               dilations=None, p=2, *, device="cpu"):
    """Lazy :func:`dml_numba.lp_pooling` of a Dask array; the halo comes from the window."""
    x = _as_dask(x, "lp_pooling", "x")
    _check_device(device)
    desc = F.lp_pooling_desc(x, window_size, strides, start_padding, end_padding, dilations, p)

    def run(block, starts, ends, output_padding):
        return F.lp_pooling(block, desc.window_size, desc.strides, starts, ends, desc.dilations,
                            desc.p, device=device)

    axes = [_forward_axis(x.shape[2 + i], x.chunks[2 + i], desc.output.sizes[2 + i], s, k, d, a)
            for i, (s, k, d, a) in enumerate(zip(desc.strides, desc.window_size,
                                                 desc.dilations, desc.start_padding))]
    return _windowed(x, "dml-lp_pooling", (desc, device), axes, run, x.shape[1], shared=True)


def _pooling(x, name, desc, device, fill):
    """A max or average pooling (their padding is not zeros to be padded in: each block runs
    with its own padding); a max pooling with its indices output gives the pair."""
    run_fn = getattr(F, name)
    extra = (desc.include_padding,) if hasattr(desc, "include_padding") else ()
    positions = getattr(desc, "output_indices_tensor", None) is not None
    if positions:
        extra = (True,)  # return_indices

    def run(block, starts, ends, output_padding):
        return run_fn(block, desc.window_size, desc.strides, starts, ends, desc.dilations,
                      *extra, device=device)

    axes = [_forward_axis(x.shape[2 + i], x.chunks[2 + i], desc.output.sizes[2 + i], s, k, d, a)
            for i, (s, k, d, a) in enumerate(zip(desc.strides, desc.window_size,
                                                 desc.dilations, desc.start_padding))]
    return _windowed(x, f"dml-{name}", (desc, device), axes, run, x.shape[1], fill=fill,
                     positions=positions)


def max_pooling(x, window_size, strides=None, start_padding=None, end_padding=None,
                dilations=None, return_indices=False, *, device="cpu"):
    """Lazy :func:`dml_numba.max_pooling` of a Dask array; the halo comes from the window.
    ``return_indices``: the pair (values, indices), each maximum's flat index into the whole
    of ``x`` (each block's own indices moved by where its region starts), from one task a
    block."""
    x = _as_dask(x, "max_pooling", "x")
    _check_device(device)
    desc = F.max_pooling_desc(x, window_size, strides, start_padding, end_padding, dilations,
                              return_indices)
    dt = np.dtype(x.dtype)
    least = -np.inf if dt.kind == "f" else np.iinfo(dt).min  # what padding alone gives
    return _pooling(x, "max_pooling", desc, device, least)


def average_pooling(x, window_size, strides=None, start_padding=None, end_padding=None,
                    dilations=None, include_padding=False, *, device="cpu"):
    """Lazy :func:`dml_numba.average_pooling` of a Dask array; the halo comes from the
    window."""
    x = _as_dask(x, "average_pooling", "x")
    _check_device(device)
    desc = F.average_pooling_desc(x, window_size, strides, start_padding, end_padding,
                                  dilations, include_padding)
    return _pooling(x, "average_pooling", desc, device, 0 if desc.include_padding else np.nan)


def convolution(x, filter, bias=None, strides=None, dilations=None, start_padding=None,
                end_padding=None, output_padding=None, group_count=1, mode=1, direction=0,
                fused_activation=None, *, device="cpu"):
    """Lazy :func:`dml_numba.convolution` of a Dask array ``x``; ``filter`` and ``bias`` are
    in-memory arrays (or small Dask arrays), broadcast to every block. Forward and transposed
    (BACKWARD) alike: each output block reads the input window its outputs depend on."""
    x = _as_dask(x, "convolution", "x")
    _check_device(device)
    w = np.asarray(filter.compute() if hasattr(filter, "compute") else filter)
    b = None if bias is None else np.asarray(bias.compute() if hasattr(bias, "compute") else bias)
    if b is not None and b.ndim == 1:
        b = b.reshape(F.bias_sizes(b.shape, x.ndim))
    desc = F.convolution_desc(x, w, b, strides, dilations, start_padding, end_padding,
                              output_padding, group_count, mode, direction, fused_activation)
    kw = dict(strides=desc.strides, dilations=desc.dilations, group_count=desc.group_count,
              mode=desc.mode, direction=desc.direction, fused_activation=desc.fused_activation,
              device=device)

    def run(block, starts, ends, output_padding):
        return F.convolution(block, w, b, start_padding=starts, end_padding=ends,
                             output_padding=output_padding, **kw)

    plan = _backward_axis if desc.direction == ConvolutionDirection.BACKWARD else _forward_axis
    axes = [plan(x.shape[2 + i], x.chunks[2 + i], desc.output.sizes[2 + i], s, k, d, a)
            for i, (s, k, d, a) in enumerate(zip(desc.strides, desc.filter_tensor.sizes[2:],
                                                 desc.dilations, desc.start_padding))]
    return _windowed(x, "dml-convolution", (desc, w, b, device), axes, run,
                     desc.output.sizes[1], shared=plan is _forward_axis)
