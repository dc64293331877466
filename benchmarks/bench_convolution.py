"""Convolution on the "cpu" device against PyTorch CPU and the vectorised "numpy" device,
float32, ResNet-like shapes; GFLOP/s counts 2 flops per multiply-add."""
from __future__ import annotations

import numpy as np

import dml_numba as dml
from benchmarks._harness import Table, median_time, torch_or_none

# name, x shape, filter shape, strides, pads, groups, direction
WORKLOADS = [
    ("3x3 64->64 s1", (8, 64, 56, 56), (64, 64, 3, 3), (1, 1), (1, 1), 1, 0),
    ("3x3 64->128 s2", (8, 64, 56, 56), (128, 64, 3, 3), (2, 2), (1, 1), 1, 0),
    ("1x1 256->64", (8, 256, 56, 56), (64, 256, 1, 1), (1, 1), (0, 0), 1, 0),
    ("depthwise 3x3 128", (8, 128, 56, 56), (128, 1, 3, 3), (1, 1), (1, 1), 128, 0),
    ("grouped 3x3 128 g=8", (8, 128, 28, 28), (128, 16, 3, 3), (1, 1), (1, 1), 8, 0),
    ("transposed 3x3 64->32 s2", (8, 64, 28, 28), (64, 32, 3, 3), (2, 2), (1, 1), 1, 1),
]


def flops(x_shape, w_shape, y_shape, groups, direction):
    if direction == 0:
        per_out = 2 * (x_shape[1] // groups) * int(np.prod(w_shape[2:]))
        return per_out * int(np.prod(y_shape))
    return 2 * int(np.prod(x_shape)) * w_shape[1] * int(np.prod(w_shape[2:]))


def run(quick: bool = False) -> Table:
    torch = torch_or_none()
    repeat = 3 if quick else 5
    rng = np.random.default_rng(0)
    table = Table("Convolution, float32, 'cpu' device vs PyTorch CPU and the numpy device",
                  ["workload", "dml_numba ms", "GFLOP/s", "PyTorch ms", "ratio vs PyTorch",
                   "numpy device ms", "speed-up vs numpy"])
    for name, xs, ws, s, p, g, direction in WORKLOADS:
        if quick:
            xs = (2,) + xs[1:]
        x = rng.standard_normal(xs).astype(np.float32)
        w = (rng.standard_normal(ws) * 0.1).astype(np.float32)
        b = rng.standard_normal(ws[0] if direction == 0 else ws[1] * g).astype(np.float32)
        kw = dict(strides=s, start_padding=p, end_padding=p, group_count=g, direction=direction)
        y = dml.convolution(x, w, b, device="cpu", **kw)
        t = median_time(lambda: dml.convolution(x, w, b, device="cpu", out=y, **kw), repeat=repeat)
        gf = flops(xs, ws, y.shape, g, direction) / t / 1e9
        t_np = median_time(lambda: dml.convolution(x, w, b, device="numpy", **kw), repeat=2,
                           warmup=0)
        row = [f"{name} N={xs[0]}", f"{t * 1e3:.1f}", f"{gf:.1f}"]
        if torch is not None:
            tx, tw, tb = (torch.from_numpy(a) for a in (x, w, b))
            if direction == 0:
                f = lambda: torch.nn.functional.conv2d(tx, tw, tb, s, p, 1, g)  # noqa: E731
            else:
                f = lambda: torch.nn.functional.conv_transpose2d(tx, tw, tb, s, p, 0, g)  # noqa: E731
            np.testing.assert_allclose(y, f().numpy(), rtol=1e-3, atol=1e-3)
            with torch.no_grad():
                t_t = median_time(f, repeat=repeat)
            row += [f"{t_t * 1e3:.1f}", f"{t_t / t:.2f}"]
        else:
            row += ["n/a", "n/a"]
        row += [f"{t_np * 1e3:.0f}", f"{t_np / t:.1f}"]
        table.add(*row)
    breakdown(table, quick)
    return table


def breakdown(table: Table, quick: bool) -> None:
    """Where the time of the dense 3x3 GEMM path goes: im2col, BLAS, the bias epilogue."""
    n = 2 if quick else 8
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 64, 56, 56)).astype(np.float32)
    w = rng.standard_normal((64, 64, 3, 3)).astype(np.float32)
    b = rng.standard_normal((1, 64, 1, 1)).astype(np.float32)
    f32 = dml.DataType.FLOAT32
    desc = dml.ConvolutionOperatorDesc(
        dml.TensorDesc.like(x), dml.TensorDesc.like(w), dml.TensorDesc.like(b),
        dml.TensorDesc(f32, x.shape), 1, 0, (1, 1), (1, 1), (1, 1), (1, 1), (0, 0), 1)
    op = dml.compile_operator(desc, "cpu")
    k = op.kernel
    y = op(x, w, b)
    # the pieces exactly as the kernel runs them: chunks of ``k.chunk`` images
    chunks = [(n0, min(n, n0 + k.chunk)) for n0 in range(0, n, k.chunk)]
    cols = np.empty((k.chunk, 1, 576, 3136), np.float32)
    wg = w.reshape(1, 64, 576)
    yv = y.reshape(n, 1, 64, 3136)
    total = median_time(lambda: op(x, w, b, out=y))
    t_im2col = median_time(lambda: [k.im2col(x, n0, cols[:n1 - n0]) for n0, n1 in chunks])
    t_gemm = median_time(lambda: [np.matmul(wg, cols[:n1 - n0], out=yv[n0:n1]) for n0, n1 in chunks])
    t_epi = median_time(lambda: k.epilogue(b, y.reshape(n, 64, 3136)))
    gf = 2 * 64 * 576 * 3136 * n / 1e9
    table.add(f"breakdown 3x3 64->64 N={n}: total", f"{total * 1e3:.1f}", f"{gf / total:.1f}",
              "", "", "", "")
    table.add(f"  im2col (generated, serial; {k.chunk} image(s) a chunk)", f"{t_im2col * 1e3:.1f}",
              "", "", "", "", "")
    table.add("  sgemm (NumPy matmul, OpenBLAS)", f"{t_gemm * 1e3:.1f}", f"{gf / t_gemm:.1f}",
              "", "", "", "")
    table.add("  bias epilogue (generated, serial)", f"{t_epi * 1e3:.1f}", "", "", "", "", "")


if __name__ == "__main__":
    run()
