"""The operators as PyTorch custom operators: ``import dml_numba.torch`` registers them.

``torch.ops.dml_numba.<name>`` (``padding``, ``lp_pooling``, ``convolution``, ``tile``,
``slice1``, ``max_pooling``, ``average_pooling``, ``element_wise_add``,
``element_wise_multiply``, ``batch_normalization``, ``gemm``, ``join``, ``activation``: the
activation by its DirectML name, ``"relu"``, ``"leaky_relu"``...) takes and returns CPU
tensors, with the functional layer's parameters as lists and
strings, and runs dml_numba's CPU kernels (read in place, result shared, no copy). Each has a
fake (meta) implementation giving its output's shape from the operator's shape rule, on
symbolic sizes too, so ``torch.compile`` graphs trace through it (``fullgraph=True`` and
``dynamic=True`` included) and call the kernel at run time. Each has a gradient
(:mod:`dml_numba.grad`), computed by a custom operator of its own
(``torch.ops.dml_numba.<name>_backward``, with a fake implementation too, so the backward
graph traces as well). The functional layer, given a tensor that requires grad, goes through
the same gradient.

    >>> import torch, dml_numba.torch
    >>> torch.ops.dml_numba.padding(torch.arange(3.), [2], [1], "reflect")
    tensor([2., 1., 0., 1., 2., 1.])
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

try:
    import torch
except ImportError:  # pragma: no cover - the module is optional
    raise ImportError("dml_numba.torch registers PyTorch custom operators: it needs PyTorch "
                      "(pip install torch)") from None

from . import functional
from ._interop import as_bound, reduce_to

#: the operator's schema after its name (parameters as the functional layer takes them)
SCHEMAS = {
    "padding": "(Tensor x, int[] start_padding, int[] end_padding, str mode='constant', "
               "float value=0.) -> Tensor",
    "lp_pooling": "(Tensor x, int[] window_size, int[]? strides=None, "
                  "int[]? start_padding=None, int[]? end_padding=None, int[]? dilations=None, "
                  "int p=2) -> Tensor",
    "convolution": "(Tensor x, Tensor filter, Tensor? bias=None, int[]? strides=None, "
                   "int[]? dilations=None, int[]? start_padding=None, int[]? end_padding=None, "
                   "int[]? output_padding=None, int group_count=1, "
                   "str mode='cross_correlation', str direction='forward') -> Tensor",
    "tile": "(Tensor x, int[] repeats) -> Tensor",
    "slice1": "(Tensor x, int[] offsets, int[] sizes, int[]? strides=None) -> Tensor",
    "max_pooling": "(Tensor x, int[] window_size, int[]? strides=None, "
                   "int[]? start_padding=None, int[]? end_padding=None, "
                   "int[]? dilations=None) -> Tensor",
    "average_pooling": "(Tensor x, int[] window_size, int[]? strides=None, "
                       "int[]? start_padding=None, int[]? end_padding=None, "
                       "int[]? dilations=None, bool include_padding=False) -> Tensor",
    "element_wise_add": "(Tensor a, Tensor b) -> Tensor",
    "element_wise_multiply": "(Tensor a, Tensor b) -> Tensor",
    "batch_normalization": "(Tensor x, Tensor mean, Tensor variance, Tensor scale, "
                           "Tensor bias, float epsilon=1e-05) -> Tensor",
    "gemm": "(Tensor a, Tensor b, Tensor? c=None, bool trans_a=False, bool trans_b=False, "
            "float alpha=1., float beta=1.) -> Tensor",
    "join": "(Tensor[] inputs, int axis) -> Tensor",
    "activation": "(Tensor x, str activation, float[]? parameters=None) -> Tensor",
}

#: what each backward operator returns: a gradient per tensor parameter (an absent optional
#: one's is an empty tensor), a list for a list of tensors
GRADIENTS = {"convolution": "(Tensor, Tensor, Tensor)",
             "element_wise_add": "(Tensor, Tensor)", "element_wise_multiply": "(Tensor, Tensor)",
             "batch_normalization": "(Tensor, Tensor, Tensor, Tensor, Tensor)",
             "gemm": "(Tensor, Tensor, Tensor)", "join": "Tensor[]"}

_LIBRARY = torch.library.Library("dml_numba", "DEF")


def _host(a):
    if isinstance(a, (list, tuple)):
        return [_host(v) for v in a]
    return a.detach().numpy() if isinstance(a, torch.Tensor) else a


def _shape_only(a):
    """What the descriptor builders read of a tensor: its shape, rank and NumPy dtype."""
    if isinstance(a, (list, tuple)):
        return [_shape_only(v) for v in a]
    if not isinstance(a, torch.Tensor):
        return a
    dtype = np.dtype(str(a.dtype).removeprefix("torch."))
    return SimpleNamespace(shape=tuple(a.shape), ndim=a.dim(), dtype=dtype)


def _kernel(name: str):
    fn = getattr(functional, name)

    def run(*args):
        return torch.from_numpy(np.asarray(fn(*(_host(a) for a in args), device="cpu")))

    return run


def _symbolic(shape) -> bool:
    return any(not isinstance(n, int) for n in shape)


def _axes(value, count: int, default: int) -> list:
    """A per-axis parameter as the schema passes it (None, one value, or one per axis)."""
    if value is None:
        return [default] * count
    value = list(value)
    return value * count if len(value) == 1 and count > 1 else value


def _window_sizes(x, k, strides, dilations, start, end) -> list:
    nd = len(x) - 2
    s, dl = _axes(strides, nd, 1), _axes(dilations, nd, 1)
    a, b = _axes(start, nd, 0), _axes(end, nd, 0)
    return [(x[2 + i] + a[i] + b[i] - ((k[i] - 1) * dl[i] + 1)) // s[i] + 1 for i in range(nd)]


def _symbolic_sizes(name: str, x, *args) -> list:
    """The output's sizes from the operator's shape rule on sizes that may be symbolic
    (``torch.compile(dynamic=True)``): the same formulas as the descriptors' shape rules; what
    the descriptors check besides (a window that fits, a slice inside the input) is checked
    when the kernel runs, on real sizes."""
    if name == "join":  # x: the list of inputs
        shape = list(x[0].shape)
        axis = args[0] % len(shape)
        shape[axis] = sum(t.shape[axis] for t in x)
        return shape
    shape = list(x.shape)
    if name in ("element_wise_add", "element_wise_multiply"):
        return list(torch.broadcast_shapes(x.shape, args[0].shape))
    if name in ("batch_normalization", "activation"):
        return shape
    if name == "gemm":
        b = list(args[0].shape)
        trans_a, trans_b = (list(args[2:4]) + [False, False])[:2]
        return shape[:-2] + [shape[-1] if trans_a else shape[-2], b[-2] if trans_b else b[-1]]
    if name in ("max_pooling", "average_pooling"):
        window, strides, start, end, dil = (list(args) + [None] * 5)[:5]
        return shape[:2] + _window_sizes(shape, list(window), strides, dil, start, end)
    if name == "padding":
        start, end = _axes(args[0], len(shape), 0), _axes(args[1], len(shape), 0)
        return [n + a + b for n, a, b in zip(shape, start, end)]
    if name == "tile":
        reps = [1] * (len(shape) - len(args[0])) + list(args[0])
        return [n * r for n, r in zip(shape, reps)]
    if name == "slice1":
        sizes = list(args[1])
        strides = _axes(args[2] if len(args) > 2 else None, len(shape), 1)
        return [1 + (n - 1) // abs(st) for n, st in zip(sizes, strides)]
    if name == "lp_pooling":
        window, strides, start, end, dil = (list(args) + [None] * 5)[:5]
        return shape[:2] + _window_sizes(shape, list(window), strides, dil, start, end)
    # convolution: filter, bias, strides, dilations, start, end, output padding, group count,
    # mode, direction (those not given: their defaults)
    args = list(args) + [None] * (10 - len(args))
    w = list(args[0].shape)
    strides, dil, start, end, outpad = args[2:7]
    groups = args[7] or 1
    direction = args[9] or "forward"
    if str(direction).lower() != "backward":
        return [shape[0], w[0]] + _window_sizes(shape, w[2:], strides, dil, start, end)
    nd = len(shape) - 2
    s, dl = _axes(strides, nd, 1), _axes(dil, nd, 1)
    a, b, op = _axes(start, nd, 0), _axes(end, nd, 0), _axes(outpad, nd, 0)
    return [shape[0], w[1] * groups] + [(shape[2 + i] - 1) * s[i] + (w[2 + i] - 1) * dl[i] + 1
                                        - a[i] - b[i] + op[i] for i in range(nd)]


def _fake(name: str):
    def fake(x, *args):
        first = x[0] if isinstance(x, (list, tuple)) else x
        tensors = (list(x) if first is not x else [x]) + [
            a for a in args if isinstance(a, torch.Tensor)]
        if any(_symbolic(t.shape) for t in tensors):
            return first.new_empty(_symbolic_sizes(name, x, *args))
        return first.new_empty(_bound(name, _shape_only(x), *map(_shape_only, args))[0]
                               .output.sizes)

    return fake


# -- gradients: a backward operator per operator, with a fake implementation ----------------

def _backward_schema(name: str) -> str:
    args = SCHEMAS[name][1:SCHEMAS[name].index(") ->")]
    return f"(Tensor grad, {args}) -> {GRADIENTS.get(name, 'Tensor')}"


class _Shape:
    """Shape and dtype only (what a descriptor builder reads), for bound array shapes."""

    def __init__(self, shape, dtype):
        self.shape, self.ndim, self.dtype = tuple(shape), len(shape), dtype


def _bound(name: str, *args):
    """The descriptor a call computes and the shapes its tensors are bound with (the
    functional layer's: operands broadcast, (C,) parameters as (1, C, 1...)), from arrays or
    shapes: ``(desc, [bound shape per tensor argument])``."""
    build = getattr(functional, f"{name}_desc")
    if name in ("element_wise_add", "element_wise_multiply"):
        a, b = args[:2]
        shape = np.broadcast_shapes(tuple(a.shape), tuple(b.shape))
        bound = [_Shape(shape, a.dtype), _Shape(shape, b.dtype)]
        return build(*bound, *args[2:]), [t.shape for t in bound]
    if name == "batch_normalization":
        x, params = args[0], args[1:5]
        bound = [_Shape(functional.bias_sizes(p.shape, x.ndim), p.dtype) for p in params]
        return build(x, *bound, *args[5:]), [tuple(x.shape)] + [t.shape for t in bound]
    if name == "gemm":
        a, b, c = (list(args) + [None])[:3]
        desc = build(a, b, None, *args[3:])
        if c is None:
            return desc, [tuple(a.shape), tuple(b.shape)]
        ct = _Shape(desc.output.sizes, c.dtype)
        return build(a, b, ct, *args[3:]), [tuple(a.shape), tuple(b.shape), ct.shape]
    if name == "join":
        return build(*args), [tuple(t.shape) for t in args[0]]
    desc = build(*args)
    return desc, [t.sizes for _, t in desc.bound_inputs()]


def _backward_kernel(name: str):
    from . import grad as _grad

    def run(grad, *args):
        host = [_host(a) for a in args]
        desc, shapes = _bound(name, *host)
        tensors = [a for a in (host[0] if name == "join" else host)
                   if isinstance(a, np.ndarray)]
        bound = [np.ascontiguousarray(as_bound(a, s)) for a, s in zip(tensors, shapes)]
        grads = _grad.backward(desc, bound, np.ascontiguousarray(_host(grad)))
        out = [torch.from_numpy(np.ascontiguousarray(reduce_to(g, a.shape)))
               for g, a in zip(grads, tensors)]
        if name == "join":
            return out
        if name not in GRADIENTS:
            return out[0]
        # one per tensor parameter of the schema: an absent optional one's is empty
        slots = [a for a in args if isinstance(a, torch.Tensor) or a is None][:len(
            GRADIENTS[name].split(","))]
        it = iter(out)
        return tuple(next(it) if a is not None else args[0].new_zeros(0) for a in slots)

    return run


def _backward_fake(name: str):
    def fake(grad, x, *args):
        if name == "join":
            return [t.new_empty(t.shape) for t in x]
        if name not in GRADIENTS:
            return x.new_empty(x.shape)
        slots = [x] + [a for a in args if isinstance(a, torch.Tensor) or a is None]
        slots = slots[:len(GRADIENTS[name].split(","))]
        return tuple(a.new_empty(a.shape) if a is not None else x.new_empty(0) for a in slots)

    return fake


def _setup_context(ctx, inputs, output):
    ctx.inputs = inputs
    flat = [t for a in inputs for t in (a if isinstance(a, (list, tuple)) else [a])]
    ctx.save_for_backward(*[a for a in flat if isinstance(a, torch.Tensor)])


def _autograd(name: str):
    op = getattr(torch.ops.dml_numba, f"{name}_backward")

    def backward(ctx, grad):
        grads = op(grad.contiguous(), *ctx.inputs)
        if name == "join":
            return (list(grads),) + (None,) * (len(ctx.inputs) - 1)
        grads = grads if isinstance(grads, tuple) else (grads,)
        it = iter(grads)
        out = []
        for a in ctx.inputs:  # a gradient per tensor parameter, None for the others
            if isinstance(a, torch.Tensor) or (a is None and len(out) < len(grads)):
                g = next(it, None)
                out.append(g if a is not None else None)
            else:
                out.append(None)
        return tuple(out)

    return backward


for _name, _schema in SCHEMAS.items():
    _LIBRARY.define(_name + _schema)
    _LIBRARY.impl(_name, _kernel(_name), "CPU")
    torch.library.register_fake(f"dml_numba::{_name}", _fake(_name), lib=_LIBRARY)
    _LIBRARY.define(f"{_name}_backward{_backward_schema(_name)}")
    _LIBRARY.impl(f"{_name}_backward", _backward_kernel(_name), "CPU")
    torch.library.register_fake(f"dml_numba::{_name}_backward", _backward_fake(_name),
                                lib=_LIBRARY)
    torch.library.register_autograd(f"dml_numba::{_name}", _autograd(_name),
                                    setup_context=_setup_context, lib=_LIBRARY)
