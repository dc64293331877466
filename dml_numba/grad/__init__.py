"""Gradients of the operators, from their descriptors: what PyTorch's autograd calls
(:mod:`dml_numba.torch`, and the functional layer given tensors that require grad). NumPy
arrays in and out, the input's dtype (float64 for ``gradcheck``).

Each operator that computes registers its gradient in a module of its own name here
(:func:`gradient`; this package imports every module, as the backends do: no list to keep).
Data movement needs none: each output element is one input element (or a padding's constant),
so the input's gradient adds up the output's gradient at every place that read it, a
scatter-add through the operator's index maps (``gather_plan()``), axis by axis (the maps are
separable); a constant reads nothing. A fused activation is not differentiated here
(:func:`check` says to apply it in PyTorch).
"""
from __future__ import annotations

import itertools

import numpy as np

from .._errors import ValidationError
from .._registry import import_lowerings

_GRADIENTS: dict = {}


def gradient(desc_type):
    """Decorator: ``@gradient(LpPooling1OperatorDesc)`` on ``fn(desc, inputs, grad) -> [one
    array per bound input]``."""

    def deco(fn):
        _GRADIENTS[desc_type] = fn
        return fn

    return deco


def check(desc) -> None:
    """Refuse, before anything runs, a descriptor whose gradient is not computed here."""
    d = desc.canonical()
    if getattr(d, "fused_activation", None) is not None:
        raise ValidationError(
            f"{type(desc).__name__}.fused_activation: {type(d.fused_activation).__name__} is "
            "invalid where a gradient is wanted; expected None (apply the activation in "
            "PyTorch, after the operator, to differentiate through it)")
    if not hasattr(d, "gather_plan") and type(d) not in _GRADIENTS:
        raise ValidationError(f"{type(desc).__name__}: no gradient is defined for it")


def backward(desc, inputs, grad):
    """The gradients of ``desc``'s bound inputs (``inputs``, NumPy, binding order) given the
    output's gradient ``grad``: one array per input."""
    check(desc)
    d = desc.canonical()
    if hasattr(d, "gather_plan"):
        return [_gather_backward(d, grad)]
    return _GRADIENTS[type(d)](d, inputs, grad)


def _gather_backward(d, grad):
    plan = d.gather_plan()
    g = np.asarray(grad)
    for axis, m in enumerate(plan.maps):
        src, inside = m.at(np.arange(m.size))
        if plan.constant is None:
            inside = np.ones_like(inside)
        moved = np.moveaxis(g, axis, 0)
        out = np.zeros((m.n,) + moved.shape[1:], g.dtype)
        np.add.at(out, src[inside], moved[inside])
        g = np.moveaxis(out, 0, axis)
    return g


# -- what the windowed operators' gradients share -------------------------------------------

def taps(window):
    return itertools.product(*(range(k) for k in window))


def tap_view(padded, tap, dilations, strides, out_sizes):
    """The strided view of ``padded`` (spatial axes 2..) that tap ``tap`` reads for every
    output position."""
    idx = [slice(None), slice(None)]
    for k, d, s, o in zip(tap, dilations, strides, out_sizes):
        idx.append(slice(k * d, k * d + (o - 1) * s + 1, s))
    return padded[tuple(idx)]


def padded(x, start, end, reach, fill=0.0):
    """``x`` with ``fill`` in front (``start``) and behind, enough for the windows' ``reach``
    (per spatial axis, the padded extent they read)."""
    pads = [(0, 0), (0, 0)]
    for n, a, b, r in zip(x.shape[2:], start, end, reach):
        pads.append((a, max(b, r - n - a)))
    return np.pad(x, pads, constant_values=fill)


def reach(d) -> list:
    """Per spatial axis, the padded extent a pooling's windows read."""
    return [(o - 1) * s + (w - 1) * dl + 1 for o, s, w, dl in
            zip(d.output_tensor.sizes[2:], d.strides, d.window_size, d.dilations)]



import_lowerings(__name__, __path__)
