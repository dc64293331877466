"""LP pooling workloads: p=2 over a 3x3 window with stride 2."""
from __future__ import annotations

import numpy as np

from .._errors import Checker
from ..ops._pooling import output_ranges
from ..ops.lp_pooling import LpPooling1OperatorDesc
from . import data, ort_call, sizes, tensor, torch_call, workload


def spec(xs, w, s, p):
    """(make, peers) for 2-D LP pooling of ``xs`` with window ``w``, stride ``s``, exponent
    ``p``."""
    def make(dtype, rng):
        ranges = output_ranges(Checker("workload"), xs, s, w, (0, 0), (0, 0), (1, 1))
        spatial = tuple(lo for lo, _ in ranges)
        desc = LpPooling1OperatorDesc(tensor(dtype, xs), tensor(dtype, xs[:2] + spatial), s, w,
                                      (0, 0), (0, 0), (1, 1), p)
        return desc, [data(xs, dtype, rng)]

    return make, {
        # PyTorch and ONNX Runtime have no |x|: they get |x| as input, which gives equal results
        "torch": lambda d, xs_: torch_call(
            lambda torch, x: torch.nn.functional.lp_pool2d(x, p, w, s), [np.abs(xs_[0])]),
        "onnxruntime": lambda d, xs_: ort_call("LpPool", [np.abs(xs_[0])], kernel_shape=list(w),
                                               strides=list(s), p=p),
    }


def workloads(quick: bool):
    n = sizes(quick)["batch"]
    return [workload("lp_pooling", f"p=2 3x3/2 on ({n}, 64, 56, 56)",
                     spec((n, 64, 56, 56), (3, 3), (2, 2), 2), "flops", True)]


def demo(rng):
    x = rng.standard_normal((2, 8, 64, 64)).astype(np.float32)
    desc = LpPooling1OperatorDesc(tensor(np.float32, x.shape), tensor(np.float32, (2, 8, 32, 32)),
                                  (2, 2), (3, 3), (1, 1), (1, 1), (1, 1), 2)
    return [("lp_pooling p=2", desc, [x])]
