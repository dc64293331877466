"""Element-wise workloads: a residual addition with ReLU, a multiplication."""
from __future__ import annotations

import numpy as np

from .. import functional as F
from ..ops.activation import ActivationReluOperatorDesc
from . import data, ort_call, sizes, torch_call, workload


def spec(shape, kind):
    def make(dtype, rng):
        a, b = data(shape, dtype, rng), data(shape, dtype, rng)
        if kind == "add":
            return F.element_wise_add_desc(a, b, ActivationReluOperatorDesc()), [a, b]
        return F.element_wise_multiply_desc(a, b), [a, b]

    if kind == "add":
        return make, {"numpy": lambda d, a: lambda: np.maximum(a[0] + a[1], 0),
                      "torch": lambda d, a: torch_call(lambda t, x, y: t.relu(x + y), a)}
    return make, {"numpy": lambda d, a: lambda: a[0] * a[1],
                  "torch": lambda d, a: torch_call(lambda t, x, y: x * y, a),
                  "onnxruntime": lambda d, a: ort_call("Mul", a)}


def workloads(quick: bool):
    n = sizes(quick)["batch"]
    return [workload("element_wise_add", f"residual add + ReLU on ({n}, 64, 56, 56)",
                     spec((n, 64, 56, 56), "add"), "bytes", True),
            workload("element_wise_multiply", f"multiply on ({n}, 64, 56, 56)",
                     spec((n, 64, 56, 56), "multiply"), "bytes")]


def demo(rng):
    a = rng.standard_normal((2, 8, 16, 16)).astype(np.float32)
    b = rng.standard_normal((2, 8, 16, 16)).astype(np.float32)
    return [("element_wise_add + ReLU",
             F.element_wise_add_desc(a, b, ActivationReluOperatorDesc()), [a, b]),
            ("element_wise_multiply", F.element_wise_multiply_desc(a, b), [a, b])]
