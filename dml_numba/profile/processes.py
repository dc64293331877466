"""Samples from several processes, pooled (``--processes N``), as pyperf does.

Samples taken in one process share its state: where its memory landed, which cores its threads
settled on, the allocator's thresholds, a peer's thread pool. Two runs of the same code can then
differ by more than either run's spread. Each worker process here takes its share of the
samples (its own first calls, calibration and passes) and writes them as JSON; the parent pools
the samples row by row, so a row's spread holds the differences between processes too.
"""
from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile

from . import Row, measured, relate
from .report import read_json
from .timing import Timing


def worker_argv(args, repeat: int, path: str) -> list[str]:
    """The command line of one worker: the parent's options, its share of the samples."""
    argv = [sys.executable, "-m", "dml_numba", "profile", "--worker", "--json", path,
            "--dtype", args.dtype, "--repeat", str(repeat)]
    if args.quick:
        argv.append("--quick")
    if args.no_peers:
        argv.append("--no-peers")
    if args.ops:
        argv += ["--ops", *args.ops]
    if args.devices:
        argv += ["--devices", *args.devices]
    if args.min_time is not None:
        argv += ["--min-time", str(args.min_time)]
    return argv


def run_workers(args, processes: int, repeat: int) -> list[dict]:
    """Run ``processes`` workers one after the other; their profiles (JSON dicts)."""
    share = max(3, math.ceil(repeat / processes))
    out = []
    with tempfile.TemporaryDirectory(prefix="dml-numba-profile-") as tmp:
        for k in range(processes):
            path = os.path.join(tmp, f"{k}.json")
            print(f"profile: process {k + 1} of {processes}", file=sys.stderr, flush=True)
            done = subprocess.run(worker_argv(args, share, path))
            if done.returncode != 0:
                raise RuntimeError(f"profile worker {k + 1} failed (exit {done.returncode})")
            out.append(read_json(path))
    return out


def pool(profiles: list[dict]) -> tuple[list[Row], dict]:
    """One profile from several: samples pooled per row, the first process's first call, the
    machine as the first process saw it before and the last after."""
    first = profiles[0]
    rows = []
    for r in first["rows"]:
        same = [row for p in profiles for row in p["rows"]
                if (row["workload"], row["impl"]) == (r["workload"], r["impl"])]
        samples = [s for row in same for s in row["samples"]]
        shares = [row["cpu_share"] for row in same if row["cpu_share"] is not None]
        d = dict(r, samples=samples, n=len(samples), loops=min(row["loops"] for row in same),
                 cpu_share=sum(shares) / len(shares) if shares else None)
        rows.append(_row(d))
    relate(rows)
    meta = dict(first["meta"])
    last = profiles[-1]["meta"]
    for key in ("load_after", "others_busy_after", "threading_layer"):
        meta[key] = last.get(key)
    meta["settings"] = dict(meta.get("settings", {}), processes=len(profiles),
                            repeat=sum(p["meta"]["settings"]["repeat"] for p in profiles))
    return rows, meta


def _row(d: dict) -> Row:
    """A row rebuilt from its pooled samples (the statistics and flags recomputed)."""
    t = Timing(d["samples"], d["loops"], d["cpu_share"])
    work = d["throughput"] * d["steady_s"] * 1e9  # bytes or operations, as the worker had them
    fields = {k: v for k, v in d.items() if k in Row.__dataclass_fields__}
    fields.update(measured(d["impl"], t), throughput=work / t.median / 1e9)
    return Row(**fields)
