"""dml_numba.dask against Dask's own ways of doing the same, on the same chunks and scheduler,
and an out-of-core run: a Zarr store on disk larger than the memory given to the workers.

    python3 -m benchmarks.bench_dask [--quick] [--no-out-of-core]

Peers: ``da.pad`` for reflection padding; ``map_overlap`` with ``scipy.ndimage.correlate`` for a
one-channel 3x3 convolution (zero boundary), with PyTorch's ``conv2d`` for a 16-channel one
(when PyTorch is installed). Each on a small chunking and on one nearer Dask's advice (tens of
MB a chunk), each result materialised two ways: ``compute()`` and ``store()`` into a
preallocated array. "chunked vs in-memory" compares with the in-memory functional call on an
array that fits.
"""
from __future__ import annotations

import shutil
import sys
import tempfile
import threading
import time

import numpy as np

from benchmarks._harness import Table, median_time


def _row(table, workload, chunks, ours, peer_name, peer, in_memory, repeat):
    """One workload on one chunking: ours and the peer, each materialised two ways: compute()
    (Dask concatenates the blocks into a new array in one thread) and store() into a
    preallocated array (each block written in place by the task that made it, as a Zarr store
    is written)."""
    import dask.array as da

    out = np.empty(ours.shape, ours.dtype)
    t = {}
    for key, arr in (("ours", ours), ("peer", peer)):  # median_time warms up (compiles) first
        t[key] = median_time(lambda a=arr: a.compute(), repeat=repeat)
        t[key + " store"] = median_time(lambda a=arr: da.store(a, out, lock=False), repeat=repeat)
    mem = median_time(in_memory, repeat=repeat)
    ms = {k: f"{v * 1e3:.1f}" for k, v in t.items()}
    table.add(workload, str(chunks), str(len(dict(ours.__dask_graph__()))),
              f"{ms['ours']} / {ms['ours store']}", peer_name, f"{ms['peer']} / {ms['peer store']}",
              f"{t['peer'] / t['ours']:.2f} / {t['peer store'] / t['ours store']:.2f}",
              f"{mem * 1e3:.1f}",
              f"{t['ours'] / mem:.2f} / {t['ours store'] / mem:.2f}")


def peers(table, quick: bool) -> None:
    import dask
    import dask.array as da
    import scipy.ndimage

    import dml_numba as dml
    import dml_numba.dask as dmd

    repeat = 3 if quick else 5
    rng = np.random.default_rng(0)
    n = 4 if quick else 8
    pads = ((0, 0), (0, 0), (16, 16), (16, 16))
    x = rng.standard_normal((n, 16, 512, 512)).astype(np.float32)
    xc = rng.standard_normal((n, 1, 1024, 1024)).astype(np.float32)
    w = rng.standard_normal((1, 1, 3, 3)).astype(np.float32)
    xm = rng.standard_normal((n, 16, 256, 256)).astype(np.float32)
    wm = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    with dask.config.set(scheduler="threads"):
        for chunks in ((2, 16, 256, 256), (4, 16, 512, 512)):
            dx = da.from_array(x, chunks=chunks)
            ours = dmd.padding(dx, (0, 0, 16, 16), (0, 0, 16, 16), "reflection")
            np.testing.assert_array_equal(ours.compute(), np.pad(x, pads, mode="reflect"))
            _row(table, f"reflection pad 16 of {x.shape}", chunks, ours, "da.pad",
                 da.pad(dx, pads, mode="reflect"),
                 lambda: dml.padding(x, (0, 0, 16, 16), (0, 0, 16, 16), "reflection"), repeat)
        for chunks in ((2, 1, 256, 256), (4, 1, 1024, 1024)):
            dc = da.from_array(xc, chunks=chunks)
            ours = dmd.convolution(dc, w, start_padding=(1, 1), end_padding=(1, 1))
            peer = dc.map_overlap(lambda b: scipy.ndimage.correlate(b, w, mode="constant"),
                                  depth=(0, 0, 1, 1), boundary=0)
            np.testing.assert_allclose(ours.compute(), peer.compute(), rtol=1e-4, atol=1e-4)
            _row(table, f"3x3 convolution 1->1 of {xc.shape}", chunks, ours,
                 "map_overlap + scipy.ndimage.correlate", peer,
                 lambda: dml.convolution(xc, w, start_padding=(1, 1), end_padding=(1, 1)),
                 repeat)
        try:
            import torch
        except ImportError:  # the peer for multi-channel convolution is optional
            torch = None
        for chunks in ((2, 16, 128, 128), (4, 16, 256, 256)):
            dm = da.from_array(xm, chunks=chunks)
            ours = dmd.convolution(dm, wm, start_padding=(1, 1), end_padding=(1, 1))
            if torch is not None:
                tw = torch.from_numpy(wm)

                def conv(b):
                    with torch.no_grad():
                        return torch.nn.functional.conv2d(torch.from_numpy(
                            np.ascontiguousarray(b)), tw).numpy()

                peer = dm.map_overlap(conv, depth=(0, 0, 1, 1), boundary=0, trim=False,
                                      chunks=dm.chunks, dtype=np.float32,
                                      meta=np.empty((0, 0, 0, 0), np.float32))
                peer_name = "map_overlap + torch conv2d (oneDNN)"
            else:
                peer, peer_name = ours, "(PyTorch not installed: ours again)"
            np.testing.assert_allclose(ours.compute(), peer.compute(), rtol=1e-3, atol=1e-3)
            _row(table, f"3x3 convolution 16->16 of {xm.shape}", chunks, ours, peer_name, peer,
                 lambda: dml.convolution(xm, wm, start_padding=(1, 1), end_padding=(1, 1)),
                 repeat)


def out_of_core(quick: bool) -> Table:
    import dask.array as da
    import zarr  # noqa: F401 - to_zarr needs it
    from distributed import Client, LocalCluster

    import dml_numba.dask as dmd

    gib = 0.5 if quick else 2.0
    limit = "256MiB" if quick else "512MiB"
    n = int(gib * 2**30 / (8 * 1024 * 1024 * 4))
    table = Table(f"Out of core: a {gib:g} GiB Zarr store through workers limited to {limit} "
                  "each (2 workers, 1 thread each): reflection pad 8 then a 3x3 convolution, "
                  "written to a new store",
                  ["store", "seconds", "MB/s (input)", "peak worker memory MiB",
                   "worker memory limit MiB"])
    tmp = tempfile.mkdtemp(prefix="dml_numba_zarr_")
    try:
        src = da.random.random((n, 8, 1024, 1024), chunks=(1, 8, 512, 512)).astype(np.float32)
        src.to_zarr(f"{tmp}/in.zarr")
        w = np.full((8, 8, 3, 3), 1 / 72, np.float32)
        with LocalCluster(n_workers=2, threads_per_worker=1, memory_limit=limit,
                          dashboard_address=None, silence_logs=40) as cluster, \
                Client(cluster) as client:
            peak, done = [0], threading.Event()

            def sample():
                while not done.is_set():
                    info = client.scheduler_info()["workers"].values()
                    peak[0] = max([peak[0]] + [wk["metrics"]["memory"] for wk in info])
                    time.sleep(0.2)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            t0 = time.perf_counter()
            x = da.from_zarr(f"{tmp}/in.zarr")
            y = dmd.padding(x, (0, 0, 8, 8), (0, 0, 8, 8), "reflection")
            z = dmd.convolution(y, w, start_padding=(0, 0), end_padding=(0, 0))
            z.to_zarr(f"{tmp}/out.zarr")
            dt = time.perf_counter() - t0
            done.set()
            sampler.join()
        nbytes = n * 8 * 1024 * 1024 * 4
        table.add(f"{tuple(x.shape)} float32, chunks {x.chunksize}", f"{dt:.1f}",
                  f"{nbytes / dt / 1e6:.0f}", f"{peak[0] / 2**20:.0f}",
                  f"{int(limit[:-3])}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return table


def run(quick: bool = False) -> Table:
    table = Table("dml_numba.dask against Dask's own tools (threaded scheduler, same chunks; "
                  "median ms; 'a / b': compute() / store() into a preallocated array)",
                  ["workload", "chunks", "tasks", "dml_numba.dask ms", "peer", "peer ms",
                   "speed-up vs peer", "in-memory dml_numba ms", "chunked / in-memory"])
    peers(table, quick)
    if "--no-out-of-core" in sys.argv:
        return table
    return _Tables(table, out_of_core(quick))


class _Tables:
    def __init__(self, *tables):
        self.tables = tables

    def markdown(self) -> str:
        return "\n".join(t.markdown() for t in self.tables)


if __name__ == "__main__":
    run(quick="--quick" in sys.argv)
