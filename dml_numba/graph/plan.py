"""What a compiled graph runs: its nodes rewritten into steps, fused where the result stays the
same. Pure Python over descriptors (no compiling here), so the plan can be read and tested.

On the "cpu" and "cuda" devices the rules of :mod:`.rules` (absorb, fold, crop, chain) rewrite
the graph to a fixed point; the "numpy" device runs the nodes as they are, the specification.
Then each node left is one step: a node output that other steps still read lives in a buffer
allocated once per compiled graph (per thread) and reused by every call; one that is a graph
output is written straight into it, and copied to any further graph output it also is. On those
devices a join whose inputs can be written in place (:func:`join_in_place`) is no step: each
input is computed straight into its part of the join's buffer.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..ops.fused_add import FusedAddDesc
from ..ops.gather_chain import GatherChainDesc
from ..ops.pointwise_depthwise import PointwiseDepthwiseDesc
from .desc import GraphDesc
from .rules import PHASES, Work, apply_rules

#: where a step reads or writes: ("input", k) a graph input, ("output", k) a graph output,
#: ("buffer", k) the buffer of (what was) node k's output, ("buffer", k, i) of its output i > 0
Ref = tuple


@dataclass(frozen=True)
class Step:
    """One compiled operator of the graph: ``op`` (a descriptor) reads ``inputs`` and writes
    ``output``; ``nodes`` are the graph nodes it computes, ``also`` further graph outputs that
    receive a copy of its result; ``more``: for an operator of several outputs, ``(ref,
    also)`` of each output after the first; ``into``: ``(whole, byte offset)`` where its
    output is written in place as a part of the buffer ``whole`` (:func:`join_in_place`)."""

    op: object
    inputs: tuple
    output: Ref
    nodes: tuple
    also: tuple = ()
    options: tuple = ()
    more: tuple = ()
    into: tuple = ()


def plan(graph: GraphDesc, fuse: bool = True, device: str = "cpu",
         phases=PHASES) -> list[Step]:
    """The steps that compute ``graph`` on ``device``, in order (``phases``: the rules applied,
    :data:`.rules.PHASES` by default)."""
    work = Work(graph, device)
    order = graph.order()
    if fuse:
        apply_rules(work, order, phases)
    outputs = work.outputs
    steps = []
    for k in order:
        n = work.nodes.get(k)
        if n is None:
            continue
        op = n.op if n.covers != (k,) else graph.nodes[k].operator  # untouched: as given
        if len(n.chain) > 1:
            op = GatherChainDesc(n.chain[0].input_tensor, n.chain[-1].output_tensor, n.chain)
        sources = tuple(_final(buffer(s[1], s[2]) if s[0] == "node" else s, outputs)
                        for s in n.sources if s is not None)
        targets = []
        for i in range(len(op.bound_outputs())):
            outs = outputs.get((k, i), [])
            targets.append((("output", outs[0]) if outs else buffer(k, i),
                            tuple(("output", g) for g in outs[1:])))
        steps.append(Step(op, sources, targets[0][0], tuple(sorted(n.covers)), targets[0][1],
                          n.options, tuple(targets[1:])))
    return join_in_place(steps) if fuse else steps


def join_in_place(steps) -> list[Step]:
    """``steps`` with each join whose inputs can be computed straight into their parts of its
    buffer removed (the copies it makes saved: a U-Net's skip connections), the steps writing
    its inputs writing there instead (``Step.into``), where every one of
    :data:`JOIN_IN_PLACE` holds. Every other step reading a joined tensor reads its part of
    the buffer, where the steps writing the join's other parts do not write (parts do not
    overlap); the buffer lives from its first part's step to its last reader's
    (:mod:`.memory`)."""
    writer = {s.output: i for i, s in enumerate(steps) if s.output[0] == "buffer"}
    steps = list(steps)
    for j in range(len(steps)):
        if join_refusal(steps, j, writer) is not None:
            continue
        join = steps[j]
        for ref, at in zip(join.inputs, join.op.joined_parts()):
            steps[writer[ref]] = dataclasses.replace(steps[writer[ref]], into=(join.output, at))
        steps[j] = None
    return [s for s in steps if s is not None]


def _writers(steps, join, writer):
    return [steps[writer[ref]] if ref in writer else None for ref in join.inputs]


#: ``(name, holds(steps, step, writer))``: what a step needs to be a join done in place
#: (:func:`join_in_place`; ``writer``: the step writing each buffer as its first output, by
#: the buffer's reference; ``steps``: None where a step was removed)
JOIN_IN_PLACE = (
    ("the step's output is its inputs whole, one run of it each (a join's, every axis before "
     "the joined one of size 1: ``joined_parts``)",
     lambda steps, join, writer: join.op.joined_parts() is not None),
    ("the join writes a buffer (not a graph output: the caller's array)",
     lambda steps, join, writer: join.output[0] == "buffer"),
    ("the join reads each tensor once (one tensor has one place)",
     lambda steps, join, writer: len(set(join.inputs)) == len(join.inputs)),
    ("each input is the first output of a step still planned that writes no part of another "
     "join (not a graph input or output, nor an operator's second output, nor a join's done "
     "in place)",
     lambda steps, join, writer: all(w is not None and not w.into
                                     for w in _writers(steps, join, writer))),
)


def join_refusal(steps, j, writer):
    """The first of :data:`JOIN_IN_PLACE` that step ``j`` does not meet, or None."""
    return next((name for name, holds in JOIN_IN_PLACE if not holds(steps, steps[j], writer)),
                None)


def buffer(k: int, i: int = 0) -> Ref:
    """The buffer of node ``k``'s output ``i``."""
    return ("buffer", k) if i == 0 else ("buffer", k, i)


def _final(ref: Ref, outputs) -> Ref:
    """A node output that is also a graph output is read from there (it has no buffer)."""
    if ref[0] == "buffer":
        at = (ref[1], ref[2] if len(ref) > 2 else 0)
        if at in outputs:
            return ("output", outputs[at][0])
    return ref


def describe(steps, graph: GraphDesc) -> str:
    """The plan in words, one line a step."""
    lines = []
    for i, s in enumerate(steps):
        what = type(s.op).__name__
        if isinstance(s.op, GatherChainDesc):
            what += " of " + " -> ".join(type(o).op_name() for o in s.op.operators)
        elif isinstance(s.op, FusedAddDesc):  # the operator, then the sum (its activation)
            act = s.op.operator.fused_activation
            what += f" of {type(s.op.operator).op_name()} + addend" + (
                f" -> {type(act).__name__}" if act is not None else "")
        elif isinstance(s.op, PointwiseDepthwiseDesc):  # the pointwise, then the depthwise
            what += " of pointwise -> depthwise convolution"
        names = ", ".join(graph.node_label(k) for k in s.nodes)
        ins = ", ".join(f"{r[0]} {r[1]}" for r in s.inputs)
        refs = [s.output, *s.also]
        for ref, also in s.more:
            refs += [ref, *also]
        outs = ", ".join(" ".join(str(v) for v in r) for r in refs)
        if s.into:
            outs += f" (in {' '.join(str(v) for v in s.into[0])} at byte {s.into[1]})"
        opts = "".join(f" ({k}={v})" for k, v in s.options)
        lines.append(f"step {i}: {what}{opts} [{names}]: {ins} -> {outs}")
    return "\n".join(lines)
