"""Per-call latency of a warm operator in a loop, as a pipeline sees it: p50, p99 and the worst
call of 600, idle and beside a busy process (a second process running parallel Numba kernels,
or a Python busy loop). A call that blocks on a compile shows as a worst call of 0.3 s or more.

Each scenario runs in a fresh process with a fresh disk cache (so nothing is loaded from an
earlier run; in the last one the neighbour starts after 50 warm calls, which is when the
automatic variant wants its serial variant): symmetric padding of a (4, 16, 128, 128) float32
tensor through the functional layer, the automatic variant (the default).

    python3 -m benchmarks.bench_latency
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time

from benchmarks._harness import Table
from benchmarks.bench_threading import BUSY, NEIGHBOUR

CHILD = textwrap.dedent("""
    import json, subprocess, sys, time, numpy as np, dml_numba as dml
    x = np.random.default_rng(0).standard_normal((4, 16, 128, 128)).astype(np.float32)
    y = dml.padding(x, (0, 0, 8, 8), (0, 0, 8, 8), "symmetric")  # compiles: not counted
    ts, neighbour = [], None
    for i in range(600):
        if i == 50 and sys.argv[1] == "late":  # the machine gets busy under a warm operator
            neighbour = subprocess.Popen([sys.executable, "-c", sys.argv[2], "60"])
            time.sleep(1.5)
        t0 = time.perf_counter()
        dml.padding(x, (0, 0, 8, 8), (0, 0, 8, 8), "symmetric", out=y)
        ts.append(time.perf_counter() - t0)
    if neighbour:
        neighbour.kill()
    fn = dml.compile_operator(dml.functional.padding_desc(x, (0, 0, 8, 8), (0, 0, 8, 8),
                                                         "symmetric"), "cpu").kernel.fn
    built = fn.serial_built() if hasattr(fn, "serial_built") else fn._fns[False] is not None
    print(json.dumps({"times": ts, "serial_built": built, "variant": fn.variant()}))
""")


def _quantile(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def measure(scenario: str) -> dict:
    helpers = []
    if scenario == "neighbour process":
        helpers.append(subprocess.Popen([sys.executable, "-c", NEIGHBOUR, "120"]))
        time.sleep(1.5)
    elif scenario == "busy loop":
        helpers.append(subprocess.Popen([sys.executable, "-c", BUSY, "120"]))
    try:
        with tempfile.TemporaryDirectory() as cache:
            out = subprocess.run([sys.executable, "-c", CHILD,
                                  "late" if scenario == "neighbour arriving after 50 calls"
                                  else "-", NEIGHBOUR], capture_output=True, text=True,
                                 env=dict(os.environ, DML_NUMBA_CACHE_DIR=cache), timeout=600)
    finally:
        for h in helpers:
            h.kill()
            h.wait()
    if out.returncode:
        raise RuntimeError(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(quick: bool = False) -> Table:
    table = Table("A warm operator in a 600-call loop (symmetric padding of (4, 16, 128, 128) "
                  "float32, automatic variant, fresh process and disk cache)",
                  ["scenario", "p50 ms", "p99 ms", "worst ms", "calls > 50 ms",
                   "serial variant built", "variant at the end"])
    for scenario in ("idle", "neighbour process", "busy loop",
                     "neighbour arriving after 50 calls"):
        r = measure(scenario)
        ts = [t * 1e3 for t in r["times"]]
        table.add(scenario, f"{_quantile(ts, 0.5):.2f}", f"{_quantile(ts, 0.99):.2f}",
                  f"{max(ts):.1f}", sum(t > 50 for t in ts), r["serial_built"], r["variant"])
    return table


if __name__ == "__main__":
    run(quick="--quick" in sys.argv)
