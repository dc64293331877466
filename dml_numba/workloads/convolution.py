"""Convolution workloads: a dense 3x3 layer, a depthwise layer, a transposed (upsampling) layer."""
from __future__ import annotations

import numpy as np

from .._errors import Checker
from ..ops.convolution import ConvolutionMode, ConvolutionOperatorDesc, output_sizes
from . import data, ort_call, sizes, tensor, torch_call, workload


def spec(xs, ws, s, p, g, direction=0, act=None):
    """(make, peers) for a 2-D convolution of input ``xs`` with filter ``ws``, stride ``s``,
    symmetric padding ``p``, ``g`` groups, FORWARD (0) or BACKWARD (1), with a bias."""
    def make(dtype, rng):
        x = data(xs, dtype, rng)
        w = (data(ws, dtype, rng) * 0.1).astype(dtype)
        out, _ = output_sizes(Checker("workload"), xs, ws, direction, s, (1, 1), p, p, (0, 0), g)
        b = data((1, out[1], 1, 1), dtype, rng)
        desc = ConvolutionOperatorDesc(
            tensor(dtype, xs), tensor(dtype, ws), tensor(dtype, b.shape), tensor(dtype, out),
            ConvolutionMode.CROSS_CORRELATION, direction, s, (1, 1), p, p, (0, 0), g, act)
        return desc, [x, w, b]

    if direction == 0:
        def torch_fn(torch, x, w, b):
            return torch.nn.functional.conv2d(x, w, b.reshape(-1), s, p, 1, g)
        onnx_op = "Conv"
    else:
        def torch_fn(torch, x, w, b):
            return torch.nn.functional.conv_transpose2d(x, w, b.reshape(-1), s, p, 0, g)
        onnx_op = "ConvTranspose"
    return make, {
        "torch": lambda d, xs_: torch_call(torch_fn, xs_),
        "onnxruntime": lambda d, xs_: ort_call(onnx_op, [xs_[0], xs_[1], xs_[2].reshape(-1)],
                                               strides=list(s), pads=list(p) * 2, group=g),
    }


def workloads(quick: bool):
    n = sizes(quick)["batch"]
    return [
        workload(
            "convolution",
            f"3x3 64->64 on ({n}, 64, 56, 56)",
            spec((n, 64, 56, 56), (64, 64, 3, 3), (1, 1), (1, 1), 1),
            "flops",
            True,
        ),
        workload(
            "convolution",
            f"depthwise 3x3 on ({n}, 128, 56, 56)",
            spec((n, 128, 56, 56), (128, 1, 3, 3), (1, 1), (1, 1), 128),
            "flops",
            True,
        ),
        workload(
            "convolution",
            f"transposed 3x3/2 64->32 on ({n}, 64, 28, 28)",
            spec((n, 64, 28, 28), (64, 32, 3, 3), (2, 2), (1, 1), 1, direction=1),
            "flops",
            True,
        ),
    ]


def demo(rng):
    x = rng.standard_normal((2, 8, 64, 64)).astype(np.float32)
    w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    wt = rng.standard_normal((8, 4, 3, 3)).astype(np.float32)

    def conv(xs, ws, out, s, p, g, direction):
        return ConvolutionOperatorDesc(tensor(np.float32, xs), tensor(np.float32, ws), None,
                                       tensor(np.float32, out), ConvolutionMode.CROSS_CORRELATION,
                                       direction, s, (1, 1), p, p, (0, 0), g)

    return [
        ("convolution 3x3", conv(x.shape, w.shape, (2, 16, 64, 64), (1, 1), (1, 1), 1, 0), [x, w]),
        (
            "convolution transposed",
            conv(x.shape, wt.shape, (2, 8, 129, 129), (2, 2), (0, 0), 2, 1),
            [x, wt],
        ),
    ]
