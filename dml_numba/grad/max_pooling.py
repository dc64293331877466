"""Max pooling's gradient: each output's gradient goes to the input element that won its
window (the first tap in window order on a tie, as PyTorch's); taps in the padding never win."""
from __future__ import annotations

import numpy as np

from ..ops.max_pooling import MaxPooling2OperatorDesc
from . import gradient, padded, reach, tap_view, taps


@gradient(MaxPooling2OperatorDesc)
def max_pooling_backward(d, inputs, grad):
    x = inputs[0].astype(np.float64)
    out = d.output_tensor.sizes[2:]
    xp = padded(x, d.start_padding, d.end_padding, reach(d), fill=-np.inf)
    best = np.full(grad.shape, -np.inf)
    won = np.full(grad.shape, -1)
    for t, tap in enumerate(taps(d.window_size)):
        v = tap_view(xp, tap, d.dilations, d.strides, out)
        better = v > best
        best, won = np.where(better, v, best), np.where(better, t, won)
    gp = np.zeros(xp.shape)
    for t, tap in enumerate(taps(d.window_size)):
        tap_view(gp, tap, d.dilations, d.strides, out)[...] += np.where(won == t, grad, 0)
    return [crop(gp, d, x).astype(inputs[0].dtype)]


def crop(gp, d, x):
    """The input's part of a padded gradient."""
    return gp[(slice(None), slice(None)) + tuple(slice(a, a + n) for a, n in
                                                 zip(d.start_padding, x.shape[2:]))]
