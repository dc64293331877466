"""Padding (every mode), tile and slice1 on ~32 MiB float32 tensors on the "cpu" device, as
ratios against a parallel Numba copy of the output's bytes (the memory limit) and against
peers (numpy.pad, numpy.tile, a NumPy strided copy, PyTorch CPU), all measured in one run."""
from __future__ import annotations

import numba
import numpy as np

import dml_numba as dml
from benchmarks._harness import Table, median_time, paired_times, torch_or_none


@numba.njit(parallel=True, cache=True)
def _parallel_copy(src, dst):
    for i in numba.prange(src.size):
        dst[i] = src[i]


@numba.njit(parallel=True, fastmath=True, cache=True)
def _row_sums(x, step):
    """Read every ``step``-th row of ``x`` (sum it): what reading rows with gaps costs."""
    rows = x.shape[0] // step
    acc = np.zeros(rows, np.float32)
    for r in numba.prange(rows):
        s = np.float32(0)
        row = x[r * step]
        for j in range(row.shape[0]):
            s += row[j]
        acc[r] = s
    return acc


def _fmt(x):
    return f"{x:.2f}"


def run(quick: bool = False) -> Table:
    torch = torch_or_none()
    repeat = 3 if quick else 9
    shape = (8, 16, 256, 256)  # 32 MiB of float32
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    table = Table("Data movement, ~32 MiB float32, 'cpu' device (median of runs)",
                  ["workload", "dml_numba ms", "GB/s", "vs parallel copy", "peer", "peer ms",
                   "speed-up vs peer", "PyTorch ms", "speed-up vs PyTorch"])

    def timed(fn, out_nbytes):
        """(t(operator), t(copy)/t(operator)): the copy moves the output's bytes with a parallel
        Numba loop, sampled alternately with the operator; 1.0 = the memory limit."""
        src = np.ones(out_nbytes // 4, np.float32)
        dst = np.empty_like(src)
        t, t_copy = paired_times(fn, lambda: _parallel_copy(src, dst), repeat=2 * repeat)
        return t, t_copy / t

    pads = ((0, 0, 4, 4), (0, 0, 4, 4))
    torch_modes = {"constant": "constant", "edge": "replicate", "reflection": "reflect",
                   "wrap": "circular"}
    np_modes = {"constant": "constant", "edge": "edge", "reflection": "reflect",
                "symmetric": "symmetric", "wrap": "wrap"}
    for mode in ["constant", "edge", "reflection", "symmetric", "wrap"]:
        out = np.empty(tuple(n + a + b for n, a, b in zip(shape, *pads)), np.float32)
        fn = lambda: dml.padding(x, pads[0], pads[1], mode, device="cpu", out=out)  # noqa: E731
        t, ratio = timed(fn, out.nbytes)
        np.testing.assert_array_equal(out, np.pad(x, list(zip(*pads)), mode=np_modes[mode]))
        t_np = median_time(lambda: np.pad(x, list(zip(*pads)), mode=np_modes[mode]), repeat=repeat)
        t_torch = ""
        if torch is not None and mode in torch_modes:
            tx = torch.from_numpy(x)
            t_torch = median_time(lambda: torch.nn.functional.pad(tx, (4, 4, 4, 4),
                                                                  mode=torch_modes[mode]),
                                  repeat=repeat)
        gbs = (x.nbytes + out.nbytes) / t / 1e9
        table.add(f"padding {mode}", _fmt(t * 1e3), _fmt(gbs), _fmt(ratio),
                  "np.pad", _fmt(t_np * 1e3), _fmt(t_np / t),
                  _fmt(t_torch * 1e3) if t_torch else "n/a (no such mode)",
                  _fmt(t_torch / t) if t_torch else "n/a")

    xs = x[:, :, :128, :128].copy()
    out = np.empty(shape, np.float32)
    t, ratio = timed(lambda: dml.tile(xs, (1, 1, 2, 2), device="cpu", out=out), out.nbytes)
    np.testing.assert_array_equal(out, np.tile(xs, (1, 1, 2, 2)))
    t_np = median_time(lambda: np.tile(xs, (1, 1, 2, 2)), repeat=repeat)
    t_torch = (median_time(lambda: torch.from_numpy(xs).repeat(1, 1, 2, 2), repeat=repeat)
               if torch else 0)
    table.add("tile (1,1,2,2)", _fmt(t * 1e3), _fmt((xs.nbytes + out.nbytes) / t / 1e9),
              _fmt(ratio), "np.tile", _fmt(t_np * 1e3), _fmt(t_np / t),
              _fmt(t_torch * 1e3) if torch else "n/a", _fmt(t_torch / t) if torch else "n/a")

    out = np.empty(shape, np.float32)
    t, ratio = timed(lambda: dml.slice1(x, (0, 0, 0, 0), shape, (1, -1, 1, -1), device="cpu",
                                        out=out), out.nbytes)
    np.testing.assert_array_equal(out, x[:, ::-1, :, ::-1])
    t_np = median_time(lambda: np.copyto(out, x[:, ::-1, :, ::-1]), repeat=repeat)
    t_torch = (median_time(lambda: torch.flip(torch.from_numpy(x), (1, 3)), repeat=repeat)
               if torch else 0)
    table.add("slice1 reversing C and W", _fmt(t * 1e3), _fmt(2 * x.nbytes / t / 1e9),
              _fmt(ratio), "NumPy strided copy", _fmt(t_np * 1e3),
              _fmt(t_np / t), _fmt(t_torch * 1e3) if torch else "n/a",
              _fmt(t_torch / t) if torch else "n/a")

    out = np.empty((8, 16, 128, 256), np.float32)
    t, ratio = timed(lambda: dml.slice1(x, (0, 0, 0, 0), shape, (1, 1, 2, 1), device="cpu",
                                        out=out), out.nbytes)
    t_np = median_time(lambda: np.copyto(out, x[:, :, ::2, :]), repeat=repeat)
    t_torch = (median_time(lambda: torch.from_numpy(x)[:, :, ::2, :].contiguous(), repeat=repeat)
               if torch else 0)
    table.add("slice1 every 2nd row", _fmt(t * 1e3), _fmt(2 * out.nbytes / t / 1e9),
              _fmt(ratio), "NumPy strided copy", _fmt(t_np * 1e3),
              _fmt(t_np / t), _fmt(t_torch * 1e3) if torch else "n/a",
              _fmt(t_torch / t) if torch else "n/a")

    big = np.random.default_rng(1).standard_normal((8, 64, 256, 256)).astype(np.float32)
    out = np.empty((8, 64, 128, 128), np.float32)
    strides = (1, 1, -2, 2)
    t, ratio = timed(lambda: dml.slice1(big, (0, 0, 0, 0), big.shape, strides, device="cpu",
                                        out=out), out.nbytes)
    np.testing.assert_array_equal(out, big[:, :, ::-2, ::2])
    t_np = median_time(lambda: np.copyto(out, big[:, :, ::-2, ::2]), repeat=repeat)
    table.add("slice1 strides (1, 1, -2, 2) of (8, 64, 256, 256)", _fmt(t * 1e3),
              _fmt(2 * out.nbytes / t / 1e9), _fmt(ratio), "NumPy strided copy",
              _fmt(t_np * 1e3), _fmt(t_np / t), "n/a (no negative steps)", "n/a")
    # what the machine charges for rows with gaps: reading every 2nd 1 KiB row of the same
    # input against reading every row (if the two take as long, the skipped rows are fetched)
    rows = big.reshape(-1, big.shape[-1])
    t_all = median_time(lambda: _row_sums(rows, 1), repeat=repeat)
    t_half = median_time(lambda: _row_sums(rows, 2), repeat=repeat)
    table.add("(bound) read every row / every 2nd row of that input", _fmt(t_all * 1e3),
              _fmt(rows.nbytes / t_all / 1e9), f"every 2nd row: {_fmt(t_half * 1e3)} ms",
              "", "", "", "", "")
    return table


if __name__ == "__main__":
    run()
