"""The default (automatic) variant on a busy machine and an idle one: a single operator, a compiled
graph, an ONNX model and a deep compiled graph (36 convolutions, each kernel its own), each
called a few hundred times in a new process with its kernels in the disk cache, with two other
processes spinning parallel Numba kernels on the cores (the busy machine) and without.

Figures of merit: busy, the worst median over every window of 20 calls from the 20th call on,
over the serial variant's median (target <= 1.5); idle, the default's median over the better
of the forced variants (target <= 1.1). And busy again in a process whose disk cache holds the
default's kernels but not their serial variants (a new install meeting its first busy
machine: the variants are built while the calls go on), the same worst window over serial.

    python3 -m benchmarks.bench_contention [--quick] [--rounds N] [--against DIR]

``--against DIR`` runs the same children on another checkout (its ``dml_numba``), alternating
with this one, so that a change is measured before and after in one run.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

from benchmarks._harness import Table
from benchmarks.bench_threading import NEIGHBOUR

CHILD = textwrap.dedent("""
    import json, statistics, sys, time
    import numpy as np
    import dml_numba as dml
    workload, calls = sys.argv[1], int(sys.argv[2])
    rng = np.random.default_rng(0)
    F = dml.functional
    if workload == "operator":
        x = rng.standard_normal((1, 3, 540, 960)).astype(np.float32)
        d = F.padding_desc(x, (0, 0, 16, 16), (0, 0, 16, 16), "reflection")
        make = lambda **kw: dml.compile_operator(d, "cpu", **kw)
        args = (x,)
    elif workload == "graph":
        x = rng.standard_normal((1, 3, 540, 960)).astype(np.float32)
        p = F.padding_desc(x, (0, 0, 1, 1), (0, 0, 1, 1), "constant", 1.0)
        lp = F.lp_pooling_desc(np.empty(p.output.sizes, np.float32), (2, 2), (2, 2))
        N, IN, OUT, MID = (dml.OperatorGraphNodeDesc, dml.InputGraphEdgeDesc,
                           dml.OutputGraphEdgeDesc, dml.IntermediateGraphEdgeDesc)
        g = dml.GraphDesc(1, 1, (N(p), N(lp)), (IN(0, 0, 0),), (OUT(1, 0, 0),),
                          (MID(0, 0, 1, 0),))
        make = lambda **kw: dml.compile_graph(g, "cpu", **kw)
        args = (x,)
    elif workload == "deep":  # twelve blocks of three convolutions, each of its own sizes
        N, IN, OUT, MID = (dml.OperatorGraphNodeDesc, dml.InputGraphEdgeDesc,
                           dml.OutputGraphEdgeDesc, dml.IntermediateGraphEdgeDesc)
        clip = dml.ElementWiseClipOperatorDesc(min=0.0, max=6.0)
        x = rng.standard_normal((1, 16, 28, 28)).astype(np.float32)
        nodes, ins, mids, params = [], [IN(0, 0, 0)], [], []
        for i in range(12):
            e = 24 + 8 * i
            for w, kw in ((np.ones((e, 16, 1, 1)), dict(fused_activation=clip)),
                          (np.ones((e, 1, 3, 3)), dict(start_padding=1, end_padding=1,
                                                       group_count=e, fused_activation=clip)),
                          (np.ones((16, e, 1, 1)), {})):
                w = (rng.standard_normal(w.shape) / np.sqrt(w[0].size)).astype(np.float32)
                c = w.shape[1] * kw.get("group_count", 1)
                nodes.append(N(F.convolution_desc(np.empty((1, c, 28, 28), np.float32), w,
                                                  **kw)))
                params.append(w)
                k = len(nodes) - 1
                ins.append(IN(len(params), k, 1))
                if k:
                    mids.append(MID(k - 1, 0, k, 0))
        g = dml.GraphDesc(1 + len(params), 1, tuple(nodes), tuple(ins),
                          (OUT(len(nodes) - 1, 0, 0),), tuple(mids))
        make = lambda **kw: dml.compile_graph(g, "cpu", **kw)
        args = (x, *params)
    else:
        from onnx import TensorProto as TP, helper, numpy_helper
        from dml_numba.onnx import compile_model
        x = rng.standard_normal((1, 8, 256, 256)).astype(np.float32)
        w = rng.standard_normal((8, 1, 3, 3)).astype(np.float32)
        nodes = [helper.make_node("Pad", ["x", "pads"], ["p"], mode="reflect"),
                 helper.make_node("Conv", ["p", "w"], ["c"], group=8),
                 helper.make_node("Relu", ["c"], ["y"])]
        graph = helper.make_graph(
            nodes, "m", [helper.make_tensor_value_info("x", TP.FLOAT, x.shape)],
            [helper.make_tensor_value_info("y", TP.FLOAT, x.shape)],
            [numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads"),
             numpy_helper.from_array(w, "w")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        make = lambda **kw: compile_model(model, "cpu", **kw)
        args = (x,)

    def times(fn, n):
        ts = []
        for _ in range(n):
            t0 = time.perf_counter(); fn(*args); ts.append(time.perf_counter() - t0)
        return ts

    auto = make()
    auto(*args)  # loaded (the disk cache is warm): the calls below are the process's first
    if calls == 0:  # only the default's kernels into the cache (their serial variants not)
        print(json.dumps({}))
        sys.exit(0)
    ts = times(auto, calls)
    variants = {"auto": auto, **{v: make(parallel=v == "parallel")
                                 for v in ("serial", "parallel")}}
    for f in variants.values():
        f(*args)
    paired = {v: [] for v in variants}
    for _ in range(60):  # then the three alternately: each sees the same machine
        for v, f in variants.items():
            paired[v] += times(f, 1)
    windows = [statistics.median(ts[i:i + 20]) for i in range(20, calls - 19, 20)]
    print(json.dumps({"windows": windows,
                      **{v: statistics.median(t) for v, t in paired.items()}}))
""")

WORKLOADS = {"operator": "reflection pad 16 of (1, 3, 540, 960)",
             "graph": "constant pad 1 -> LP 2x2/2 of (1, 3, 540, 960), two steps",
             "onnx": "ONNX Pad (reflect) -> depthwise Conv -> Relu, (1, 8, 256, 256)",
             "deep": "36 convolutions of (1, 16, 28, 28), 12 inverted residual blocks"}


def _cold(root: str, workload: str, cache: str) -> str:
    """A cache holding the default's kernels only, their serial variants not (a new install
    that never met a busy machine): the variants are built when contention first asks."""
    _child(root, workload, 0, False, cache)
    return cache


def _child(root: str, workload: str, calls: int, busy: bool, cache: str) -> dict:
    env = {**os.environ, "PYTHONPATH": root, "DML_NUMBA_CACHE_DIR": cache}
    spinners = []
    if busy:
        spinners = [subprocess.Popen([sys.executable, "-c", NEIGHBOUR, "600"])
                    for _ in range(2)]
        time.sleep(1.5)  # their pools are up and spinning
    try:
        out = subprocess.run([sys.executable, "-c", CHILD, workload, str(calls)], env=env,
                             capture_output=True, text=True, timeout=600, cwd=root)
    finally:
        for p in spinners:
            p.kill()
            p.wait()
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(quick: bool = False, rounds: int = 3, against: str | None = None) -> Table:
    calls = 200 if quick else 400
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = [("this tree", here)] + ([("--against", os.path.abspath(against))]
                                     if against else [])
    table = Table("The default variant, busy (two processes spinning parallel kernels) and "
                  "idle; medians, ms",
                  ["workload", "tree", "round", "busy: worst 20-call window / serial",
                   "busy: windows (ms)", "busy: serial ms", "idle: default / best (paired)",
                   "idle: default, parallel, serial ms",
                   "busy, serial variants not yet built: worst window / serial",
                   "busy, not yet built: windows (ms)"])
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as scratch:
        for workload in WORKLOADS:
            colds = {}
            for name, root in trees:  # the kernels of every variant into the cache first
                _child(root, workload, 25, False, cache)
                colds[name] = _cold(root, workload, os.path.join(scratch, f"{workload}-{name}"))
            for r in range(rounds):
                for name, root in trees:
                    busy = _child(root, workload, calls, True, cache)
                    idle = _child(root, workload, calls, False, cache)
                    fresh = os.path.join(scratch, "fresh")
                    shutil.rmtree(fresh, ignore_errors=True)
                    shutil.copytree(colds[name], fresh)  # each round as new
                    cold = _child(root, workload, calls, True, fresh)
                    worst = max(busy["windows"]) / busy["serial"]
                    best = min(idle["serial"], idle["parallel"])
                    table.add(WORKLOADS[workload], name, r + 1, f"{worst:.2f}",
                              " ".join(f"{w * 1e3:.2f}" for w in busy["windows"]),
                              f"{busy['serial'] * 1e3:.2f}", f"{idle['auto'] / best:.2f}",
                              f"{idle['auto'] * 1e3:.2f}, {idle['parallel'] * 1e3:.2f}, "
                              f"{idle['serial'] * 1e3:.2f}",
                              f"{max(cold['windows']) / cold['serial']:.2f}",
                              " ".join(f"{w * 1e3:.2f}" for w in cold["windows"]))
    return table


def _summary(table: Table) -> str:
    """Per workload and tree, the median of each figure of merit over the rounds."""
    rows: dict = {}
    for row in table.rows:
        rows.setdefault((row[0], row[1]), []).append((float(row[3]), float(row[6]),
                                                      float(row[8])))
    lines = []
    for (w, t), v in rows.items():
        busy, idle, cold = ([r[i] for r in v] for i in range(3))
        lines.append(f"{w} [{t}]: busy worst window / serial {statistics.median(busy):.2f} "
                     f"({', '.join(f'{a:.2f}' for a in busy)}); idle default / best "
                     f"{statistics.median(idle):.2f} ({', '.join(f'{b:.2f}' for b in idle)}); "
                     f"busy, serial variants not yet built {statistics.median(cold):.2f} "
                     f"({', '.join(f'{c:.2f}' for c in cold)})")
    return "\n".join(lines)


if __name__ == "__main__":
    args = sys.argv[1:]
    against = args[args.index("--against") + 1] if "--against" in args else None
    rounds = int(args[args.index("--rounds") + 1]) if "--rounds" in args else 3
    t = run("--quick" in args, rounds, against)
    print(t.markdown())
    print(_summary(t))
