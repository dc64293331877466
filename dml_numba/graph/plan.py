"""What a compiled graph runs: its nodes rewritten into steps, fused where the result stays the
same. Pure Python over descriptors (no compiling here), so the plan can be read and tested.

Rewrites, applied on the "cpu" and "cuda" devices (the "numpy" device runs the nodes as they
are, the specification):

* **zero padding into a window**: a CONSTANT padding with value +0 of the spatial axes only,
  whose output is read as the input of a FORWARD convolution or an LP pooling, becomes that
  operator's own start/end padding (both read zeros there; LP pooling counts them as 0);
* **any other padding into a window**: an EDGE, REFLECTION, SYMMETRIC or WRAP padding of the
  spatial axes in front of a FORWARD convolution or an LP pooling without padding of its own
  becomes that operator's padding, read through the mode's map wherever its kernels read the
  input (``input_padding``: the blocked kernels' staging, the direct kernels' taps, CUDA's
  shared-memory regions and gathers);
* **a slice after a window**: a slice with positive strides along the spatial axes of the
  output of a FORWARD convolution or an LP pooling (read by nothing else) becomes that
  operator's strides and start padding: only the kept windows are computed;
* **data-movement chains**: padding, slice and tile nodes each feeding only the next become one
  :class:`~dml_numba.ops.gather_chain.GatherChainDesc`, one pass with no intermediate.

A node output that other nodes still read lives in a buffer allocated once per compiled graph
(per thread) and reused by every call; one that is a graph output is written straight into it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .._dims import dilated_extent
from .._errors import ValidationError
from .._registry import split_device
from ..ops.convolution import ConvolutionDirection, ConvolutionOperatorDesc
from ..ops.gather_chain import GatherChainDesc
from ..ops.lp_pooling import LpPooling1OperatorDesc
from ..ops.padding import Padding1OperatorDesc, PaddingMode
from ..ops.slice import Slice1OperatorDesc
from .desc import GraphDesc

#: where a step reads or writes: ("input", k) a graph input, ("output", k) a graph output,
#: ("buffer", k) the buffer of (what was) node k's output
Ref = tuple


@dataclass
class Node:
    """A node while the rewrites run: its operator, where each present input comes from, the
    graph nodes it stands for."""

    op: object
    sources: list
    covers: tuple
    chain: tuple = ()  # data-movement operators fused so far (in order), when op is one of them
    options: tuple = ()  # compile options the rewrites add (("input_padding", mode),)


@dataclass(frozen=True)
class Step:
    """One compiled operator of the graph: ``op`` (a descriptor) reads ``inputs`` and writes
    ``output``; ``nodes`` are the graph nodes it computes, ``also`` further graph outputs that
    receive a copy of its result."""

    op: object
    inputs: tuple
    output: Ref
    nodes: tuple
    also: tuple = ()
    options: tuple = ()


def _data_movement(op) -> bool:
    return hasattr(op.canonical(), "gather_plan")


def _spatial_padding(op) -> tuple | None:
    """(mode, start, end) when ``op`` pads the spatial axes only: ``mode`` the PaddingMode's
    name, or "ZERO" for a CONSTANT padding by +0 (what a window's own padding reads); None for
    any other operator or padding."""
    p = op.canonical()
    if not isinstance(p, Padding1OperatorDesc) or p.input_tensor.rank < 3 or \
            any(p.start_padding[:2]) or any(p.end_padding[:2]):
        return None
    if p.padding_mode == PaddingMode.CONSTANT:
        if p.padding_value != 0 or math.copysign(1.0, float(p.padding_value)) < 0:
            return None
        return "ZERO", p.start_padding[2:], p.end_padding[2:]
    return p.padding_mode.name, p.start_padding[2:], p.end_padding[2:]


def window(op):
    """(strides, dilated window extents, start padding) of a FORWARD convolution's or an LP
    pooling's spatial axes."""
    k = op.window_size if isinstance(op, LpPooling1OperatorDesc) else op.filter_tensor.sizes[2:]
    return op.strides, tuple(dilated_extent(kk, d) for kk, d in zip(k, op.dilations)), \
        op.start_padding


def _fold_mode_padding(consumer, padding, src_tensor, device):
    """``consumer`` (a FORWARD convolution or an LP pooling, without padding of its own) reading
    ``src_tensor`` through ``padding`` (mode, start, end) in its own input reads, where the
    device's kernels can (every kernel on the CPU and CUDA); None elsewhere."""
    c = consumer.canonical()
    backend = split_device(device)[0]
    if isinstance(c, LpPooling1OperatorDesc):  # every LP pooling kernel reads through a fold
        if any(c.start_padding) or any(c.end_padding) or backend not in ("cpu", "cuda"):
            return None
        mode, start, end = padding
        return replace(c, input_tensor=src_tensor, start_padding=start, end_padding=end)
    if not isinstance(c, ConvolutionOperatorDesc) or \
            c.direction != ConvolutionDirection.FORWARD or any(c.start_padding) or \
            any(c.end_padding):
        return None
    mode, start, end = padding
    folded = replace(c, input_tensor=src_tensor, start_padding=start, end_padding=end)
    if backend == "cpu":
        from ..cpu.convolution import folds_padding
    elif backend == "cuda":
        from ..cuda.convolution import folds_padding
    else:
        return None
    return folded if folds_padding(folded, mode) else None


def _fold_slice(window_op, sl):
    """``window_op`` (a FORWARD convolution or an LP pooling) computing only what the slice
    ``sl`` after it keeps: positive strides and offsets along the spatial axes become its
    strides and start padding (the same windows, each computed once, none thrown away); None
    where the slice touches the batch or channel axes, reverses, or reaches windows the
    operator cannot express."""
    w, s = window_op.canonical(), sl.canonical()
    if not isinstance(s, Slice1OperatorDesc) or not (
            isinstance(w, LpPooling1OperatorDesc) or isinstance(w, ConvolutionOperatorDesc)
            and w.direction == ConvolutionDirection.FORWARD):
        return None
    sizes = w.output_tensor.sizes
    if any(s.input_window_offsets[:2]) or tuple(s.input_window_sizes[:2]) != sizes[:2] or \
            tuple(s.input_window_strides[:2]) != (1, 1) or min(s.input_window_strides) < 0:
        return None
    _, extents, _ = window(w)
    strides, start, end = [], [], []
    for i, (o, k) in enumerate(zip(s.input_window_offsets[2:], s.input_window_strides[2:])):
        count = s.output_tensor.sizes[i + 2]
        stride = w.strides[i] * k
        front = w.start_padding[i] - o * w.strides[i]
        if front < 0:
            return None
        reach = (count - 1) * stride + extents[i]
        strides.append(stride)
        start.append(front)
        end.append(max(0, reach - w.input_tensor.sizes[i + 2] - front))
    try:
        return replace(w, output_tensor=s.output_tensor, strides=tuple(strides),
                       start_padding=tuple(start), end_padding=tuple(end))
    except ValidationError:
        return None


def _fold_padding(consumer, pad, src_tensor):
    """``consumer`` (convolution or LP pooling) reading ``src_tensor`` with ``pad`` added to its
    own padding, or None where the rule does not apply."""
    c = consumer.canonical()
    if isinstance(c, ConvolutionOperatorDesc):
        if c.direction != ConvolutionDirection.FORWARD:
            return None
    elif not isinstance(c, LpPooling1OperatorDesc):
        return None
    start, end = pad
    return replace(c, input_tensor=src_tensor,
                   start_padding=tuple(a + b for a, b in zip(c.start_padding, start)),
                   end_padding=tuple(a + b for a, b in zip(c.end_padding, end)))


def plan(graph: GraphDesc, fuse: bool = True, device: str = "cpu") -> list[Step]:
    """The steps that compute ``graph`` on ``device``, in order."""
    nodes: dict[int, Node] = {}
    for k in range(len(graph.nodes)):
        nodes[k] = Node(graph.nodes[k].operator, [None] * len(graph.node_inputs(k)), (k,))
    for e in graph.input_edges:
        nodes[e.to_node_index].sources[e.to_node_input_index] = ("input", e.graph_input_index)
    for e in graph.intermediate_edges:
        nodes[e.to_node_index].sources[e.to_node_input_index] = ("node", e.from_node_index)
    outputs: dict[int, list[int]] = {}
    for e in sorted(graph.output_edges, key=lambda e: e.graph_output_index):
        outputs.setdefault(e.from_node_index, []).append(e.graph_output_index)
    order = list(graph.order())

    def readers(k):
        return [j for j in order if j in nodes and ("node", k) in nodes[j].sources]

    def drop_if_unread(k):
        if k not in outputs and not readers(k):
            del nodes[k]

    if fuse:
        for k in order:  # zero padding into the window operator reading it
            n = nodes.get(k)
            while n is not None and n.sources and n.sources[0] and n.sources[0][0] == "node":
                p = n.sources[0][1]
                pad = None if nodes[p].chain else _spatial_padding(nodes[p].op)
                if pad is None:
                    break
                src_tensor, options = nodes[p].op.input_tensor, ()
                if pad[0] == "ZERO":
                    folded = _fold_padding(n.op, pad[1:], src_tensor)
                else:
                    folded = _fold_mode_padding(n.op, pad, src_tensor, device)
                    options = (("input_padding", pad[0]),)
                if folded is None:
                    break
                n.op, n.sources[0], n.covers = folded, nodes[p].sources[0], nodes[p].covers + \
                    n.covers
                n.options = options
                drop_if_unread(p)
                if options:
                    break
        for k in order:  # a slice after a window operator: only the windows it keeps
            n = nodes.get(k)
            src = n.sources[0] if n is not None and n.sources else None
            if src is None or src[0] != "node" or src[1] not in nodes or src[1] in outputs \
                    or readers(src[1]) != [k] or nodes[src[1]].chain:
                continue
            folded = _fold_slice(nodes[src[1]].op, n.op)
            if folded is not None:
                p = nodes.pop(src[1])
                n.op, n.sources, n.covers, n.options = folded, p.sources, p.covers + n.covers, \
                    p.options
        for k in order:  # chains of data movement, each link read by the next alone
            n = nodes.get(k)
            if n is None or not _data_movement(n.op):
                continue
            n.chain = n.chain or (n.op,)
            src = n.sources[0]
            if src[0] == "node" and src[1] in nodes and _data_movement(nodes[src[1]].op) \
                    and src[1] not in outputs and readers(src[1]) == [k]:
                p = nodes.pop(src[1])
                n.chain = (p.chain or (p.op,)) + n.chain
                n.sources[0] = p.sources[0]
                n.covers = p.covers + n.covers
    steps = []
    for k in order:
        n = nodes.get(k)
        if n is None:
            continue
        op = n.op
        if len(n.chain) > 1:
            op = GatherChainDesc(n.chain[0].input_tensor, n.chain[-1].output_tensor, n.chain)
        sources = tuple(("buffer", s[1]) if s[0] == "node" else s for s in n.sources
                        if s is not None)
        sources = tuple(_final(s, outputs) for s in sources)
        outs = outputs.get(k, [])
        target = ("output", outs[0]) if outs else ("buffer", k)
        steps.append(Step(op, sources, target, tuple(sorted(n.covers)),
                          tuple(("output", g) for g in outs[1:]), n.options))
    return steps


def _final(ref: Ref, outputs) -> Ref:
    """A node output that is also a graph output is read from there (it has no buffer)."""
    if ref[0] == "buffer" and ref[1] in outputs:
        return ("output", outputs[ref[1]][0])
    return ref


def describe(steps, graph: GraphDesc) -> str:
    """The plan in words, one line a step."""
    lines = []
    for i, s in enumerate(steps):
        what = type(s.op).__name__
        if isinstance(s.op, GatherChainDesc):
            what += " of " + " -> ".join(type(o).op_name() for o in s.op.operators)
        names = ", ".join(graph.node_label(k) for k in s.nodes)
        ins = ", ".join(f"{r[0]} {r[1]}" for r in s.inputs)
        outs = ", ".join(f"{r[0]} {r[1]}" for r in (s.output,) + s.also)
        opts = "".join(f" ({k}={v})" for k, v in s.options)
        lines.append(f"step {i}: {what}{opts} [{names}]: {ins} -> {outs}")
    return "\n".join(lines)
