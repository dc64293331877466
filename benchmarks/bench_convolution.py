"""Convolution on the "cpu" device against PyTorch CPU (oneDNN) and the machine's own FMA peak,
float32, ResNet-like shapes; GFLOP/s counts 2 flops per multiply-add.

    python3 -m benchmarks.bench_convolution [--quick] [--grid | --gemm]

* the main table: every workload with the algorithm chosen automatically (and which ran), its
  GFLOP/s and fraction of the measured FMA peak, the ratio against PyTorch (PyTorch time / ours,
  median of three rounds, each a median of runs) and the first call in a cold cache (compile);
* the peak: a generated kernel of independent vector FMAs on every thread (and on one), the
  ceiling any convolution here can reach;
* ``--grid``: every algorithm on a grid of shapes (batch 1 and 8; channels 16 to 512; kernels 1,
  3, 5, 7; strides 1 and 2; dense, 8 groups, depthwise; 1-D, 2-D, 3-D), the fastest, and what
  the automatic choice picked (the crossover table);
* ``--gemm``: the ``gemm`` algorithm (BLAS, its product spread over Numba's threads) on layers
  of small planes, against the static choice and against NumPy's own ``matmul`` of the same
  matrices on BLAS's own threads (the product alone: the ceiling of a BLAS-bound layer);
* ``--winograd [--dump FILE]``: the four algorithms on 3x3 stride-1 layers (the grid's and the
  networks'), Winograd's F(4x4, 3x3) among them, and the static choice; ``--dump`` writes the
  times as a host's set of ``tests/data/crossover.json`` (what the choice is tested against).
"""
from __future__ import annotations

import os
import statistics
import sys
import time

import numpy as np

import dml_numba as dml
from benchmarks._harness import Table, Tables, median_time, torch_or_none

# name, x shape, filter shape, strides, pads, groups, direction
WORKLOADS = [
    ("3x3 64->64 on 56x56", (8, 64, 56, 56), (64, 64, 3, 3), (1, 1), (1, 1), 1, 0),
    ("3x3 64->128 stride 2", (8, 64, 56, 56), (128, 64, 3, 3), (2, 2), (1, 1), 1, 0),
    ("grouped 3x3, 256 ch in 8 groups, 28x28", (8, 256, 28, 28), (256, 32, 3, 3), (1, 1), (1, 1), 8, 0),
    ("1x1 256->128 on 28x28", (8, 256, 28, 28), (128, 256, 1, 1), (1, 1), (0, 0), 1, 0),
    ("depthwise 3x3, 128 ch, 56x56", (8, 128, 56, 56), (128, 1, 3, 3), (1, 1), (1, 1), 128, 0),
    ("transposed 4x4/2 64->32, 28->56", (8, 64, 28, 28), (64, 32, 4, 4), (2, 2), (1, 1), 1, 1),
    ("transposed 3x3/2 64->32, 28->55", (8, 64, 28, 28), (64, 32, 3, 3), (2, 2), (1, 1), 1, 1),
]


def peak_gflops(threads: int | None = None) -> float:
    """GFLOP/s of independent vector FMAs (12 accumulators of the host's widest vectors, as the
    convolution tiles hold) on ``threads`` threads (all by default)."""
    import numba

    from dml_numba.cpu._simd import vector_lanes, vfma, vsplat, vstore, vzero

    lanes = vector_lanes()
    n_acc, steps = 12, 200_000
    src = [
        "@numba.njit(parallel=True)",
        "def peak(out, a, b):",
        f"    for t in numba.prange(out.shape[0] // {lanes}):",
        f"        x = vsplat(a, {lanes})",
        f"        y = vsplat(b, {lanes})",
    ]
    src += [f"        s{i} = vzero({lanes})" for i in range(n_acc)]
    src += [f"        for _ in range({steps}):"]
    src += [f"            s{i} = vfma(x, s{i}, y)" for i in range(n_acc)]
    src += [f"        s0 = vfma(s{i}, x, s0)" for i in range(1, n_acc)]  # keep every chain live
    src += [f"        vstore(out, t * {lanes}, s0)"]
    ns = {"numba": numba, "vfma": vfma, "vsplat": vsplat, "vstore": vstore, "vzero": vzero}
    exec("\n".join(src), ns)
    peak = ns["peak"]
    before = numba.get_num_threads()
    workers = threads or before
    numba.set_num_threads(workers)
    try:
        out = np.zeros(workers * lanes, np.float32)
        a, b = np.float32(0.999), np.float32(0.001)
        peak(out, a, b)
        t = median_time(lambda: peak(out, a, b), repeat=5)
    finally:
        numba.set_num_threads(before)
    return 2 * lanes * n_acc * steps * workers / t / 1e9


def _case(xs, ws, s, p, g, direction, rng):
    x = rng.standard_normal(xs).astype(np.float32)
    w = (rng.standard_normal(ws) * 0.1).astype(np.float32)
    cout = ws[0] if direction == 0 else ws[1] * g
    b = rng.standard_normal((1, cout) + (1,) * (len(xs) - 2)).astype(np.float32)
    desc = dml.functional.convolution_desc(x, w, b, strides=s, start_padding=p, end_padding=p,
                                           group_count=g, direction=direction)
    return desc, x, w, b


def _torch_fn(torch, x, w, b, s, p, g, direction):
    tx, tw, tb = (torch.from_numpy(a) for a in (x, w, b.reshape(-1)))
    nd = x.ndim - 2
    conv = {1: torch.nn.functional.conv1d, 2: torch.nn.functional.conv2d,
            3: torch.nn.functional.conv3d}[nd]
    convt = {1: torch.nn.functional.conv_transpose1d, 2: torch.nn.functional.conv_transpose2d,
             3: torch.nn.functional.conv_transpose3d}[nd]

    def f():
        with torch.no_grad():
            if direction == 0:
                return conv(tx, tw, tb, s, p, 1, g)
            return convt(tx, tw, tb, s, p, 0, g)

    return f


def _cold_compile_s(desc, **options) -> float:
    """Seconds to build the operator with no disk cache and nothing in memory for it."""
    saved = os.environ.get("DML_NUMBA_DISK_CACHE")
    os.environ["DML_NUMBA_DISK_CACHE"] = "0"
    try:
        dml.cache.clear()
        t0 = time.perf_counter()
        dml.compile_operator(desc, "cpu", **options)
        return time.perf_counter() - t0
    finally:
        if saved is None:
            os.environ.pop("DML_NUMBA_DISK_CACHE")
        else:
            os.environ["DML_NUMBA_DISK_CACHE"] = saved


def _converged(desc):
    """The operator with the choice quick tuning converges to: every quick candidate timed in
    this process (a user's first process compiles what the tuning budget allows, later
    processes the rest)."""
    from dml_numba.cpu.convolution import tune

    saved, tune.QUICK_BUDGET_S = tune.QUICK_BUDGET_S, float("inf")
    try:
        return dml.compile_operator(desc, "cpu", tune="quick")
    finally:
        tune.QUICK_BUDGET_S = saved


def run(quick: bool = False) -> Tables:
    torch = torch_or_none()
    if torch is not None:
        import numba

        torch.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    rng = np.random.default_rng(0)
    peak, peak1 = peak_gflops(), peak_gflops(1)
    table = Table("Convolution, float32, 'cpu' device vs PyTorch CPU and the FMA peak",
                  ["workload", "algorithm (variant)", "ms", "GFLOP/s", "of peak",
                   "PyTorch ms", "ratio vs PyTorch (3 rounds)", "first call, cold (s)"])
    for name, xs, ws, s, p, g, direction in WORKLOADS:
        if quick:
            xs = (2,) + xs[1:]
        desc, x, w, b = _case(xs, ws, s, p, g, direction, rng)
        compile_s = _cold_compile_s(desc)
        op = _converged(desc)
        y = op(x, w, b)
        ours = lambda: op(x, w, b, out=y)  # noqa: E731
        row = [f"{name}, N={xs[0]}"]
        if torch is not None:
            f = _torch_fn(torch, x, w, b, s, p, g, direction)
            np.testing.assert_allclose(y, f().numpy(), rtol=1e-3, atol=1e-3)
            # three rounds of (ours, PyTorch), each a median after the other's thread pool has
            # gone idle: sampled alternately, PyTorch's spinning OpenMP threads would take the
            # cores from our parallel kernels (that case is the threading benchmark's)
            reps = 5 if quick else 9
            rounds = [(median_time(ours, repeat=reps), median_time(f, repeat=reps))
                      for _ in range(3)]
            t = statistics.median(r[0] for r in rounds)
            t_t = statistics.median(r[1] for r in rounds)
            ratio = statistics.median(r[1] / r[0] for r in rounds)
            spread = f"{min(r[1] / r[0] for r in rounds):.2f}-{max(r[1] / r[0] for r in rounds):.2f}"
            torch_cols = [f"{t_t * 1e3:.2f}", f"{ratio:.2f} ({spread})"]
        else:
            t = median_time(ours)
            torch_cols = ["n/a", "n/a"]
        gf = desc.flops() / t / 1e9
        row += [f"{op.kernel.algorithm} ({op.kernel.variant()})", f"{t * 1e3:.2f}", f"{gf:.0f}",
                f"{gf / peak:.0%}"] + torch_cols + [f"{compile_s:.2f}"]
        table.add(*row)
    table.add(f"FMA peak, all threads ({peak1:.0f} GFLOP/s on one)", "", "", f"{peak:.0f}",
              "100%", "", "", "")
    return Tables([table])


def grid_shapes(quick: bool):
    """(label, x shape, filter shape, strides, pads, groups, direction) over the crossover grid:
    every kernel size and stride at 64 channels, kernels 1 and 3 at the other widths."""
    out = []
    for n in ((1,) if quick else (1, 8)):
        for c, hw in ((16, 56), (64, 28), (256, 14), (512, 7)):
            for k in ((1, 3, 5, 7) if c == 64 else (1, 3)):
                for s in ((1, 2) if k > 1 else (1,)):
                    for g in (1, 8, c):
                        if g == 8 and c < 64:
                            continue
                        out.append((f"2-D N={n} C={c} {hw}x{hw} k={k} s={s} g={'dw' if g == c else g}",
                                    (n, c, hw, hw), (c, c // g, k, k), (s, s), (k // 2, k // 2), g, 0))
        out.append((f"1-D N={n} C=64 L=512 k=3 s=1", (n, 64, 512), (64, 64, 3), (1,), (1,), 1, 0))
        out.append((f"1-D N={n} C=64 L=512 k=7 s=2", (n, 64, 512), (64, 64, 7), (2,), (3,), 1, 0))
        out.append((f"3-D N={n} C=32 16^3 k=3 s=1", (n, 32, 16, 16, 16), (32, 32, 3, 3, 3), (1, 1, 1), (1, 1, 1), 1, 0))
        out.append((f"3-D N={n} C=32 16^3 k=3 dw", (n, 32, 16, 16, 16), (32, 1, 3, 3, 3), (1, 1, 1), (1, 1, 1), 32, 0))
        out.append((f"transposed 2-D N={n} C=64 14->28 k=4 s=2", (n, 64, 14, 14), (64, 64, 4, 4), (2, 2), (1, 1), 1, 1))
        out.append((f"transposed 2-D N={n} C=32 28->56 k=3 s=2", (n, 32, 28, 28), (32, 32, 3, 3), (2, 2), (1, 1), 1, 1))
    return out


def grid(quick: bool = False) -> Table:
    from dml_numba.cpu.convolution import block_plan, choose_algorithm

    rng = np.random.default_rng(0)
    table = Table("Convolution algorithms across shapes (ms, float32; the fastest in bold)",
                  ["shape", "direct", "gemm", "blocked", "automatic picks", "automatic / best"])
    for label, xs, ws, s, p, g, direction in grid_shapes(quick):
        desc, x, w, b = _case(xs, ws, s, p, g, direction, rng)
        times = {}
        for alg in ("direct", "gemm", "blocked"):
            if alg == "blocked" and block_plan(desc) is None:
                continue
            op = dml.compile_operator(desc, "cpu", algorithm=alg)
            y = op(x, w, b)
            times[alg] = median_time(lambda: op(x, w, b, out=y), repeat=5)
        best = min(times, key=times.get)
        auto = choose_algorithm(desc)
        cells = [f"**{times[a] * 1e3:.2f}**" if a == best else f"{times[a] * 1e3:.2f}"
                 if a in times else "n/a" for a in ("direct", "gemm", "blocked")]
        table.add(label, *cells, auto, f"{times[auto] / times[best]:.2f}")
    return table


#: (batch, in, out, plane, kernel, stride): ResNet-18's stride-2 downsamples and last 3x3,
#: MobileNetV2's 1x1 layers on small planes
GEMM_LAYERS = [(1, 64, 128, 56, 1, 2), (1, 128, 256, 28, 1, 2), (1, 256, 512, 14, 1, 2),
               (1, 320, 1280, 7, 1, 1), (1, 96, 576, 14, 1, 1), (1, 512, 512, 7, 3, 1),
               (8, 64, 128, 56, 1, 2), (8, 320, 1280, 7, 1, 1)]


def gemm_layers(quick: bool = False) -> Table:
    """The ``gemm`` algorithm (bias, ReLU6) against the static choice and NumPy's ``matmul`` of
    the 1x1 layers' matrices (BLAS on its own threads, no epilogue), medians sampled in turn,
    the weights frozen as a model's are."""
    from benchmarks._harness import paired_times
    from dml_numba._frozen import freeze

    rng = np.random.default_rng(0)
    table = Table("The gemm algorithm on small planes, float32, 'cpu' device (ms)",
                  ["layer", "gemm", "static choice", "its ms", "NumPy matmul (1x1)"])
    clip = dml.ElementWiseClipOperatorDesc(0.0, 6.0)
    for n, cin, cout, hw, k, st in GEMM_LAYERS[:3] if quick else GEMM_LAYERS:
        x = rng.standard_normal((n, cin, hw, hw)).astype(np.float32)
        # frozen, as a model's weights are: the blocked kernel packs its filter once
        w = freeze((rng.standard_normal((cout, cin, k, k)) * 0.1).astype(np.float32))
        b = freeze(rng.standard_normal((1, cout, 1, 1)).astype(np.float32))
        desc = dml.functional.convolution_desc(x, w, b, strides=(st, st), start_padding=k // 2,
                                               end_padding=k // 2, fused_activation=clip)
        y = np.empty(desc.output.sizes, np.float32)
        gemm, auto = (dml.compile_operator(desc, "cpu", **o) for o in ({"algorithm": "gemm"}, {}))
        np.testing.assert_allclose(gemm(x, w, b), auto(x, w, b), rtol=1e-4, atol=1e-4)
        a, c = paired_times(lambda: gemm(x, w, b, out=y), lambda: auto(x, w, b, out=y),
                            repeat=31 if not quick else 9)
        blas = "n/a"
        if k == 1 and n == 1:
            wm = w.reshape(cout, cin)
            xm = np.ascontiguousarray(x[:, :, ::st, ::st]).reshape(cin, -1)
            ym = np.empty((cout, xm.shape[1]), np.float32)
            blas = f"{median_time(lambda: np.matmul(wm, xm, out=ym), repeat=31) * 1e3:.3f}"
        table.add(f"{k}x{k} {cin}->{cout} stride {st} on {hw}x{hw}, N={n}", f"{a * 1e3:.3f}",
                  auto.kernel.algorithm, f"{c * 1e3:.3f}", blas)
    return table


#: 3x3 stride-1 layers (label, x shape, filter shape): the grid's dense 2-D ones and the
#: networks' (ResNet-18's stages, the U-Net's levels)
WINOGRAD_LAYERS = [(label, xs, ws) for label, xs, ws, s, _, g, d in grid_shapes(False) + WORKLOADS
                   if len(xs) == 4 and ws[2:] == (3, 3) and s == (1, 1) and g == 1 and d == 0] + [
    (f"3x3 {c}->{k} on {hw}x{hw} N=1", (1, c, hw, hw), (k, c, 3, 3)) for c, k, hw in (
        (64, 64, 56), (128, 128, 28), (32, 32, 128), (16, 16, 256), (16, 32, 128), (3, 16, 256),
        (128, 64, 64), (64, 32, 128), (32, 16, 256), (8, 8, 32), (32, 32, 16))]


def winograd_layers(quick: bool = False, dump: str | None = None) -> Table:
    """Each algorithm that runs a 3x3 stride-1 layer (the planner's tile for ``blocked``),
    timed in turn (7 rounds of the least of 5 calls; the filter not frozen, so Winograd
    transforms it each call, as the grid's blocked kernel packs it), and the static choice."""
    import json

    from dml_numba.cpu._emit import Host
    from dml_numba.cpu.convolution import choice

    host = Host.current()
    rng = np.random.default_rng(0)
    names = list(choice.ALGORITHMS)
    table = Table("3x3 stride-1 layers, every algorithm (ms, float32; the fastest in bold)",
                  ["layer"] + names + ["automatic picks", "automatic / best"])
    found = {}
    for label, xs, ws in WINOGRAD_LAYERS[:4] if quick else WINOGRAD_LAYERS:
        desc, x, w, b = _case(xs, ws, (1, 1), (1, 1), 1, 0, rng)
        ops = {a: dml.compile_operator(desc, "cpu", algorithm=a, tune="off")
               for a in choice.options(desc.canonical(), host)}
        y = np.empty(desc.output_tensor.sizes, np.float32)
        samples = {a: [] for a in ops}
        for _ in range(2 if quick else 7):
            for a, op in ops.items():
                op(x, w, b, out=y)
                calls = []
                for _ in range(5):
                    t = time.perf_counter()
                    op(x, w, b, out=y)
                    calls.append(time.perf_counter() - t)
                samples[a].append(min(calls))
        times = {a: statistics.median(v) for a, v in samples.items()}
        best, auto = min(times, key=times.get), choice.choose_algorithm(desc.canonical(), host)
        table.add(label, *(f"**{times[a] * 1e3:.3f}**" if a == best else
                           f"{times[a] * 1e3:.3f}" if a in times else "n/a" for a in names),
                  auto, f"{times[auto] / times[best]:.2f}")
        found[label] = {"x": list(xs), "w": list(ws), "strides": [1, 1], "pads": [1, 1],
                        "groups": 1, "direction": 0,
                        "times": {a: float(f"{t:.4g}") for a, t in times.items()}}
    if dump:
        with open(dump, "w") as f:
            json.dump({"host": [host.lanes, host.threads], "source": os.path.basename(dump),
                       "shapes": found}, f)
    return table


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    if "--grid" in sys.argv:
        print(grid(quick).markdown())
    elif "--winograd" in sys.argv:
        dump = sys.argv[sys.argv.index("--dump") + 1] if "--dump" in sys.argv else None
        print(winograd_layers(quick, dump).markdown())
    elif "--gemm" in sys.argv:
        print(gemm_layers(quick).markdown())
    else:
        print(run(quick).markdown())
