"""An ONNX model read into DirectML's graph: its values (graph inputs, constants, node outputs,
views of them with other sizes), constant subgraphs evaluated at load, the graph's edges."""
from __future__ import annotations

import os
from types import SimpleNamespace

import numpy as np

from .._errors import ValidationError
from ..graph import (
    GraphDesc,
    InputGraphEdgeDesc,
    IntermediateGraphEdgeDesc,
    OperatorGraphNodeDesc,
    OutputGraphEdgeDesc,
)
from . import nodes as mapped
from .patterns import check_supported, lppool_exports

#: ONNX operators that only give their input other sizes (a view: no node of their own)
VIEWS = ("Flatten", "Reshape", "Squeeze", "Unsqueeze")


def onnx_module():
    try:
        import onnx
    except ImportError as exc:  # pragma: no cover - onnx is in the test extras
        raise ImportError("dml_numba.onnx needs the onnx package: pip install "
                          "'dml_numba[onnx]'") from exc
    return onnx


def external_data(onnx, model) -> bool:
    """Whether a tensor of the model (an initializer, a sparse one's values, a node's tensor
    attribute) lies in an external data file."""
    g = model.graph
    tensors = [*g.initializer, *(s.values for s in g.sparse_initializer)]
    for node in g.node:
        for a in node.attribute:
            tensors += [a.t, *a.tensors] if a.HasField("t") else list(a.tensors)
    return any(t.data_location == onnx.TensorProto.EXTERNAL for t in tensors)


class Fail:
    """Errors that name the node: ``Conv 'conv1' (node 3).pads: ... is invalid; expected ...``."""

    def __init__(self, node, k):
        self.where = f"{node.op_type} {node.name!r} (node {k})" if node.name else \
            f"{node.op_type} (node {k})"

    def __call__(self, field, value, expected):
        raise ValidationError(f"compile_model: {self.where}.{field}: {value!r} is invalid; "
                              f"{expected}")


def attributes(onnx, node) -> dict:
    """The node's attributes by name, strings decoded (ONNX stores them as bytes)."""
    values = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    return {k: v.decode() if isinstance(v, bytes) else v for k, v in values.items()}


class Loader(mapped.Mappings):
    def __init__(self, model, input_shapes, constants=None):
        onnx = onnx_module()
        path = None
        if isinstance(model, (bytes, bytearray, memoryview)):  # a serialised model
            model = onnx.load_from_string(bytes(model))
        elif isinstance(model, str) or hasattr(model, "__fspath__"):
            path = model
            model = onnx.load(path, load_external_data=False)
        #: whether the model's tensors lie in files beside its own (its load is not kept in
        #: the disk cache, whose key holds the model's bytes only: ``stored``)
        self.external = external_data(onnx, model)
        if self.external and path is not None:  # what onnx.load(path) does
            onnx.load_external_data_for_model(model, os.path.dirname(os.fspath(path)))
        self.onnx = onnx
        self.model = model
        self.graph = model.graph
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
                          1)
        self.consts = {t.name: onnx.numpy_helper.to_array(t) for t in self.graph.initializer}
        names = {i.name for i in self.graph.input}
        for name, value in (constants or {}).items():
            if name not in names:
                raise ValidationError(f"compile_model.constants: {name!r} is invalid; expected "
                                      "the name of one of the model's inputs")
            self.consts[name] = np.asarray(value)
        for node in self.graph.node:  # Constant nodes are known before the patterns look
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                a = attributes(onnx, node)
                if "value" in a:
                    self.consts[node.output[0]] = onnx.numpy_helper.to_array(a["value"])
        outputs = {o.name for o in self.graph.output}
        self.node_list = lppool_exports(onnx, list(self.graph.node), self.consts, outputs)
        check_supported(self.node_list, self.consts, model, mapped.SUPPORTED)
        # an Identity's or a view's output -> the value it aliases, through chains: who reads
        # a value is counted by this root (an activation fuses only where nothing else sees it)
        self.root: dict = {}
        for node in self.node_list:
            if node.op_type in ("Identity",) + VIEWS and node.input:
                self.root[node.output[0]] = self.root.get(node.input[0], node.input[0])
        self.values: dict = {}  # name -> ("input", k) | ("node", j) | ("const", name)
        self.shapes: dict = {}  # name -> SimpleNamespace(shape, dtype)
        self.inputs = [i for i in self.graph.input if i.name not in self.consts]
        shapes = dict(input_shapes or {})
        for k, vi in enumerate(self.inputs):
            self.values[vi.name] = ("input", k)
            self.shapes[vi.name] = self._value_info(vi, shapes.pop(vi.name, None))
        if shapes:
            raise ValidationError(f"compile_model.input_shapes: {sorted(shapes)!r} is invalid; "
                                  f"expected names of the model's inputs "
                                  f"({', '.join(i.name for i in self.inputs)})")
        #: a model input the graph reads with other sizes: k -> ("reshape" | "broadcast", sizes)
        #: (the compiled model gives it to the graph so)
        self.input_seen: dict = {}
        self.nodes: list = []  # [operator desc, [source per input], name]
        self.const_inputs: list[str] = []  # constants bound as extra graph inputs, in order
        #: a MaxPool's Indices output: name -> its node (the node's output 1; a model output
        #: only, given back as ONNX's int64)
        self.indices: dict = {}
        self.signed_outputs: list[int] = []  # the model outputs that are such indices

    def _value_info(self, vi, override):
        t = vi.type.tensor_type
        try:
            dtype = np.dtype(self.onnx.helper.tensor_dtype_to_np_dtype(t.elem_type))
        except Exception:  # noqa: BLE001 - onnx raises KeyError or ValueError by version
            dtype = None
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                for d in t.shape.dim]
        if override is not None:
            if len(tuple(override)) != len(dims):
                raise ValidationError(f"compile_model.input_shapes[{vi.name!r}]: "
                                      f"{tuple(override)!r} is invalid; expected {len(dims)} "
                                      "dimensions")
            dims = [int(v) for v in override]
        bad = [d for d in dims if not isinstance(d, int)]
        if bad:
            raise ValidationError(f"compile_model: input {vi.name!r} has the symbolic dimension "
                                  f"{bad[0]!r}; expected static shapes (give it one with "
                                  f"input_shapes={{{vi.name!r}: (...)}})")
        return SimpleNamespace(shape=tuple(dims), dtype=dtype)

    # -- constants read at load time ----------------------------------------------------------
    def const(self, name, fail, field, optional=False):
        if not name:
            if optional:
                return None
            fail(field, name, "expected an input")
        if name not in self.consts:
            fail(field, name, "expected a constant (an initializer, a Constant node's output, "
                              "or computed from constants): DirectML's operators take it as a "
                              "parameter")
        return self.consts[name]

    def ints(self, name, fail, field, optional=False):
        v = self.const(name, fail, field, optional)
        return None if v is None else [int(x) for x in np.asarray(v).reshape(-1)]

    def input_name(self, node, i) -> str:
        return node.input[i] if len(node.input) > i else ""

    # -- tensors flowing between nodes --------------------------------------------------------
    def tensor(self, name, fail, field):
        if name in self.indices:
            fail(field, name, "expected a tensor other than a MaxPool's Indices output (it is "
                              "supported as a model output only)")
        if name in self.values:
            return self.values[name], self.shapes[name]
        if name in self.consts:
            a = self.consts[name]
            self.values[name] = ("const", name)
            self.shapes[name] = SimpleNamespace(shape=a.shape, dtype=a.dtype)
            return self.values[name], self.shapes[name]
        fail(field, name, "expected a graph input, a constant or an earlier node's output")

    def input_as(self, src, x, how, shape, fail, field, name):
        """Model input ``src`` read with ``shape`` (a view of it, or a broadcast): the graph's
        input has those sizes; every reader of the input must see the same."""
        k = src[1]
        seen = self.input_seen.setdefault(k, (how, tuple(shape)))
        if seen != (how, tuple(shape)):
            fail(field, name, f"expected one shape for model input {self.inputs[k].name!r} "
                              f"(it is read as {seen[1]} elsewhere)")
        return src, type(x)(shape=tuple(shape), dtype=x.dtype)

    def add(self, desc, sources, name, out):
        self.nodes.append([desc, list(sources), name])
        self.values[out] = ("node", len(self.nodes) - 1)
        t = desc.output
        self.shapes[out] = SimpleNamespace(shape=t.sizes, dtype=t.dtype)

    def constant_name(self, base: str, value) -> str:
        """A new constant (a folded filter, a broadcast operand), named after ``base``."""
        name, k = f"{base}::folded", 0
        while name in self.consts:
            k += 1
            name = f"{base}::folded{k}"
        self.consts[name] = np.ascontiguousarray(value)
        return name

    def load(self):
        readers: dict = {}
        for node in self.node_list:
            if node.op_type != "Identity" and node.op_type not in VIEWS:
                for i in node.input:
                    if i:
                        key = self.root.get(i, i)
                        readers[key] = readers.get(key, 0) + 1
        self.readers = readers
        self.outputs = {self.root.get(o.name, o.name) for o in self.graph.output}
        for k, node in enumerate(self.node_list):
            fail = Fail(node, k)
            a = attributes(self.onnx, node)
            ins = [i for i in node.input if i]
            if node.op_type == "Constant":  # read before the patterns looked (__init__)
                if "value" not in a:
                    fail("attribute", sorted(a), "expected a 'value' tensor")
            elif node.op_type in ("Shape", "Size") and ins and ins[0] not in self.consts:
                self._static_shape(node, fail, a)
            elif ins and all(i in self.consts for i in ins) and node.op_type != "Identity":
                self._evaluate(node, fail)
            else:
                self.map_node(node, fail, a)
        return self._graph()

    def _evaluate(self, node, fail):
        """A node whose inputs are all constant, evaluated now by ONNX's reference evaluator."""
        from onnx.reference import ReferenceEvaluator

        try:
            outs = ReferenceEvaluator(node).run(None, {i: self.consts[i] for i in node.input
                                                       if i})
        except Exception as exc:  # noqa: BLE001 - whatever the evaluator refuses, named
            fail("inputs", list(node.input), f"expected constants ONNX's reference evaluator "
                                             f"can compute ({type(exc).__name__}: {exc})")
        for name, value in zip(node.output, outs):
            if name:
                self.consts[name] = np.asarray(value)

    def _static_shape(self, node, fail, a):
        _, x = self.tensor(node.input[0], fail, "input[0]")
        shape = np.array(x.shape, np.int64)
        if node.op_type == "Size":
            self.consts[node.output[0]] = np.array(shape.prod(), np.int64)
            return
        rank = len(shape)
        start, end = a.get("start", 0), a.get("end", rank)
        self.consts[node.output[0]] = shape[slice(start, end)]

    def _derive_input_shapes(self):
        """Each model input the graph reads with other sizes than declared: a broadcast
        (recorded by the operand that asked for it), or a view. Where every reader reads the
        same sizes, the argument is given to the graph so (no copy); where readers differ, those
        reading a view read a copy of the input (SLICE1 of the whole tensor) through a graph
        edge with other sizes."""
        from .. import functional as F

        for k, vi in enumerate(self.inputs):
            declared = tuple(self.shapes[vi.name].shape)
            readers = [(j, slot, node[0].bound_inputs()[slot][1].sizes)
                       for j, node in enumerate(self.nodes)
                       for slot, src in enumerate(node[1]) if src == ("input", k)]
            sizes = {r[2] for r in readers}
            if len(sizes) == 1 and declared not in sizes:
                self.input_seen.setdefault(k, ("reshape", next(iter(sizes))))
                continue
            if len(sizes) <= 1:
                continue
            if k in self.input_seen:
                raise ValidationError(f"compile_model: input {vi.name!r} is invalid; expected "
                                      f"one shape for it across its readers (read as "
                                      f"{', '.join(map(str, sorted(sizes)))})")
            x = self.shapes[vi.name]
            n = len(declared)
            copy = len(self.nodes)
            self.add(F.slice1_desc(x, (0,) * n, declared, (1,) * n), [("input", k)], None,
                     f"{vi.name}::copy")
            for j, slot, got in readers:
                if got != declared:
                    self.nodes[j][1][slot] = ("node", copy)

    def _copies_of_inputs(self):
        """A model output that is a model input (through an Identity or a view) is computed by
        a copy: DirectML's SLICE1 of the whole tensor (exact for every type)."""
        from .. import functional as F

        for o in self.graph.output:
            ref = self.values.get(o.name)
            if ref is not None and ref[0] == "input":
                x = self.shapes[o.name]
                n = len(x.shape)
                self.add(F.slice1_desc(x, (0,) * n, x.shape, (1,) * n), [ref], None, o.name)

    def _graph(self):
        self._copies_of_inputs()
        self._derive_input_shapes()
        n_inputs = len(self.inputs)
        const_index: dict = {}
        input_edges, inter = [], []
        for j, (_, sources, _) in enumerate(self.nodes):
            for slot, s in enumerate(sources):
                if s[0] == "input":
                    input_edges.append(InputGraphEdgeDesc(s[1], j, slot))
                elif s[0] == "node":
                    inter.append(IntermediateGraphEdgeDesc(s[1], 0, j, slot))
                else:
                    if s[1] not in const_index:
                        const_index[s[1]] = n_inputs + len(self.const_inputs)
                        self.const_inputs.append(s[1])
                    input_edges.append(InputGraphEdgeDesc(const_index[s[1]], j, slot, s[1]))
        output_edges = []
        self.output_shapes = []
        for k, o in enumerate(self.graph.output):
            if o.name in self.indices:
                j = self.indices[o.name]
                output_edges.append(OutputGraphEdgeDesc(j, 1, k, o.name))
                self.output_shapes.append(self.nodes[j][0].output.sizes)
                self.signed_outputs.append(k)
                continue
            ref = self.values.get(o.name)
            if ref is None or ref[0] != "node":
                raise ValidationError(f"compile_model: output {o.name!r} is invalid; expected "
                                      "the output of a node (not a graph input or a constant)")
            declared = [d.dim_value if d.HasField("dim_value") else None
                        for d in o.type.tensor_type.shape.dim]
            got = self.shapes[o.name].shape
            if o.type.tensor_type.HasField("shape") and (len(declared) != len(got) or any(
                    d is not None and d != g for d, g in zip(declared, got))):
                raise ValidationError(f"compile_model: output {o.name!r} is declared "
                                      f"{tuple(declared)}; its nodes compute {tuple(got)}")
            output_edges.append(OutputGraphEdgeDesc(ref[1], 0, k, o.name))
            self.output_shapes.append(tuple(got))
        used = {e.graph_input_index for e in input_edges}
        for k, vi in enumerate(self.inputs):
            if k not in used:
                raise ValidationError(f"compile_model: input {vi.name!r} is invalid; expected an "
                                      "input some supported node reads")
        nodes = tuple(OperatorGraphNodeDesc(d, name or None) for d, _, name in self.nodes)
        if not nodes:
            raise ValidationError("compile_model: the model has no operator node")
        return GraphDesc(n_inputs + len(self.const_inputs), len(self.graph.output), nodes,
                         tuple(input_edges), tuple(output_edges), tuple(inter))
