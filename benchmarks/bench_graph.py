"""Compiled graphs, fused, against the same operators one by one, against the memory limit (a
parallel copy of the output's bytes), against the convolution alone, and against PyTorch eager
and ``jax.jit`` of the same pipeline (XLA fuses too), float32, all measured in one run."""
from __future__ import annotations

import numpy as np

import dml_numba as dml
from benchmarks._harness import Table, paired_times, torch_or_none
from benchmarks.bench_data_movement import _parallel_copy

F32 = dml.DataType.FLOAT32
N, IN, OUT, MID = (dml.OperatorGraphNodeDesc, dml.InputGraphEdgeDesc, dml.OutputGraphEdgeDesc,
                   dml.IntermediateGraphEdgeDesc)


def _t(*sizes):
    return dml.TensorDesc(F32, sizes)


def _chain(*ops, params=0):
    """ops[0] -> ops[1] -> ...; graph input 0 feeds ops[0], inputs 1.. are ops' parameters."""
    nodes = tuple(N(op) for op in ops)
    ins = [IN(0, 0, 0)]
    k = 1
    for j, op in enumerate(ops):
        for slot in range(1, len(op.bound_inputs())):
            ins.append(IN(k, j, slot))
            k += 1
    return dml.GraphDesc(k, 1, nodes, tuple(ins), (OUT(len(ops) - 1, 0, 0),),
                         tuple(MID(j, 0, j + 1, 0) for j in range(len(ops) - 1)))


def _pad(shape, a, b, mode):
    out = tuple(n + x + y for n, x, y in zip(shape, a, b))
    return dml.Padding1OperatorDesc(_t(*shape), _t(*out), mode, F32, 0.0, a, b)


def _fmt(v):
    return f"{v:.2f}"


_DEPTH = """
import sys, time
import numpy as np
import dml_numba as dml
N, IN, OUT, MID = (dml.OperatorGraphNodeDesc, dml.InputGraphEdgeDesc, dml.OutputGraphEdgeDesc,
                   dml.IntermediateGraphEdgeDesc)
n = int(sys.argv[1])
p = dml.functional.padding_desc(np.zeros((4, 5), np.float32), (1, 0), (0, 1), "reflection")
s = dml.functional.slice1_desc(np.zeros((5, 6), np.float32), (1, 0), (4, 5), (1, 1))
ops = [p, s] * (n // 2)
t0 = time.perf_counter()
g = dml.GraphDesc(1, 1, tuple(N(o) for o in ops), (IN(0, 0, 0),), (OUT(n - 1, 0, 0),),
                  tuple(MID(k, 0, k + 1, 0) for k in range(n - 1)))
run = dml.compile_graph(g, "cpu")
x = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
y = run(x)
print(time.perf_counter() - t0)
assert (y == dml.compile_graph(g, "numpy")(x)).all()
"""


def depth_seconds(nodes: int) -> float:
    """A new process's time to build, compile (an empty kernel cache) and first run a chain of
    ``nodes`` data-movement nodes (a reflection padding and the slice that takes it off, in
    turn), checked against the "numpy" device."""
    import os
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as cache:
        out = subprocess.run([sys.executable, "-c", _DEPTH, str(nodes)], check=True,
                             capture_output=True, text=True,
                             env={**os.environ, "DML_NUMBA_CACHE_DIR": cache})
    return float(out.stdout.split()[0])


def _jax():
    try:
        import jax

        return jax
    except ImportError:
        return None


def run(quick: bool = False) -> Table:
    torch = torch_or_none()
    jax = _jax()
    repeat = 5 if quick else 15
    rng = np.random.default_rng(0)
    table = Table("Compiled graphs, fused, float32, 'cpu' device (medians, sampled alternately)",
                  ["graph", "fused ms", "compared with", "its ms", "ratio (its / fused)",
                   "target"])
    R = dml.PaddingMode.REFLECTION

    # 1. pad -> slice -> tile: one gather
    # reflection padding, every other row and column (a downsampled border), tiled 2 x 2
    shape = (8, 16, 256, 256)
    x = rng.standard_normal(shape).astype(np.float32)
    p = _pad(shape, (0, 0, 4, 4), (0, 0, 4, 4), R)
    s = dml.functional.slice1_desc(np.empty((8, 16, 264, 264), np.float32), (0, 0, 0, 0),
                                   (8, 16, 264, 264), (1, 1, 2, 2))
    t = dml.functional.tile_desc(np.empty((8, 16, 132, 132), np.float32), (1, 1, 2, 2))
    g = _chain(p, s, t)
    fused, unfused = dml.compile_graph(g, "cpu"), dml.compile_graph(g, "cpu", fuse=False)
    out = np.empty(g.output_tensor(0).sizes, np.float32)
    ref = np.tile(np.pad(x, [(0, 0), (0, 0), (4, 4), (4, 4)], mode="reflect")[..., ::2, ::2],
                  (1, 1, 2, 2))
    np.testing.assert_array_equal(fused(x, out=out), ref)
    src, dst = np.ones(out.size, np.float32), np.empty(out.size, np.float32)
    a, b = paired_times(lambda: fused(x, out=out), lambda: _parallel_copy(src, dst),
                        repeat=repeat)
    table.add("reflection pad 4 -> every 2nd row and column -> tile 2x2, (8, 16, 256, 256)",
              _fmt(a * 1e3),
              "a parallel copy of the output", _fmt(b * 1e3), _fmt(b / a), ">= 0.83 (<= 1.2x)")
    a, b = paired_times(lambda: fused(x, out=out), lambda: unfused(x, out=out), repeat=repeat)
    table.add("", "", "the three operators one by one", _fmt(b * 1e3), _fmt(b / a), ">= 2")

    # 2. reflection pad -> 3x3 convolution (+ ReLU), against the convolution alone
    shape = (8, 64, 56, 56)
    x = rng.standard_normal(shape).astype(np.float32)
    xp = np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)], mode="reflect")
    relu = dml.ActivationReluOperatorDesc()
    for label, groups, ws, target in (("depthwise", 64, (64, 1, 3, 3), "<= 1.1x: >= 0.91"),
                                      ("dense 64->64", 1, (64, 64, 3, 3), "<= 1.03x: >= 0.97")):
        w = (rng.standard_normal(ws) * 0.1).astype(np.float32)
        c = dml.functional.convolution_desc(xp, w, group_count=groups, fused_activation=relu)
        g = _chain(_pad(shape, (0, 0, 1, 1), (0, 0, 1, 1), R), c)
        fused, alone = dml.compile_graph(g, "cpu"), dml.compile_operator(c, "cpu")
        unfused = dml.compile_graph(g, "cpu", fuse=False)
        out = np.empty(c.output.sizes, np.float32)
        np.testing.assert_allclose(fused(x, w, out=out), alone(xp, w), rtol=1e-4, atol=1e-4)
        a, b = paired_times(lambda: fused(x, w, out=out), lambda: alone(xp, w, out=out),
                            repeat=repeat)
        table.add(f"reflection pad -> {label} 3x3 + ReLU, {shape}", _fmt(a * 1e3),
                  "the convolution alone on a padded input", _fmt(b * 1e3), _fmt(b / a), target)
        zero = dml.compile_operator(dml.functional.convolution_desc(
            x, w, group_count=groups, start_padding=(1, 1), end_padding=(1, 1),
            fused_activation=relu), "cpu")
        a, b = paired_times(lambda: fused(x, w, out=out), lambda: zero(x, w, out=out),
                            repeat=repeat)
        table.add("", "", "the convolution with its own zero padding", _fmt(b * 1e3),
                  _fmt(b / a), "")
        a, b = paired_times(lambda: fused(x, w, out=out), lambda: unfused(x, w, out=out),
                            repeat=repeat)
        table.add("", "", "padding, then the convolution", _fmt(b * 1e3), _fmt(b / a), "")

    # 2b. a convolution, then an activation of its own: the fuse rule
    w = (rng.standard_normal((64, 64, 3, 3)) * 0.1).astype(np.float32)
    c = dml.functional.convolution_desc(x, w, start_padding=(1, 1), end_padding=(1, 1))
    act = dml.functional.activation_desc(np.empty(c.output.sizes, np.float32), "relu")
    g = _chain(c, act)
    fused, unfused = dml.compile_graph(g, "cpu"), dml.compile_graph(g, "cpu", fuse=False)
    assert len(fused.steps) == 1 and len(unfused.steps) == 2
    out = np.empty(c.output.sizes, np.float32)
    np.testing.assert_allclose(fused(x, w, out=out), np.maximum(dml.convolution(
        x, w, start_padding=1, end_padding=1), 0), rtol=1e-4, atol=1e-4)
    a, b = paired_times(lambda: fused(x, w, out=out), lambda: unfused(x, w, out=out),
                        repeat=repeat)
    table.add(f"dense 64->64 3x3 -> ReLU of its own (fused into it), {shape}", _fmt(a * 1e3),
              "the two operators one by one", _fmt(b * 1e3), _fmt(b / a), "> 1")
    relu_op = dml.compile_operator(dml.functional.activation_desc(x, "relu"), "cpu")
    y = np.empty(shape, np.float32)
    src, dst = np.ones(x.size, np.float32), np.empty(x.size, np.float32)
    a, b = paired_times(lambda: relu_op(x, out=y), lambda: _parallel_copy(src, dst),
                        repeat=repeat)
    table.add(f"ReLU of its own, {shape}", _fmt(a * 1e3), "a parallel copy (the memory limit)",
              _fmt(b * 1e3), _fmt(b / a), ">= 0.83")
    if torch is not None:
        tx = torch.from_numpy(x)
        a, b = paired_times(lambda: relu_op(x, out=y), lambda: torch.relu(tx), repeat=repeat)
        table.add("", "", f"PyTorch {torch.__version__} relu", _fmt(b * 1e3), _fmt(b / a),
                  ">= 1")

    # 3. the whole pipeline
    w = (rng.standard_normal((64, 1, 3, 3)) * 0.3).astype(np.float32)
    c = dml.functional.convolution_desc(xp, w, group_count=64, fused_activation=relu)
    lp = dml.functional.lp_pooling_desc(np.empty(c.output.sizes, np.float32), (2, 2), (2, 2))
    sl = dml.functional.slice1_desc(np.empty(lp.output.sizes, np.float32), (0, 0, 0, 0),
                                    lp.output.sizes, (1, 1, 2, 1))
    g = _chain(_pad(shape, (0, 0, 1, 1), (0, 0, 1, 1), R), c, lp, sl)
    fused, unfused = dml.compile_graph(g, "cpu"), dml.compile_graph(g, "cpu", fuse=False)
    out = np.empty(g.output_tensor(0).sizes, np.float32)
    ref = dml.compile_graph(g, "numpy")(x, w)
    np.testing.assert_allclose(fused(x, w, out=out), ref, rtol=1e-4, atol=1e-4)
    name = "reflection pad -> depthwise 3x3 + ReLU -> LP 2x2/2 -> every other row"
    a, b = paired_times(lambda: fused(x, w, out=out), lambda: unfused(x, w, out=out),
                        repeat=repeat)
    table.add(name + f", {shape}", _fmt(a * 1e3), "our operators one by one", _fmt(b * 1e3),
              _fmt(b / a), ">= 1.5")
    if torch is not None:
        F = torch.nn.functional
        tx, tw = torch.from_numpy(x), torch.from_numpy(w)

        def eager():
            with torch.no_grad():
                y = F.relu(F.conv2d(F.pad(tx, (1, 1, 1, 1), mode="reflect"), tw, groups=64))
                return F.lp_pool2d(y, 2, 2, 2)[:, :, ::2].contiguous()

        np.testing.assert_allclose(eager().numpy(), ref, rtol=1e-3, atol=1e-3)
        a, b = paired_times(lambda: fused(x, w, out=out), eager, repeat=repeat)
        table.add("", "", f"PyTorch {torch.__version__} eager", _fmt(b * 1e3), _fmt(b / a),
                  ">= 1.5")
    if jax is not None:
        import jax.numpy as jnp

        @jax.jit
        def pipeline(x, w):
            y = jnp.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), mode="reflect")
            y = jax.lax.conv_general_dilated(y, w, (1, 1), "VALID", feature_group_count=64)
            y = jnp.maximum(y, 0)
            y = jax.lax.reduce_window(y * y, 0.0, jax.lax.add, (1, 1, 2, 2), (1, 1, 2, 2),
                                      "VALID")
            return jnp.sqrt(y)[:, :, ::2]

        jx, jw = jnp.asarray(x), jnp.asarray(w)
        np.testing.assert_allclose(np.asarray(pipeline(jx, jw)), ref, rtol=1e-3, atol=1e-3)
        a, b = paired_times(lambda: fused(x, w, out=out),
                            lambda: pipeline(jx, jw).block_until_ready(), repeat=repeat)
        table.add("", "", f"jax.jit {jax.__version__} (XLA, fused)", _fmt(b * 1e3), _fmt(b / a),
                  "ahead, or say why")

    # 4. deep graphs: build, compile and first call, seconds (a new process, an empty cache)
    for nodes in (2000, 10000):
        table.add(f"a chain of {nodes} data-movement nodes: build, compile, first call (s)",
                  _fmt(depth_seconds(nodes)), "", "", "", "< 10 s")
    return table


if __name__ == "__main__":
    run()
