"""Batch normalization's gradients (inference: the parameters are inputs, not statistics of
the batch). With ``k = scale / sqrt(variance + epsilon)``: ``dx = g * k``; ``dmean = -sum(g *
k)``; ``dvariance = sum(g * scale * (x - mean)) * -1/2 (variance + epsilon)**-3/2``; ``dscale
= sum(g * (x - mean) / sqrt(variance + epsilon))``; ``dbias = sum(g)``, each sum over the axes
the parameter broadcasts along."""
from __future__ import annotations

import numpy as np

from .._interop import reduce_to
from ..ops.batch_normalization import BatchNormalizationOperatorDesc
from . import gradient


@gradient(BatchNormalizationOperatorDesc)
def batch_normalization_backward(d, inputs, grad):
    x, mean, var, scale, bias = inputs
    root = np.sqrt(var + d.epsilon)
    k = scale / root
    centred = x - mean
    return [grad * k, reduce_to(-grad * k, mean.shape),
            reduce_to(grad * scale * centred * -0.5 / (root * root * root), var.shape),
            reduce_to(grad * centred / root, scale.shape), reduce_to(grad, bias.shape)]
