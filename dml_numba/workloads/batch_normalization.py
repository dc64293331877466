"""Batch normalization workloads: per channel, as after a ResNet convolution."""
from __future__ import annotations

import numpy as np

from .. import functional as F
from . import data, ort_call, sizes, torch_call, workload


def _params(c, dtype, rng):
    mean, scale, bias = (rng.standard_normal((1, c, 1, 1)).astype(dtype) for _ in range(3))
    var = rng.uniform(0.5, 2, (1, c, 1, 1)).astype(dtype)
    return [mean, var, scale, bias]


def spec(shape):
    def make(dtype, rng):
        x = data(shape, dtype, rng)
        ps = _params(shape[1], dtype, rng)
        return F.batch_normalization_desc(x, *ps), [x] + ps

    flat = lambda a: [a[0]] + [p.reshape(-1) for p in a[1:]]  # noqa: E731
    return make, {
        "torch": lambda d, a: torch_call(lambda t, x, m, v, s, b: t.nn.functional.batch_norm(
            x, m, v, s, b, False, 0.0, 1e-5), flat(a)),
        "onnxruntime": lambda d, a: ort_call("BatchNormalization", [flat(a)[i] for i in
                                                                     (0, 3, 4, 1, 2)]),
    }


def workloads(quick: bool):
    n = sizes(quick)["batch"]
    return [workload("batch_normalization", f"per channel on ({n}, 64, 56, 56)",
                     spec((n, 64, 56, 56)), "bytes", True)]


def demo(rng):
    x = rng.standard_normal((2, 8, 16, 16)).astype(np.float32)
    ps = _params(8, np.float32, rng)
    return [("batch_normalization", F.batch_normalization_desc(x, *ps), [x] + ps)]
