"""Data movement on Dask arrays: padding, tile, slice1 (a gather from the region each output
block's index maps name) and join (Dask's own concatenation)."""
from __future__ import annotations

import functools
import itertools
from fractions import Fraction

import numpy as np

from .. import functional as F
from ..ops.padding import PaddingMode
from ._common import (
    _as_dask,
    _as_slice,
    _boundaries,
    _bounded,
    _check_device,
    _da,
    _region_task,
    _regular,
    _shape,
    _spans,
)


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


def join(inputs, axis, *, device="cpu"):
    """Lazy :func:`dml_numba.join`: checked as DirectML's JOIN, then Dask's own concatenation
    (join moves whole blocks: each output block is one input's block, nothing to compute)."""
    da = _da()
    xs = [_as_dask(x, "join", f"inputs[{k}]") for k, x in enumerate(inputs)]
    _check_device(device)
    desc = F.join_desc([_shape(x) for x in xs], axis)
    return da.concatenate(xs, axis=desc.axis)
