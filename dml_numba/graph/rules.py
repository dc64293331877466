"""The rewrites of a compiled graph, each a rule object whose preconditions are written as code
(named, so a plan can say why a rule did not apply and a test can remove one and watch the
results go wrong). Rules read operators through their traits only: a data-movement operator's
``gather_plan()`` and a windowed operator's ``window()``/``rewindow()``
(:class:`~dml_numba.ops._base.Window`); what a device's kernel can read its input through comes
from the registry. No operator class and no backend is named here.

One word per rewrite, here and in ``docs/GRAPHS.md``:

* **absorb**: a CONSTANT padding by +0 of the spatial axes, in front of a window whose padding
  reads zeros, becomes part of the window's own padding;
* **fold**: an EDGE, REFLECTION, SYMMETRIC or WRAP padding of the spatial axes, in front of a
  window without padding of its own, becomes the window's padding read through the mode's index
  map by its kernel (the lowering's ``input_padding`` option, where the registry says the
  device's kernel reads through that mode);
* **crop**: a slice with positive strides after a window becomes the window's strides and start
  padding: only the windows the slice keeps are computed;
* **chain**: data-movement nodes, each read by the next alone, become one gather
  (:class:`~dml_numba.ops.gather_chain.GatherChainDesc`);
* **fuse**: an activation of its own (``as_fused_activation()``), after an operator whose
  ``fused_activation`` slot is empty, becomes that operator's fused activation.
* **residual**: an addition of two tensors alike (``is_sum()``), one of them the result of an
  operator that takes an addend (``takes_addend``) and has an empty ``fused_activation`` slot,
  becomes that operator with the other tensor as its addend and the addition's activation as
  its own (:class:`~dml_numba.ops.fused_add.FusedAddDesc`, where the device runs one).
* **pair**: a depthwise convolution (``is_depthwise()``) whose input is a pointwise
  convolution's result (``is_pointwise()``) becomes one operator
  (:class:`~dml_numba.ops.pointwise_depthwise.PointwiseDepthwiseDesc`), where the device
  computes the pair as one kernel (the registry's ``runs_as_one``): the pointwise result is
  computed a band of rows at a time where the depthwise windows read it, never stored whole.

Absorb and fold change what the window reads, not what it writes: the padding node stays
wherever anything else reads it (or it is a graph output). Crop, chain, fuse, residual and pair
remove a node's output: they need that node to be no graph output and read by the rewritten
node alone.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .._registry import has_lowering, option_values, runs_as_one
from ..ops._base import FOLDS, PAD_KINDS
from ..ops.fused_add import FusedAddDesc
from ..ops.pointwise_depthwise import PointwiseDepthwiseDesc

#: the padding mode a fold reads through, by the AxisMap kind of its gather plan
_MODES = {kind: mode for mode, kind in FOLDS.items()}


@dataclass
class Node:
    """A node while the rules run: its operator (canonical), where each input slot reads from
    (``("input", g)``, ``("node", k, i)``: output ``i`` of node ``k``, or None for an absent
    input), the graph nodes it stands for, the data-movement operators it fuses (once the chain
    rule has run), and the compile options rules added (``(("input_padding", mode),)`` once a
    fold has)."""

    op: object
    sources: list
    covers: tuple
    chain: tuple = ()
    options: tuple = ()


class Work:
    """The graph while the rules run: the nodes left, who reads each node's outputs (reader,
    slot), and which node outputs are graph outputs. A source ``("node", k, i)`` is output
    ``i`` of node ``k`` (max pooling's indices are its output 1). Every update is local
    (linear planning)."""

    def __init__(self, graph, device: str):
        self.device = device
        self.nodes: dict[int, Node] = {}
        for k in range(len(graph.nodes)):
            self.nodes[k] = Node(graph.nodes[k].operator.canonical(),
                                 [None] * len(graph.node_inputs(k)), (k,))
        self.uses: dict[int, list] = {k: [] for k in self.nodes}
        for e in graph.input_edges:
            self.nodes[e.to_node_index].sources[e.to_node_input_index] = \
                ("input", e.graph_input_index)
        for e in graph.intermediate_edges:
            self.nodes[e.to_node_index].sources[e.to_node_input_index] = \
                ("node", e.from_node_index, e.from_node_output_index)
            self.uses[e.from_node_index].append((e.to_node_index, e.to_node_input_index))
        #: (node, output index) -> the graph outputs it is, in order
        self.outputs: dict[tuple, list[int]] = {}
        for e in sorted(graph.output_edges, key=lambda e: e.graph_output_index):
            self.outputs.setdefault((e.from_node_index, e.from_node_output_index),
                                    []).append(e.graph_output_index)
        self._output_nodes = {k for k, _ in self.outputs}

    def producer(self, k: int, slot: int = 0) -> int | None:
        """The node whose output 0 node ``k`` reads as its input ``slot`` (0: its tensor), if
        a node's (a node reading another output, max pooling's indices, has no producer to
        rewrite with: the rules rewrite a window's or a data movement's values)."""
        sources = self.nodes[k].sources
        src = sources[slot] if len(sources) > slot else None
        return src[1] if src is not None and src[0] == "node" and src[2] == 0 else None

    def read_by_alone(self, p: int, k: int) -> bool:
        """Node ``p``'s output is read by node ``k``'s input 0 and by nothing else."""
        return self.uses[p] == [(k, 0)]

    def reshaped(self, p: int, k: int, slot: int = 0) -> bool:
        """Node ``k``'s input ``slot`` sees node ``p``'s output with other sizes (a view)."""
        op = self.nodes[k].op
        return getattr(op, op.input_fields[slot]).sizes != self.nodes[p].op.output.sizes

    def is_output(self, p: int) -> bool:
        """Any output of node ``p`` is a graph output."""
        return p in self._output_nodes

    def take_over(self, k: int, p: int, op, whole: bool = False, remove: bool = False,
                  at: int = 0, keep=(), **fields) -> None:
        """Node ``k`` becomes ``op`` (covering ``p``'s nodes too), reading what ``p`` reads as
        its input 0 instead of ``p``'s output (which it read as its input ``at``);
        ``whole``: reading every input of ``p`` (``k`` becomes ``p``'s operator, rewritten),
        then its own inputs ``keep`` (slots: a residual's other summand, a pair's depthwise
        filter and bias). ``p`` is dropped once nothing reads it and it is no graph output;
        ``remove``: dropped, its output gone (the rule's preconditions made sure nothing else
        needs it)."""
        n, q = self.nodes[k], self.nodes[p]
        kept = [n.sources[slot] for slot in keep]
        for slot, src in zip(keep, kept):
            if src is not None and src[0] == "node":
                self.uses[src[1]].remove((k, slot))
        self.uses[p].remove((k, at))
        if whole:
            n.sources = [None] * len(q.sources)
        for slot in range(len(q.sources)) if whole else (0,):
            src = n.sources[slot] = q.sources[slot]
            if src is not None and src[0] == "node":
                self.uses[src[1]].append((k, slot))
        n.op, n.covers = op, q.covers + n.covers
        for name, value in fields.items():
            setattr(n, name, value)
        if remove or (not self.uses[p] and not self.is_output(p)):
            self.drop(p)
        for src in kept:
            n.sources.append(src)
            if src is not None and src[0] == "node":
                self.uses[src[1]].append((k, len(n.sources) - 1))

    def drop(self, p: int) -> None:
        for slot, src in enumerate(self.nodes.pop(p).sources):
            if src is not None and src[0] == "node":
                self.uses[src[1]].remove((p, slot))
        del self.uses[p]


# -- what the rules read of an operator: its traits ---------------------------------------------

def gather_plan(op):
    """The operator's gather plan where it is data movement, else None."""
    return op.gather_plan() if hasattr(op, "gather_plan") else None


def spatial_padding(op):
    """``(kind, start, end, constant)`` where ``op`` pads the spatial axes (2 on) only: the
    AxisMap kind all its axes read through ('shift' for a CONSTANT padding, whose constant is
    ``constant``), and its start and end padding per spatial axis; None for anything else."""
    plan = gather_plan(op)
    if plan is None or len(plan.maps) < 3 or len({m.kind for m in plan.maps}) != 1 or \
            plan.maps[0].kind not in PAD_KINDS:
        return None
    if any(m.a or m.size != m.n for m in plan.maps[:2]):
        return None
    spatial = plan.maps[2:]
    return (plan.maps[0].kind, tuple(m.a for m in spatial),
            tuple(m.size - m.n - m.a for m in spatial), plan.constant)


def is_positive_zero(value) -> bool:
    """+0 (what a window's padding reads), not -0.0 and not any other value."""
    return value == 0 and math.copysign(1.0, float(value)) > 0


# -- the rules -------------------------------------------------------------------------------

class Rule:
    """A rewrite of node ``k`` with its producer ``p`` (the node its input 0 reads):
    ``preconditions`` are ``(name, check(work, k, p))`` pairs, every one required; ``rewrite``
    gives the rewritten operator (None: not expressible); ``apply`` changes the work."""

    name = ""
    preconditions: tuple = ()
    #: the rewrite takes the producer's output away (crop, chain), or only reads around it
    #: (absorb, fold: the producer stays wherever anything else reads it)
    removes = False
    #: the rewritten node reads every input of the producer (crop: it becomes the producer's
    #: window), not only its input 0
    whole = False

    def refusal(self, work: Work, k: int) -> str | None:
        """The first precondition node ``k`` fails (None: the rule applies)."""
        p = work.producer(k)
        if p is None:
            return "the node reads a node's output"
        if work.reshaped(p, k):
            return "the node reads the producer's output with its sizes (not through a view)"
        for name, check in self.preconditions:
            if not (check(work, k, p) if check is not None else
                    self.rewrite(work, k, p) is not None):
                return name
        return None

    def rewrite(self, work: Work, k: int, p: int):  # pragma: no cover - every rule overrides
        raise NotImplementedError

    def apply(self, work: Work, k: int) -> None:
        p = work.producer(k)
        op = self.rewrite(work, k, p)
        if op is None:  # pragma: no cover - the preconditions exclude it
            raise AssertionError(f"the {self.name} rule's rewrite of node {k} is invalid")
        work.take_over(k, p, op, whole=self.whole, remove=self.removes,
                       **self.changes(work, k, p))

    def changes(self, work: Work, k: int, p: int) -> dict:
        return {}


def reads_through(desc_type, device: str) -> tuple:
    """The padding modes the device's kernel for ``desc_type`` reads its input through: what
    its lowering declares for the ``input_padding`` option (the registry's word)."""
    return option_values(desc_type, device, "input_padding")


def _window(work, k):
    return work.nodes[k].op.window()


def _pad(work, p):
    """The producer's spatial padding (:func:`spatial_padding`); None where it is anything
    else, a fused chain (ending in a padding or not) included."""
    return None if work.nodes[p].chain else spatial_padding(work.nodes[p].op)


_HAS_WINDOW = ("the node has a window", lambda w, k, p: _window(w, k) is not None)
#: the rewrite itself gives a valid descriptor (checked last; ``None``: :meth:`Rule.refusal`
#: calls the rule's ``rewrite``): a crop whose first kept window starts inside the input, or
#: with negative strides, is a slice the window cannot express (absorb and fold keep the
#: window's padded extent, so theirs is always valid)
_VALID = ("the rewritten operator is valid", None)
_PADS_SPATIAL = ("the producer pads the spatial axes only", lambda w, k, p: _pad(w, p) is not None)


def _padded_window(work, k, p):
    """The window of node ``k`` reading the input of the padding ``p`` in front of it, that
    padding added to its own (absorb, fold)."""
    win, (_, start, end, _) = _window(work, k), _pad(work, p)
    op = work.nodes[k].op
    return op.rewindow(work.nodes[p].op.input_tensor, op.output_tensor, win.strides,
                       [a + b for a, b in zip(win.start_padding, start)],
                       [a + b for a, b in zip(win.end_padding, end)])


_NO_FOLD_YET = ("the window reads through no folded padding",
                lambda w, k, p: not w.nodes[k].options)
_PRODUCER_NOT_OUTPUT = ("the producer is no graph output", lambda w, k, p: not w.is_output(p))
_READ_ALONE = ("the producer is read by this node alone", lambda w, k, p: w.read_by_alone(p, k))


class Absorb(Rule):
    """A CONSTANT padding by +0 of the spatial axes becomes part of the window's padding."""

    name = "absorb"
    preconditions = (
        _HAS_WINDOW,
        ("the window's padding reads zeros", lambda w, k, p: _window(w, k).padding_reads_zero),
        _PADS_SPATIAL,
        ("the producer pads with +0",
         lambda w, k, p: _pad(w, p)[0] == "shift" and is_positive_zero(_pad(w, p)[3])),
        _NO_FOLD_YET,
    )

    def rewrite(self, work, k, p):
        return _padded_window(work, k, p)


class Fold(Rule):
    """A mode padding of the spatial axes becomes the window's padding, read through the
    mode's map by the device's kernel."""

    name = "fold"
    preconditions = (
        _HAS_WINDOW,
        _PADS_SPATIAL,
        ("the producer pads through a mode (not a constant)",
         lambda w, k, p: _pad(w, p)[0] in _MODES),
        # (the map would be read over the window's zeros too; a window folded already has
        # padding of its own, or its fold pads nothing and a second one replaces it)
        ("the window has no padding of its own", lambda w, k, p: not _window(w, k).padded),
        ("the device's kernel reads through the mode",
         lambda w, k, p: _MODES[_pad(w, p)[0]] in reads_through(type(w.nodes[k].op),
                                                                 w.device)),
    )

    def rewrite(self, work, k, p):
        return _padded_window(work, k, p)

    def changes(self, work, k, p):
        return {"options": (("input_padding", _MODES[_pad(work, p)[0]]),)}


def _slice_maps(op):
    """The maps of an affine gather (a slice), or None."""
    plan = gather_plan(op)
    if plan is None or plan.constant is not None or any(m.kind != "affine" for m in plan.maps):
        return None
    return plan.maps


class Crop(Rule):
    """A slice after a window: the window computes only the windows the slice keeps (its
    strides times the slice's, its start padding moved to the first kept window). Valid where
    the slice keeps the batch and channel axes whole (a window's output has its input's batch
    and its own channels), its strides are positive and its first kept window starts at or
    before the input's first element (the window's start padding, less the slice's offset
    times the stride, is not negative): a window cannot start reading inside its input."""

    name = "crop"
    removes = whole = True
    preconditions = (
        ("the node is a slice (an affine gather)", lambda w, k, p: _slice_maps(w.nodes[k].op)
         is not None),
        ("the producer has a window", lambda w, k, p: _window(w, p) is not None),
        _PRODUCER_NOT_OUTPUT,
        _READ_ALONE,
        _VALID,
    )

    def rewrite(self, work, k, p):
        maps, win, op = _slice_maps(work.nodes[k].op), _window(work, p), work.nodes[p].op
        strides, start, end = [], [], []
        for m, s, a, e, n in zip(maps[2:], win.strides, win.start_padding, win.extents,
                                 op.input_tensor.sizes[2:]):
            front = a - m.a * s
            reach = (m.size - 1) * s * m.s + e
            strides.append(s * m.s)
            start.append(front)
            end.append(max(0, reach - n - front))
        return op.rewindow(op.input_tensor, work.nodes[k].op.output_tensor, strides, start, end)

    def changes(self, work, k, p):
        return {"options": work.nodes[p].options}


class Chain(Rule):
    """Two data-movement nodes, the first read by the second alone, become one gather."""

    name = "chain"
    removes = True
    preconditions = (
        ("the node moves data", lambda w, k, p: gather_plan(w.nodes[k].op) is not None),
        ("the producer moves data", lambda w, k, p: gather_plan(w.nodes[p].op) is not None),
        _PRODUCER_NOT_OUTPUT,
        _READ_ALONE,
    )

    def rewrite(self, work, k, p):
        return work.nodes[k].op

    def changes(self, work, k, p):
        return {"chain": (work.nodes[p].chain or (work.nodes[p].op,)) +
                         (work.nodes[k].chain or (work.nodes[k].op,))}


class Fuse(Rule):
    """An activation of its own after an operator that takes a fused activation and has none:
    the operator applies it as it stores its output (one pass over memory fewer). The
    operator's result is the activation's input alone (no graph output, no other reader), and
    its output tensor becomes the activation's (same sizes and type)."""

    name = "fuse"
    removes = whole = True
    preconditions = (
        ("the node is an activation of its own",
         lambda w, k, p: w.nodes[k].op.as_fused_activation() is not None),
        ("the producer has an empty fused-activation slot",
         lambda w, k, p: "fused_activation" in getattr(w.nodes[p].op, "__dataclass_fields__",
                                                       ()) and
         w.nodes[p].op.fused_activation is None),
        # (an integer addition takes no fused activation: a RELU of its own after it stays)
        ("the producer computes in floating point",
         lambda w, k, p: w.nodes[p].op.output.data_type.is_float),
        _PRODUCER_NOT_OUTPUT,
        _READ_ALONE,
    )

    def rewrite(self, work, k, p):
        op, act = work.nodes[p].op, work.nodes[k].op
        return replace(op, fused_activation=act.as_fused_activation(),
                       **{op.output_field: act.output})

    def changes(self, work, k, p):
        return {"options": work.nodes[p].options}


def _summand(work, k) -> int:
    """The input slot of addition ``k`` whose producer the residual rule rewrites: the first
    whose producer meets every precondition, else the first read from a node (whose refusal
    is then reported), else 0."""
    read = [slot for slot in (0, 1) if work.producer(k, slot) is not None]
    for slot in read:
        if all(check(work, k, work.producer(k, slot)) for _, check in Residual.preconditions):
            return slot
    return read[0] if read else 0


def _slot_of(work, k, p) -> int:
    """The input slot of node ``k`` that reads producer ``p``'s output 0."""
    return next(i for i, s in enumerate(work.nodes[k].sources)
                if s is not None and s[0] == "node" and s[1] == p and s[2] == 0)


class Residual(Rule):
    """An addition of two tensors alike, one of them the result of an operator that takes an
    addend (a convolution) read by the addition alone: the operator adds the other tensor to
    each result before its fused activation, which becomes the addition's (one pass over
    memory: the operator's result is never stored alone). Either input may be the operator's
    (a sum is the same either way round). The operator's own slot must be empty (its
    activation would come before the sum), and the device must run such an operator."""

    name = "residual"
    removes = whole = True
    preconditions = (
        ("the node is a sum of two tensors alike", lambda w, k, p: w.nodes[k].op.is_sum()),
        ("the producer takes an addend", lambda w, k, p: w.nodes[p].op.takes_addend),
        ("the producer has an empty fused-activation slot",
         lambda w, k, p: w.nodes[p].op.fused_activation is None),
        ("the device runs an operator with an addend",
         lambda w, k, p: has_lowering(FusedAddDesc, w.device)),
        _PRODUCER_NOT_OUTPUT,
        ("the producer is read by this node alone",
         lambda w, k, p: w.uses[p] == [(k, _slot_of(w, k, p))]),
        ("the node reads the producer's output with its sizes (not through a view)",
         lambda w, k, p: not w.reshaped(p, k, _slot_of(w, k, p))),
    )

    def refusal(self, work, k):
        slot = _summand(work, k)
        if work.producer(k, slot) is None:
            return "the node reads a node's output"
        for name, check in self.preconditions:
            if not check(work, k, work.producer(k, slot)):
                return name
        return None

    def rewrite(self, work, k, p):
        add, op = work.nodes[k].op, work.nodes[p].op
        slot = _slot_of(work, k, p)
        other = getattr(add, add.input_fields[1 - slot])
        return FusedAddDesc(replace(op, fused_activation=add.fused_activation,
                                    **{op.output_field: add.output}), other)

    def apply(self, work, k):
        slot = _summand(work, k)
        p = work.producer(k, slot)
        op = self.rewrite(work, k, p)
        work.take_over(k, p, op, whole=True, remove=True, at=slot, keep=(1 - slot,),
                       options=work.nodes[p].options)


def _pair(work, k, p):
    """The pair of producer ``p`` and node ``k`` as one descriptor (valid where the
    preconditions before the device's hold: the node reads the producer's result with its
    own sizes and type, a valid graph's edge)."""
    return PointwiseDepthwiseDesc(work.nodes[p].op, work.nodes[k].op)


class Pair(Rule):
    """A depthwise convolution reading a pointwise convolution's result alone: one operator, where
    the device computes it as one kernel (the CPU: float32, the depthwise layer strided and
    within its depthwise lanes kernel's reach), which computes the pointwise result a band of
    rows at a time where the depthwise windows read it; it is never stored whole. The node may
    not read through a folded padding (the pair's kernel reads zeros; a pointwise producer has
    no padding to fold into: a fold or an absorb would give it some)."""

    name = "pair"
    removes = whole = True
    preconditions = (
        ("the node is a depthwise convolution", lambda w, k, p: w.nodes[k].op.is_depthwise()),
        ("the producer is a pointwise convolution",
         lambda w, k, p: w.nodes[p].op.is_pointwise()),
        ("the node reads through no folded padding", lambda w, k, p: not w.nodes[k].options),
        _PRODUCER_NOT_OUTPUT,
        _READ_ALONE,
        ("the device computes the pair as one kernel",
         lambda w, k, p: runs_as_one(_pair(w, k, p), w.device)),
    )

    def rewrite(self, work, k, p):
        return _pair(work, k, p)

    def apply(self, work, k):
        p = work.producer(k)
        op = self.rewrite(work, k, p)
        work.take_over(k, p, op, whole=True, remove=True,  # then the depthwise filter and bias
                       keep=range(1, len(work.nodes[k].sources)))


#: the rules in phases, each applied to a fixed point before the next: the window rules and
#: the activations' fusion first (a padding or slice next to a window is worth more there than
#: in a chain), then the residual additions (an addition's activation fused first: it comes
#: with the sum), then the pairs (their activations fused first), then chains
PHASES = ((Fuse(), Absorb(), Fold(), Crop()), (Residual(),), (Pair(),), (Chain(),))


def apply_rules(work: Work, order, phases=PHASES) -> None:
    """Each phase's rules to a fixed point: the nodes in topological order, each rewritten by
    the first rule that applies until none does. A rule rewrites a node with its producer,
    which the order has already visited; the rewrite changes that node, drops the producer or
    leaves it, and moves the node's read from the producer to what the producer read. So the
    readers of a node visited before only ever grow (or it is dropped), and a precondition on
    readers refused there stays refused: one pass is the fixed point."""
    for rules in phases:
        for k in order:
            while k in work.nodes:
                rule = next((r for r in rules if r.refusal(work, k) is None), None)
                if rule is None:
                    break
                rule.apply(work, k)
