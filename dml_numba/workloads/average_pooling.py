"""Average pooling workloads: a global average pool (a classifier's head) and a 3x3 window."""
from __future__ import annotations

import numpy as np

from .. import functional as F
from . import data, ort_call, sizes, torch_call, workload


def spec(xs, k, s, p):
    def make(dtype, rng):
        x = data(xs, dtype, rng)
        return F.average_pooling_desc(x, k, s, p, p, include_padding=True), [x]

    return make, {
        "torch": lambda d, a: torch_call(
            lambda torch, x: torch.nn.functional.avg_pool2d(x, k, s, p), a),
        "onnxruntime": lambda d, a: ort_call("AveragePool", a, kernel_shape=list(k),
                                             strides=[s, s], pads=[p] * 4, count_include_pad=1),
    }


def workloads(quick: bool):
    n = sizes(quick)["batch"]
    return [workload("average_pooling", f"global 7x7 on ({n}, 512, 7, 7)",
                     spec((n, 512, 7, 7), (7, 7), 1, 0), "bytes", True),
            workload("average_pooling", f"3x3/1 pad 1 on ({n}, 64, 56, 56)",
                     spec((n, 64, 56, 56), (3, 3), 1, 1), "bytes", True)]


def demo(rng):
    x = rng.standard_normal((2, 8, 16, 16)).astype(np.float32)
    return [("average_pooling 3x3", F.average_pooling_desc(x, (3, 3), 1, 1, 1), [x])]
