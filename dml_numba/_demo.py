"""Run every operator on every available device and print a table (agreement and times)."""
from __future__ import annotations

import time

import numpy as np

import dml_numba as dml


def demo_cases():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 8, 64, 64)).astype(np.float32)
    w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    wt = rng.standard_normal((8, 4, 3, 3)).astype(np.float32)
    return [
        ("padding reflection", lambda d: dml.padding(x, (0, 0, 5, 7), (0, 0, 9, 3), "reflection", device=d)),
        ("padding constant", lambda d: dml.padding(x, (0, 1, 2, 3), (1, 0, 3, 2), "constant", 1.5, device=d)),
        ("lp_pooling p=2", lambda d: dml.lp_pooling(x, (3, 3), (2, 2), (1, 1), (1, 1), p=2, device=d)),
        ("convolution 3x3", lambda d: dml.convolution(x, w, start_padding=(1, 1), end_padding=(1, 1), device=d)),
        ("convolution transposed", lambda d: dml.convolution(x, wt, strides=(2, 2), group_count=2,
                                                              direction=1, device=d)),
        ("tile", lambda d: dml.tile(x, (1, 2, 2, 3), device=d)),
        ("slice1 reversed", lambda d: dml.slice1(x, (0, 1, 3, 0), (2, 6, 60, 64), (1, 2, -3, -1), device=d)),
    ]


def run_demo() -> int:
    devices = dml.available_devices()
    print(f"dml_numba {dml.__version__}: devices {', '.join(devices)}")
    print(f"{'operator':26s} {'device':7s} {'first call':>12s} {'warm call':>12s}  agrees with numpy")
    failures = 0
    for name, fn in demo_cases():
        ref = fn("numpy")
        for dev in devices:
            t0 = time.perf_counter()
            y = fn(dev)
            first = time.perf_counter() - t0
            t0 = time.perf_counter()
            y = fn(dev)
            warm = time.perf_counter() - t0
            y = y.copy_to_host() if hasattr(y, "copy_to_host") else np.asarray(y)
            ok = np.allclose(y, ref, rtol=1e-4, atol=1e-4)
            failures += not ok
            print(f"{name:26s} {dev:7s} {first * 1e3:10.1f}ms {warm * 1e3:10.2f}ms  {'yes' if ok else 'NO'}")
    return 1 if failures else 0
