"""Slice workloads: reversing two axes, and every second row."""
from __future__ import annotations

import numpy as np

from ..ops.slice import Slice1OperatorDesc
from . import data, sizes, tensor, workload


def spec(xs, offs, extents, strides):
    """(make, peers) for a Slice1 of ``xs`` (offsets, sizes, strides as the descriptor's)."""
    def make(dtype, rng):
        out = tuple(1 + (n - 1) // abs(s) for n, s in zip(extents, strides))
        desc = Slice1OperatorDesc(tensor(dtype, xs), tensor(dtype, out), offs, extents, strides)
        return desc, [data(xs, dtype, rng)]

    def numpy_slices():
        out = []
        for o, n, s in zip(offs, extents, strides):
            start = o + (n - 1 if s < 0 else 0)
            stop = start + s * (1 + (n - 1) // abs(s))
            out.append(slice(start, stop if stop >= 0 else None, s))
        return tuple(out)

    return make, {"numpy (strided copy)":
                  lambda d, x: (lambda: np.ascontiguousarray(x[0][numpy_slices()]))}


def workloads(quick: bool):
    act = sizes(quick)["activation"]
    return [
        workload(
            "slice1",
            f"reverse C and W of {act}",
            spec(act, (0, 0, 0, 0), act, (1, -1, 1, -1)),
            "bytes",
        ),
        workload(
            "slice1", f"every 2nd row of {act}", spec(act, (0, 0, 0, 0), act, (1, 1, 2, 1)), "bytes"
        ),
    ]


def demo(rng):
    x = rng.standard_normal((2, 8, 64, 64)).astype(np.float32)
    desc = Slice1OperatorDesc(tensor(np.float32, x.shape), tensor(np.float32, (2, 3, 20, 64)),
                              (0, 1, 3, 0), (2, 6, 60, 64), (1, 2, -3, -1))
    return [("slice1 reversed", desc, [x])]
