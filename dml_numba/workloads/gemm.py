"""GEMM workloads: a classifier head (features x weights^T + bias)."""
from __future__ import annotations

import numpy as np

from .. import functional as F
from . import data, ort_call, sizes, torch_call, workload


def spec(m, k, n):
    def make(dtype, rng):
        a, b = data((m, k), dtype, rng), data((n, k), dtype, rng)
        c = np.broadcast_to(data((n,), dtype, rng), (m, n)).copy()
        return F.gemm_desc(a, b, c, trans_b=True), [a, b, c]

    return make, {
        "numpy": lambda d, a: lambda: a[0] @ a[1].T + a[2],
        "torch": lambda d, a: torch_call(lambda t, x, w, c: t.addmm(c, x, w.T), a),
        "onnxruntime": lambda d, a: ort_call("Gemm", a, transB=1),
    }


def workloads(quick: bool):
    m = sizes(quick)["batch"]
    return [workload("gemm", f"classifier ({m}, 512) x (1000, 512)^T", spec(m, 512, 1000),
                     "flops", True)]


def demo(rng):
    a = rng.standard_normal((4, 16)).astype(np.float32)
    b = rng.standard_normal((10, 16)).astype(np.float32)
    return [("gemm", F.gemm_desc(a, b, trans_b=True), [a, b])]
