"""ONNX CNNs exported by PyTorch (ResNet-18, MobileNetV2 at 224 x 224, a U-Net at 256 x 256;
random weights, eval mode, ``torch.onnx.export`` at opset 17) through ``compile_model`` on the
"cpu" device, against ONNX Runtime's CPU provider with the same thread count, in one run
(alternating blocks of calls, fifteen rounds, medians: :func:`benchmarks._harness.blocks_samples`;
the paired speed-up is the median over rounds of each round's ratio, with its quartiles:
:func:`benchmarks._harness.paired_ratio`), once both have
settled: each kernel's serial and parallel variants are timed against each other over its first
calls (``settle`` calls, reported apart); and the first load-and-run of a new process with a
warm kernel cache. ``--tuned``: each model tuned first (``tune="quick"`` in new processes until
one compiles nothing), then the tuned network (the default mode reads the choices) and the
static choice (``tune="off"``) timed in the same alternation as ONNX Runtime. ``--first-run``:
only the first load-and-run of new processes (median of three after one that warms the cache).

    python3 -m benchmarks.bench_cnn [--quick] [--tuned] [--batches 1 8] [--models resnet18 unet]
    python3 -m benchmarks.bench_cnn --first-run     # new processes, warm kernel cache
    python3 -m benchmarks.bench_cnn --native        # the steps as native calls or one by one
    python3 -m benchmarks.bench_cnn --gaps          # calls after idle gaps, workers pinned or not
    python3 -m benchmarks.bench_cnn --steps --models mobilenet_v2 --batches 1  # step by step
    python3 -m benchmarks.bench_cnn --device cuda   # on a GPU: against PyTorch (cuDNN)

On "cuda" the input is a device array (no transfer timed) and the peer is the same network in
PyTorch, eager on the GPU (cuDNN, TF32 off: float32 throughout, as ours); the result is checked
against ONNX Runtime's CPU provider.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks._harness import (
    Table,
    Tables,
    blocks_samples,
    machine,
    median_time,
    paired_ratio,
    paired_times,
    samples_median,
)

SIZES = {"resnet18": 224, "mobilenet_v2": 224, "unet": 256}


def _models():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests import cnn_models as C

    return C


def _export(name: str, size: int) -> bytes:
    C = _models()
    return C.export(C.MODELS[name](), (1, 3, size, size), batch="n")


def run_cuda(quick: bool = False, batches=(1, 8), models=tuple(SIZES)) -> Table:
    """Time per inference on the GPU against PyTorch eager (cuDNN) of the same network."""
    import onnxruntime as ort
    import torch
    from numba import cuda

    from dml_numba.onnx import compile_model

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    C = _models()
    table = Table(f"ONNX CNNs on the GPU ({torch.cuda.get_device_name()}) against PyTorch eager "
                  "(cuDNN, float32)", ["model", "input", "dml_numba ms", "PyTorch ms",
                                       "speed-up", "max rel. error (ONNX Runtime CPU)",
                                       "build (s)"])
    for name in models:
        size = SIZES[name] // (2 if quick else 1)
        net = C.MODELS[name]()
        data = C.export(net, (1, 3, size, size), batch="n")
        session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
        tnet = net.cuda()
        for n in batches:
            shape = (n, 3, size, size)
            x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
            t0 = time.perf_counter()
            model = compile_model(data, "cuda", input_shapes={"x": shape})
            dx = cuda.to_device(x)
            y = model(dx)
            cuda.synchronize()
            build = time.perf_counter() - t0
            ref = session.run(None, {"x": x})[0]
            err = float(np.abs(y.copy_to_host() - ref).max() / np.abs(ref).max())
            tx = torch.from_numpy(x).cuda()

            def ours():
                model(dx)
                cuda.synchronize()

            def theirs():
                with torch.no_grad():
                    tnet(tx)
                torch.cuda.synchronize()

            a, b = paired_times(ours, theirs, repeat=9 if quick else 21)
            table.add(name, f"{n}x3x{size}x{size}", f"{a * 1e3:.2f}", f"{b * 1e3:.2f}",
                      f"{b / a:.2f}", f"{err:.1e}", f"{build:.1f}")
    return table


def steps_cuda(name: str, batch: int, quick: bool = False, repeat: int = 15) -> Table:
    """Where a network's time goes on the GPU, step by step: each step's kernel time (CUDA
    events around it), its host time (Python and the launch, the GPU not waited for) and, for a
    convolution, the kernel time of each other CUDA algorithm on the same arrays; the network's
    time, waited for, and its host time alone. A network whose host time is its time starves the
    GPU (launches); one whose kernel times add up to it is bound by its kernels."""
    import statistics

    from numba import cuda

    from dml_numba import compile_operator
    from dml_numba.cuda._launch import geometry
    from dml_numba.onnx import compile_model
    from dml_numba.ops import ConvolutionOperatorDesc

    size = SIZES[name] // (2 if quick else 1)
    shape = (batch, 3, size, size)
    model = compile_model(_export(name, size), "cuda", input_shapes={"x": shape})
    dx = cuda.to_device(np.random.default_rng(0).standard_normal(shape).astype(np.float32))
    model(dx)
    cuda.synchronize()
    g = model.compiled
    ops = list(g.ops)
    events = [(cuda.event(), cuda.event()) for _ in ops]
    host = [[] for _ in ops]
    kernel = [[] for _ in ops]
    seen = [None] * len(ops)

    class Timed:
        def __init__(self, i):
            self.i = i

        def run_checked(self, args, out):
            e0, e1 = events[self.i]
            e0.record()
            t0 = time.perf_counter()
            ops[self.i].run_checked(args, out)
            host[self.i].append(time.perf_counter() - t0)
            e1.record()
            seen[self.i] = (list(args), out)

    def whole():
        model(dx)
        cuda.synchronize()

    def enqueue():
        t0 = time.perf_counter()
        model(dx)
        t = time.perf_counter() - t0
        cuda.synchronize()
        return t

    total = median_time(whole, repeat=repeat, number=3)
    queued = statistics.median(enqueue() for _ in range(repeat))
    g.ops = [Timed(i) for i in range(len(ops))]
    try:
        for _ in range(repeat):
            model(dx)
            cuda.synchronize()
            for i, (e0, e1) in enumerate(events):
                kernel[i].append(e0.elapsed_time(e1) * 1e-3)
    finally:
        g.ops = ops

    def event_time(fn) -> float:
        e0, e1 = cuda.event(), cuda.event()
        fn()
        samples = []
        for _ in range(repeat):
            e0.record()
            fn()
            e1.record()
            e1.synchronize()
            samples.append(e0.elapsed_time(e1) * 1e-3)
        return statistics.median(samples)

    table = Table(f"{name} {shape} on the GPU, step by step: network {total * 1e3:.2f} ms, "
                  f"its host time {queued * 1e3:.2f} ms",
                  ["step", "operator", "output", "kernel", "blocks x threads", "kernel ms",
                   "host us", "other algorithms ms"])
    for i, (op, step) in enumerate(zip(ops, g.steps)):
        desc = op.desc
        others = []
        if isinstance(desc, ConvolutionOperatorDesc) and seen[i] is not None:
            args, out = seen[i]
            opts = dict(step.options)
            for alg in ("direct", "tiled"):
                try:
                    alt = compile_operator(desc, "cuda", **{**opts, "algorithm": alg})
                    if alt.kernel.key == op.kernel.key:
                        continue
                    spent = event_time(lambda: alt.run_checked(args, out))
                    others.append(f"{alg} {spent * 1e3:.3f}")
                except Exception as e:  # noqa: BLE001 - a row, not the run
                    others.append(f"{alg}: {type(e).__name__}")
        k = op.kernel
        grid = "x".join(map(str, geometry(k.total, False, k._threads(), fixed=k.block))) if (
            hasattr(k, "total")) else ""
        table.add(i, type(desc).__name__.replace("OperatorDesc", ""),
                  "x".join(map(str, desc.output.sizes)), getattr(k, "key", None) and k.key.op,
                  grid, f"{statistics.median(kernel[i]) * 1e3:.3f}",
                  f"{statistics.median(host[i]) * 1e6:.0f}", "; ".join(others))
    k = sum(statistics.median(t) for t in kernel)
    h = sum(statistics.median(t) for t in host)
    table.add("sum", "", "", "", "", f"{k * 1e3:.2f}", f"{h * 1e6:.0f}", "")
    return table


def steps_cpu(name: str, batch: int, quick: bool = False, rounds: int = 12) -> Table:
    """Where a network's time goes on the CPU, step by step, against ONNX Runtime's own
    profile in the same process: each step's time inside the network (the steps called in
    order, each timed), the same step alone (called three times, the last timed: its data,
    weights and code in the caches), and ONNX Runtime's node (its profiler, matched in order
    with our convolutions and GEMMs where both have as many; its fusions differ otherwise).
    Blocks of the two alternate 0.1 s apart. The gap between "in network" and "alone" is what
    the rest of the network costs a step (its data evicted by the others'); ONNX Runtime's run
    is timed with its profiler on (slower than without)."""
    import json
    import statistics

    import numba
    import onnxruntime as ort

    from dml_numba.onnx import compile_model

    size = SIZES[name] // (2 if quick else 1)
    shape = (batch, 3, size, size)
    data = _export(name, size)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    model = compile_model(data, "cpu", input_shapes={"x": shape})
    g = model.compiled
    runs = {}
    bind = g._bind

    def kept(k, *args):  # each step's call of no arguments, as the graph binds it
        runs[k] = bind(k, *args)
        return runs[k]

    g._bind = kept
    try:
        model(x)
    finally:
        del g._bind
    steps = [runs[k] for k in sorted(runs)]
    threads = numba.config.NUMBA_NUM_THREADS
    with tempfile.TemporaryDirectory() as tmp:
        so = ort_options(threads)
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(tmp, "ort")
        session = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        for _ in range(10):
            model(x)
            session.run(None, {"x": x})
        inside, ort_runs = [[] for _ in steps], []
        for _ in range(rounds):
            time.sleep(0.1)
            for _ in range(6):
                t = time.perf_counter()
                for i, f in enumerate(steps):
                    f()
                    t2 = time.perf_counter()
                    inside[i].append(t2 - t)
                    t = t2
            time.sleep(0.1)
            for _ in range(6):
                t = time.perf_counter()
                session.run(None, {"x": x})
                ort_runs.append(time.perf_counter() - t)
        with open(session.end_profiling()) as f:
            events = json.load(f)
    alone = []
    for f in steps:
        samples = []
        for _ in range(rounds):
            f()
            f()
            t = time.perf_counter()
            f()
            samples.append(time.perf_counter() - t)
        alone.append(statistics.median(samples))
    nodes: dict = {}
    for e in events:  # each node's kernel times, in the order first seen (the graph's)
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            nodes.setdefault(e["name"], (e["args"].get("op_name", ""), []))[1].append(e["dur"])
    theirs = [(op, statistics.median(d[-6 * rounds:]) * 1e-6) for op, d in nodes.values()]
    compute = [t for op, t in theirs if op in ("Conv", "FusedConv", "Gemm", "FusedGemm")]
    # our compute steps, each with the number of ONNX Runtime's compute nodes it stands for (a
    # pointwise convolution and the depthwise one after it: two)
    covers = {"ConvolutionOperatorDesc": 1, "FusedAddDesc": 1, "GemmOperatorDesc": 1,
              "PointwiseDepthwiseDesc": 2}
    ours_compute = [(i, covers[type(op.desc).__name__]) for i, op in enumerate(g.ops)
                    if type(op.desc).__name__ in covers]
    matched = {}
    if sum(n for _, n in ours_compute) == len(compute):
        at = 0
        for i, n in ours_compute:
            matched[i] = sum(compute[at:at + n])
            at += n
    med = [statistics.median(v) for v in inside]
    table = Table(f"{name} {shape} on the CPU, step by step ({threads} threads): our "
                  f"steps {sum(med) * 1e3:.2f} ms in the network, {sum(alone) * 1e3:.2f} "
                  f"alone; ONNX Runtime's nodes {sum(t for _, t in theirs) * 1e3:.2f} ms, its "
                  f"runs {statistics.median(ort_runs) * 1e3:.2f} (profiled)",
                  ["step", "operator", "input", "output", "in network ms", "alone ms",
                   "ONNX Runtime node ms"])
    for i, op in enumerate(g.ops):
        desc = op.desc
        inp = getattr(desc, "input_tensor", None)
        table.add(i, type(desc).__name__.replace("OperatorDesc", "").replace("Desc", ""),
                  "x".join(map(str, inp.sizes)) if inp is not None else "",
                  "x".join(map(str, desc.output.sizes)), f"{med[i] * 1e3:.3f}",
                  f"{alone[i] * 1e3:.3f}", f"{matched[i] * 1e3:.3f}" if i in matched else "")
    return table


def ort_options(threads: int):
    """ONNX Runtime's session options for a comparison: ``threads`` in its operators, one
    operator at a time (as our graph runs its steps)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return opts


def first_run_seconds(path: str, shape) -> float:
    """A new process: import, load the model, compile (kernels from the disk cache) and run
    once; the seconds from the start of the import to the result."""
    code = (f"import time; t = time.perf_counter(); import numpy as np; "
            f"from dml_numba.onnx import compile_model; "
            f"m = compile_model({path!r}, 'cpu', input_shapes={{'x': {tuple(shape)!r}}}); "
            f"m(np.zeros({tuple(shape)!r}, np.float32)); print(time.perf_counter() - t)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    return float(out.stdout.strip().splitlines()[-1])


def tune_in_new_processes(path: str, shape, most: int = 8) -> list[float]:
    """Quick tuning of every convolution of the model at ``path`` for inputs of ``shape``, in
    new processes (each within the tuner's budget a layer) until one takes under 5 s (it
    compiled nothing: every candidate is in the disk cache and was timed) or ``most`` ran:
    each process's seconds."""
    code = ("import time, numpy as np; t = time.perf_counter(); "
            "from dml_numba.onnx import compile_model; "
            f"m = compile_model({path!r}, 'cpu', input_shapes={{'x': {tuple(shape)!r}}}, "
            f"tune='quick'); m(np.zeros({tuple(shape)!r}, np.float32)); "
            "print(time.perf_counter() - t)")
    spent = []
    while len(spent) < most and (not spent or spent[-1] >= 5.0):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True)
        spent.append(float(out.stdout.strip().splitlines()[-1]))
    return spent


def run(quick: bool = False, batches=(1, 8), models=tuple(SIZES), settle: int = 40,
        tuned: bool = False, rounds: int = 15) -> Table:
    import numba
    import onnxruntime as ort

    from dml_numba.onnx import compile_model

    threads = numba.config.NUMBA_NUM_THREADS
    table = Table(f"ONNX CNNs on the CPU against ONNX Runtime ({threads} threads each)"
                  + (", tuned" if tuned else ""),
                  ["model", "input", "dml_numba ms", "ONNX Runtime ms", "speed-up",
                   "paired speed-up (quartiles)", "max rel. error", "first calls ms (mean)",
                   "first run, new process (s)"]
                  + (["static choice ms", "tuning processes (s)"] if tuned else []))
    opts = ort_options(threads)
    for name in models:
        size = SIZES[name] // (2 if quick else 1)
        data = _export(name, size)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, f"{name}.onnx")
            Path(path).write_bytes(data)
            session = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
            for n in batches:
                shape = (n, 3, size, size)
                x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
                spent = tune_in_new_processes(path, shape) if tuned else []
                t0 = time.perf_counter()
                model = compile_model(path, "cpu", input_shapes={"x": shape})
                y = model(x)
                build = time.perf_counter() - t0
                ref = session.run(None, {"x": x})[0]
                err = float(np.abs(y - ref).max() / np.abs(ref).max())
                t0 = time.perf_counter()
                for _ in range(settle):
                    model(x)
                early = (time.perf_counter() - t0) / settle
                fns = [lambda: model(x), lambda: session.run(None, {"x": x})]
                if tuned:
                    static = compile_model(path, "cpu", input_shapes={"x": shape}, tune="off")
                    for _ in range(settle):
                        static(x)
                    fns.append(lambda: static(x))
                samples = blocks_samples(fns, rounds=5 if quick else rounds)
                ours, theirs, *rest = [samples_median(s) for s in samples]
                paired = paired_ratio(samples[1], samples[0])
                first = first_run_seconds(path, shape)
                extra = ([f"{rest[0] * 1e3:.1f}", " ".join(f"{s:.0f}" for s in spent)]
                         if tuned else [])
                table.add(name, f"{n}x3x{size}x{size}", f"{ours * 1e3:.1f}",
                          f"{theirs * 1e3:.1f}", f"{theirs / ours:.2f}",
                          "{:.2f} ({:.2f}-{:.2f})".format(*paired), f"{err:.1e}",
                          f"{early * 1e3:.1f}", f"{first:.2f} (build here {build:.1f})", *extra)
    return table


def _model_files(models):
    """``(name, size, path)`` of each model exported to a file that lasts until the next."""
    for name in models:
        size = SIZES[name]
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, f"{name}.onnx")
            Path(path).write_bytes(_export(name, size))
            yield name, size, path


def run_first(batches=(1, 8), models=tuple(SIZES), repeats: int = 3) -> Table:
    """The first run of a new process with a warm kernel cache alone (import to result), each
    model and batch ``repeats`` times after one process that warms the cache: the median and
    the range."""
    table = Table("First run of a new process, warm kernel cache (s)",
                  ["model", "input", "median s", "min s", "max s"])
    for name, size, path in _model_files(models):
        for n in batches:
            shape = (n, 3, size, size)
            first_run_seconds(path, shape)  # the cache warmed
            times = sorted(first_run_seconds(path, shape) for _ in range(repeats))
            table.add(name, f"{n}x3x{size}x{size}", f"{times[len(times) // 2]:.2f}",
                      f"{times[0]:.2f}", f"{times[-1]:.2f}")
    return table


GAPS_CHILD = """
import json, sys, time, statistics
import numpy as np, numba, onnxruntime as ort
from benchmarks.bench_cnn import ort_options
from dml_numba.onnx import compile_model
path, calls = sys.argv[1], int(sys.argv[4])
shape, gaps = tuple(json.loads(sys.argv[2])), json.loads(sys.argv[3])
x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
model = compile_model(path, "cpu", input_shapes={"x": shape})
session = ort.InferenceSession(path, ort_options(numba.config.NUMBA_NUM_THREADS),
                               providers=["CPUExecutionProvider"])
fns = {"ours": lambda: model(x), "ort": lambda: session.run(None, {"x": x})}
for f in fns.values():
    for _ in range(20):
        f()
out = {}
for gap in gaps:
    for name, f in fns.items():
        time.sleep(0.1)
        f()
        times = []
        for _ in range(calls):
            time.sleep(gap)
            t0 = time.perf_counter()
            f()
            times.append(time.perf_counter() - t0)
        out[f"{name} {gap}"] = statistics.median(times)
print(json.dumps(out))
"""


def run_gaps(batches=(1,), models=tuple(SIZES), gaps=(0.0, 0.02, 0.1), rounds: int = 3,
             calls: int = 30) -> Table:
    """Calls after idle gaps (a server answering requests, a camera's frames): each model's
    single calls ``gap`` seconds apart, in new processes alternating GNU OpenMP's workers
    pinned to cores of their own (the default) and not (``DML_NUMBA_PIN_WORKERS=0``), ONNX
    Runtime's in the same processes (its own blocks, after a rest of 0.1 s: its workers spin
    about 50 ms after a run); medians over ``rounds`` processes of each setting of the
    medians of ``calls`` calls."""
    import numba

    table = Table(f"Calls after idle gaps, median ms ({numba.config.NUMBA_NUM_THREADS} threads)",
                  ["model", "input", "gap s", "workers pinned", "not pinned",
                   "ONNX Runtime", "speed-up pinned", "speed-up not pinned"])
    root = str(Path(__file__).resolve().parents[1])
    for name, size, path in _model_files(models):
        for n in batches:
            shape = [n, 3, size, size]
            got = {"1": [], "0": []}
            for _ in range(rounds):
                for pin in got:
                    env = {**os.environ, "DML_NUMBA_PIN_WORKERS": pin}
                    out = subprocess.run(
                        [sys.executable, "-c", GAPS_CHILD, path, str(shape), str(list(gaps)),
                         str(calls)], capture_output=True, text=True, check=True, env=env,
                        cwd=root)
                    got[pin].append(json.loads(out.stdout.strip().splitlines()[-1]))
            for gap in gaps:
                med = lambda runs, k: statistics.median(r[f"{k} {gap}"] for r in runs)  # noqa: E731
                on, off = med(got["1"], "ours"), med(got["0"], "ours")
                ort_ms = med(got["1"] + got["0"], "ort")
                table.add(name, "x".join(map(str, shape)), f"{gap:g}", f"{on * 1e3:.2f}",
                          f"{off * 1e3:.2f}", f"{ort_ms * 1e3:.2f}", f"{ort_ms / on:.2f}",
                          f"{ort_ms / off:.2f}")
    return table


def run_native(quick: bool = False, batches=(1, 8), models=tuple(SIZES), settle: int = 40,
               rounds: int = 9) -> Table:
    """A model's steps as native calls (the default, once their function is built) against the
    same steps one by one (``DML_NUMBA_NATIVE_STEPS=0`` and the plan put aside), and ONNX
    Runtime, in the same alternation; the share of our calls that ran natively (a run not
    direct, a busy or noisy machine's, runs its steps one by one either way)."""
    import numba
    import onnxruntime as ort

    from dml_numba.onnx import compile_model

    threads = numba.config.NUMBA_NUM_THREADS
    table = Table(f"A model's steps as native calls against one by one, and ONNX Runtime "
                  f"({threads} threads each)",
                  ["model", "input", "native functions (steps)", "one by one ms", "native ms",
                   "speed-up", "ONNX Runtime ms", "native vs ONNX Runtime",
                   "paired (quartiles)", "native calls (of timed)"])
    for name in models:
        size = SIZES[name] // (2 if quick else 1)
        data = _export(name, size)
        session = ort.InferenceSession(data, ort_options(threads),
                                       providers=["CPUExecutionProvider"])
        for n in batches:
            shape = (n, 3, size, size)
            x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
            model = compile_model(data, "cpu", input_shapes={"x": shape})
            steps, store = model.compiled._run_steps, model._bindings
            model(x)
            (entry,) = store.bound.values()
            deadline = time.perf_counter() + 60
            while steps.native_runs == 0 and time.perf_counter() < deadline:
                model(x)  # its plan made in a direct run, its function built in the background
                time.sleep(0.01)
            for _ in range(settle):
                model(x)
            plan = entry[2].get("native")
            counted = [0, 0]

            def native():
                os.environ["DML_NUMBA_NATIVE_STEPS"] = "1"
                entry[2]["native"] = plan
                before = steps.native_runs
                model(x)
                counted[0] += steps.native_runs - before
                counted[1] += 1

            def one_by_one():
                os.environ["DML_NUMBA_NATIVE_STEPS"] = "0"
                entry[2]["native"] = None
                model(x)

            try:
                samples = blocks_samples(
                    [native, one_by_one, lambda: session.run(None, {"x": x})], rounds=rounds)
                ours, alone, theirs = [samples_median(s) for s in samples]
                paired = paired_ratio(samples[2], samples[0])
            finally:
                os.environ.pop("DML_NUMBA_NATIVE_STEPS", None)
                entry[2]["native"] = plan
            functions = len(plan.sources) if plan is not None and plan.built else 0
            table.add(name, f"{n}x3x{size}x{size}",
                      f"{functions} ({len(model.compiled.steps)})", f"{alone * 1e3:.2f}",
                      f"{ours * 1e3:.2f}", f"{alone / ours:.3f}", f"{theirs * 1e3:.2f}",
                      f"{theirs / ours:.3f}", "{:.3f} ({:.3f}-{:.3f})".format(*paired),
                      f"{counted[0]} ({counted[1]})")
    return table


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="half the image sizes")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    p.add_argument("--models", nargs="+", default=list(SIZES), choices=list(SIZES))
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--tuned", action="store_true",
                   help="tune each model first (CPU), and time the static choice beside it")
    p.add_argument("--steps", action="store_true",
                   help="each step's time: (cpu) in the network, alone and ONNX Runtime's "
                        "node; (cuda) its kernel and host time, and other algorithms'")
    p.add_argument("--native", action="store_true",
                   help="(cpu) the steps as native calls against one by one, and ONNX Runtime")
    p.add_argument("--first-run", action="store_true",
                   help="(cpu) only the first run of new processes with a warm kernel cache")
    p.add_argument("--gaps", action="store_true",
                   help="(cpu) calls after idle gaps, workers pinned or not, and ONNX Runtime")
    a = p.parse_args(argv)
    print(machine())
    if a.gaps:
        table = run_gaps(a.batches, a.models)
    elif a.first_run:
        table = run_first(a.batches, a.models)
    elif a.native:
        table = run_native(a.quick, a.batches, a.models)
    elif a.steps:
        steps = steps_cuda if a.device == "cuda" else steps_cpu
        table = Tables(steps(m, n, a.quick) for m in a.models for n in a.batches)
    elif a.device == "cuda":
        table = run_cuda(a.quick, a.batches, a.models)
    else:
        table = run(a.quick, a.batches, a.models, tuned=a.tuned)
    print(table.markdown())


if __name__ == "__main__":
    main()
