"""Tile workloads: doubling an activation along both spatial axes."""
from __future__ import annotations

import numpy as np

from ..ops.tile import TileOperatorDesc
from . import data, ort_call, sizes, tensor, torch_call, workload


def spec(xs, reps):
    """(make, peers) for tiling ``xs`` by ``reps``."""
    def make(dtype, rng):
        out = tuple(n * r for n, r in zip(xs, reps))
        return TileOperatorDesc(tensor(dtype, xs), tensor(dtype, out), reps), [data(xs, dtype, rng)]

    return make, {
        "numpy.tile": lambda d, x: lambda: np.tile(x[0], reps),
        "torch": lambda d, x: torch_call(lambda torch, t: t.repeat(*reps), x),
        "onnxruntime": lambda d, x: ort_call("Tile", x, extra_inputs=[np.array(reps, np.int64)]),
    }


def workloads(quick: bool):
    act = sizes(quick)["activation"]
    half = act[:2] + (act[2] // 2, act[3] // 2)
    return [workload("tile", f"tile (1,1,2,2) of {half}", spec(half, (1, 1, 2, 2)), "bytes")]


def demo(rng):
    x = rng.standard_normal((2, 8, 64, 64)).astype(np.float32)
    desc = TileOperatorDesc(tensor(np.float32, x.shape), tensor(np.float32, (2, 16, 128, 192)),
                            (1, 2, 2, 3))
    return [("tile", desc, [x])]
