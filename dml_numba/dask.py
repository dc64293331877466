"""Every operator on Dask arrays: ``padding``, ``lp_pooling``, ``convolution``, ``tile``,
``slice1``, ``max_pooling``, ``average_pooling``, ``element_wise_add``,
``element_wise_multiply``, ``batch_normalization``, ``gemm`` and ``join`` with the functional
layer's signatures, taking and returning ``dask.array.Array``,
lazily, for any chunking along any axis, on any Dask scheduler (threads, processes,
``distributed``). Install with ``pip install "dml_numba[dask]"``.

How each output block is made (nothing is ever materialised whole):

* **Data movement** (padding in every mode, tile, slice1 with negative strides): each output
  axis is an index map of the descriptor (``gather_plan``). An output block reads, per axis, the
  input coordinates its map names; the block is a gather from just that input region (read
  from the input chunks it overlaps, however many), so reflection, symmetric and wrap padding
  wider than a chunk or than the whole array are exact. Results are bit-for-bit equal to the
  in-memory functional layer.
* **Forward convolution and LP pooling**: output chunks follow the input's chunks divided by the
  stride; an output block ``[o0, o1)`` reads the input window ``[o0*s - start, (o1-1)*s +
  (k-1)*d - start + 1)`` (the halo from the descriptor), and the part of that window outside the
  array becomes the block's own start/end padding, so the in-memory operator (on ``device``)
  computes the block exactly. The batch axis keeps its chunks; the channel axis is taken whole
  (a convolution needs every channel of a group).
* **Transposed (BACKWARD) convolution**, from the gather form: output ``o`` receives input ``i``
  through tap ``t`` where ``o = i*s + t*d - start``, so an output block reads the inputs that
  reach it; its own start padding crops what they write before the block, its end padding
  what they write after it (output chunks follow the input's chunks times the stride).
* **Max and average pooling**: the same halos as LP pooling, each block run with its own
  padding (their padding is not zeros to pad in: a maximum never takes it, an average that
  does not count it divides by fewer taps).
* **Element-wise operators and batch normalization**: block by block (operands broadcast and
  cut like the first one; batch normalization's parameters whole, the channel axis whole).
* **GEMM**: block by block along the batch axes and M, K and N whole; **join**: Dask's own
  concatenation of the inputs' blocks (nothing to compute), checked as DirectML's JOIN.
* A block whose window lies wholly in the padding (padding wider than the kernel, or gaps of a
  stride wider than the kernel) is computed from zeros, which is what padding reads.

Chunks smaller than the halo need no rechunking and give no wrong answer: each output block is
one task that reads the input chunks its window overlaps (a view where it lies in one chunk,
one copy where it spans several), so a block costs one task however many chunks it spans.

Output chunks are regular (one size per axis, the last one smaller), so results store to Zarr as
they are. Forward windows run every block on one compiled kernel per batch-chunk size: edge
blocks are padded with the zeros their padding reads (and a short last block with enough to
make it full size, the surplus dropped), at the cost of a copy of the edge blocks' regions;
transposed blocks add a handful of kernels for their edges. Each worker
compiles or loads kernels through the normal caches (one disk cache per machine, safe under
concurrent writers: entries are written atomically under content-hashed names).
"""
from __future__ import annotations

import functools
import itertools
import math
import operator
from fractions import Fraction
from typing import NamedTuple

import numpy as np

from . import functional as F
from ._errors import ValidationError
from .ops.convolution import ConvolutionDirection
from .ops.padding import PaddingMode

__all__ = ["padding", "lp_pooling", "convolution", "tile", "slice1", "max_pooling",
           "average_pooling", "element_wise_add", "element_wise_multiply", "batch_normalization",
           "gemm", "join", "graph"]


def _da():
    try:
        import dask.array as da
    except ImportError as exc:  # pragma: no cover - the extra is not installed
        raise ImportError("dml_numba.dask needs Dask: pip install 'dml_numba[dask]'") from exc
    return da


def _as_dask(x, owner: str, field: str):
    da = _da()
    if isinstance(x, da.Array):
        return x
    try:
        return da.from_array(np.asarray(x))
    except Exception as exc:  # noqa: BLE001
        raise ValidationError(f"{owner}.{field}: {type(x).__name__} is invalid; expected a "
                              f"dask.array.Array or an array ({exc})") from None


def _boundaries(chunks) -> list[int]:
    out = [0]
    for c in chunks:
        out.append(out[-1] + c)
    return out


def _as_slice(idx):
    """``idx`` as a slice where it is an arithmetic progression with a non-zero step (in order,
    reversed as reflection reads, or strided as slice1 reads), else None."""
    if len(idx) == 1:
        return slice(int(idx[0]), int(idx[0]) + 1)
    step = int(idx[1] - idx[0])
    if step == 0 or np.any(np.diff(idx) != step):
        return None
    stop = int(idx[-1]) + step
    return slice(int(idx[0]), stop if stop >= 0 else None, step)


def _gather_block(region, local_idx, masks, constant, dtype):
    """The output block: per axis, a view of the region where the block reads it as an
    arithmetic progression (interior blocks as they are, reflected edges reversed, strided
    slices), else a gather along that axis (wrap-around, clamped edges)."""
    shape = tuple(len(i) for i in local_idx)
    if not region.size:
        block = np.empty(shape, dtype)
    else:
        block = region
        for d, idx in enumerate(local_idx):
            cut = _as_slice(idx) if len(idx) else None
            if cut is not None:
                if cut != slice(0, block.shape[d], 1):
                    block = block[(slice(None),) * d + (cut,)]
            else:
                block = np.take(block, idx, axis=d)
    if constant is not None and not all(m.all() for m in masks):
        nd = len(masks)
        axes = [m.reshape([-1 if i == d else 1 for i in range(nd)]) for d, m in enumerate(masks)]
        outside = ~functools.reduce(np.logical_and, axes)
        block = np.where(outside, np.asarray(constant, dtype=dtype), block)
    # a view where the block is the region as it is (no copy: Dask copies blocks into the
    # result, and the operators take strided blocks)
    return np.asarray(block, dtype=dtype)


def _data_movement(x, desc, out_chunks):
    """The lazily gathered output of a data-movement descriptor, blocks per ``out_chunks``."""
    import dask
    from dask.array.core import Array
    from dask.highlevelgraph import HighLevelGraph

    plan = desc.canonical().gather_plan()
    dtype = x.dtype
    out_chunks = _bounded(out_chunks, dtype.itemsize)
    const = plan.constant
    if const is not None and desc.output.data_type == desc.output.data_type.FLOAT16:
        const = np.float16(const)
    name = "dml-" + desc.op_name() + "-" + dask.base.tokenize(x, desc, out_chunks)
    dsk = {}
    bounds = [_boundaries(c) for c in out_chunks]
    in_bounds = [_boundaries(c) for c in x.chunks]

    # per axis and block along it, once: the input range read, the local indices, the mask,
    # the input chunks the range overlaps (the blocks are their product)
    axes = []
    for d, b in enumerate(bounds):
        per = []
        for j in range(len(b) - 1):
            src, inside = plan.maps[d].sources(b[j], b[j + 1])
            used = src[inside]
            lo, hi = (int(used.min()), int(used.max()) + 1) if used.size else (0, 0)
            local = np.where(inside, src - lo, 0) if used.size else np.zeros_like(src)
            per.append((local, inside, _spans(in_bounds[d], lo, hi) if hi > lo else None))
        axes.append(per)
    empty = np.empty((0,) * x.ndim, dtype)
    for index in itertools.product(*(range(len(c)) for c in out_chunks)):
        picked = [axes[d][b] for d, b in enumerate(index)]
        local, masks = [p[0] for p in picked], [p[1] for p in picked]
        if any(p[2] is None for p in picked):  # all padding: no input read
            dsk[(name,) + index] = (_gather_block, empty, local, masks, const, dtype)
        else:  # the region from the input chunks it overlaps, in the block's own task
            key = _region_task(x, [p[2] for p in picked])
            dsk[(name,) + index] = (_gather_block, key, local, masks, const, dtype)
    graph = HighLevelGraph.from_collections(name, dsk, dependencies=[x])
    return Array(graph, name, out_chunks, dtype=dtype)


def _bounded(chunks, itemsize: int) -> tuple:
    """``chunks`` with no block over Dask's ``array.chunk-size`` (128 MiB by default): the
    largest block axis halved until a block fits, that axis then in regular chunks. A tile of a
    one-chunk array (or a wide padding) would otherwise be one block of its whole output, which
    computing any part of allocates."""
    import dask
    from dask.utils import parse_bytes

    limit = parse_bytes(dask.config.get("array.chunk-size"))
    steps = [max(c) for c in chunks]
    if math.prod(steps) * itemsize <= limit:
        return tuple(chunks)
    while math.prod(steps) * itemsize > limit and any(s > 1 for s in steps):
        d = max(range(len(steps)), key=lambda i: steps[i])
        steps[d] = (steps[d] + 1) // 2
    return tuple(tuple(c) if step >= max(c) else _steps(sum(c), step)
                 for c, step in zip(chunks, steps))


def _steps(size: int, step: int) -> tuple[int, ...]:
    """``size`` in chunks of ``step``, the last one smaller."""
    return (step,) * (size // step) + ((size % step,) if size % step else ())


def _regular(size: int, like, scale: Fraction = Fraction(1)) -> tuple[int, ...]:
    """Regular chunks for an output axis of ``size`` (all of one size, the last one smaller),
    the size being the input's chunk size ``like[0]`` times ``scale`` (the output's size per
    input element); one chunk where the input has one. Regular chunks are what Zarr stores
    and most of Dask expect (``to_zarr`` would otherwise rechunk), and blocks of one shape
    share one compiled kernel."""
    if len(like) == 1:
        return (size,)
    return _steps(size, max(1, math.ceil(like[0] * scale)))


def _check_device(device) -> None:
    """The device names a usable device (checked when the graph is built, not at compute)."""
    from ._registry import get_device

    get_device(device)


def padding(x, start_padding, end_padding, mode=PaddingMode.CONSTANT, value=0, *, device="cpu"):
    """Lazy :func:`dml_numba.padding` of a Dask array; every mode, pads of any width, output
    chunks regular (the input's chunk size). ``device`` is checked for the functional layer's
    signature: data-movement blocks are NumPy gathers."""
    x = _as_dask(x, "padding", "x")
    _check_device(device)
    desc = F.padding_desc(x, start_padding, end_padding, mode, value)
    return _data_movement(x, desc, tuple(_regular(n, c) for n, c in zip(desc.output.sizes,
                                                                       x.chunks)))


def tile(x, repeats, *, device="cpu"):
    """Lazy :func:`dml_numba.tile` of a Dask array (output chunks regular, the input's size)."""
    x = _as_dask(x, "tile", "x")
    _check_device(device)
    desc = F.tile_desc(x, F.last_axes(repeats, x.ndim))
    return _data_movement(x, desc, tuple(_regular(n, c) for n, c in zip(desc.output.sizes,
                                                                       x.chunks)))


def slice1(x, offsets, sizes, strides=None, *, device="cpu"):
    """Lazy :func:`dml_numba.slice1` of a Dask array (negative strides read backwards; output
    chunks regular, the input's chunk size scaled by output size over input size)."""
    x = _as_dask(x, "slice1", "x")
    _check_device(device)
    desc = F.slice1_desc(x, offsets, sizes, strides)
    return _data_movement(x, desc, tuple(_regular(n, c, Fraction(n, sum(c))) for n, c in zip(
        desc.output.sizes, x.chunks)))


# -- windows: convolution and LP pooling ------------------------------------------------------

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


def _spans(bounds, lo, hi):
    """The input chunks ``[lo, hi)`` of one axis overlaps: (chunk index, slice within it)."""
    out = []
    for j, (a, b) in enumerate(itertools.pairwise(bounds)):
        if a < hi and b > lo:
            out.append((j, slice(max(lo, a) - a, min(hi, b) - a)))
    return out


def _region_task(x, spans_per_axis):
    """A task computing the input region ``spans_per_axis`` covers, from ``x``'s chunk keys."""
    keys = [(x.name,) + tuple(j for j, _ in combo)
            for combo in itertools.product(*spans_per_axis)]
    cuts = [[sl for _, sl in spans] for spans in spans_per_axis]
    if len(keys) == 1:
        return (operator.getitem, keys[0], tuple(c[0] for c in cuts))
    return (_stitch_region, keys, cuts)


def _stitch_region(pieces, cuts):
    """``pieces`` (C order over the per-axis ``cuts``) copied into one new array."""
    offsets = [_boundaries([sl.stop - sl.start for sl in c]) for c in cuts]
    out = np.empty(tuple(o[-1] for o in offsets), pieces[0].dtype)
    for piece, idx in zip(pieces, itertools.product(*(range(len(c)) for c in cuts))):
        at = tuple(slice(offsets[d][j], offsets[d][j + 1]) for d, j in enumerate(idx))
        out[at] = piece[tuple(cuts[d][j] for d, j in enumerate(idx))]
    return out


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


def _windowed(x, name, operands, axes, run_block, channels_out, *, shared=False, fill=0):
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
            if shared:
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
    return Array(graph, name, chunks, dtype=x.dtype)


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
    with its own padding)."""
    run_fn = getattr(F, name)
    extra = (desc.include_padding,) if hasattr(desc, "include_padding") else ()

    def run(block, starts, ends, output_padding):
        return run_fn(block, desc.window_size, desc.strides, starts, ends, desc.dilations,
                      *extra, device=device)

    axes = [_forward_axis(x.shape[2 + i], x.chunks[2 + i], desc.output.sizes[2 + i], s, k, d, a)
            for i, (s, k, d, a) in enumerate(zip(desc.strides, desc.window_size,
                                                 desc.dilations, desc.start_padding))]
    return _windowed(x, f"dml-{name}", (desc, device), axes, run, x.shape[1], fill=fill)


def max_pooling(x, window_size, strides=None, start_padding=None, end_padding=None,
                dilations=None, *, device="cpu"):
    """Lazy :func:`dml_numba.max_pooling` of a Dask array; the halo comes from the window."""
    x = _as_dask(x, "max_pooling", "x")
    _check_device(device)
    desc = F.max_pooling_desc(x, window_size, strides, start_padding, end_padding, dilations)
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


def _shape(x):
    """Shape and dtype only: what a descriptor builder reads (no array of that size made)."""
    from types import SimpleNamespace

    return SimpleNamespace(shape=tuple(x.shape), ndim=x.ndim, dtype=np.dtype(x.dtype))


def _lazy_operand(value):
    """A Dask array as it is, anything else as a NumPy array (a Dask array of one chunk)."""
    da = _da()
    if isinstance(value, da.Array):
        return value
    return da.from_array(np.asarray(value))


def _element_wise(name, a, b, extra, device):
    """Element by element, block by block: the operands broadcast and their chunks unified."""
    da = _da()
    a = _as_dask(a, name, "a")
    _check_device(device)
    b = _lazy_operand(b).astype(a.dtype, casting="same_kind")
    first = a
    a, b = da.broadcast_arrays(a, b)
    if a.shape == first.shape:  # the first operand's chunks (regular where its are)
        a, b = first, b.rechunk(first.chunks)
    getattr(F, f"{name}_desc")(_shape(a), _shape(b), *extra)  # its checks, before any block
    fn = functools.partial(_element_wise_block, name, extra, device)
    return da.map_blocks(fn, a, b, dtype=a.dtype,
                         name=f"dml-{name}-" + _da_token(a, b, extra, device))


def _element_wise_block(name, extra, device, a, b):
    return getattr(F, name)(np.ascontiguousarray(a), np.ascontiguousarray(b), *extra,
                            device=device)


def _da_token(*args):
    import dask

    return dask.base.tokenize(*args)


def element_wise_add(a, b, fused_activation=None, *, device="cpu"):
    """Lazy :func:`dml_numba.element_wise_add`: ``a + b`` (broadcast NumPy's way) block by
    block, then the fused activation."""
    return _element_wise("element_wise_add", a, b, (fused_activation,), device)


def element_wise_multiply(a, b, *, device="cpu"):
    """Lazy :func:`dml_numba.element_wise_multiply`: ``a * b`` block by block."""
    return _element_wise("element_wise_multiply", a, b, (), device)


def batch_normalization(x, mean, variance, scale, bias, epsilon=1e-5, fused_activation=None, *,
                        device="cpu"):
    """Lazy :func:`dml_numba.batch_normalization` of a Dask array; the parameters (in memory)
    go whole to every block, the channel axis taken whole."""
    x = _as_dask(x, "batch_normalization", "x")
    _check_device(device)
    params = [np.asarray(p.compute() if hasattr(p, "compute") else p, x.dtype)
              for p in (mean, variance, scale, bias)]
    params = [p.reshape(F.bias_sizes(p.shape, x.ndim)) if p.ndim == 1 else p for p in params]
    if any(p.shape[2:] != (1,) * (x.ndim - 2) for p in params):
        x = x.rechunk({i: -1 for i in range(2, x.ndim)})  # per-position parameters: whole
    xb = x.rechunk({1: -1})
    F.batch_normalization_desc(_shape(xb), *params, epsilon, fused_activation)
    fn = functools.partial(_batch_normalization_block, params, epsilon, fused_activation, device)
    return xb.map_blocks(fn, dtype=x.dtype, name="dml-batch_normalization-" + _da_token(
        xb, params, epsilon, fused_activation, device))


def _batch_normalization_block(params, epsilon, activation, device, x):
    return F.batch_normalization(np.ascontiguousarray(x), *params, epsilon, activation,
                                 device=device)


def gemm(a, b, c=None, trans_a=False, trans_b=False, alpha=1.0, beta=1.0,
         fused_activation=None, *, device="cpu"):
    """Lazy :func:`dml_numba.gemm` of a Dask array ``a`` by ``b`` (in memory, or a Dask array):
    block by block along ``a``'s batch axes and its M axis, K and N taken whole; ``b`` and
    ``c`` (broadcast to the output) cut along the same batch blocks."""
    da = _da()
    a = _as_dask(a, "gemm", "a")
    _check_device(device)
    b = _lazy_operand(b).astype(a.dtype)
    desc = F.gemm_desc(_shape(a), _shape(b), None, trans_a, trans_b, alpha, beta,
                       fused_activation)
    batch = [f"i{d}" for d in range(a.ndim - 2)]
    a_ix = batch + (["k", "m"] if trans_a else ["m", "k"])
    b_ix = batch + (["n", "k"] if trans_b else ["k", "n"])
    a = a.rechunk({a_ix.index("k"): -1})
    b = b.rechunk(a.chunks[:-2] + (-1, -1))
    args = [a, tuple(a_ix), b, tuple(b_ix)]
    if c is not None:
        cz = _lazy_operand(c).astype(a.dtype)
        cz = da.broadcast_to(cz, desc.output.sizes).rechunk(
            a.chunks[:-2] + (a.chunks[a_ix.index("m")], -1))
        args += [cz, tuple(batch + ["m", "n"])]
    fn = functools.partial(_gemm_block, trans_a, trans_b, alpha, beta, fused_activation, device)
    return da.blockwise(fn, tuple(batch + ["m", "n"]), *args, concatenate=True, dtype=a.dtype,
                        name="dml-gemm-" + _da_token(*args[::2], desc, device))


def _gemm_block(trans_a, trans_b, alpha, beta, activation, device, a, b, c=None):
    return F.gemm(np.ascontiguousarray(a), np.ascontiguousarray(b),
                  None if c is None else np.ascontiguousarray(c), trans_a, trans_b, alpha, beta,
                  activation, device=device)


def join(inputs, axis, *, device="cpu"):
    """Lazy :func:`dml_numba.join`: checked as DirectML's JOIN, then Dask's own concatenation
    (join moves whole blocks: each output block is one input's block, nothing to compute)."""
    da = _da()
    xs = [_as_dask(x, "join", f"inputs[{k}]") for k, x in enumerate(inputs)]
    _check_device(device)
    desc = F.join_desc([_shape(x) for x in xs], axis)
    return da.concatenate(xs, axis=desc.axis)


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


# -- graphs: one task per output block, the combined halo of every node --------------------------

def _graph_block(graph, device, region, in_box, need, params):
    from .graph.blocks import run_block

    return run_block(graph, device, region, in_box, need, params)


def graph(graph, x, *params, device="cpu", chunks=None):
    """Lazy graph output of a Dask array: ``graph`` (a :class:`dml_numba.GraphDesc` of one
    output) with ``x`` as graph input 0 and ``params`` (filters, biases: in-memory arrays) as
    the others. Each output block is one task that reads the input region its output depends
    on through every node (the combined halo of the windows, the index maps of the data
    movement; :mod:`dml_numba.graph.blocks`) and computes only what the block needs, node by
    node on ``device``. ``chunks``: the output's chunks (default: the input's, scaled by each
    axis's size ratio, regular)."""
    import dask
    from dask.array.core import Array, normalize_chunks
    from dask.highlevelgraph import HighLevelGraph

    from .graph import GraphDesc
    from .graph.blocks import check_blockable, needs

    if not isinstance(graph, GraphDesc):
        raise ValidationError(f"dml_numba.dask.graph.graph: {type(graph).__name__} is invalid; "
                              "expected a GraphDesc")
    x = _as_dask(x, "dml_numba.dask.graph", "x")
    _check_device(device)
    check_blockable(graph)
    if len(params) != graph.input_count - 1:
        raise ValidationError(f"dml_numba.dask.graph: {len(params)} params are invalid; "
                              f"expected {graph.input_count - 1} (graph inputs 1 and on)")
    tin, tout = graph.input_tensor(0), graph.output_tensor(0)
    if tuple(x.shape) != tin.sizes or x.dtype != tin.dtype:
        raise ValidationError(f"dml_numba.dask.graph.x: {x.dtype} {tuple(x.shape)} is invalid; "
                              f"expected {tin.dtype} {tin.sizes}")
    values = [None] + [np.asarray(p.compute() if hasattr(p, "compute") else p) for p in params]
    for k in range(1, graph.input_count):
        t = graph.input_tensor(k)
        if values[k].shape != t.sizes:
            values[k] = values[k].reshape(t.sizes)  # a (C_out,) bias as the node binds it
    if chunks is None:
        chunks = tuple(_regular(n, c, Fraction(n, m)) for n, c, m in
                       zip(tout.sizes, x.chunks, x.shape))
    chunks = normalize_chunks(chunks, tout.sizes, dtype=tout.dtype)
    name = "dml-graph-" + dask.base.tokenize(x, graph, values[1:], device, chunks)
    in_bounds = [_boundaries(c) for c in x.chunks]
    out_bounds = [_boundaries(c) for c in chunks]
    dsk = {}
    for idx in itertools.product(*(range(len(c)) for c in chunks)):
        box = tuple((b[i], b[i + 1]) for b, i in zip(out_bounds, idx))
        need, in_box = needs(graph, box)
        region = None if in_box is None else _region_task(
            x, [_spans(in_bounds[d], lo, hi) for d, (lo, hi) in enumerate(in_box)])
        dsk[(name,) + idx] = (_graph_block, graph, device, region, in_box, need, values)
    hlg = HighLevelGraph.from_collections(name, dsk, dependencies=[x])
    return Array(hlg, name, chunks, dtype=tout.dtype)
