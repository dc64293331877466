"""Timing helpers for the benchmark scripts: medians of repeated runs, ratios in one run."""
from __future__ import annotations

import os
import platform
import statistics
import subprocess
import time


def median_time(fn, *, repeat: int = 7, number: int = 1, warmup: int = 1) -> float:
    """Median seconds per call of ``fn`` over ``repeat`` samples of ``number`` calls each.

    Sleeps briefly first so thread pools that spin after their last parallel region (OpenMP in
    PyTorch and NumPy's BLAS) do not steal cores from the next implementation measured."""
    time.sleep(0.2)
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - t0) / number)
    return statistics.median(samples)


def paired_times(fn_a, fn_b, *, repeat: int = 9) -> tuple[float, float]:
    """Medians of ``fn_a`` and ``fn_b`` sampled alternately, so that both see the same machine
    state (a shared, noisy machine drifts between consecutive measurements)."""
    time.sleep(0.2)
    fn_a(), fn_b()
    a, b = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn_a()
        t1 = time.perf_counter()
        fn_b()
        t2 = time.perf_counter()
        a.append(t1 - t0)
        b.append(t2 - t1)
    return statistics.median(a), statistics.median(b)


def blocks_samples(fns, *, rounds: int = 5, calls: int = 5,
                   rest: float = 0.1) -> list[list[list[float]]]:
    """Each of ``fns`` sampled in alternating blocks of ``calls`` calls (the first of each
    block dropped), ``rest`` seconds apart: for peers with thread pools of their own.
    Alternating single calls times each against the other's pool still spinning after its call
    (ONNX Runtime's and OpenMP's both spin): on two cores a ResNet-18 then took 96 ms against
    23 ms alone, and ONNX Runtime 36 ms against 19 ms. ONNX Runtime's worker spins about 50 ms
    after its last run (a 2-core machine, 2 threads: 50 ms of CPU time in any sleep of 50 ms or
    more after a run), hence the rest of 0.1 s. Blocks still see the same drifting machine,
    each engine as a program using only it would. Each round starts one function later than
    the one before (none always timed first after the rest). The samples per function and
    round (``[fn][round]``: that block's times)."""
    samples = [[] for _ in fns]
    for r in range(rounds):
        for i in [(j + r) % len(fns) for j in range(len(fns))]:
            time.sleep(rest)
            block = []
            for k in range(calls + 1):
                t0 = time.perf_counter()
                fns[i]()
                if k:
                    block.append(time.perf_counter() - t0)
            samples[i].append(block)
    return samples


def samples_median(rounds) -> float:
    """The median of every sample of one function's rounds (:func:`blocks_samples`)."""
    return statistics.median(t for block in rounds for t in block)


def paired_ratio(theirs, ours) -> tuple[float, float, float]:
    """The median and quartiles over rounds of ``theirs``' block median over ``ours``'
    (per-round samples from :func:`blocks_samples`): each round's two blocks saw the same
    phase of a drifting machine, so the ratio of the two is steadier than a ratio of medians
    taken over all rounds (a shared 2-core VM's speed changes by 1.5x for seconds at a
    time)."""
    ratios = sorted(statistics.median(t) / statistics.median(o) for t, o in zip(theirs, ours))
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
    return statistics.median(ratios), q[0], q[2]


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import numba
    import numpy as np
    from llvmlite import binding as ll

    from dml_numba import _blas
    from dml_numba._host import vector_lanes

    # LLVM's name tells CPUs one model name covers apart (an "AMD EPYC" is a Zen 4 or a Zen 5);
    # BLAS's kernels can be narrower than the machine's (OpenBLAS's core type)
    return (f"{cpu} ({ll.get_host_cpu_name()}), {os.cpu_count()} cores, Python "
            f"{platform.python_version()}, NumPy {np.__version__}, Numba {numba.__version__} "
            f"({numba.config.NUMBA_NUM_THREADS} threads); "
            f"{_blas.describe(vector_lanes(), ll.get_host_cpu_name())}")


def torch_or_none():
    try:
        import torch

        return torch
    except ImportError:
        return None


def run_python(code: str, env=None) -> str:
    out = subprocess.run(["python3", "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, **(env or {})))
    if out.returncode:
        raise RuntimeError(out.stderr)
    return out.stdout


class Table:
    def __init__(self, title, columns):
        self.title, self.columns, self.rows = title, columns, []

    def add(self, *row):
        self.rows.append(row)
        print("  " + " | ".join(str(c) for c in row), flush=True)

    def markdown(self) -> str:
        lines = [f"### {self.title}", "", "| " + " | ".join(self.columns) + " |",
                 "|" + "---|" * len(self.columns)]
        lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in self.rows]
        return "\n".join(lines) + "\n"


class Tables(list):
    """Several tables from one benchmark module, written one after the other."""

    def markdown(self) -> str:
        return "\n".join(t.markdown() for t in self)
