"""Parallel kernels on a busy machine: every usable threading layer and wait policy against
{idle; a second process running parallel Numba kernels; a Python busy loop on one core; four
Python threads calling operators at once}.

Each configuration runs in a fresh process (a threading layer and libgomp's wait policy are
fixed when the pool starts). The workload is reflection padding of a (1, 3, 540, 960) float32
image, forced parallel and forced serial; the figure of merit is parallel time / serial time
(below 1: the pool helps; above 1.5 under contention: the pool hurts).

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
    scenario, repeat = sys.argv[1], int(sys.argv[2])
    x = np.random.default_rng(0).standard_normal((1, 3, 540, 960)).astype(np.float32)
    t = dml.TensorDesc(dml.DataType.FLOAT32, x.shape)
    o = dml.TensorDesc(dml.DataType.FLOAT32, (1, 3, 572, 992))
    d = dml.PaddingOperatorDesc(t, o, dml.PaddingMode.REFLECTION, 0.0, (0, 0, 16, 16), (0, 0, 16, 16))
    ops = {v: dml.compile_operator(d, "cpu", parallel=v == "parallel") for v in ("parallel", "serial")}
    outs = {v: op(x) for v, op in ops.items()}
    import numba
    layer = numba.threading_layer()

    def timed(v, n):
        ts = []
        for _ in range(n):
            t0 = time.perf_counter(); ops[v](x, out=outs[v]); ts.append(time.perf_counter() - t0)
            time.sleep(0.002)  # a pipeline does other work between calls
        return ts

    res = {}
    for v in ("parallel", "serial"):
        if scenario == "threads4":
            per = []
            ys = [np.empty_like(outs[v]) for _ in range(4)]
            def work(i):
                ts = []
                for _ in range(repeat // 2):
                    t0 = time.perf_counter(); ops[v](x, out=ys[i]); ts.append(time.perf_counter() - t0)
                per.extend(ts)
            th = [threading.Thread(target=work, args=(i,)) for i in range(4)]
            [a.start() for a in th]; [a.join() for a in th]
            assert all(np.array_equal(y, outs["serial"]) for y in ys)
            res[v] = statistics.median(per)
        else:
            res[v] = statistics.median(timed(v, repeat))
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


def _tbb_usable() -> bool:
    try:
        import tbb  # noqa: F401
    except ImportError:
        return False
    return True


CONFIGS = {
    "omp, libgomp's default wait": {"NUMBA_THREADING_LAYER": "omp", "DML_NUMBA_THREADING": "numba"},
    "omp, passive wait (dml_numba's default)": {"NUMBA_THREADING_LAYER": "omp",
                                                "OMP_WAIT_POLICY": "PASSIVE"},
    "omp, active wait": {"NUMBA_THREADING_LAYER": "omp", "OMP_WAIT_POLICY": "ACTIVE"},
    "workqueue": {"NUMBA_THREADING_LAYER": "workqueue"},
    "tbb": {"NUMBA_THREADING_LAYER": "tbb"},
}
SCENARIOS = ["idle", "neighbour process", "busy loop", "threads4"]


def _measure(env_extra: dict, scenario: str, repeat: int) -> dict:
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
        out = subprocess.run([sys.executable, "-c", CHILD, scenario, str(repeat)], env=env,
                             capture_output=True, text=True, timeout=300)
    finally:
        for h in helpers:
            h.kill()
            h.wait()
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["failed"])[-1][:80]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(quick: bool = False) -> Table:
    repeat = 15 if quick else 41
    table = Table("Parallel kernels on a busy machine: reflection pad (1, 3, 540, 960) float32, "
                  "parallel / serial time (median; < 1 the pool helps, > 1.5 it hurts)",
                  ["threading layer, wait policy"] + SCENARIOS)
    for name, env in CONFIGS.items():
        if env.get("NUMBA_THREADING_LAYER") == "tbb" and not _tbb_usable():
            table.add(name, *["not installed"] * len(SCENARIOS))
            continue
        cells = []
        for scenario in SCENARIOS:
            r = _measure(env, scenario, repeat)
            if "error" in r:
                cells.append(f"fails: {r['error']}")
            else:
                cells.append(f"{r['parallel'] / r['serial']:.2f} "
                             f"({r['parallel'] * 1e3:.2f} / {r['serial'] * 1e3:.2f} ms)")
        table.add(name, *cells)
    return table


if __name__ == "__main__":
    run(quick="--quick" in sys.argv)
