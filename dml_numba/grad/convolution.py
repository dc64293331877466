"""Convolution's gradients: the input's is the adjoint, a convolution of the other direction
with the same filter and parameters (our own operator); the filter's is the correlation of the
(padded) input with the output's gradient, group by group, each tap a strided view; the bias's
the sum over batch and space. A transposed convolution's input gradient is the forward
convolution, its filter's the same correlation with the roles of input and gradient
exchanged. CONVOLUTION mode reads the filter flipped: its gradient is flipped back."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..ops.convolution import ConvolutionDirection, ConvolutionMode, ConvolutionOperatorDesc
from ..tensor import TensorDesc
from . import gradient, padded, taps


@gradient(ConvolutionOperatorDesc)
def convolution_backward(d, inputs, grad):
    from .._api import compile_operator

    x, w = inputs[0], inputs[1]
    forward = d.direction == ConvolutionDirection.FORWARD
    dt = d.input_tensor.data_type
    if forward:  # the adjoint: the transposed convolution of the gradient, x's size exactly
        other = ConvolutionDirection.BACKWARD
        natural = [(o - 1) * s + (k - 1) * dl + 1 - a - b for o, s, k, dl, a, b in zip(
            grad.shape[2:], d.strides, w.shape[2:], d.dilations, d.start_padding,
            d.end_padding)]
        output_padding = tuple(n - m for n, m in zip(x.shape[2:], natural))
    else:
        other, output_padding = ConvolutionDirection.FORWARD, (0,) * (x.ndim - 2)
    adjoint = replace(d, input_tensor=TensorDesc(dt, grad.shape), bias_tensor=None,
                      output_tensor=TensorDesc(dt, x.shape), direction=other,
                      output_padding=output_padding)
    gx = compile_operator(adjoint, "numpy")(np.ascontiguousarray(grad), w)
    # the filter: the forward correlation's, of (input, output gradient); transposed: of
    # (output gradient, input)
    a, g = (x, grad) if forward else (grad, x)
    gw = _filter_grad(a, g, w.shape, d)
    if d.mode == ConvolutionMode.CONVOLUTION:  # the forward read the filter flipped
        gw = gw[(slice(None), slice(None)) + (slice(None, None, -1),) * (w.ndim - 2)]
    out = [gx, np.ascontiguousarray(gw)]
    if d.bias_tensor is not None:
        out.append(grad.sum(axis=(0,) + tuple(range(2, grad.ndim)), keepdims=True))
    return out


def _filter_grad(a, g, wshape, d):
    """``dW[co, ci, k] = sum_n,o g[n, co, o] * a_padded[n, group's ci, o*s + k*dil]`` (the
    forward correlation's filter gradient; ``a`` the forward input, ``g`` the forward output's
    gradient), group by group."""
    groups = d.group_count
    out = g.shape[2:]
    reach = [(o - 1) * s + (k - 1) * dl + 1 for o, s, k, dl in
             zip(out, d.strides, wshape[2:], d.dilations)]
    ap = padded(a, d.start_padding, d.end_padding, reach)
    n, cin = a.shape[:2]
    cout = g.shape[1]
    ag = ap.reshape((n, groups, cin // groups) + ap.shape[2:])
    gg = g.reshape((n, groups, cout // groups) + g.shape[2:])
    gw = np.zeros((groups, cout // groups, cin // groups) + tuple(wshape[2:]), g.dtype)
    spatial = "xyz"[: len(out)]
    for tap in taps(wshape[2:]):
        idx = [slice(None)] * 3
        for k, dl, s, o in zip(tap, d.dilations, d.strides, out):
            idx.append(slice(k * dl, k * dl + (o - 1) * s + 1, s))
        v = ag[tuple(idx)]
        gw[(slice(None),) * 3 + tap] = np.einsum(f"ngo{spatial},ngi{spatial}->goi", gg, v)
    return gw.reshape((cout, cin // groups) + tuple(wshape[2:]))
