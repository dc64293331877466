"""LP pooling's gradient: ``d(sum |x|^p)^(1/p) / dx = sign(x) |x|^(p-1) y^(1-p)``, summed
over the windows reading ``x`` (0 where a window's result is 0: every term of it is; taps in
the padding read zeros)."""
from __future__ import annotations

import numpy as np

from ..ops.lp_pooling import LpPooling1OperatorDesc
from . import gradient, padded, tap_view, taps


@gradient(LpPooling1OperatorDesc)
def lp_pooling_backward(d, inputs, grad):
    from .._api import compile_operator

    x = inputs[0]
    y = compile_operator(d, "numpy")(x)
    p = d.p
    out = d.output_tensor.sizes[2:]
    reach = [(o - 1) * s + (w - 1) * dl + 1 for o, s, w, dl in
             zip(out, d.strides, d.window_size, d.dilations)]
    xp = padded(x, d.start_padding, d.end_padding, reach)
    gp = np.zeros_like(xp)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(y > 0, grad * np.power(y, 1 - p), 0) if p > 1 else grad
    for tap in taps(d.window_size):
        v = tap_view(xp, tap, d.dilations, d.strides, out)
        tap_view(gp, tap, d.dilations, d.strides, out)[...] += \
            scale * np.sign(v) * np.abs(v) ** (p - 1)
    crop = (slice(None), slice(None)) + tuple(slice(a, a + n) for a, n in
                                              zip(d.start_padding, x.shape[2:]))
    return [gp[crop]]
