"""The tuner against the best candidate and the static rule, on the convolution crossover grid.

    python3 -m benchmarks.bench_tune [--quick] [--lanes N] [--threads N] [--shapes K]
                                     [--table-only] [--dump FILE] [--workloads]

For each shape of ``bench_convolution``'s grid (``--quick``: batch 1 only; ``--shapes K``: every
K-th shape), every candidate the exhaustive tuner considers is timed (median of three rounds,
each a median of five samples of at least 2 ms, the tuner's own
measure) into one table; from it: the best candidate, the static rule's
pick and its time over the best, and what the ``quick`` and ``exhaustive`` tuners chose when run
(independently, each with its own timing, nothing read from or kept in the wisdom) and their
choices' times over the best. ``--lanes 8 --threads 2`` plans every kernel for a machine with
AVX2's 8-lane vectors and two threads (the kernels run here), to see where crossovers move;
``--threads N`` also gives BLAS N threads (OpenBLAS's variable, set before NumPy starts).
Also the cost of tuning one key in quick mode, one new process after another from an empty
cache folder, until one reads the wisdom. ``--table-only``: the candidates' table and the static
rule against it, without running the tuners (about half the time); ``--dump FILE``: every
candidate's time per shape as JSON, written after each shape (the data the static rule's cost
model is fitted to); ``--workloads``: the convolution benchmark's layers instead of the grid.
"""
from __future__ import annotations

import os
import sys

if "--threads" in sys.argv:  # BLAS's pool too, before NumPy loads it
    os.environ.setdefault("OPENBLAS_NUM_THREADS", sys.argv[sys.argv.index("--threads") + 1])

import json
import statistics
import subprocess
import time

import numpy as np

from benchmarks._harness import Table, Tables
from benchmarks.bench_convolution import WORKLOADS, _case, grid_shapes


def _arg(name: str, default: int) -> int:
    return int(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def shapes(quick: bool, every: int, workloads: bool) -> list:
    """The crossover grid's shapes (every ``every``-th), or the benchmark set's layers."""
    return list(WORKLOADS) if workloads else grid_shapes(quick)[::every]


def grid(quick: bool, every: int, host, tuners: bool = True, dump: str | None = None,
         workloads: bool = False) -> Table:
    from dml_numba.cpu.convolution import tune

    rng = np.random.default_rng(0)
    table = Table(f"Tuner vs best candidate on the crossover grid (host planned: {host.lanes} "
                  f"lanes, {host.threads} threads; times over the best candidate's)",
                  ["shape", "candidates", "best (ms)", "best is", "static rule",
                   "static / best", "quick / best", "exhaustive / best", "exhaustive picks"])
    ratios = {"static": [], "quick": [], "exhaustive": []} if tuners else {"static": []}
    dumped = {}
    for label, xs, ws, s, p, g, direction in shapes(quick, every, workloads):
        desc, x, w, b = _case(xs, ws, s, p, g, direction, rng)
        desc = desc.canonical()
        cands = tune.candidates(desc, host, "exhaustive")
        kernels = {c: c.build(desc, {}, timed=True) for c in cands}
        inputs, out = tune._inputs(desc, rng)
        rounds = {c: [] for c in cands}
        for _ in range(3):
            for c, k in sorted(kernels.items(), key=lambda ck: ck[0].algorithm == "gemm"):
                samples = tune.measure(lambda k=k: k(inputs, out), time.perf_counter, 5, None)
                rounds[c].append(statistics.median(samples))
            time.sleep(0.2)  # BLAS's pool (timed last) stops spinning before the next round
        times = {c: statistics.median(r) for c, r in rounds.items()}
        best = min(times, key=times.get)
        static = tune.static(desc, host)
        row, picks = {"static": times[static] / times[best]}, {}
        if dump:
            dumped[label] = {c.label(): t for c, t in times.items()}
            with open(dump, "w") as f:
                json.dump({"host": [host.lanes, host.threads], "shapes": dumped}, f, indent=1)
        for mode in ("quick", "exhaustive") if tuners else ():
            chosen = tune.tune(desc, {}, mode, host=host, remember=False,
                               build=lambda c, timed=False: kernels[c])
            picks[mode] = tune.Candidate.from_json(chosen.tuning["choice"])
            row[mode] = times[picks[mode]] / times[best]
        for k, v in row.items():
            ratios[k].append(v)
        tuned = [f"{row[m]:.2f}" if m in row else "" for m in ("quick", "exhaustive")]
        table.add(label, len(cands), f"{times[best] * 1e3:.3f}", best.label(), static.label(),
                  f"{row['static']:.2f}", *tuned,
                  picks["exhaustive"].label() if picks else "")
        print(f"{label}: " + " ".join(f"{k} {v:.2f}" for k, v in row.items())
              + f" ({best.label()})", file=sys.stderr)
    for k, v in ratios.items():
        cells = [f"worst {max(v):.2f}, median {statistics.median(v):.2f}; within 3%: "
                 f"{sum(r <= 1.03 for r in v)}, 1%: {sum(r <= 1.01 for r in v)} of {len(v)}"
                 if k == m else "" for m in ("static", "quick", "exhaustive")]
        table.add(f"**{k}**", "", "", "", "", *cells, "")
    return table


COST_SCRIPT = """
import sys, time
import numpy as np
t0 = time.perf_counter()
import dml_numba as dml
x = np.ones((8, 64, 56, 56), np.float32); w = np.ones((64, 64, 3, 3), np.float32)
d = dml.functional.convolution_desc(x, w, None, start_padding=(1, 1), end_padding=(1, 1))
t1 = time.perf_counter()
op = dml.compile_operator(d, "cpu", tune="quick")
t = op.kernel.tuning
print(time.perf_counter() - t1, t["source"], t["tuning_s"], len(t.get("left") or []),
      int(bool(t.get("provisional"))))
"""


def tuning_cost() -> Table:
    """The dense 3x3 64->64 layer built in one new process after another from a new cache
    folder, quick mode: each process's compile_operator time, until one reads the wisdom
    (each compiles what its budget allows; a provisional result is timed again by the next)."""
    import tempfile

    table = Table("Cost of tuning one key (dense 3x3 64->64 on 8x56x56, quick), one new "
                  "process after another from an empty cache folder",
                  ["process", "compile_operator (s)", "from", "tuning measured (s)",
                   "candidates left", "provisional"])
    with tempfile.TemporaryDirectory() as root:
        env = dict(os.environ, DML_NUMBA_CACHE_DIR=root)
        for i in range(1, 11):
            out = subprocess.run([sys.executable, "-c", COST_SCRIPT], env=env, check=True,
                                 capture_output=True, text=True).stdout.split()
            table.add(str(i), f"{float(out[0]):.2f}", out[1], f"{float(out[2]):.2f}", out[3],
                      "yes" if out[4] == "1" else "no")
            if out[1] == "wisdom":
                break
    return table


def main() -> None:
    import numba

    from dml_numba.cpu._emit import Host, planned_for

    quick = "--quick" in sys.argv
    lanes = _arg("--lanes", 0)
    threads = _arg("--threads", 0)
    if threads:
        numba.set_num_threads(threads)
    here = Host.current()
    host = Host(lanes or here.lanes, threads or here.threads)
    t0 = time.perf_counter()
    with planned_for(host):
        tables = [grid(quick, _arg("--shapes", 1), host, "--table-only" not in sys.argv,
                       sys.argv[sys.argv.index("--dump") + 1] if "--dump" in sys.argv else None,
                       "--workloads" in sys.argv)]
    if not lanes and not threads and "--table-only" not in sys.argv:
        tables.append(tuning_cost())
    print(Tables(tables).markdown())
    print(f"(run took {time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
