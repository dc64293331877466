"""Every operator on Dask arrays: ``padding``, ``lp_pooling``, ``convolution``, ``tile`` and
``slice1`` with the functional layer's signatures, taking and returning ``dask.array.Array``,
lazily, for any chunking along any axis, on any Dask scheduler (threads, processes,
``distributed``). Install with ``pip install "dml_numba[dask]"``.

How each output block is made (nothing is ever materialised whole):

* **Data movement** (padding in every mode, tile, slice1 with negative strides): each output
  axis is an index map of the descriptor (``gather_plan``). An output block reads, per axis, the
  input coordinates its map names; the block is a gather from just that input region (a lazy
  slice of ``x``, however many input chunks it spans), so reflection, symmetric and wrap padding
  wider than a chunk or than the whole array are exact. Results are bit-for-bit equal to the
  in-memory functional layer.
* **Forward convolution and LP pooling**: output chunks follow the input's chunks divided by the
  stride; an output block ``[o0, o1)`` reads the input window ``[o0*s - start, (o1-1)*s +
  (k-1)*d - start + 1)`` (the halo from the descriptor), and the part of that window outside the
  array becomes the block's own start/end padding, so the in-memory operator (on ``device``)
  computes the block exactly. Input chunks smaller than the halo are fine: the window is a
  lazy slice spanning as many chunks as it needs. The batch axis keeps its chunks; the channel
  axis is taken whole (a convolution needs every channel of a group).
* **Transposed (BACKWARD) convolution**: the spatial axes (and channels) are taken whole per
  batch chunk: its output blocks are not aligned to input windows in general.

Interior blocks of equal shape share one compiled kernel; edge blocks add a handful. Each worker
compiles or loads kernels through the normal caches (one disk cache per machine, safe under
concurrent writers: entries are written atomically under content-hashed names).
"""
from __future__ import annotations

import functools
import itertools

import numpy as np

from . import functional as F
from ._errors import ValidationError
from ._gather import sources
from .ops.convolution import ConvolutionDirection
from .ops.padding import PaddingMode

__all__ = ["padding", "lp_pooling", "convolution", "tile", "slice1"]


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


def _gather_block(region, local_idx, masks, constant, dtype):
    """The output block: per axis, the region as is where the block reads it in order (the
    common case: interior blocks are views), else a gather along that axis."""
    shape = tuple(len(i) for i in local_idx)
    if not region.size:
        block = np.empty(shape, dtype)
    else:
        block = region
        for d, idx in enumerate(local_idx):
            if not (len(idx) == block.shape[d] and (len(idx) < 2 or (
                    idx[0] == 0 and np.all(np.diff(idx) == 1)))):
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
    const = plan.constant
    if const is not None and desc.output.data_type == desc.output.data_type.FLOAT16:
        const = np.float16(const)
    name = "dml-" + desc.op_name() + "-" + dask.base.tokenize(x, desc, out_chunks)
    deps, dsk = [x], {}
    bounds = [_boundaries(c) for c in out_chunks]
    in_bounds = [_boundaries(c) for c in x.chunks]

    for index in itertools.product(*(range(len(c)) for c in out_chunks)):
        local, masks, region = [], [], []
        for d, b in enumerate(index):
            src, inside = sources(plan.maps[d], bounds[d][b], bounds[d][b + 1])
            used = src[inside]
            lo, hi = (int(used.min()), int(used.max()) + 1) if used.size else (0, 0)
            region.append(slice(lo, hi))
            local.append(np.where(inside, src - lo, 0) if used.size else np.zeros_like(src))
            masks.append(inside)
        if any(s.stop == s.start for s in region):  # all padding: no input read
            dsk[(name,) + index] = (_gather_block, np.empty((0,) * x.ndim, dtype), local, masks,
                                    const, dtype)
        else:
            exact = [in_bounds[d].index(r.start) if r.start in in_bounds[d] and
                     r.stop in in_bounds[d] and in_bounds[d].index(r.stop) ==
                     in_bounds[d].index(r.start) + 1 else None for d, r in enumerate(region)]
            if all(e is not None for e in exact):  # exactly one input chunk: use it as is
                key = (x.name,) + tuple(exact)
            else:  # the region as one block, however many input chunks it spans
                part = x[tuple(region)].rechunk(tuple(r.stop - r.start for r in region))
                deps.append(part)
                key = (part.name,) + (0,) * part.ndim
            dsk[(name,) + index] = (_gather_block, key, local, masks, const, dtype)
    graph = HighLevelGraph.from_collections(name, dsk, dependencies=deps)
    return Array(graph, name, out_chunks, dtype=dtype)


def _split(size: int, like) -> tuple[int, ...]:
    """Chunks for an output axis of ``size`` shaped like the input's chunks ``like``."""
    total = sum(like)
    if total == size:
        return tuple(like)
    bounds = sorted({min(size, -(-b * size // total)) for b in _boundaries(like)} | {0, size})
    return tuple(b - a for a, b in zip(bounds, bounds[1:]) if b > a)


def padding(x, start_padding, end_padding, mode=PaddingMode.CONSTANT, value=0, *, device="cpu"):
    """Lazy :func:`dml_numba.padding` of a Dask array; every mode, pads of any width. ``device``
    is accepted for the functional layer's signature: data-movement blocks are NumPy gathers."""
    x = _as_dask(x, "padding", "x")
    desc = F.padding_desc(x, start_padding, end_padding, mode, value)
    chunks = tuple(_pad_chunks(c, a, b) for c, a, b in zip(x.chunks, desc.start_padding,
                                                          desc.end_padding))
    return _data_movement(x, desc, chunks)


def _pad_chunks(chunks, a, b):
    out = ([a] if a else []) + list(chunks) + ([b] if b else [])
    return tuple(out)


def tile(x, repeats, *, device="cpu"):
    """Lazy :func:`dml_numba.tile` of a Dask array (output blocks: the input's chunks, repeated)."""
    x = _as_dask(x, "tile", "x")
    desc = F.tile_desc(x, repeats)
    chunks = tuple(tuple(c) * r for c, r in zip(x.chunks, desc.repeats))
    return _data_movement(x, desc, chunks)


def slice1(x, offsets, sizes, strides=None, *, device="cpu"):
    """Lazy :func:`dml_numba.slice1` of a Dask array (negative strides read backwards)."""
    x = _as_dask(x, "slice1", "x")
    desc = F.slice1_desc(x, offsets, sizes, strides)
    chunks = tuple(_split(n, c) for n, c in zip(desc.output.sizes, x.chunks))
    return _data_movement(x, desc, chunks)


# -- windows: forward convolution and LP pooling ---------------------------------------------

def _windows(n, chunks, out_size, stride, k, dil, start):
    """Per output block: (o0, o1, region lo, region hi, local start pad, local end pad)."""
    kl = (k - 1) * dil + 1
    bounds = _boundaries(_split(out_size, [max(1, -(-c // stride)) for c in chunks]))
    blocks = []
    for o0, o1 in zip(bounds[:-1], bounds[1:]):
        lo = o0 * stride - start
        hi = (o1 - 1) * stride + kl - start
        blocks.append((o0, o1, max(lo, 0), min(hi, n), max(0, -lo), max(0, hi - n)))
    return blocks


def _windowed(x, out_desc_sizes, spatial_params, run_block, channels_out):
    """Assemble the output from blocks ``run_block(x_region, starts=..., ends=...)`` (the
    block's own start and end padding) over (batch chunk) x (spatial output blocks); channels
    whole."""
    da = _da()
    nd = x.ndim - 2
    xb = x.rechunk({1: -1})
    per_axis = [_windows(x.shape[2 + i], x.chunks[2 + i], out_desc_sizes[2 + i],
                         *spatial_params[i]) for i in range(nd)]
    nb = _boundaries(xb.chunks[0])
    rows = []
    for bi in range(len(xb.chunks[0])):
        grid = {}
        for indexed in itertools.product(*(list(enumerate(a)) for a in per_axis)):
            combo = [c for _, c in indexed]
            region = (slice(nb[bi], nb[bi + 1]), slice(None)) + tuple(
                slice(c[2], c[3]) for c in combo)
            part = xb[region]
            starts = tuple(c[4] for c in combo)
            ends = tuple(c[5] for c in combo)
            shape = (nb[bi + 1] - nb[bi], channels_out) + tuple(c[1] - c[0] for c in combo)
            grid[tuple(i for i, _ in indexed)] = da.map_blocks(
                run_block, part.rechunk(part.shape), starts=starts, ends=ends,
                dtype=x.dtype, chunks=shape, meta=np.empty((0,) * x.ndim, x.dtype))
        rows.append(_nest(grid, [len(a) for a in per_axis]))
    return da.concatenate(rows, axis=0) if len(rows) > 1 else rows[0]


def _nest(grid, counts, prefix=()):
    da = _da()
    if len(prefix) == len(counts):
        return grid[prefix]
    parts = [_nest(grid, counts, prefix + (i,)) for i in range(counts[len(prefix)])]
    return da.concatenate(parts, axis=2 + len(prefix)) if len(parts) > 1 else parts[0]


def lp_pooling(x, window_size, strides=None, start_padding=None, end_padding=None,
               dilations=None, p=2, *, device="cpu"):
    """Lazy :func:`dml_numba.lp_pooling` of a Dask array; the halo comes from the window."""
    x = _as_dask(x, "lp_pooling", "x")
    desc = F.lp_pooling_desc(x, window_size, strides, start_padding, end_padding, dilations, p)

    def run(block, starts, ends):
        return F.lp_pooling(block, desc.window_size, desc.strides, starts, ends, desc.dilations,
                            desc.p, device=device)

    params = list(zip(desc.strides, desc.window_size, desc.dilations, desc.start_padding))
    return _windowed(x, desc.output.sizes, params, run, channels_out=x.shape[1])


def convolution(x, filter, bias=None, strides=None, dilations=None, start_padding=None,
                end_padding=None, output_padding=None, group_count=1, mode=1, direction=0,
                fused_activation=None, *, device="cpu"):
    """Lazy :func:`dml_numba.convolution` of a Dask array ``x``; ``filter`` and ``bias`` are
    in-memory arrays (or small Dask arrays), broadcast to every block."""
    x = _as_dask(x, "convolution", "x")
    w = np.asarray(filter.compute() if hasattr(filter, "compute") else filter)
    b = None if bias is None else np.asarray(bias.compute() if hasattr(bias, "compute") else bias)
    if b is not None and b.ndim == 1:
        b = b.reshape((1, -1) + (1,) * (x.ndim - 2))
    desc = F.convolution_desc(x, w, b, strides, dilations, start_padding, end_padding,
                              output_padding, group_count, mode, direction, fused_activation)
    kw = dict(strides=desc.strides, dilations=desc.dilations, group_count=desc.group_count,
              mode=desc.mode, direction=desc.direction, fused_activation=desc.fused_activation,
              device=device)
    if desc.direction == ConvolutionDirection.BACKWARD:
        da = _da()
        xb = x.rechunk({i: -1 for i in range(1, x.ndim)})
        out_shape = desc.output.sizes

        def run_whole(block):
            return F.convolution(block, w, b, start_padding=desc.start_padding,
                                 end_padding=desc.end_padding,
                                 output_padding=desc.output_padding, **kw)

        chunks = (xb.chunks[0],) + tuple((s,) for s in out_shape[1:])
        return da.map_blocks(run_whole, xb, dtype=x.dtype, chunks=chunks,
                             meta=np.empty((0,) * x.ndim, x.dtype))

    def run(block, starts, ends):
        return F.convolution(block, w, b, start_padding=starts, end_padding=ends, **kw)

    params = list(zip(desc.strides, desc.filter_tensor.sizes[2:], desc.dilations,
                      desc.start_padding))
    return _windowed(x, desc.output.sizes, params, run, channels_out=desc.output.sizes[1])
