"""Average pooling's gradient: each output's gradient divided by its window's count, added to
every input element the window reads (taps in the padding read nothing)."""
from __future__ import annotations

import numpy as np

from .._dtypes import DataType
from ..ops.average_pooling import AveragePooling1OperatorDesc
from ..tensor import TensorDesc
from . import gradient, padded, reach, tap_view, taps
from .max_pooling import crop


@gradient(AveragePooling1OperatorDesc)
def average_pooling_backward(d, inputs, grad):
    from .._api import compile_operator

    x = inputs[0]
    ones = np.ones((1, 1) + x.shape[2:], np.float64)
    # each output's count: the operator itself on ones, times the count (= its sum of ones)
    count_desc = d.replace_tensors(
        input_tensor=TensorDesc(DataType.FLOAT64, ones.shape),
        output_tensor=TensorDesc(DataType.FLOAT64, (1, 1) + d.output_tensor.sizes[2:]))
    mean_of_ones = compile_operator(count_desc, "numpy")(ones)  # 1, or count / all taps
    out = d.output_tensor.sizes[2:]
    inside = padded(ones, d.start_padding, d.end_padding, reach(d))
    counted = np.zeros((1, 1) + tuple(out))
    for tap in taps(d.window_size):
        counted += tap_view(inside, tap, d.dilations, d.strides, out)
    with np.errstate(divide="ignore", invalid="ignore"):
        # sum over inside taps / count = mean_of_ones: count = inside taps / mean_of_ones
        share = np.where(counted > 0, grad * mean_of_ones / np.maximum(counted, 1), 0.0)
    gp = np.zeros(padded(x, d.start_padding, d.end_padding, reach(d)).shape)
    for tap in taps(d.window_size):
        tap_view(gp, tap, d.dilations, d.strides, out)[...] += share
    return [crop(gp, d, x).astype(x.dtype)]
