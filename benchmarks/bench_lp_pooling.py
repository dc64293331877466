"""LP pooling on the "cpu" device against PyTorch's lp_pool2d and the vectorised device."""
from __future__ import annotations

import numpy as np

import dml_numba as dml
from benchmarks._harness import Table, median_time, torch_or_none


def run(quick: bool = False) -> Table:
    torch = torch_or_none()
    repeat = 3 if quick else 7
    table = Table("LP pooling, float32, 'cpu' device", ["workload", "dml_numba ms",
                  "numpy device ms", "jit speed-up", "PyTorch lp_pool2d ms",
                  "speed-up vs PyTorch"])
    x = np.random.default_rng(0).standard_normal((8, 16, 256, 256)).astype(np.float32)
    for p, k, s in [(2, 3, 2), (1, 2, 2), (3, 3, 1)]:
        out = dml.lp_pooling(x, (k, k), (s, s), p=p, device="cpu")
        t = median_time(lambda: dml.lp_pooling(x, (k, k), (s, s), p=p, device="cpu", out=out),
                        repeat=repeat)
        t_np = median_time(lambda: dml.lp_pooling(x, (k, k), (s, s), p=p, device="numpy"),
                           repeat=max(3, repeat // 2))
        row = [f"p={p} window {k}x{k} stride {s} on {x.shape}", f"{t * 1e3:.2f}",
               f"{t_np * 1e3:.1f}", f"{t_np / t:.1f}"]
        if torch is not None:
            tx = torch.from_numpy(np.abs(x))  # PyTorch has no |x|: give it |x| for equal results
            ref = torch.nn.functional.lp_pool2d(tx, p, k, s).numpy()
            np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-3)
            t_t = median_time(lambda: torch.nn.functional.lp_pool2d(tx, p, k, s), repeat=repeat)
            row += [f"{t_t * 1e3:.2f}", f"{t_t / t:.2f}"]
        else:
            row += ["n/a", "n/a"]
        table.add(*row)
    return table


if __name__ == "__main__":
    run()
