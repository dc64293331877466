"""DirectML's compiled operator graphs: :class:`GraphDesc` (DML_GRAPH_DESC with its node and
edge structs, validated) and :func:`compile_graph`, which runs a graph node by node on the
"numpy" device and fused on "cpu" and "cuda" (:mod:`.plan` says what fuses)."""
from .compiled import CompiledGraph, compile_graph
from .desc import (
    GraphDesc,
    InputGraphEdgeDesc,
    IntermediateGraphEdgeDesc,
    OperatorGraphNodeDesc,
    OutputGraphEdgeDesc,
)

__all__ = ["GraphDesc", "OperatorGraphNodeDesc", "InputGraphEdgeDesc", "OutputGraphEdgeDesc",
           "IntermediateGraphEdgeDesc", "compile_graph", "CompiledGraph"]
