"""``dml-numba profile``: jitted against vectorised, and both against peers.

A built-in suite (``dml_numba.workloads``, a module per operator) runs every operator at
realistic sizes on every available device and, when installed, on peers (NumPy's own functions,
PyTorch CPU, ONNX Runtime). For each it reports the first call apart from the steady state (what
it was: a compile, a disk-cache load or a memory-cache hit), the steady state as calibrated
samples (median, interquartile range, samples x loops; :mod:`.timing`), throughput (GB/s for data
movement, GFLOP/s for convolution and pooling) and the speed-up over the vectorised "numpy"
device. The machine and its load go into the JSON (:mod:`.machine`); a run that cannot be
trusted says so and why (:mod:`.checks`); two runs are compared row by row (:mod:`.compare`).
The JSON schema is in docs/PROFILE.md.

With the "cuda" device (a GPU; the simulator is refused) the peers gain their GPU forms,
PyTorch on CUDA ("torch-cuda": cuDNN for convolution) and CuPy for the NumPy peers, and every
data-movement workload a "cuda copy (limit)" row: a device copy of the output's bytes, whose
time over the cuda row's is the "of copy" column.
"""
from __future__ import annotations

import importlib.util
import time
from dataclasses import dataclass, field

import numpy as np

import dml_numba as dml

from ..workloads import PeerUnavailable, Workload, gpu_peers, suite
from . import checks, machine
from .report import Progress, plot, table, to_csv, to_markdown, write_json
from .timing import Sampler, Timing

__all__ = ["OPS", "Row", "Settings", "run", "table", "to_csv", "to_markdown", "write_json",
           "plot", "main", "default_devices", "Progress"]

OPS = tuple(dml.functional.__all__)  # the functional layer's names
SETTLE_S = 0.05  # pause before each steady-state measurement, for other thread pools to idle


@dataclass(frozen=True)
class Settings:
    """How long each row is timed: samples of at least ``min_time`` seconds (calls repeated to
    fill them), ``repeat`` samples, fewer once ``budget`` seconds are spent (never under 3)."""

    min_time: float
    repeat: int
    budget: float

    @classmethod
    def default(cls, quick: bool, min_time: float | None = None, repeat: int | None = None):
        base = cls(0.005, 9, 0.5) if quick else cls(0.02, 20, 2.0)
        min_time = base.min_time if min_time is None else min_time
        repeat = base.repeat if repeat is None else repeat
        return cls(min_time, repeat, max(base.budget, 3 * min_time * repeat))


@dataclass
class Row:
    op: str
    workload: str
    impl: str
    kind: str               # "device", "peer" or "limit"
    shape: list
    dtype: str
    first_call_s: float | None
    first_call: str | None  # "compile", "disk cache", "memory cache", "none" (nothing to
    #                         build: the numpy device) or "peer" (a peer's own first call)
    steady_s: float         # median seconds per call
    q1_s: float
    q3_s: float
    min_s: float
    n: int                  # samples
    loops: int              # calls per sample
    samples: list           # seconds per call, one a sample
    cpu_share: float | None  # calling thread's CPU time over wall time while timed
    throughput: float
    throughput_unit: str
    speedup_vs_numpy: float | None = None
    variant: str | None = None  # the cpu device's choice: serial, parallel, or the algorithm
    of_limit: float | None = None  # cuda, data movement: a device copy of the output's bytes
    #                                (read and write) over this row's time
    flags: list = field(default_factory=list)  # "busy", "unstable", "tick" (checks.py)

    @classmethod
    def timed(cls, w: Workload, impl: str, kind: str, desc, dtype, first: float | None,
              first_kind: str | None, timing: Timing, work: float, **extra) -> Row:
        return cls(op=w.op, workload=w.name, impl=impl, kind=kind,
                   shape=list(desc.output.sizes), dtype=dtype.name, first_call_s=first,
                   first_call=first_kind, throughput=work / timing.median / 1e9,
                   throughput_unit="GB/s" if w.kind == "bytes" else "GFLOP/s",
                   **measured(impl, timing), **extra)

    @property
    def iqr_s(self) -> float:
        return self.q3_s - self.q1_s

    @property
    def spread(self) -> float:
        return self.iqr_s / self.steady_s if self.steady_s > 0 else 0.0

    @property
    def label(self) -> str:
        """The implementation as the table and chart name it."""
        if self.impl == "numpy":
            return "numpy (vectorised)"
        return f"{self.impl} ({self.variant})" if self.variant else self.impl


def measured(impl: str, timing: Timing) -> dict:
    """The fields of a row its samples give: median, quartiles, minimum, counts, the calling
    thread's CPU share, and the flags of :mod:`.checks`."""
    q1, q3 = timing.q1_q3()
    return {"steady_s": timing.median, "q1_s": q1, "q3_s": q3, "min_s": timing.minimum,
            "n": timing.n, "loops": timing.loops, "samples": list(timing.samples),
            "cpu_share": timing.cpu_share,
            "flags": checks.row_flags(impl, timing.sample_totals(), timing.spread,
                                      timing.cpu_share)}


def relate(rows: list[Row]) -> None:
    """Each row's speed-up over its workload's numpy row, and a cuda row's fraction of its
    workload's device copy limit (where it has one)."""
    groups: dict = {}
    for r in rows:
        groups.setdefault(r.workload, []).append(r)
    for group in groups.values():
        ref = next((r.steady_s for r in group if r.impl == "numpy"), None)
        limit = next((r.steady_s for r in group if r.kind == "limit"), None)
        for r in group:
            r.speedup_vs_numpy = ref / r.steady_s if ref else None
            if r.impl == "cuda" and limit:  # the copy's time over this row's
                r.of_limit = limit / r.steady_s


# -- measuring -------------------------------------------------------------------------------------

def _work(workload: Workload, desc) -> float:
    """Bytes moved or arithmetic operations, from the descriptor's own metadata."""
    return float(desc.bytes_moved() if workload.kind == "bytes" else desc.flops())


def first_call(fn, device: str):
    """(seconds, what it was, result) of the first call of ``fn`` (which compiles or fetches an
    operator and runs it once): "compile" when Numba compiled, "disk cache" when the operator
    was built without compiling, "memory cache" when it was already built."""
    from numba.core import event

    before = dml.cache.stats()
    with event.install_recorder("numba:compile") as compiled:
        t0 = time.perf_counter()
        result = fn()
        seconds = time.perf_counter() - t0
    after = dml.cache.stats()
    if device == "numpy":
        kind = "none"
    elif compiled.buffer or device == "cuda" and after["misses"] > before["misses"]:
        kind = "compile"
    elif after["misses"] > before["misses"]:
        kind = "disk cache"
    else:
        kind = "memory cache"
    return seconds, kind, result


def _device_runner(device: str, desc, inputs):
    """(first-call seconds, its kind, warm callable, operator) for ``device``; CUDA keeps data
    on the device."""
    if device == "cuda":
        from numba import cuda

        d_in = [cuda.to_device(a) for a in inputs]

        def build():
            op = dml.compile_operator(desc, "cuda")
            out = op(*d_in)
            cuda.synchronize()
            return op, out

        seconds, kind, (op, out) = first_call(build, device)

        def warm():
            op(*d_in, out=out)
            cuda.synchronize()

        return seconds, kind, warm, op

    def build():
        op = dml.compile_operator(desc, device)
        return op, op(*inputs)

    seconds, kind, (op, out) = first_call(build, device)
    return seconds, kind, lambda: op(*inputs, out=out), op


def _cuda_copy(nbytes: int):
    """A warm device-to-device copy of ``nbytes`` (the memory limit of a data-movement kernel)."""
    from numba import cuda

    src, dst = cuda.device_array(nbytes, np.uint8), cuda.device_array(nbytes, np.uint8)

    def warm():
        dst.copy_to_device(src)
        cuda.synchronize()

    return warm


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


#: the library each peer needs, by the start of its name
PEER_LIBRARIES = {"torch": "torch", "cupy": "cupy", "onnxruntime": "onnxruntime",
                  "numpy": "numpy"}


def installed(peer: str) -> bool:
    """Whether the library behind ``peer`` is installed (it may still refuse a workload)."""
    lib = next((m for p, m in PEER_LIBRARIES.items() if peer.startswith(p)), None)
    return lib is None or importlib.util.find_spec(lib) is not None


@dataclass
class _Pending:
    """A row measured, before its speed-up is known."""

    workload: Workload
    impl: str
    kind: str
    desc: object
    first: float | None
    first_kind: str | None
    sampler: Sampler
    work: float
    extra: dict = field(default_factory=dict)

    def row(self, dtype) -> Row:
        return Row.timed(self.workload, self.impl, self.kind, self.desc, dtype, self.first,
                         self.first_kind, self.sampler.timing(), self.work, **self.extra)


def run(ops=None, devices=None, dtype="float32", quick=False, peers=True, progress=True,
        workloads=None, settings: Settings | None = None, meta: dict | None = None) -> list[Row]:
    """Profile; ``meta``, when given, is filled with the machine (:func:`machine.describe`).

    Each row in turn: its first call, calibration, then its samples one after the other (as
    pyperf's workers take theirs); several processes pooled (:mod:`.processes`) add what differs
    between processes and over the run."""
    dtype = np.dtype(dtype)
    ops = list(ops or OPS)
    devices = list(devices or default_devices())
    if "numpy" not in devices:
        devices.insert(0, "numpy")  # the reference every speed-up is measured against
    chosen = [w for w in (workloads if workloads is not None else suite(quick)) if w.op in ops]
    chosen.sort(key=lambda w: OPS.index(w.op) if w.op in OPS else len(OPS))  # the API's order
    if dtype.kind != "f":
        chosen = [w for w in chosen if not w.float_only]
    settings = settings or Settings.default(quick)
    on_gpu = "cuda" in devices
    if meta is not None:
        meta.update(machine.describe())

    missing: list = []  # [workload, peer, why] for each peer of a workload that did not run

    def peers_of(w):
        every = {**w.peers, **gpu_peers(w.peers)} if on_gpu else w.peers
        missing.extend([w.name, name, "not installed"] for name in every
                       if not installed(name))
        return {name: f for name, f in every.items() if installed(name)}

    runnable = {w.name: peers_of(w) for w in chosen} if peers else {}
    total = sum(len(devices) + len(runnable.get(w.name, ())) for w in chosen)
    bar = Progress(total, progress)
    rng = np.random.default_rng(0)
    prepared = []
    for w in chosen:
        desc, inputs = w.make(dtype, rng)
        prepared.append((w, desc, inputs, _work(w, desc)))
    # Every device first, then every peer: a peer's thread pool (ONNX Runtime, PyTorch, BLAS)
    # keeps spinning for a while after it returns and would steal cores from the next
    # measurement (seen: a 0.05 ms kernel timed at 8 ms right after ONNX Runtime).
    pending = _devices(prepared, devices, bar, settings)
    pending += _peers(prepared, runnable, bar, settings, missing)
    rows = [p.row(dtype) for w, *_ in prepared for p in pending if p.workload is w]
    relate(rows)
    if meta is not None:
        machine.finish(meta)
        meta["settings"] = {"min_time_s": settings.min_time, "repeat": settings.repeat,
                            "budget_s": settings.budget, "quick": quick}
        meta["not_run"] = sorted(tuple(m) for m in missing)
    return rows


def _sample(sampler: Sampler, settings: Settings) -> Sampler:
    """Calibrate, then take the row's samples one after the other: ``settings.repeat``, fewer
    once ``settings.budget`` seconds are spent, never under three."""
    time.sleep(SETTLE_S)  # other thread pools (a peer's, ours) go quiet first
    sampler.calibrate(settings.min_time)
    return sampler.take(settings.repeat, settings.budget)


def _devices(prepared, devices, bar, settings) -> list[_Pending]:
    """A pending row per device (and the device copy limit on CUDA), first call done."""
    out = []
    for w, desc, inputs, work in prepared:
        for device in devices:
            bar.step(f"{w.name} on {device}")
            first, kind, warm, op = _device_runner(device, desc, inputs)
            variant = getattr(op.kernel, "variant", None)
            p = _Pending(w, device, "device", desc, first, kind,
                         _sample(Sampler(warm), settings), work,
                         {"variant": variant() if callable(variant) else None})
            out.append(p)
            if device == "cuda" and w.kind == "bytes":
                nbytes = desc.output.element_count * desc.output.dtype.itemsize
                out.append(_Pending(w, "cuda copy (limit)", "limit", desc, None, None,
                                    _sample(Sampler(_cuda_copy(nbytes)), settings), 2 * nbytes))
    return out


def _peers(prepared, runnable: dict, bar, settings, missing: list) -> list[_Pending]:
    """A pending row per peer that can run its workload (``runnable``: workload name -> its
    installed peers); those that cannot go into ``missing`` with the reason."""
    out = []
    for w, desc, inputs, work in prepared:
        for name, factory in runnable.get(w.name, {}).items():
            bar.step(f"{w.name} with {name}")
            try:
                fn = factory(desc, inputs)
                t0 = time.perf_counter()
                fn()
                first = time.perf_counter() - t0
                sampler = _sample(Sampler(fn), settings)
            except PeerUnavailable as exc:
                missing.append([w.name, name, str(exc)])
                continue
            except Exception as exc:  # noqa: BLE001 - a peer that cannot do this dtype or shape
                missing.append([w.name, name, f"{type(exc).__name__}: {exc}"[:200]])
                continue
            out.append(_Pending(w, name, "peer", desc, first, "peer", sampler, work))
    return out


from .cli import main  # noqa: E402 - the command line uses everything above
