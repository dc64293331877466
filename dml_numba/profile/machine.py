"""The machine a profile ran on: what the JSON's ``meta`` records (docs/PROFILE.md)."""
from __future__ import annotations

import datetime
import os
import platform
import time
from importlib import metadata as importlib_metadata

from .._machine import CpuShare, cpu_model

#: the libraries whose versions a profile records (those installed)
LIBRARIES = ("dml_numba", "numpy", "numba", "llvmlite", "scipy", "numba-cuda", "torch",
             "onnxruntime", "onnx", "cupy", "dask", "matplotlib")


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - no affinity call (macOS, Windows)
        return os.cpu_count() or 1


def load() -> list[float] | None:
    """The 1-, 5- and 15-minute load averages (None where the system has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):  # pragma: no cover - Windows
        return None


def others_busy(seconds: float = 0.3) -> float | None:
    """The share of the machine's CPU time used by other processes (and stolen by a
    hypervisor's neighbours) while this one sleeps for ``seconds``, measured now, where the load
    average lags a minute behind (and still counts the previous run). This process's own
    threads (a thread pool still spinning) are subtracted."""
    meter = CpuShare()
    time.sleep(seconds)
    return meter.others()


def versions() -> dict:
    out = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            out[name] = importlib_metadata.version(name)
        except importlib_metadata.PackageNotFoundError:
            continue
    return out


def threading_layer() -> str | None:
    """Numba's threading layer once a parallel kernel has started it; None before."""
    import numba

    try:
        return numba.threading_layer()
    except ValueError:  # no parallel kernel has run yet
        return None


def describe() -> dict:
    """Everything but the load after the run and the threading layer (known only after)."""
    import numba

    from .._host import Host

    host = Host.current()
    return {
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu": cpu_model(),
        "machine": platform.machine(),
        "system": f"{platform.system()} {platform.release()}",
        "vector_lanes_float32": host.lanes,
        "logical_cores": os.cpu_count(),
        "usable_cores": usable_cores(),
        "numba_threads": numba.config.NUMBA_NUM_THREADS,
        "threading_layer": None,
        "versions": versions(),
        "load_before": load(),
        "load_after": None,
        "others_busy_before": others_busy(),
        "others_busy_after": None,
    }


def finish(meta: dict) -> dict:
    """Record what is known only once the run is over."""
    meta["load_after"] = load()
    meta["others_busy_after"] = others_busy()
    meta["threading_layer"] = threading_layer()
    return meta


def caption(meta: dict) -> str:
    v = meta.get("versions", {})
    return (f"{meta.get('cpu', '?')}, {meta.get('usable_cores', '?')} cores, "
            f"{meta.get('vector_lanes_float32', '?')} float32 lanes, "
            f"{meta.get('numba_threads', '?')} threads ({meta.get('threading_layer') or 'n/a'}); "
            f"dml_numba {v.get('dml_numba', '?')}, Numba {v.get('numba', '?')}, "
            f"NumPy {v.get('numpy', '?')}; {meta.get('timestamp', '')}")
