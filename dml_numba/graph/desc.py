"""DirectML's graph descriptors (DML_GRAPH_DESC and its node and edge structs), validated.

A graph has ``input_count`` inputs and ``output_count`` outputs; its nodes are operators; input
edges connect a graph input to a node's input, intermediate edges a node's output to another
node's input, output edges a node's output to a graph output. Inputs are numbered in each
operator's binding order (convolution: input, filter, bias), outputs likewise (max pooling with
its indices output has two: the values, then the indices).

The rules, checked on construction (a ValidationError naming the node or edge): indices in
range; every present input of every node fed by exactly one edge (an absent bias by none); the
tensor descs along an edge equal in sizes and data type (strides describe each side's buffer),
or, along an intermediate edge, packed descs of one element count and data type: the consumer
sees the producer's buffer with other sizes (a view: what ONNX's Reshape and Flatten are);
every graph input used, with one sizes/data type across the nodes it feeds; every node output
used; every graph output produced by exactly one edge; no cycle.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

from .._errors import Checker
from ..ops._base import DESCRIPTOR_TYPES, OperatorDesc
from ..tensor import TensorDesc

__all__ = ["GraphDesc", "OperatorGraphNodeDesc", "InputGraphEdgeDesc", "OutputGraphEdgeDesc",
           "IntermediateGraphEdgeDesc"]


def _name(c: Checker, field: str, value):
    if value is not None and not isinstance(value, str):
        c.fail(field, value, "expected None or a str")
    return value


@dataclass(frozen=True)
class OperatorGraphNodeDesc:
    """DML_OPERATOR_GRAPH_NODE_DESC: an operator descriptor and an optional name (used in
    error messages)."""

    operator: OperatorDesc
    name: str | None = None

    def __post_init__(self):
        c = Checker(type(self).__name__)
        if type(self.operator) not in DESCRIPTOR_TYPES:
            c.fail("operator", self.operator, "expected one of dml_numba's operator descriptors")
        if self.operator.output is None:
            c.fail("operator", self.operator, "expected an operator with its tensors (an "
                   "activation's fused form has none: give it input_tensor and output_tensor)")
        _name(c, "name", self.name)


@dataclass(frozen=True)
class InputGraphEdgeDesc:
    """DML_INPUT_GRAPH_EDGE_DESC: graph input ``graph_input_index`` feeds input
    ``to_node_input_index`` of node ``to_node_index``."""

    graph_input_index: int
    to_node_index: int
    to_node_input_index: int
    name: str | None = None

    def __post_init__(self):
        _edge_fields(self)


@dataclass(frozen=True)
class OutputGraphEdgeDesc:
    """DML_OUTPUT_GRAPH_EDGE_DESC: output ``from_node_output_index`` of node ``from_node_index``
    is graph output ``graph_output_index``."""

    from_node_index: int
    from_node_output_index: int
    graph_output_index: int
    name: str | None = None

    def __post_init__(self):
        _edge_fields(self)


@dataclass(frozen=True)
class IntermediateGraphEdgeDesc:
    """DML_INTERMEDIATE_GRAPH_EDGE_DESC: output ``from_node_output_index`` of node
    ``from_node_index`` feeds input ``to_node_input_index`` of node ``to_node_index``."""

    from_node_index: int
    from_node_output_index: int
    to_node_index: int
    to_node_input_index: int
    name: str | None = None

    def __post_init__(self):
        _edge_fields(self)


def _edge_fields(edge) -> None:
    c = Checker(type(edge).__name__)
    for f in edge.__dataclass_fields__:
        if f == "name":
            _name(c, "name", edge.name)
        else:
            object.__setattr__(edge, f, c.integer(f, getattr(edge, f), lo=0))


def _where(kind: str, k: int, edge) -> str:
    name = getattr(edge, "name", None)
    return f"{kind}[{k}]" + (f" ({name!r})" if name else "")


@dataclass(frozen=True)
class GraphDesc:
    """DML_GRAPH_DESC; the node and edge counts are the tuples' lengths.

    >>> import dml_numba as dml
    >>> t = lambda *s: dml.TensorDesc(dml.DataType.FLOAT32, s)
    >>> tile = dml.TileOperatorDesc(t(2, 3), t(4, 3), (2, 1))
    >>> g = GraphDesc(1, 1, (OperatorGraphNodeDesc(tile, "tile"),),
    ...               (InputGraphEdgeDesc(0, 0, 0),), (OutputGraphEdgeDesc(0, 0, 0),), ())
    >>> g.input_tensor(0).sizes, g.output_tensor(0).sizes
    ((2, 3), (4, 3))
    """

    input_count: int
    output_count: int
    nodes: tuple
    input_edges: tuple
    output_edges: tuple
    intermediate_edges: tuple = ()

    def __post_init__(self):
        c = Checker("GraphDesc")
        n_in = c.integer("input_count", self.input_count, lo=1)
        n_out = c.integer("output_count", self.output_count, lo=1)
        object.__setattr__(self, "input_count", n_in)
        object.__setattr__(self, "output_count", n_out)
        for f, cls in (("nodes", OperatorGraphNodeDesc), ("input_edges", InputGraphEdgeDesc),
                       ("output_edges", OutputGraphEdgeDesc),
                       ("intermediate_edges", IntermediateGraphEdgeDesc)):
            seq = getattr(self, f)
            if isinstance(seq, (str, bytes)) or not hasattr(seq, "__len__"):
                c.fail(f, seq, f"expected a sequence of {cls.__name__}")
            seq = tuple(seq)
            for k, item in enumerate(seq):
                c.instance(f"{f}[{k}]", item, cls, f"a {cls.__name__}")
            object.__setattr__(self, f, seq)
        if not self.nodes:
            c.fail("nodes", self.nodes, "expected at least one node")
        self._check_edges(c)

    # -- what the rest of the library reads ---------------------------------------------------
    def node_inputs(self, k: int) -> tuple[tuple[str, TensorDesc], ...]:
        """(field, desc) of every input slot of node ``k``, in binding order (an absent bias is
        ``(field, None)``)."""
        op = self.nodes[k].operator
        return tuple((f, getattr(op, f)) for f in op.input_fields)

    def node_label(self, k: int) -> str:
        return _where("nodes", k, self.nodes[k])

    def input_tensor(self, k: int) -> TensorDesc:
        """Graph input ``k``'s desc (packed): that of the node inputs it feeds."""
        e = self._first_edges[0][k]
        t = self.node_inputs(e.to_node_index)[e.to_node_input_index][1]
        return TensorDesc(t.data_type, t.sizes)

    def output_tensor(self, k: int) -> TensorDesc:
        e = self._first_edges[1][k]
        t = self.node_output(e.from_node_index, e.from_node_output_index)
        return TensorDesc(t.data_type, t.sizes)

    def node_output(self, k: int, i: int = 0) -> TensorDesc:
        """Output ``i`` of node ``k`` (its operator's outputs in binding order)."""
        return self.nodes[k].operator.bound_outputs()[i][1]

    def order(self) -> tuple[int, ...]:
        """The nodes in a topological order (ties by index)."""
        return self._order

    # -- validation ---------------------------------------------------------------------------
    def _check_edges(self, c: Checker) -> None:
        """Every edge names real nodes and slots, feeds each present node input and graph
        output exactly once, with the tensor its source has; then the order (no cycle)."""
        edges = _Edges(self, c)
        edges.inputs()
        consumers, used = edges.intermediates()
        used |= edges.outputs()
        edges.connected(used)
        object.__setattr__(self, "_order", self._toposort(c, consumers))
        firsts: tuple = ({}, {})  # graph input / output index -> its first edge
        for e in self.input_edges:
            firsts[0].setdefault(e.graph_input_index, e)
        for e in self.output_edges:
            firsts[1].setdefault(e.graph_output_index, e)
        object.__setattr__(self, "_first_edges", firsts)

    def reshaping_edges(self) -> tuple:
        """The intermediate edges whose consumer sees the producer's buffer with other sizes
        (:func:`reshapes`)."""
        return tuple(e for e in self.intermediate_edges if reshapes(
            self.node_output(e.from_node_index, e.from_node_output_index),
            self.node_inputs(e.to_node_index)[e.to_node_input_index][1]))

    def _toposort(self, c: Checker, consumers) -> tuple[int, ...]:
        indegree = {k: 0 for k in consumers}
        for dsts in consumers.values():
            for d in dsts:
                indegree[d] += 1
        ready = [k for k, v in indegree.items() if v == 0]
        heapq.heapify(ready)
        order = []
        while ready:  # (a heap: linear-logarithmic in the nodes, however wide the graph)
            k = heapq.heappop(ready)
            order.append(k)
            for d in consumers[k]:
                indegree[d] -= 1
                if indegree[d] == 0:
                    heapq.heappush(ready, d)
        if len(order) < len(consumers):
            cycle = sorted(k for k, v in indegree.items() if v > 0)
            c.fail("intermediate_edges", ", ".join(self.node_label(k) for k in cycle),
                   "expected a directed acyclic graph; these nodes lie on or behind a cycle")
        return tuple(order)


def reshapes(out, t) -> bool:
    """Whether a node output ``out`` feeds an input ``t`` as a view with other sizes: the same
    data type and element count, other sizes, neither with strides (both packed, so the view
    reads the same elements in the same order)."""
    return (out.sizes != t.sizes and out.data_type == t.data_type and out.strides is None
            and t.strides is None and out.element_count == t.element_count)


class _Edges:
    """The edge checks of one graph (:meth:`GraphDesc._check_edges`), sharing the node inputs
    fed so far."""

    def __init__(self, graph: GraphDesc, c: Checker):
        self.g, self.c = graph, c
        self.fed: dict = {}  # (node, input) -> the label of the edge feeding it

    def node_ref(self, field, edge, attr) -> int:
        k, n_nodes = getattr(edge, attr), len(self.g.nodes)
        if k >= n_nodes:
            self.c.fail(f"{field}.{attr}", k, f"expected a node index below {n_nodes} (the "
                                              "number of nodes)")
        return k

    def graph_ref(self, field, edge, attr, count) -> None:
        k, n = getattr(edge, attr), getattr(self.g, count)
        if k >= n:
            self.c.fail(f"{field}.{attr}", k, f"expected an index below {count} ({n})")

    def input_slot(self, field, edge, node):
        g, c = self.g, self.c
        slots = g.node_inputs(node)
        k = edge.to_node_input_index
        if k >= len(slots):
            c.fail(f"{field}.to_node_input_index", k,
                   f"expected an input index below {len(slots)} (the inputs of "
                   f"{g.node_label(node)}, {type(g.nodes[node].operator).__name__}: "
                   f"{', '.join(f for f, _ in slots)})")
        fname, t = slots[k]
        if t is None:
            c.fail(f"{field}.to_node_input_index", k,
                   f"{g.node_label(node)}'s {fname} is absent from its operator; expected "
                   "no edge to it")
        if (node, k) in self.fed:
            c.fail(f"{field}.to_node_input_index", k,
                   f"{g.node_label(node)}'s {fname} is already fed by {self.fed[(node, k)]}; "
                   "expected exactly one edge to each node input")
        self.fed[(node, k)] = field
        return fname, t

    def output_slot(self, field, edge, node):
        outs = self.g.nodes[node].operator.bound_outputs()
        i = edge.from_node_output_index
        if i >= len(outs):
            self.c.fail(f"{field}.from_node_output_index", i,
                        f"expected an output index below {len(outs)} (the outputs of "
                        f"{self.g.node_label(node)}: {', '.join(f for f, _ in outs)})")
        return outs[i][1]

    def same(self, field, t, ref, ref_what) -> None:
        if t.data_type != ref.data_type or t.sizes != ref.sizes:
            self.c.fail(field, f"{t.data_type.name} {t.sizes}",
                        f"expected {ref.data_type.name} {ref.sizes}, {ref_what}")

    def inputs(self) -> None:
        """Input edges: a graph input below input_count, every one used, one tensor each."""
        g, c = self.g, self.c
        seen: dict = {}
        for k, e in enumerate(g.input_edges):
            field = _where("input_edges", k, e)
            self.graph_ref(field, e, "graph_input_index", "input_count")
            node = self.node_ref(field, e, "to_node_index")
            fname, t = self.input_slot(field, e, node)
            if e.graph_input_index in seen:
                ref, what = seen[e.graph_input_index]
                self.same(f"{field} ({g.node_label(node)}.{fname})", t, ref,
                          f"the tensor graph input {e.graph_input_index} is to {what}")
            else:
                seen[e.graph_input_index] = (t, f"{g.node_label(node)}.{fname}")
        for i in range(g.input_count):
            if i not in seen:
                c.fail("input_edges", f"graph input {i}", "expected an input edge from every "
                                                          "graph input (it feeds no node)")

    def intermediates(self) -> tuple[dict, set]:
        """Intermediate edges, each the producer's tensor (or a packed view of it); returns
        each node's consumers and the (node, output index) pairs read."""
        g = self.g
        consumers = {k: [] for k in range(len(g.nodes))}
        used = set()
        for k, e in enumerate(g.intermediate_edges):
            field = _where("intermediate_edges", k, e)
            src = self.node_ref(field, e, "from_node_index")
            dst = self.node_ref(field, e, "to_node_index")
            out = self.output_slot(field, e, src)
            fname, t = self.input_slot(field, e, dst)
            if not reshapes(out, t):
                self.same(f"{field} ({g.node_label(dst)}.{fname})", t, out,
                          f"the output tensor of {g.node_label(src)} (or its element count, "
                          "both packed: a view with other sizes)")
            consumers[src].append(dst)
            used.add((src, e.from_node_output_index))
        return consumers, used

    def outputs(self) -> set:
        """Output edges: each graph output produced exactly once; returns the (node, output
        index) pairs that produce them."""
        g, c = self.g, self.c
        produced: dict = {}
        used = set()
        for k, e in enumerate(g.output_edges):
            field = _where("output_edges", k, e)
            self.graph_ref(field, e, "graph_output_index", "output_count")
            src = self.node_ref(field, e, "from_node_index")
            self.output_slot(field, e, src)
            if e.graph_output_index in produced:
                c.fail(f"{field}.graph_output_index", e.graph_output_index,
                       f"graph output {e.graph_output_index} is already produced by "
                       f"{produced[e.graph_output_index]}; expected exactly one edge to each "
                       "graph output")
            produced[e.graph_output_index] = field
            used.add((src, e.from_node_output_index))
        for i in range(g.output_count):
            if i not in produced:
                c.fail("output_edges", f"graph output {i}", "expected an output edge to every "
                                                            "graph output (nothing produces it)")
        return used

    def connected(self, used: set) -> None:
        """Every present node input fed, every node output (each present one) read."""
        g, c = self.g, self.c
        for k in range(len(g.nodes)):
            for i, (fname, t) in enumerate(g.node_inputs(k)):
                if t is not None and (k, i) not in self.fed:
                    c.fail(f"{g.node_label(k)}.{fname}", "unconnected",
                           "expected an input or intermediate edge to every present node input")
            for i, (fname, _) in enumerate(g.nodes[k].operator.bound_outputs()):
                if (k, i) not in used:
                    c.fail(f"{g.node_label(k)}.{'output' if i == 0 else fname}", "unconnected",
                           "expected an intermediate or output edge from every node output")
