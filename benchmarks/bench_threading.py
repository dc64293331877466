"""Parallel kernels on a busy machine: every usable threading layer and wait policy against
{idle; a second process running parallel Numba kernels; a Python busy loop on one core; four
Python threads calling operators at once}.

Each configuration runs in a fresh process (a threading layer and libgomp's wait policy are
fixed when the pool starts). The workload is reflection padding of a (1, 3, 540, 960) float32
image, forced parallel and forced serial; the figure of merit is parallel time / serial time
(below 1: the pool helps; above 1.5 under contention: the pool hurts), and the same for the
automatic choice (``parallel=None``, the default), which measures both variants as it runs.

    python3 -m benchmarks.bench_threading [--quick]
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

from benchmarks._harness import Table

CHILD = textwrap.dedent("""
    import json, statistics, sys, threading, time
    import numpy as np
    import dml_numba as dml
    scenario, repeat, workload = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if workload == "pad":
        x = np.random.default_rng(0).standard_normal((1, 3, 540, 960)).astype(np.float32)
        t = dml.TensorDesc(dml.DataType.FLOAT32, x.shape)
        o = dml.TensorDesc(dml.DataType.FLOAT32, (1, 3, 572, 992))
        d = dml.PaddingOperatorDesc(t, o, dml.PaddingMode.REFLECTION, 0.0, (0, 0, 16, 16),
                                    (0, 0, 16, 16))
    else:
        x = np.random.default_rng(0).standard_normal((2, 16, 128, 128)).astype(np.float32)
        t = dml.TensorDesc(dml.DataType.FLOAT32, x.shape)
        o = dml.TensorDesc(dml.DataType.FLOAT32, (2, 16, 126, 126))
        d = dml.LpPooling1OperatorDesc(t, o, (1, 1), (3, 3), (0, 0), (0, 0), (1, 1), 3)
    ops = {v: dml.compile_operator(d, "cpu", parallel=v == "parallel")
           for v in ("parallel", "serial")}
    ops["auto"] = dml.compile_operator(d, "cpu")  # the default: measured choice
    outs = {v: op(x) for v, op in ops.items()}
    for op in ops.values():  # warm: compiled (or loaded) before timing
        op(x)
    import numba
    layer = numba.threading_layer()

    variants = ("parallel", "serial", "auto")
    res = {}
    if scenario == "threads4":
        for v in ("serial", "auto", "parallel"):  # forced parallel last: its pools spin after
            per = []
            ys = [np.empty_like(outs["serial"]) for _ in range(4)]
            def work(i):
                ts = []
                for _ in range(repeat // 2):
                    t0 = time.perf_counter(); ops[v](x, out=ys[i])
                    ts.append(time.perf_counter() - t0)
                per.extend(ts)
            th = [threading.Thread(target=work, args=(i,)) for i in range(4)]
            [a.start() for a in th]; [a.join() for a in th]
            assert all(np.allclose(y, outs["serial"], rtol=1e-6) for y in ys)
            res[v] = statistics.median(per)
    else:  # the variants alternate, so that all three see the same machine
        ts = {v: [] for v in variants}
        for _ in range(repeat):
            for v in variants:
                t0 = time.perf_counter(); ops[v](x, out=outs[v])
                ts[v].append(time.perf_counter() - t0)
                time.sleep(0.001)  # a pipeline does other work between calls
        res = {v: statistics.median(t) for v, t in ts.items()}
    print(json.dumps({"layer": layer, **res}))
""")

NEIGHBOUR = textwrap.dedent("""
    import numpy as np, numba, time
    @numba.njit(parallel=True)
    def work(a):
        s = 0.0
        for i in numba.prange(a.size):
            s += np.sin(a[i])
        return s
    a = np.ones(200_000)
    t_end = time.time() + float(__import__("sys").argv[1])
    while time.time() < t_end:
        work(a)
""")

BUSY = "import time, sys\nt = time.time() + float(sys.argv[1])\nwhile time.time() < t: pass\n"


CONFIGS = {
    "omp, libgomp's default wait (dml_numba's default)": {"NUMBA_THREADING_LAYER": "omp"},
    "omp, passive wait": {"NUMBA_THREADING_LAYER": "omp", "OMP_WAIT_POLICY": "PASSIVE"},
    "omp, active wait": {"NUMBA_THREADING_LAYER": "omp", "OMP_WAIT_POLICY": "ACTIVE"},
    "workqueue": {"NUMBA_THREADING_LAYER": "workqueue"},
    "tbb": {"NUMBA_THREADING_LAYER": "tbb"},
}
SCENARIOS = ["idle", "neighbour process", "busy loop", "threads4"]


def _measure(env_extra: dict, scenario: str, repeat: int, workload: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("NUMBA_THREADING_LAYER", "OMP_WAIT_POLICY", "DML_NUMBA_THREADING")}
    env.update(env_extra)
    helpers = []
    if scenario == "neighbour process":
        helpers.append(subprocess.Popen([sys.executable, "-c", NEIGHBOUR, "120"],
                                        env={k: v for k, v in os.environ.items()
                                             if k not in ("OMP_WAIT_POLICY",)}))
        time.sleep(1.5)  # its pool is up and spinning
    elif scenario == "busy loop":
        helpers.append(subprocess.Popen([sys.executable, "-c", BUSY, "120"]))
    try:
        out = subprocess.run(
            [sys.executable, "-c", CHILD, scenario, str(repeat), workload],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        for h in helpers:
            h.kill()
            h.wait()
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["failed"])[-1][:80]}
    return json.loads(out.stdout.strip().splitlines()[-1])


WORKLOADS = {"pad": "reflection pad 16 of (1, 3, 540, 960) float32 (memory-bound)",
             "pool": "LP pooling p=3 3x3 of (2, 16, 128, 128) float32 (compute-bound)"}


def run(quick: bool = False) -> Table:
    repeat = 21 if quick else 101
    table = Table("Parallel kernels on a busy machine. Each cell: forced-parallel / serial and "
                  "automatic / serial time (medians; < 1 the pool helps, > 1.5 it hurts), then "
                  "the three times (parallel, automatic, serial)",
                  ["workload", "threading layer, wait policy"] + SCENARIOS)
    for workload, what in WORKLOADS.items():
        for name, env in CONFIGS.items():
            if workload == "pool" and not name.startswith("omp, "):
                continue  # the layer comparison is made on the first workload
            cells = []
            for scenario in SCENARIOS:
                r = _measure(env, scenario, repeat, workload)
                if "error" in r:
                    cells.append(f"fails: {r['error']}")
                else:
                    cells.append(f"{r['parallel'] / r['serial']:.2f} / "
                                 f"{r['auto'] / r['serial']:.2f} ({r['parallel'] * 1e3:.2f}, "
                                 f"{r['auto'] * 1e3:.2f}, {r['serial'] * 1e3:.2f} ms)")
            table.add(what, name, *cells)
    return table


if __name__ == "__main__":
    run(quick="--quick" in sys.argv)
