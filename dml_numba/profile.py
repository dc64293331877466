"""``dml-numba profile``: jitted against vectorised, and both against peers.

A built-in suite (``dml_numba.workloads``, a module per operator) runs every operator at
realistic sizes on every available device and, when installed, on peers (NumPy's own functions,
PyTorch CPU, ONNX Runtime). For each it reports the first call (compile, or disk-cache load)
apart from the steady state (median of warm runs), throughput (GB/s for data movement, GFLOP/s
for convolution and pooling) and the speed-up over the vectorised "numpy" device.

With the "cuda" device (a GPU; the simulator is refused) the peers gain their GPU forms,
PyTorch on CUDA ("torch-cuda": cuDNN for convolution) and CuPy for the NumPy peers, and every
data-movement workload a "cuda copy (limit)" row: a device copy of the output's bytes, whose
time over the cuda row's is the "of copy" column.
"""
from __future__ import annotations

import dataclasses
import json
import platform
import statistics
import sys
import time
from dataclasses import dataclass

import numpy as np

import dml_numba as dml

from .workloads import (
    PeerUnavailable,
    Workload,
    gpu_peers,
    suite,
)

OPS = tuple(dml.functional.__all__)  # the functional layer's names
SETTLE_S = 0.05  # pause before each steady-state measurement, for other thread pools to idle


@dataclass
class Row:
    op: str
    workload: str
    impl: str
    kind: str               # "device", "peer" or "limit"
    shape: list
    dtype: str
    first_call_s: float | None
    steady_s: float
    throughput: float
    throughput_unit: str
    speedup_vs_numpy: float | None = None
    variant: str | None = None  # the cpu device's choice: serial, parallel, direct or gemm
    of_limit: float | None = None  # cuda, data movement: a device copy of the output's bytes
    #                                (read and write) over this row's time


# -- measuring -------------------------------------------------------------------------------------

def _steady(fn, budget_s: float, max_runs: int) -> float:
    """Median of warm runs: at least 3, until ``budget_s`` is spent or ``max_runs`` reached."""
    fn()
    times = []
    start = time.perf_counter()
    while len(times) < 3 or (len(times) < max_runs and time.perf_counter() - start < budget_s):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _work(workload: Workload, desc, inputs) -> float:
    """Bytes moved or arithmetic operations, from the descriptor's own metadata."""
    return float(desc.bytes_moved() if workload.kind == "bytes" else desc.flops())


def _device_runner(device: str, desc, inputs):
    """(first-call seconds, warm callable, operator) for ``device``; CUDA keeps data on the
    device."""
    if device == "cuda":
        from numba import cuda

        d_in = [cuda.to_device(a) for a in inputs]
        t0 = time.perf_counter()
        op = dml.compile_operator(desc, "cuda")
        out = op(*d_in)
        cuda.synchronize()
        first = time.perf_counter() - t0

        def warm():
            op(*d_in, out=out)
            cuda.synchronize()

        return first, warm, op
    t0 = time.perf_counter()
    op = dml.compile_operator(desc, device)
    out = op(*inputs)
    first = time.perf_counter() - t0
    return first, lambda: op(*inputs, out=out), op


def _cuda_copy(nbytes: int):
    """A warm device-to-device copy of ``nbytes`` (the memory limit of a data-movement kernel)."""
    from numba import cuda

    src, dst = cuda.device_array(nbytes, np.uint8), cuda.device_array(nbytes, np.uint8)

    def warm():
        dst.copy_to_device(src)
        cuda.synchronize()

    return warm


class Progress:
    """A one-line progress bar on stderr (plain lines when stderr is not a terminal)."""

    def __init__(self, total: int, enabled: bool = True):
        self.total, self.done, self.enabled = total, 0, enabled
        self.tty = sys.stderr.isatty()

    def step(self, label: str):
        self.done += 1
        if not self.enabled:
            return
        width = 30
        filled = int(width * self.done / max(self.total, 1))
        line = f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} {label}"
        if self.tty:
            sys.stderr.write("\r" + line[:110].ljust(110))
            if self.done == self.total:
                sys.stderr.write("\n")
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


def _simulated() -> bool:
    from numba import config

    return bool(config.ENABLE_CUDASIM)


def default_devices() -> list[str]:
    """numpy and cpu; cuda only on real hardware (the simulator would time Python threads)."""
    devices = [d for d in dml.available_devices() if d != "cuda"]
    if "cuda" in dml.available_devices():
        from numba import config

        if not config.ENABLE_CUDASIM:
            devices.append("cuda")
    return devices


def run(ops=None, devices=None, dtype="float32", quick=False, peers=True, progress=True,
        workloads=None) -> list[Row]:
    dtype = np.dtype(dtype)
    ops = list(ops or OPS)
    devices = list(devices or default_devices())
    if "numpy" not in devices:
        devices.insert(0, "numpy")  # the reference every speed-up is measured against
    chosen = [w for w in (workloads if workloads is not None else suite(quick)) if w.op in ops]
    chosen.sort(key=lambda w: OPS.index(w.op) if w.op in OPS else len(OPS))  # the API's order
    if dtype.kind != "f":
        chosen = [w for w in chosen if not w.float_only]
    budget, max_runs = (0.3, 7) if quick else (1.0, 25)
    on_gpu = "cuda" in devices

    def peers_of(w):
        return {**w.peers, **gpu_peers(w.peers)} if on_gpu else w.peers

    total = sum(len(devices) + (len(peers_of(w)) if peers else 0) for w in chosen)
    bar = Progress(total, progress)
    rng = np.random.default_rng(0)
    prepared = []
    for w in chosen:
        desc, inputs = w.make(dtype, rng)
        prepared.append((w, desc, inputs, _work(w, desc, inputs)))
    # Every device first, then every peer: a peer's thread pool (ONNX Runtime, PyTorch, BLAS)
    # keeps spinning for a while after it returns and would steal cores from the next
    # measurement (seen: a 0.05 ms kernel timed at 8 ms right after ONNX Runtime).
    timing = (budget, max_runs)
    device_rows = _device_rows(prepared, devices, dtype, bar, timing)
    peer_rows = _peer_rows(prepared, peers_of if peers else None, dtype, bar, timing)
    rows: list[Row] = []
    for w, *_ in prepared:
        group = device_rows.get(w.name, []) + peer_rows.get(w.name, [])
        ref = next((r.steady_s for r in group if r.impl == "numpy"), None)
        for r in group:
            r.speedup_vs_numpy = ref / r.steady_s if ref else None
        rows += group
    return rows


def _device_rows(prepared, devices, dtype, bar, timing) -> dict:
    """Workload name -> a row per device (and the device copy limit on CUDA)."""
    budget, max_runs = timing
    rows: dict = {}
    for w, desc, inputs, work in prepared:
        unit = "GB/s" if w.kind == "bytes" else "GFLOP/s"
        for device in devices:
            bar.step(f"{w.name} on {device}")
            first, warm, op = _device_runner(device, desc, inputs)
            time.sleep(SETTLE_S)
            steady = _steady(warm, budget, max_runs)
            variant = getattr(op.kernel, "variant", None)
            row = Row(w.op, w.name, device, "device", list(desc.output.sizes), dtype.name, first,
                      steady, work / steady / 1e9, unit,
                      variant=variant() if callable(variant) else None)
            rows.setdefault(w.name, []).append(row)
            if device == "cuda" and w.kind == "bytes":
                nbytes = desc.output.element_count * desc.output.dtype.itemsize
                copy = _steady(_cuda_copy(nbytes), budget, max_runs)
                row.of_limit = copy / steady
                rows[w.name].append(
                    Row(w.op, w.name, "cuda copy (limit)", "limit", list(desc.output.sizes),
                        dtype.name, None, copy, 2 * nbytes / copy / 1e9, unit))
    return rows


def _peer_rows(prepared, peers_of, dtype, bar, timing) -> dict:
    """Workload name -> a row per peer that can run it (none when ``peers_of`` is None)."""
    budget, max_runs = timing
    rows: dict = {}
    for w, desc, inputs, work in prepared:
        unit = "GB/s" if w.kind == "bytes" else "GFLOP/s"
        for name, factory in (peers_of(w).items() if peers_of else ()):
            bar.step(f"{w.name} with {name}")
            try:
                fn = factory(desc, inputs)
                t0 = time.perf_counter()
                fn()
                first = time.perf_counter() - t0
                time.sleep(SETTLE_S)
                steady = _steady(fn, budget, max_runs)
            except PeerUnavailable:
                continue
            except Exception:  # noqa: BLE001 - a peer that cannot do this dtype or shape
                continue
            rows.setdefault(w.name, []).append(
                Row(w.op, w.name, name, "peer", list(desc.output.sizes), dtype.name, first,
                    steady, work / steady / 1e9, unit))
    return rows


# -- reporting -------------------------------------------------------------------------------------

def table(rows: list[Row]) -> str:
    head = (f"{'workload':44s} {'impl':24s} {'first call':>11s} {'steady':>10s} "
            f"{'throughput':>16s} {'vs numpy device':>16s}")
    if any(r.of_limit for r in rows):
        head += f" {'of copy':>8s}"
    lines = [head, "-" * len(head)]
    last = None
    for r in rows:
        name = r.workload if r.workload != last else ""
        last = r.workload
        first = f"{r.first_call_s * 1e3:9.1f}ms" if r.first_call_s is not None else ""
        speed = f"{r.speedup_vs_numpy:15.2f}x" if r.speedup_vs_numpy else ""
        impl = f"{r.impl} ({r.variant})" if r.variant else r.impl
        limit = f" {r.of_limit:8.2f}" if r.of_limit else ""
        lines.append(f"{name[:44]:44s} {impl[:24]:24s} {first:>11s} {r.steady_s * 1e3:8.2f}ms "
                     f"{r.throughput:9.2f} {r.throughput_unit:6s} {speed:>16s}{limit}")
    return "\n".join(lines)


def metadata() -> dict:
    import numba

    return {"dml_numba": dml.__version__, "python": platform.python_version(),
            "numpy": np.__version__, "numba": numba.__version__, "machine": platform.machine(),
            "processor": platform.processor(), "threads": numba.config.NUMBA_NUM_THREADS}


def write_json(rows: list[Row], path) -> None:
    with open(path, "w") as f:
        json.dump({"meta": metadata(), "rows": [dataclasses.asdict(r) for r in rows]}, f, indent=1)


def plot(rows: list[Row], path) -> None:
    """Horizontal bars per workload: speed-up of every implementation over the numpy device."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = list(dict.fromkeys(r.workload for r in rows))
    impls = list(dict.fromkeys(r.impl for r in rows))
    colors = plt.get_cmap("tab10")
    height = 0.8 / max(len(impls), 1)
    fig, ax = plt.subplots(figsize=(11, 0.55 * len(workloads) * max(len(impls), 3) / 3 + 1.5))
    for j, impl in enumerate(impls):
        ys, xs = [], []
        for i, wl in enumerate(workloads):
            for r in rows:
                if r.workload == wl and r.impl == impl and r.speedup_vs_numpy:
                    ys.append(i + (j - (len(impls) - 1) / 2) * height)
                    xs.append(r.speedup_vs_numpy)
        ax.barh(ys, xs, height=height, color=colors(j % 10), label=impl)
    ax.set_yticks(range(len(workloads)))
    ax.set_yticklabels(workloads, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("speed-up over the vectorised numpy device (steady state, log scale)")
    ax.set_title(f"dml_numba profile ({rows[0].dtype if rows else ''})")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(args) -> int:
    bad = [o for o in (args.ops or []) if o not in OPS]
    if bad:
        print(f"profile: unknown --ops {bad}; expected some of {', '.join(OPS)}", file=sys.stderr)
        return 2
    try:
        dml.DataType.from_numpy(args.dtype)
    except (TypeError, dml.ValidationError) as exc:
        print(f"profile: --dtype {args.dtype!r} is invalid: {exc}", file=sys.stderr)
        return 2
    if args.devices:
        status = dml.device_status()
        for d in args.devices:
            if status.get(d) != "available":
                print(
                    f"profile: device {d!r} is not usable here: {status.get(d, 'unknown device')}",
                    file=sys.stderr,
                )
                return 2
        if "cuda" in args.devices and _simulated():
            print("profile: device 'cuda' is Numba's simulator here (NUMBA_ENABLE_CUDASIM=1): it "
                  "would time Python threads; profile CUDA on a GPU", file=sys.stderr)
            return 2
    rows = run(args.ops, args.devices, args.dtype, args.quick, peers=not args.no_peers)
    print(table(rows))
    if args.json:
        write_json(rows, args.json)
        print(f"wrote {args.json}")
    if args.plot:
        plot(rows, args.plot)
        print(f"wrote {args.plot}")
    return 0
