"""dml_numba.dask against Dask's own ways of doing the same, on the same chunks and scheduler,
and an out-of-core run: a Zarr store on disk larger than the memory given to the workers.

    python3 -m benchmarks.bench_dask [--quick]

Peers: ``da.pad`` for reflection padding; ``map_overlap`` with ``scipy.ndimage.correlate`` for a
3x3 convolution (zero boundary). "chunked vs in-memory" compares the Dask call with the
in-memory functional call on an array that fits.
"""
from __future__ import annotations

import shutil
import sys
import tempfile
import threading
import time

import numpy as np

from benchmarks._harness import Table


def _best(fn, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def peers(table: Table, quick: bool) -> None:
    import dask
    import dask.array as da
    import scipy.ndimage

    import dml_numba as dml
    import dml_numba.dask as dmd

    repeat = 3 if quick else 5
    rng = np.random.default_rng(0)
    n = 4 if quick else 8
    x = rng.standard_normal((n, 16, 512, 512)).astype(np.float32)
    dx = da.from_array(x, chunks=(2, 16, 256, 256))
    with dask.config.set(scheduler="threads"):
        ours = _best(lambda: dmd.padding(dx, (0, 0, 16, 16), (0, 0, 16, 16), "reflection")
                     .compute(), repeat)
        theirs = _best(lambda: da.pad(dx, ((0, 0), (0, 0), (16, 16), (16, 16)), mode="reflect")
                       .compute(), repeat)
        mem = _best(lambda: dml.padding(x, (0, 0, 16, 16), (0, 0, 16, 16), "reflection"), repeat)
        np.testing.assert_array_equal(
            dmd.padding(dx, (0, 0, 16, 16), (0, 0, 16, 16), "reflection").compute(),
            np.pad(x, ((0, 0), (0, 0), (16, 16), (16, 16)), mode="reflect"))
        table.add(f"reflection pad 16 of {x.shape}, chunks {dx.chunksize}", f"{ours * 1e3:.1f}",
                  "da.pad", f"{theirs * 1e3:.1f}", f"{theirs / ours:.2f}", f"{mem * 1e3:.1f}",
                  f"{ours / mem:.2f}")

        xc = rng.standard_normal((n, 1, 1024, 1024)).astype(np.float32)
        dc = da.from_array(xc, chunks=(2, 1, 256, 256))
        w = rng.standard_normal((1, 1, 3, 3)).astype(np.float32)
        ours = _best(lambda: dmd.convolution(dc, w, start_padding=(1, 1), end_padding=(1, 1))
                     .compute(), repeat)
        theirs = _best(lambda: dc.map_overlap(
            lambda b: scipy.ndimage.correlate(b, w, mode="constant"), depth=(0, 0, 1, 1),
            boundary=0).compute(), repeat)
        mem = _best(lambda: dml.convolution(xc, w, start_padding=(1, 1), end_padding=(1, 1)),
                    repeat)
        ref = dc.map_overlap(lambda b: scipy.ndimage.correlate(b, w, mode="constant"),
                             depth=(0, 0, 1, 1), boundary=0).compute()
        np.testing.assert_allclose(dmd.convolution(dc, w, start_padding=(1, 1),
                                                   end_padding=(1, 1)).compute(), ref,
                                   rtol=1e-4, atol=1e-4)
        table.add(f"3x3 convolution of {xc.shape}, chunks {dc.chunksize}", f"{ours * 1e3:.1f}",
                  "map_overlap + scipy.ndimage.correlate", f"{theirs * 1e3:.1f}",
                  f"{theirs / ours:.2f}", f"{mem * 1e3:.1f}", f"{ours / mem:.2f}")


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
                  "median ms)", ["workload", "dml_numba.dask ms", "peer", "peer ms",
                                 "speed-up vs peer", "in-memory dml_numba ms",
                                 "chunked / in-memory"])
    peers(table, quick)
    return _Tables(table, out_of_core(quick))


class _Tables:
    def __init__(self, *tables):
        self.tables = tables

    def markdown(self) -> str:
        return "\n".join(t.markdown() for t in self.tables)


if __name__ == "__main__":
    run(quick="--quick" in sys.argv)
