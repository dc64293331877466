"""The operators as PyTorch custom operators: ``import dml_numba.torch`` registers them.

``torch.ops.dml_numba.<name>`` (``padding``, ``lp_pooling``, ``convolution``, ``tile``,
``slice1``) takes and returns CPU tensors, with the functional layer's parameters as lists and
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
}

_LIBRARY = torch.library.Library("dml_numba", "DEF")


def _host(a):
    return a.detach().numpy() if isinstance(a, torch.Tensor) else a


def _shape_only(a):
    """What the descriptor builders read of a tensor: its shape, rank and NumPy dtype."""
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
    shape = list(x.shape)
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
    build = getattr(functional, f"{name}_desc")

    def fake(x, *args):
        tensors = [x] + [a for a in args if isinstance(a, torch.Tensor)]
        if any(_symbolic(t.shape) for t in tensors):
            return x.new_empty(_symbolic_sizes(name, x, *args))
        return x.new_empty(build(_shape_only(x), *map(_shape_only, args)).output.sizes)

    return fake


# -- gradients: a backward operator per operator, with a fake implementation ----------------

def _backward_schema(name: str) -> str:
    args = SCHEMAS[name][1:SCHEMAS[name].index(") ->")]
    out = "(Tensor, Tensor, Tensor)" if name == "convolution" else "Tensor"
    return f"(Tensor grad, {args}) -> {out}"


def _backward_kernel(name: str):
    from . import grad as _grad

    build = getattr(functional, f"{name}_desc")

    def run(grad, *args):
        host = [_host(a) for a in args]
        desc = build(*host)
        grads = _grad.backward(desc, [np.ascontiguousarray(a) for a in host
                                      if isinstance(a, np.ndarray)],
                               np.ascontiguousarray(_host(grad)))
        out = [torch.from_numpy(np.ascontiguousarray(g)) for g in grads]
        if name != "convolution":
            return out[0]
        x, w, b = args[:3]
        bias = out[2].reshape(b.shape) if b is not None else x.new_zeros(0)
        return out[0], out[1], bias

    return run


def _backward_fake(name: str):
    def fake(grad, x, *args):
        if name != "convolution":
            return x.new_empty(x.shape)
        w, b = args[0], args[1]
        return (x.new_empty(x.shape), w.new_empty(w.shape),
                b.new_empty(b.shape) if b is not None else x.new_empty(0))

    return fake


def _setup_context(ctx, inputs, output):
    ctx.inputs = inputs
    ctx.save_for_backward(*[a for a in inputs if isinstance(a, torch.Tensor)])


def _autograd(name: str):
    op = getattr(torch.ops.dml_numba, f"{name}_backward")

    def backward(ctx, grad):
        grads = op(grad.contiguous(), *ctx.inputs)
        if name != "convolution":
            return (grads,) + (None,) * (len(ctx.inputs) - 1)
        gx, gw, gb = grads
        return (gx, gw, gb if ctx.inputs[2] is not None else None) + \
            (None,) * (len(ctx.inputs) - 3)

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
