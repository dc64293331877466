"""Run every operator on every available device and print a table (agreement and times)."""
from __future__ import annotations

import time

import numpy as np

import dml_numba as dml

from .workloads import demos


def run_demo() -> int:
    devices = dml.available_devices()
    print(f"dml_numba {dml.__version__}: devices {', '.join(devices)}")
    print(f"{'operator':26s} {'device':7s} {'first call':>12s} {'warm call':>12s}  "
          "agrees with numpy")
    failures = 0
    for name, desc, inputs in demos(np.random.default_rng(0)):
        ref = dml.compile_operator(desc, "numpy")(*inputs)
        for dev in devices:
            t0 = time.perf_counter()
            op = dml.compile_operator(desc, dev)
            y = op(*inputs)
            first = time.perf_counter() - t0
            t0 = time.perf_counter()
            y = op(*inputs)
            warm = time.perf_counter() - t0
            y = y.copy_to_host() if hasattr(y, "copy_to_host") else np.asarray(y)
            ok = np.allclose(y, ref, rtol=1e-4, atol=1e-4)
            failures += not ok
            print(f"{name:26s} {dev:7s} {first * 1e3:10.1f}ms {warm * 1e3:10.2f}ms  "
                  f"{'yes' if ok else 'NO'}")
    return 1 if failures else 0
