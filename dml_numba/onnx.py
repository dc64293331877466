"""ONNX models through DirectML's graphs: ``compile_model(model, device)`` turns a model whose
nodes are Pad, LpPool, Conv, ConvTranspose, Tile, Slice (and the activations a convolution
fuses, directly after one; Identity and Constant anywhere) into a :class:`~dml_numba.GraphDesc`
and compiles it like any graph (fused on "cpu" and "cuda"). Needs the ``onnx`` package
(``pip install 'dml_numba[onnx]'``).

>>> import numpy as np, onnx
>>> from onnx import helper, TensorProto
>>> node = helper.make_node("Pad", ["x", "pads"], ["y"], mode="reflect")
>>> g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
...     [1, 4])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6])],
...     [helper.make_tensor("pads", TensorProto.INT64, [4], [0, 1, 0, 1])])
>>> model = compile_model(helper.make_model(g), device="numpy")
>>> model(np.array([[1, 2, 3, 4]], np.float32))
array([[2., 1., 2., 3., 4., 3.]], dtype=float32)

Shapes must be static: give a symbolic dimension a value with ``input_shapes={name: shape}``,
and an input that is a parameter (pads, repeats...) a value with ``constants={name: array}``.
The compiled model takes the model's inputs positionally in the model's order or as one dict by
name, and returns its output (or a tuple of its outputs, in order). The model's weights are
bound on every call from the copies taken at load time. What is not supported (another
operator, an attribute value DirectML's operators cannot express, a dynamic shape) is a
ValidationError naming the first such node, its operator and the attribute.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from . import functional as F
from ._errors import ValidationError
from .graph import (
    GraphDesc,
    InputGraphEdgeDesc,
    IntermediateGraphEdgeDesc,
    OperatorGraphNodeDesc,
    OutputGraphEdgeDesc,
    compile_graph,
)
from .ops import activation as act
from .ops.convolution import ConvolutionDirection
from .ops.padding import PaddingMode

__all__ = ["compile_model", "CompiledModel", "to_graph", "SUPPORTED"]

_PAD_MODES = {"constant": PaddingMode.CONSTANT, "reflect": PaddingMode.REFLECTION,
              "edge": PaddingMode.EDGE, "wrap": PaddingMode.WRAP}

#: ONNX activation -> (DirectML activation, its fields from the node's attributes and defaults)
_ACTIVATIONS = {
    "Relu": lambda a: act.ActivationReluOperatorDesc(),
    "LeakyRelu": lambda a: act.ActivationLeakyReluOperatorDesc(a.get("alpha", 0.01)),
    "Sigmoid": lambda a: act.ActivationSigmoidOperatorDesc(),
    "HardSigmoid": lambda a: act.ActivationHardSigmoidOperatorDesc(a.get("alpha", 0.2),
                                                                   a.get("beta", 0.5)),
    "Tanh": lambda a: act.ActivationTanhOperatorDesc(),
    "Elu": lambda a: act.ActivationEluOperatorDesc(a.get("alpha", 1.0)),
    "Celu": lambda a: act.ActivationCeluOperatorDesc(a.get("alpha", 1.0)),
    "Selu": lambda a: act.ActivationScaledEluOperatorDesc(
        a.get("alpha", 1.67326319217681884765625), a.get("gamma", 1.05070102214813232421875)),
    "Softplus": lambda a: act.ActivationSoftplusOperatorDesc(1.0),
    "Softsign": lambda a: act.ActivationSoftsignOperatorDesc(),
    "ThresholdedRelu": lambda a: act.ActivationThresholdedReluOperatorDesc(a.get("alpha", 1.0)),
    "Shrink": lambda a: act.ActivationShrinkOperatorDesc(a.get("bias", 0.0), a.get("lambd", 0.5)),
    "Gelu": lambda a: act.ActivationGeluOperatorDesc(),
    "Clip": None,  # min and max are inputs from opset 11: read with the node
}

#: the ONNX operators a model may hold
SUPPORTED = ("Pad", "LpPool", "Conv", "ConvTranspose", "Tile", "Slice", "Identity",
             "Constant") + tuple(_ACTIVATIONS)


def _onnx():
    try:
        import onnx
    except ImportError as exc:  # pragma: no cover - onnx is in the test extras
        raise ImportError("dml_numba.onnx needs the onnx package: pip install "
                          "'dml_numba[onnx]'") from exc
    return onnx


class _Fail:
    """Errors that name the node: ``Conv 'conv1' (node 3).pads: ... is invalid; expected ...``."""

    def __init__(self, node, k):
        self.where = f"{node.op_type} {node.name!r} (node {k})" if node.name else \
            f"{node.op_type} (node {k})"

    def __call__(self, field, value, expected):
        raise ValidationError(f"compile_model: {self.where}.{field}: {value!r} is invalid; "
                              f"{expected}")


def _attrs(node) -> dict:
    """The node's attributes by name, strings decoded (ONNX stores them as bytes)."""
    onnx = _onnx()
    values = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    return {k: v.decode() if isinstance(v, bytes) else v for k, v in values.items()}


class _Loader:
    def __init__(self, model, input_shapes, constants=None):
        onnx = _onnx()
        if isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
            model = onnx.load(model)
        self.onnx = onnx
        self.graph = model.graph
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
                          1)
        self.consts = {t.name: onnx.numpy_helper.to_array(t) for t in self.graph.initializer}
        self.root: dict = {}  # an Identity's output -> the value it aliases, through chains
        for node in self.graph.node:
            if node.op_type == "Identity" and node.input:
                self.root[node.output[0]] = self.root.get(node.input[0], node.input[0])
        names = {i.name for i in self.graph.input}
        for name, value in (constants or {}).items():
            if name not in names:
                raise ValidationError(f"compile_model.constants: {name!r} is invalid; expected "
                                      "the name of one of the model's inputs")
            self.consts[name] = np.asarray(value)
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
        self.nodes: list = []  # (operator desc, [source per input], name)
        self.const_inputs: list[str] = []  # constants bound as extra graph inputs, in order

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
            fail(field, name, "expected a constant (an initializer or a Constant node's output): "
                              "DirectML's operators take it as a parameter")
        return self.consts[name]

    def ints(self, name, fail, field, optional=False):
        v = self.const(name, fail, field, optional)
        return None if v is None else [int(x) for x in np.asarray(v).reshape(-1)]

    # -- tensors flowing between nodes --------------------------------------------------------
    def tensor(self, name, fail, field):
        if name in self.values:
            return self.values[name], self.shapes[name]
        if name in self.consts:
            a = self.consts[name]
            self.values[name] = ("const", name)
            self.shapes[name] = SimpleNamespace(shape=a.shape, dtype=a.dtype)
            return self.values[name], self.shapes[name]
        fail(field, name, "expected a graph input, a constant or an earlier node's output")

    def add(self, desc, sources, name, out):
        self.nodes.append([desc, list(sources), name])
        self.values[out] = ("node", len(self.nodes) - 1)
        t = desc.output
        self.shapes[out] = SimpleNamespace(shape=t.sizes, dtype=t.dtype)

    def load(self):
        # who reads each value, an Identity's output counted as the value it aliases (its
        # root): an activation fuses into a convolution only where nothing else sees the
        # convolution's output under any name
        root = self.root
        readers: dict = {}
        for node in self.graph.node:
            if node.op_type != "Identity":
                for i in node.input:
                    readers[root.get(i, i)] = readers.get(root.get(i, i), 0) + 1
        outputs = {root.get(o.name, o.name) for o in self.graph.output}
        for k, node in enumerate(self.graph.node):
            fail = _Fail(node, k)
            a = _attrs(node)
            op = node.op_type
            if node.domain not in ("", "ai.onnx"):
                fail("domain", node.domain, "expected the default ONNX domain")
            if op == "Constant":
                if "value" not in a:
                    fail("attribute", sorted(a), "expected a 'value' tensor")
                self.consts[node.output[0]] = self.onnx.numpy_helper.to_array(a["value"])
            elif op == "Identity":
                src = node.input[0]
                if src in self.consts:
                    self.consts[node.output[0]] = self.consts[src]
                else:
                    self.tensor(src, fail, "input[0]")
                    self.values[node.output[0]] = self.values[src]
                    self.shapes[node.output[0]] = self.shapes[src]
            elif op in _ACTIVATIONS:
                self._activation(node, fail, a, readers, outputs)
            elif op in ("Pad", "LpPool", "Conv", "ConvTranspose", "Tile", "Slice"):
                getattr(self, f"_{op.lower()}")(node, fail, a)
            else:
                fail("op_type", op, f"expected one of {', '.join(SUPPORTED)}")
        return self._graph()

    def _pad(self, node, fail, a):
        src, x = self.tensor(node.input[0], fail, "input[0]")
        rank = len(x.shape)
        if self.opset < 11:
            pads, value = a.get("pads"), a.get("value", 0.0)
            if pads is None:
                fail("pads", None, "expected the pads attribute")
        else:
            pads = self.ints(node.input[1] if len(node.input) > 1 else "", fail, "pads")
            v = self.const(node.input[2] if len(node.input) > 2 else "", fail, "constant_value",
                           optional=True)
            value = 0 if v is None else np.asarray(v).reshape(-1)[0].item()
        axes = self.ints(node.input[3] if len(node.input) > 3 else "", fail, "axes",
                         optional=True)
        mode = a.get("mode", "constant")
        if mode not in _PAD_MODES:
            fail("mode", mode, f"expected one of {', '.join(_PAD_MODES)}")
        axes = list(range(rank)) if axes is None else _axes(fail, "axes", axes, rank)
        if len(pads) != 2 * len(axes):
            fail("pads", pads, f"expected {2 * len(axes)} values (begin and end per axis)")
        start, end = [0] * rank, [0] * rank
        for i, ax in enumerate(axes):
            start[ax], end[ax] = pads[i], pads[i + len(axes)]
        if min(start + end) < 0:
            fail("pads", pads, "expected pads >= 0 (cropping is a Slice)")
        self.add(_named(fail, "pads", lambda: F.padding_desc(x, start, end, _PAD_MODES[mode],
                                                             value)),
                 [src], node.name, node.output[0])

    def _window(self, a, fail, nd):
        """strides, dilations, (start, end) pads of a window operator, auto_pad resolved later."""
        pads = a.get("pads", [0] * 2 * nd)
        if len(pads) != 2 * nd:
            fail("pads", pads, f"expected {2 * nd} values")
        return (a.get("strides", [1] * nd), a.get("dilations", [1] * nd), pads[:nd], pads[nd:])

    def _auto_pad(self, a, fail, in_sizes, kernel, strides, dilations, start, end):
        mode = a.get("auto_pad", "NOTSET")
        if mode in ("NOTSET", "VALID"):
            return (start, end) if mode == "NOTSET" else ([0] * len(start), [0] * len(end))
        if mode not in ("SAME_UPPER", "SAME_LOWER"):
            fail("auto_pad", mode, "expected NOTSET, VALID, SAME_UPPER or SAME_LOWER")
        start, end = [], []
        for n, k, s, d in zip(in_sizes, kernel, strides, dilations):
            out = -(-n // s)
            total = max(0, (out - 1) * s + (k - 1) * d + 1 - n)
            small, big = total // 2, total - total // 2
            start.append(small if mode == "SAME_UPPER" else big)
            end.append(big if mode == "SAME_UPPER" else small)
        return start, end

    def _lppool(self, node, fail, a):
        src, x = self.tensor(node.input[0], fail, "input[0]")
        nd = len(x.shape) - 2
        if a.get("ceil_mode", 0):
            fail("ceil_mode", a["ceil_mode"], "expected 0 (DirectML's LP pooling floors)")
        if "kernel_shape" not in a:
            fail("kernel_shape", None, "expected the window size")
        strides, dil, start, end = self._window(a, fail, nd)
        start, end = self._auto_pad(a, fail, x.shape[2:], a["kernel_shape"], strides, dil, start,
                                    end)
        self.add(_named(fail, "kernel_shape", lambda: F.lp_pooling_desc(
            x, a["kernel_shape"], strides, start, end, dil, a.get("p", 2))),
            [src], node.name, node.output[0])

    def _conv(self, node, fail, a, direction=ConvolutionDirection.FORWARD):
        src, x = self.tensor(node.input[0], fail, "input[0]")
        wsrc, w = self.tensor(node.input[1], fail, "input[1]")
        bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
        nd = len(x.shape) - 2
        strides, dil, start, end = self._window(a, fail, nd)
        kernel = a.get("kernel_shape", list(w.shape[2:]))
        outpad = list(a.get("output_padding", [0] * nd))
        mode = a.get("auto_pad", "NOTSET")
        if direction == ConvolutionDirection.BACKWARD and ("output_shape" in a
                                                         or mode.startswith("SAME")):
            # ONNX's rule: the output size asked for (or input * stride for SAME) fixes the
            # total padding; what it cannot take from the end is output padding
            out = list(a["output_shape"])[-nd:] if "output_shape" in a else \
                [n * st for n, st in zip(x.shape[2:], strides)]
            start, end = [], []
            for i, (n, k, st, d) in enumerate(zip(x.shape[2:], kernel, strides, dil)):
                total = st * (n - 1) + outpad[i] + (k - 1) * d + 1 - out[i]
                if total < 0:
                    outpad[i], total = outpad[i] - total, 0
                upper = mode == "SAME_UPPER"
                start.append(total // 2 if upper else total - total // 2)
                end.append(total - start[-1])
        else:
            start, end = self._auto_pad(a, fail, x.shape[2:], kernel, strides, dil, start, end)
        sources = [src, wsrc]
        b = None
        if bias is not None:
            bsrc, b = self.tensor(bias, fail, "input[2]")
            if bsrc[0] == "const":
                self.consts[bias] = self.consts[bias].reshape(F.bias_sizes(b.shape, nd + 2))
            elif len(b.shape) == 1:
                fail("input[2]", bias, "expected a constant bias (a (C_out,) tensor computed by "
                                       "the graph is not bound as (1, C_out, 1...))")
            sources.append(bsrc)
        self.add(_named(fail, "attributes", lambda: F.convolution_desc(
            x, w, b, strides, dil, start, end, outpad, a.get("group", 1), direction=direction)),
            sources, node.name, node.output[0])

    def _convtranspose(self, node, fail, a):
        self._conv(node, fail, a, ConvolutionDirection.BACKWARD)

    def _tile(self, node, fail, a):
        src, x = self.tensor(node.input[0], fail, "input[0]")
        reps = self.ints(node.input[1] if len(node.input) > 1 else "", fail, "repeats")
        self.add(_named(fail, "repeats", lambda: F.tile_desc(x, reps)), [src], node.name,
                 node.output[0])

    def _slice(self, node, fail, a):
        src, x = self.tensor(node.input[0], fail, "input[0]")
        rank = len(x.shape)
        if self.opset < 10:
            starts, ends, axes, steps = a.get("starts"), a.get("ends"), a.get("axes"), None
        else:
            get = lambda i, f, opt: self.ints(node.input[i] if len(node.input) > i else "",  # noqa: E731
                                              fail, f, opt)
            starts, ends = get(1, "starts", False), get(2, "ends", False)
            axes, steps = get(3, "axes", True), get(4, "steps", True)
        axes = list(range(len(starts))) if axes is None else _axes(fail, "axes", axes, rank)
        steps = [1] * len(starts) if steps is None else steps
        offsets, sizes, strides = [0] * rank, list(x.shape), [1] * rank
        for ax, s, e, st in zip(axes, starts, ends, steps):
            if st == 0:
                fail("steps", steps, "expected non-zero steps")
            lo, hi, step = slice(s, e, st).indices(x.shape[ax])
            count = len(range(lo, hi, step))
            if count == 0:
                fail("starts", starts, f"expected a non-empty slice of axis {ax} (DirectML's "
                                       "tensors have no empty dimensions)")
            last = lo + (count - 1) * step
            offsets[ax], sizes[ax] = min(lo, last), abs(last - lo) + 1
            strides[ax] = step
        self.add(_named(fail, "starts", lambda: F.slice1_desc(x, offsets, sizes, strides)),
                 [src], node.name, node.output[0])

    def _activation(self, node, fail, a, readers, outputs):
        src = node.input[0]
        ref = self.values.get(src)
        conv = self.nodes[ref[1]][0] if ref and ref[0] == "node" else None
        key = self.root.get(src, src)
        if conv is None or not hasattr(conv, "fused_activation") or conv.fused_activation \
                or readers.get(key, 0) != 1 or key in outputs:
            fail("input[0]", src, "expected the output of a Conv or ConvTranspose that feeds "
                                  "only this activation (DirectML fuses activations into the "
                                  "convolution; they are not operators of their own here)")
        if node.op_type == "Clip":
            lo, hi = self._clip_bounds(node, fail, a, conv.output.dtype)
            desc = act.ElementWiseClipOperatorDesc(lo, hi)
        elif node.op_type == "Gelu" and a.get("approximate", "none") != "none":
            fail("approximate", a["approximate"], "expected 'none' (DirectML's GELU is exact)")
        else:
            desc = _ACTIVATIONS[node.op_type](a)
        from dataclasses import replace

        self.nodes[ref[1]][0] = replace(conv, fused_activation=desc)
        self.values[node.output[0]] = ref
        self.shapes[node.output[0]] = self.shapes[src]

    def _clip_bounds(self, node, fail, a, dtype):
        big = float(np.finfo(dtype).max)
        if self.opset < 11:
            return a.get("min", -big), a.get("max", big)
        vals = []
        for i, field, default in ((1, "min", -big), (2, "max", big)):
            v = self.const(node.input[i] if len(node.input) > i else "", fail, field,
                           optional=True)
            vals.append(default if v is None else float(np.asarray(v).reshape(-1)[0]))
        return tuple(vals)

    def _graph(self):
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
        for k, o in enumerate(self.graph.output):
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


def _named(fail, field, build):
    """The descriptor from ``build()``, its ValidationError re-raised naming the ONNX node."""
    try:
        return build()
    except ValidationError as exc:
        raise ValidationError(f"compile_model: {fail.where}: {exc}") from None


def to_graph(model, input_shapes=None, constants=None) -> tuple[GraphDesc, list[str], dict]:
    """The model as a GraphDesc: (graph, the model's input names in order, constants bound as
    the graph's further inputs by name in order)."""
    loader = _Loader(model, input_shapes, constants)
    graph = loader.load()
    consts = {name: np.ascontiguousarray(loader.consts[name]) for name in loader.const_inputs}
    return graph, [vi.name for vi in loader.inputs], consts


class CompiledModel:
    """``model(*inputs)`` or ``model({name: array})``: the model's outputs (one, or a tuple)."""

    def __init__(self, graph, names, consts, device, options):
        self.graph = graph
        self.input_names = names
        self.compiled = compile_graph(graph, device, **options)
        self._consts = list(consts.values())

    def __call__(self, *inputs, out=None):
        if len(inputs) == 1 and isinstance(inputs[0], dict):
            feed = dict(inputs[0])
            missing = [n for n in self.input_names if n not in feed]
            extra = sorted(set(feed) - set(self.input_names))
            if missing or extra:
                raise ValidationError(f"compile_model: inputs {sorted(feed)!r} are invalid; "
                                      f"expected {self.input_names!r}")
            inputs = tuple(feed[n] for n in self.input_names)
        if len(inputs) != len(self.input_names):
            raise ValidationError(f"compile_model: {len(inputs)} inputs are invalid; expected "
                                  f"{len(self.input_names)} ({', '.join(self.input_names)})")
        return self.compiled(*inputs, *self._consts, out=out)

    @property
    def plan(self) -> str:
        return self.compiled.plan

    def __repr__(self):
        return f"<CompiledModel of {len(self.graph.nodes)} nodes on {self.compiled.device!r}>"


def _axes(fail, field: str, axes, rank: int) -> list[int]:
    """ONNX's axes as the spec has them: each in [-rank, rank - 1] (negative counts from the
    end), none twice (ONNX Runtime refuses both); normalised to 0..rank-1."""
    out = []
    for ax in axes:
        ax = int(ax)
        if not -rank <= ax < rank:
            fail(field, list(axes), f"expected axes in [{-rank}, {rank - 1}] (the input has "
                                    f"{rank} dimensions)")
        if ax % rank in out:
            fail(field, list(axes), f"expected each axis once (axis {ax % rank} is named twice)")
        out.append(ax % rank)
    return out


def compile_model(model, device: str = "cpu", *, input_shapes=None, constants=None,
                  **options) -> CompiledModel:
    """Compile an ONNX ``model`` (a ModelProto, or a path to one) for ``device``.
    ``constants``: model inputs to fix at load time by name (pads, repeats, starts... that a
    model takes as inputs, since DirectML's operators take them as parameters)."""
    graph, names, consts = to_graph(model, input_shapes, constants)
    return CompiledModel(graph, names, consts, device, options)
