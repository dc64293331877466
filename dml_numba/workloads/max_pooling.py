"""Max pooling workloads: a ResNet stem's 3x3 window, stride 2, padding 1."""
from __future__ import annotations

import numpy as np

from .. import functional as F
from . import data, ort_call, sizes, torch_call, workload


def spec(xs):
    def make(dtype, rng):
        x = data(xs, dtype, rng)
        return F.max_pooling_desc(x, (3, 3), 2, 1, 1), [x]

    return make, {
        "torch": lambda d, a: torch_call(
            lambda torch, x: torch.nn.functional.max_pool2d(x, 3, 2, 1), a),
        "onnxruntime": lambda d, a: ort_call("MaxPool", a, kernel_shape=[3, 3], strides=[2, 2],
                                             pads=[1, 1, 1, 1]),
    }


def workloads(quick: bool):
    n = sizes(quick)["batch"]
    return [workload("max_pooling", f"3x3/2 pad 1 on ({n}, 64, 112, 112)",
                     spec((n, 64, 112, 112)), "bytes", True)]


def demo(rng):
    x = rng.standard_normal((2, 8, 32, 32)).astype(np.float32)
    return [("max_pooling 3x3/2", F.max_pooling_desc(x, (3, 3), 2, 1, 1), [x])]
