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

import threading

import numpy as np

from ._errors import ValidationError
from ._frozen import freeze
from ._onnx import stored
from ._onnx.load import Loader
from ._onnx.nodes import SUPPORTED
from .graph import GraphDesc, compile_graph

__all__ = ["compile_model", "CompiledModel", "to_graph", "SUPPORTED"]


def to_graph(model, input_shapes=None, constants=None) -> tuple[GraphDesc, list[str], dict]:
    """The model as a GraphDesc: (graph, the model's input names in order, constants bound as
    the graph's further inputs by name in order)."""
    graph, names, consts, _ = _load(model, input_shapes, constants)
    return graph, names, consts


def _load(model, input_shapes, constants):
    """(graph, input names, constants, (output shapes, inputs as the graph sees them, signed
    outputs)): from the disk cache where this file was loaded for these shapes before
    (``_onnx/stored.py``: no ``import onnx`` then), else from the loader (and kept)."""
    entry = stored.key(model, input_shapes, constants)
    kept = stored.read(entry)
    if kept is not None:
        return kept
    loader = Loader(model, input_shapes, constants)
    graph = loader.load()
    consts = {name: np.ascontiguousarray(loader.consts[name]) for name in loader.const_inputs}
    seen = [loader.input_seen.get(k) for k in range(len(loader.inputs))]
    result = (graph, [vi.name for vi in loader.inputs], consts,
              (loader.output_shapes, seen, loader.signed_outputs))
    if not loader.external:
        stored.write(entry, result)
    return result


class CompiledModel:
    """``model(*inputs)`` or ``model({name: array})``: the model's outputs (one, or a tuple)."""

    def __init__(self, graph, names, consts, device, options, output_shapes=None,
                 input_seen=None, signed_outputs=()):
        self.graph = graph
        self.input_names = names
        self.compiled = compile_graph(graph, device, **options)
        # the model's own copies, read-only: kernels keep what they derive from them (a
        # convolution's packed filter) from one call to the next
        self._consts = [freeze(np.array(c)) for c in consts.values()]
        first = len(names)  # checked here once: each call passes them unchecked (``own``)
        for k, c in enumerate(self._consts):
            self.compiled._check(c, self.compiled._in[first + k], f"input {first + k}")
        # the graph's steps bound to those weights, kept per thread with the model (not with
        # the compiled graph, which the cache may keep longer)
        self._bindings = threading.local()
        # a model output that is a view of a node's output (Flatten, Reshape...): its sizes
        self._shapes = [s if s != graph.output_tensor(k).sizes else None
                        for k, s in enumerate(output_shapes or [])]
        # a model input the graph reads as a view or a broadcast: ("reshape" | "broadcast", sizes)
        self._seen = list(input_seen or [None] * len(names))
        # the model outputs that are a MaxPool's Indices: ONNX's int64, computed as DirectML's
        # UINT64 (the same bits for every index an input can have)
        self._signed = frozenset(signed_outputs)

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
        if any(self._seen):
            inputs = tuple(_as_seen(a, s, n) if s else a
                           for a, s, n in zip(inputs, self._seen, self.input_names))
        if out is None:
            result = self.compiled._call((*inputs, *self._consts), None, self._bindings,
                                         len(self._consts))
            if not (any(self._shapes) or self._signed):
                return result
            results = result if isinstance(result, tuple) else (result,)
            shaped = tuple(self._as_model(k, r) for k, r in enumerate(results))
            return shaped if isinstance(result, tuple) else shaped[0]
        if not (any(self._shapes) or self._signed):
            return self.compiled._call((*inputs, *self._consts), out, self._bindings,
                                       len(self._consts))
        # the outputs bound as the graph has them (views of the caller's arrays)
        outs = [out] if not isinstance(out, (list, tuple)) else list(out)
        bound = [self._as_graph(k, o) for k, o in enumerate(outs)]
        self.compiled._call((*inputs, *self._consts),
                            bound if isinstance(out, (list, tuple)) else bound[0], self._bindings,
                            len(self._consts))
        return out

    def _as_model(self, k, r):
        """Graph output ``k`` as the model declares it: its sizes (a view), int64 indices."""
        if k < len(self._shapes) and self._shapes[k]:
            r = r.reshape(self._shapes[k])
        return _view(r, "int64") if k in self._signed else r

    def _as_graph(self, k, o):
        """The caller's ``out`` array for model output ``k`` as the graph writes it."""
        if o is None:
            return o
        if k in self._signed and str(getattr(o, "dtype", "")).removeprefix("torch.") != "int64":
            raise ValidationError(f"compile_model.out[{k}]: dtype {getattr(o, 'dtype', None)} is "
                                  "invalid; expected int64 (a MaxPool's Indices output)")
        if k < len(self._shapes) and self._shapes[k]:
            o = o.reshape(self.graph.output_tensor(k).sizes)
        return _view(o, "uint64") if k in self._signed else o

    @property
    def plan(self) -> str:
        return self.compiled.plan

    def __repr__(self):
        return f"<CompiledModel of {len(self.graph.nodes)} nodes on {self.compiled.device!r}>"


def _view(a, dtype: str):
    """``a``'s elements read as ``dtype`` of the same size (a view; a PyTorch tensor through
    its own dtypes)."""
    if type(a).__module__.partition(".")[0] == "torch":  # (the loader's layer is below interop)
        import torch

        return a.view(getattr(torch, dtype))
    return a.view(np.dtype(dtype))


def _as_seen(a, seen, name):
    """A model input as the graph reads it: reshaped (a view of its elements) or broadcast (a
    NumPy view with strides of 0; a device array is reshaped only)."""
    how, sizes = seen
    shape = tuple(getattr(a, "shape", ()))
    try:
        if how == "reshape":
            return a.reshape(sizes)
        return np.broadcast_to(np.asarray(a), sizes)
    except (ValueError, TypeError, AttributeError):
        raise ValidationError(f"compile_model: input {name!r} of shape {shape} is invalid; "
                              f"expected one the model reads as {sizes} (a {how})") from None


def compile_model(model, device: str = "cpu", *, input_shapes=None, constants=None,
                  **options) -> CompiledModel:
    """Compile an ONNX ``model`` (a ModelProto, a path to a file, or the serialised bytes) for
    ``device``.
    ``constants``: model inputs to fix at load time by name (pads, repeats, starts... that a
    model takes as inputs, since DirectML's operators take them as parameters)."""
    graph, names, consts, (shapes, seen, signed) = _load(model, input_shapes, constants)
    return CompiledModel(graph, names, consts, device, options, shapes, seen, signed)
