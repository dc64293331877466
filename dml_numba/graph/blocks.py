"""One block of a graph's output from just the input region it depends on (for Dask: one task
per output block, :func:`dml_numba.dask.graph`).

Boxes are per-axis ``(lo, hi)`` ranges. :func:`needs` walks the graph backwards from an output
box: each node's needed output box (the union over its readers) gives the box of its tensor
input it reads, the combined halo of every windowed operator on the way. :func:`run_block`
then walks forwards over those boxes. Operators are read through their traits alone: a
data-movement node (``gather_plan()``) gathers its box through its index maps (a padding's
constant where it reads no input); a windowed node (``window()``, whose padding reads zeros)
pads its input box with the zeros its windows read outside the array and runs re-windowed
(``rewindow()``: unpadded, its strides) on ``device``, each output element from the same window
as the whole operator's; any other operator reads its whole input, for the batch range of its
box where it is ``batch_separable`` (a transposed convolution), and keeps its box.
"""
from __future__ import annotations

import numpy as np

from .._api import compile_operator
from .._errors import ValidationError
from ..tensor import TensorDesc
from .desc import GraphDesc


def _union(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return tuple((min(x[0], y[0]), max(x[1], y[1])) for x, y in zip(a, b))


def _empty(box) -> bool:
    return any(hi <= lo for lo, hi in box)


def input_box(op, box):
    """The box of ``op``'s tensor input that its output ``box`` reads (None: none of it)."""
    op = op.canonical()
    sizes = op.input_tensor.sizes
    if hasattr(op, "gather_plan"):
        out = []
        for m, (lo, hi) in zip(op.gather_plan().maps, box):
            idx, inside = m.sources(lo, hi)
            if not inside.any():
                return None
            out.append((int(idx[inside].min()), int(idx[inside].max()) + 1))
        return tuple(out)
    win = op.window()
    if win is None:  # the whole input (of the box's batch range, where that is all it reads)
        whole = tuple((0, n) for n in sizes)
        return (box[0],) + whole[1:] if op.batch_separable else whole
    channels = box[1] if win.channels == "same" else (0, sizes[1])
    spatial = []
    for (lo, hi), s, e, a, n in zip(box[2:], win.strides, win.extents, win.start_padding,
                                    sizes[2:]):
        spatial.append((min(max(lo * s - a, 0), n), max(min((hi - 1) * s - a + e, n), 0)))
    return (box[0], channels) + tuple(spatial)


def needs(graph: GraphDesc, out_box) -> tuple[dict, tuple | None]:
    """Per node, the box of its output needed for graph output 0's ``out_box``, and the box of
    graph input 0 read (None: none)."""
    need: dict = {}
    for e in graph.output_edges:
        if e.graph_output_index == 0:
            need[e.from_node_index] = tuple(out_box)
    feeds = {}
    for e in graph.intermediate_edges:
        if e.to_node_input_index == 0:
            feeds.setdefault(e.to_node_index, []).append(("node", e.from_node_index))
    for e in graph.input_edges:
        if e.to_node_input_index == 0:
            feeds.setdefault(e.to_node_index, []).append(("input", e.graph_input_index))
    in_box = None
    for k in reversed(graph.order()):
        if need.get(k) is None:
            continue
        box = input_box(graph.nodes[k].operator, need[k])
        if box is None or _empty(box):
            continue
        for kind, j in feeds.get(k, []):
            if kind == "node":
                need[j] = _union(need.get(j), box)
            else:
                in_box = _union(in_box, box)
    return need, in_box


def run_block(graph: GraphDesc, device: str, region, in_box, need, params):
    """Graph output 0 over the box :func:`needs` gave ``need`` for, from ``region`` (graph
    input 0 over ``in_box``; None where no input is read) and the other graph inputs
    ``params`` (by graph input index)."""
    sources = {}
    for e in graph.input_edges:
        sources[(e.to_node_index, e.to_node_input_index)] = ("input", e.graph_input_index)
    for e in graph.intermediate_edges:
        sources[(e.to_node_index, e.to_node_input_index)] = ("node", e.from_node_index)
    values: dict = {}
    for k in graph.order():
        box = need.get(k)
        if box is None:
            continue
        op = graph.nodes[k].operator.canonical()
        kind, j = sources[(k, 0)]
        if kind == "input":
            x, x_box = region, in_box
        else:  # absent where this node's box reads none of it (all padding)
            x, x_box = values.get(j, (None, None))
        rest = [params[sources[(k, i)][1]] for i in range(1, len(graph.node_inputs(k)))
                if (k, i) in sources]
        values[k] = (_node(op, x, x_box, box, rest, device), box)
    final = next(e.from_node_index for e in graph.output_edges if e.graph_output_index == 0)
    return values[final][0]


def _node(op, x, x_box, box, rest, device):
    """``op``'s output over ``box`` from ``x`` (its input over ``x_box``)."""
    shape = tuple(hi - lo for lo, hi in box)
    if hasattr(op, "gather_plan"):
        plan = op.gather_plan()
        idx, mask = [], []
        for d, (m, (lo, hi)) in enumerate(zip(plan.maps, box)):
            i, inside = m.sources(lo, hi)
            idx.append(np.where(inside, i - (x_box[d][0] if x_box else 0), 0))
            mask.append(inside)
        if x is None or x_box is None:
            return np.full(shape, plan.constant, op.output_tensor.dtype)
        out = x[np.ix_(*idx)]
        if plan.constant is not None:  # (np.ix_ would take boolean masks as indices)
            keep = np.ones(shape, bool)
            for d, a in enumerate(mask):
                keep &= a.reshape((1,) * d + (-1,) + (1,) * (len(shape) - d - 1))
            out = np.where(keep, out, np.asarray(plan.constant).astype(out.dtype))
        return np.ascontiguousarray(out, dtype=op.output_tensor.dtype)
    xb = input_box(op, box)
    if x is None or x_box is None or _empty(xb):
        x = np.zeros(tuple(max(hi - lo, 0) for lo, hi in xb), op.input_tensor.dtype)
    else:  # the part of the input this node reads (its producer made the union of readers')
        x = x[tuple(slice(lo - a, hi - a) for (lo, hi), (a, _) in zip(xb, x_box))]
    win = op.window()
    out = op.output_tensor
    if win is None:  # the whole input (of the batch range): the operator as it is, then the box
        if op.batch_separable:
            n = box[0][1] - box[0][0]
            op = op.replace_tensors(**{
                op.input_fields[0]: TensorDesc(out.data_type, (n,) + op.input_tensor.sizes[1:]),
                op.output_field: TensorDesc(out.data_type, (n,) + out.sizes[1:])})
        y = compile_operator(op, device)(np.ascontiguousarray(x), *rest)
        return y[(slice(None) if op.batch_separable else slice(*box[0]), slice(*box[1])) +
                 tuple(slice(lo, hi) for lo, hi in box[2:])]
    pads = [(0, 0), (0, 0)]
    for (lo, hi), (a, b), s, e, p in zip(box[2:], xb[2:], win.strides, win.extents,
                                         win.start_padding):
        first, last = lo * s - p, (hi - 1) * s - p + e  # the windows' reach, input coordinates
        pads.append((a - first, last - b) if b > a else (last - first, 0))
    local = np.pad(x, pads) if any(a or b for a, b in pads) else np.ascontiguousarray(x)
    nd = len(box) - 2
    channels = out.sizes[1] if win.channels == "all" else local.shape[1]
    sizes = (local.shape[0], channels) + tuple(hi - lo for lo, hi in box[2:])
    local_op = op.rewindow(TensorDesc(out.data_type, local.shape),
                           TensorDesc(out.data_type, sizes), win.strides, (0,) * nd, (0,) * nd)
    y = compile_operator(local_op, device)(local, *rest)
    return y[:, slice(*box[1])] if win.channels == "all" and box[1] != (0, sizes[1]) else y


def check_blockable(graph: GraphDesc, tensor_input: int = 0) -> None:
    """A graph Dask can run per block: one output; graph input 0 is the tensor and feeds only
    tensor inputs (slot 0); the others (filters, biases) feed only the others."""
    c = "dml_numba.dask.graph"
    for k, node in enumerate(graph.nodes):
        win = node.operator.canonical().window()
        if win is not None and not win.padding_reads_zero:
            raise ValidationError(
                f"{c}.graph: {graph.node_label(k)} ({type(node.operator).__name__}) is invalid; "
                "expected windowed operators whose padding reads zeros (a block pads its input "
                "region with zeros)")
    for e in graph.reshaping_edges():
        raise ValidationError(
            f"{c}.graph: intermediate edge to {graph.node_label(e.to_node_index)} is invalid; "
            "expected edges that keep the tensor's sizes (a view with other sizes has no "
            "block of its own)")
    if graph.output_count != 1:
        raise ValidationError(f"{c}.graph: output_count {graph.output_count} is invalid; "
                              "expected 1 (one output, computed block by block)")
    for e in graph.input_edges:
        if (e.graph_input_index == tensor_input) != (e.to_node_input_index == 0):
            raise ValidationError(
                f"{c}.graph: input edge to {graph.node_label(e.to_node_index)} input "
                f"{e.to_node_input_index} is invalid; expected graph input 0 to be the tensor "
                "(every node's input 0) and the other graph inputs its parameters (filters, "
                "biases)")
    for e in graph.intermediate_edges:
        if e.to_node_input_index != 0:
            raise ValidationError(
                f"{c}.graph: intermediate edge to {graph.node_label(e.to_node_index)} input "
                f"{e.to_node_input_index} is invalid; expected filters and biases to be graph "
                "inputs")
