"""Join workloads: a U-Net skip connection (two activations joined along channels)."""
from __future__ import annotations

import numpy as np

from .. import functional as F
from . import data, ort_call, sizes, torch_call, workload


def spec(a_shape, b_shape):
    def make(dtype, rng):
        a, b = data(a_shape, dtype, rng), data(b_shape, dtype, rng)
        return F.join_desc([a, b], 1), [a, b]

    return make, {"numpy.concatenate": lambda d, a: lambda: np.concatenate(a, axis=1),
                  "torch": lambda d, a: torch_call(lambda t, x, y: t.cat([x, y], 1), a),
                  "onnxruntime": lambda d, a: ort_call("Concat", a, axis=1)}


def workloads(quick: bool):
    n = sizes(quick)["batch"]
    return [workload("join", f"skip ({n}, 64, 128, 128) + ({n}, 64, 128, 128)",
                     spec((n, 64, 128, 128), (n, 64, 128, 128)), "bytes")]


def demo(rng):
    a = rng.standard_normal((2, 4, 8, 8)).astype(np.float32)
    b = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    return [("join channels", F.join_desc([a, b], 1), [a, b])]
