"""A compiled graph on Dask arrays: each output block from the input region the graph's
windows need (``dml_numba.graph.blocks``)."""
from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np

from .._errors import ValidationError
from ._common import _as_dask, _boundaries, _check_device, _region_task, _regular, _spans


def _graph_block(graph, device, region, in_box, need, params):
    from ..graph.blocks import run_block

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

    from ..graph import GraphDesc
    from ..graph.blocks import check_blockable, needs

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
