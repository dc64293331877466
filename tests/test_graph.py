"""DirectML's graphs: validation names the node or edge; every graph runs on numpy (node by node,
the specification) and fused on cpu, equal to the node-by-node result (bit for bit for data
movement) and to NumPy's own functions where they exist; fusion shows in the plan and the
source; intermediate buffers are allocated once."""
import dataclasses
import threading

import numpy as np
import pytest

import dml_numba as dml
from tests.helpers import assert_close, brute_conv_forward

F32 = dml.DataType.FLOAT32
N, IN, OUT, MID = (dml.OperatorGraphNodeDesc, dml.InputGraphEdgeDesc, dml.OutputGraphEdgeDesc,
                   dml.IntermediateGraphEdgeDesc)
R = dml.PaddingMode.REFLECTION


def t(*sizes, dtype=F32):
    return dml.TensorDesc(dtype, sizes)


def pad(shape, start, end, mode=dml.PaddingMode.CONSTANT, value=0, dtype=F32):
    value = float(value) if dtype.is_float else int(value)
    out = tuple(n + a + b for n, a, b in zip(shape, start, end))
    return dml.Padding1OperatorDesc(t(*shape, dtype=dtype), t(*out, dtype=dtype), mode, dtype,
                                    value, start, end)


def slice1(shape, offsets, sizes, strides, dtype=F32):
    out = tuple(1 + (n - 1) // abs(s) for n, s in zip(sizes, strides))
    return dml.Slice1OperatorDesc(t(*shape, dtype=dtype), t(*out, dtype=dtype), offsets, sizes,
                                  strides)


def tile(shape, reps, dtype=F32):
    return dml.TileOperatorDesc(t(*shape, dtype=dtype), t(*(n * r for n, r in zip(shape, reps)),
                                                          dtype=dtype), reps)


def chain_graph(*ops):
    """ops[0] -> ops[1] -> ... as a graph of one input and one output."""
    nodes = tuple(N(op, f"n{k}") for k, op in enumerate(ops))
    return dml.GraphDesc(1, 1, nodes, (IN(0, 0, 0),), (OUT(len(ops) - 1, 0, 0),),
                         tuple(MID(k, 0, k + 1, 0) for k in range(len(ops) - 1)))


def conv(xs, ws, pads=(0, 0), groups=1, act=None, bias=False):
    x, w = np.zeros(xs, np.float32), np.zeros(ws, np.float32)
    b = np.zeros(ws[0], np.float32) if bias else None
    return dml.functional.convolution_desc(x, w, b, start_padding=pads, end_padding=pads,
                                           group_count=groups, fused_activation=act)


def pool(xs, window, strides, pads=(0, 0), p=2):
    return dml.functional.lp_pooling_desc(np.zeros(xs, np.float32), window, strides, pads, pads,
                                          p=p)


def rand(shape, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(0, 100, size=shape).astype(dtype)


def run_both(graph, *inputs, exact=True):
    ref = dml.compile_graph(graph, "numpy")(*inputs)
    got = dml.compile_graph(graph, "cpu")(*inputs)
    refs, gots = (ref, got) if isinstance(ref, tuple) else ((ref,), (got,))
    for r, g in zip(refs, gots):
        if exact:
            np.testing.assert_array_equal(g, r)
        else:
            assert_close(g, r, g.dtype)
    return ref, got


# -- the catalogue ------------------------------------------------------------------------------

def test_pad_slice_tile_is_one_gather_equal_to_numpy_functions():
    g = chain_graph(pad((2, 3, 6, 7), (0, 0, 2, 1), (0, 0, 1, 2), R),
                    slice1((2, 3, 9, 10), (0, 0, 1, 0), (2, 3, 8, 10), (1, 1, 2, -1)),
                    tile((2, 3, 4, 10), (1, 2, 1, 2)))
    x = rand((2, 3, 6, 7))
    ref, got = run_both(g, x)
    padded = np.pad(x, [(0, 0), (0, 0), (2, 1), (1, 2)], mode="reflect")
    oracle = np.tile(padded[:, :, 1:9:2, ::-1], (1, 2, 1, 2))
    np.testing.assert_array_equal(got, oracle)
    cg = dml.compile_graph(g, "cpu")
    assert len(cg.steps) == 1 and "GatherChainDesc of padding -> slice -> tile" in cg.plan
    assert cg.source.count("def kernel(x, y)") == 1 and "np.empty" not in cg.source
    cg(x)
    assert cg.buffers() == {}  # no intermediate at all


@pytest.mark.parametrize("dtype", [np.float16, np.int8, np.uint64, np.float64])
def test_chain_of_every_dtype_class_moves_bits(dtype):
    dt = dml.DataType.from_numpy(dtype)
    g = chain_graph(tile((3, 4), (2, 1), dtype=dt),
                    pad((6, 4), (1, 2), (0, 1), dml.PaddingMode.CONSTANT, 7, dtype=dt),
                    pad((7, 7), (1, 0), (1, 1), dml.PaddingMode.WRAP, dtype=dt))
    x = rand((3, 4), dtype)
    _, got = run_both(g, x)
    oracle = np.pad(np.pad(np.tile(x, (2, 1)), [(1, 0), (2, 1)], constant_values=7),
                    [(1, 1), (0, 1)], mode="wrap")
    np.testing.assert_array_equal(got, oracle)


def test_a_node_feeding_two_nodes_and_two_outputs():
    """pad feeds slice and tile; slice is an output and feeds tile2; its buffer is kept."""
    p = pad((1, 2, 4, 4), (0, 0, 1, 1), (0, 0, 1, 1), R)
    s = slice1((1, 2, 6, 6), (0, 0, 0, 0), (1, 2, 6, 6), (1, 1, 2, 2))
    tl = tile((1, 2, 6, 6), (1, 1, 1, 2))
    t2 = tile((1, 2, 3, 3), (2, 1, 1, 1))
    g = dml.GraphDesc(1, 3, (N(p, "pad"), N(s, "slice"), N(tl, "tile"), N(t2, "tile2")),
                      (IN(0, 0, 0),), (OUT(1, 0, 0), OUT(2, 0, 1), OUT(3, 0, 2)),
                      (MID(0, 0, 1, 0), MID(0, 0, 2, 0), MID(1, 0, 3, 0)))
    x = rand((1, 2, 4, 4))
    ref, got = run_both(g, x)
    padded = np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)], mode="reflect")
    np.testing.assert_array_equal(got[0], padded[:, :, ::2, ::2])
    np.testing.assert_array_equal(got[1], np.tile(padded, (1, 1, 1, 2)))
    np.testing.assert_array_equal(got[2], np.tile(padded[:, :, ::2, ::2], (2, 1, 1, 1)))
    cg = dml.compile_graph(g, "cpu")
    # the padding is read twice: it runs once into a buffer; tile2 reads output 0 in place
    assert len(cg.steps) == 4 and "buffer 0" in cg.plan and "output 0 -> output 2" in cg.plan


def test_one_node_output_as_two_graph_outputs():
    g = dml.GraphDesc(1, 2, (N(tile((2, 2), (1, 2))),), (IN(0, 0, 0),),
                      (OUT(0, 0, 1), OUT(0, 0, 0)))
    x = rand((2, 2))
    a, b = dml.compile_graph(g, "cpu")(x)
    np.testing.assert_array_equal(a, np.tile(x, (1, 2)))
    np.testing.assert_array_equal(b, a)


def test_zero_padding_folds_into_convolution_and_pooling():
    x, w = rand((2, 4, 9, 9)), rand((6, 4, 3, 3), seed=1)
    z = pad((2, 4, 9, 9), (0, 0, 1, 2), (0, 0, 2, 1))
    c = conv((2, 4, 12, 12), (6, 4, 3, 3), act=dml.ActivationReluOperatorDesc())
    lp = pool((2, 6, 10, 10), (2, 2), (2, 2))
    zp = pad((2, 6, 10, 10), (0, 0, 1, 1), (0, 0, 1, 1))
    lp2 = pool((2, 6, 12, 12), (3, 3), (3, 3))
    nodes = (N(z, "pad0"), N(c, "conv"), N(zp, "pad1"), N(lp2, "pool"))
    g = dml.GraphDesc(2, 1, nodes, (IN(0, 0, 0), IN(1, 1, 1)), (OUT(3, 0, 0),),
                      (MID(0, 0, 1, 0), MID(1, 0, 2, 0), MID(2, 0, 3, 0)))
    run_both(g, x, w, exact=False)
    cg = dml.compile_graph(g, "cpu")
    assert [type(s.op).__name__ for s in cg.steps] == ["ConvolutionOperatorDesc",
                                                       "LpPooling1OperatorDesc"]
    assert cg.steps[0].op.start_padding == (1, 2) and cg.steps[0].op.end_padding == (2, 1)
    assert cg.steps[0].op.input_tensor.sizes == (2, 4, 9, 9)
    assert cg.steps[1].op.start_padding == (1, 1)
    assert lp is not None


def test_padding_that_cannot_fold_stays_a_step():
    """Non-zero constant, -0.0, a padded channel axis, a BACKWARD convolution: no fold."""
    x, w = rand((1, 2, 5, 5)), rand((2, 2, 3, 3), seed=2)
    for p in (pad((1, 2, 5, 5), (0, 0, 1, 1), (0, 0, 1, 1), value=1.0),
              pad((1, 2, 5, 5), (0, 0, 1, 1), (0, 0, 1, 1), value=-0.0)):
        g = dml.GraphDesc(2, 1, (N(p), N(conv((1, 2, 7, 7), (2, 2, 3, 3)))),
                          (IN(0, 0, 0), IN(1, 1, 1)), (OUT(1, 0, 0),), (MID(0, 0, 1, 0),))
        run_both(g, x, w, exact=False)
        assert len(dml.compile_graph(g, "cpu").steps) == 2


def test_intermediate_buffers_are_allocated_once_and_per_thread():
    x, w = rand((1, 2, 6, 6)), rand((2, 2, 3, 3), seed=3)
    r = pad((1, 2, 6, 6), (0, 0, 1, 1), (0, 0, 1, 1), value=1.0)  # neither folds
    c = conv((1, 2, 8, 8), (2, 2, 3, 3))
    s = slice1((1, 2, 6, 6), (0, 0, 0, 0), (1, 2, 6, 6), (1, 1, 1, -2))
    g = dml.GraphDesc(2, 1, (N(r), N(c), N(s)), (IN(0, 0, 0), IN(1, 1, 1)), (OUT(2, 0, 0),),
                      (MID(0, 0, 1, 0), MID(1, 0, 2, 0)))
    cg = dml.compile_graph(g, "cpu")
    first = cg(x, w)
    bufs = cg.buffers()
    assert sorted(bufs) == [0, 1]
    second = cg(x, w)
    assert all(cg.buffers()[k] is bufs[k] for k in bufs)
    np.testing.assert_array_equal(first, second)
    other = {}
    th = threading.Thread(target=lambda: (cg(x, w), other.update(cg.buffers())))
    th.start()
    th.join()
    assert sorted(other) == [0, 1] and all(other[k] is not bufs[k] for k in bufs)


@pytest.mark.parametrize("device", ["numpy", "cpu"])
def test_buffers_share_memory_only_where_their_lives_do_not_overlap(device):
    # pad -> conv -> pad -> conv -> slice, nothing folds: buffers 0..3, each read by the next
    # step alone, so node 2's output may take node 0's bytes (and 3 node 1's), but no step's
    # output shares its input's
    x, w = rand((1, 2, 6, 6)), rand((2, 2, 3, 3), seed=3)
    ops = [pad((1, 2, 6, 6), (0, 0, 1, 1), (0, 0, 1, 1), value=1.0),
           conv((1, 2, 8, 8), (2, 2, 3, 3)),
           pad((1, 2, 6, 6), (0, 0, 1, 1), (0, 0, 1, 1), value=2.0),
           conv((1, 2, 8, 8), (2, 2, 3, 3)),
           slice1((1, 2, 6, 6), (0, 0, 0, 0), (1, 2, 6, 6), (1, 1, 1, -2))]
    g = dml.GraphDesc(2, 1, tuple(N(op) for op in ops), (IN(0, 0, 0), IN(1, 1, 1), IN(1, 3, 1)),
                      (OUT(4, 0, 0),), tuple(MID(k, 0, k + 1, 0) for k in range(4)))
    cg = dml.compile_graph(g, device)
    assert len(cg.steps) == 5
    got = cg(x, w)
    b = cg.buffers()
    assert sorted(b) == [0, 1, 2, 3]
    for k in range(3):
        assert not np.shares_memory(b[k], b[k + 1]), k
    assert np.shares_memory(b[0], b[2]) and np.shares_memory(b[1], b[3])
    # against NumPy's own functions
    def conv_ref(a):
        return brute_conv_forward(a, w, None, (1, 1), (1, 1), (0, 0), out_spatial=(6, 6))
    y = conv_ref(np.pad(conv_ref(np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=1)),
                        ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=2))[..., ::-2]
    np.testing.assert_allclose(got, y, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(cg(x, w), got)  # again, over the same buffers


@pytest.mark.parametrize("algorithm", ["blocked", "direct", "gemm"])
def test_a_step_bound_once_follows_its_arrays_and_keeps_none_of_the_callers(algorithm):
    # pad -> conv(., w) -> slice: the conv step touches the graph's input 1 (its filter) and
    # buffers only; its binding (views, the packed filter) is kept for the next call where that
    # filter is frozen (a model's own) and the same array again, and nowhere else
    import gc
    import weakref

    from dml_numba._frozen import freeze
    r = pad((1, 2, 6, 6), (0, 0, 1, 1), (0, 0, 1, 1), value=1.0)
    c = conv((1, 2, 8, 8), (2, 2, 3, 3))
    s = slice1((1, 2, 6, 6), (0, 0, 0, 0), (1, 2, 6, 6), (1, 1, 1, -2))
    g = dml.GraphDesc(2, 1, (N(r), N(c), N(s)), (IN(0, 0, 0), IN(1, 1, 1)), (OUT(2, 0, 0),),
                      (MID(0, 0, 1, 0), MID(1, 0, 2, 0)))
    cg = dml.compile_graph(g, "cpu", algorithm=algorithm)
    assert [op.kernel.algorithm for op in cg.ops if hasattr(op.kernel, "algorithm")] == [
        algorithm]

    def want(x, w):  # NumPy's pad and a brute-force convolution
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=1)
        return brute_conv_forward(xp, w, None, (1, 1), (1, 1), (0, 0),
                                  out_spatial=(6, 6))[..., ::-2]

    def check(x, w):
        np.testing.assert_allclose(cg(x, w), want(x, w), rtol=1e-5, atol=1e-5)

    w1, w2 = freeze(rand((2, 2, 3, 3), seed=3)), freeze(rand((2, 2, 3, 3), seed=4))
    x = rand((1, 2, 6, 6))
    check(x, w1)
    kept = cg._local.bound[id(cg)][1]
    assert kept[1] is not None and kept[0] is None and kept[2] is None  # x; the graph's output
    run = kept[1][1]
    check(rand((1, 2, 6, 6), seed=1), w1)
    assert kept[1][1] is run  # the same frozen filter: the same binding
    check(x, w2)  # another frozen filter: bound again
    assert kept[1][1] is not run
    mine = rand((2, 2, 3, 3), seed=5)  # the caller's own filter: not kept, read at each call
    check(x, mine)
    assert kept[1] is None
    mine *= -2
    check(x, mine)
    # nothing of the caller's stays alive in the graph: its input, filter and output
    x = rand((1, 2, 6, 6), seed=2)
    refs = [weakref.ref(a) for a in (x, mine, cg(x, mine))]
    del x, mine
    gc.collect()
    assert [ref() for ref in refs] == [None, None, None]


def test_the_steps_bound_on_a_thread_share_one_scratch_buffer():
    # two Winograd steps, the second taking more of the thread's scratch than the first (its
    # transformed output 64 channels wide): the graph grows the scratch to the larger need
    # before binding either, so that the first step's views are not left on a buffer the
    # second replaced (each bound step keeps the views it was bound with); every call right
    import threading

    from dml_numba._frozen import freeze
    from dml_numba.cpu.convolution import base, winograd

    c1 = conv((1, 4, 8, 8), (4, 4, 3, 3), pads=(1, 1))
    c2 = conv((1, 4, 8, 8), (64, 4, 3, 3), pads=(1, 1))
    g = dml.GraphDesc(3, 1, (N(c1), N(c2)), (IN(0, 0, 0), IN(1, 0, 1), IN(2, 1, 1)),
                      (OUT(1, 0, 0),), (MID(0, 0, 1, 0),))
    cg = dml.compile_graph(g, "cpu", algorithm="winograd")
    needs = [op.kernel.scratch_bytes() for op in cg.ops]
    assert 0 < needs[0] < needs[1]
    w1, w2 = freeze(rand((4, 4, 3, 3), seed=1)), freeze(rand((64, 4, 3, 3), seed=2))
    seen, failed = [], []

    def run():  # a thread of its own: its scratch starts empty
        real = base.scratch

        def scratch(shape, dtype):
            view = real(shape, dtype)
            seen.append(base._scratch.buf)
            return view

        base.scratch = winograd.scratch = scratch  # the graph's reserve, the kernels' views
        try:
            for seed in range(3):
                x = rand((1, 4, 8, 8), seed=seed)
                mid = brute_conv_forward(x, w1, None, (1, 1), (1, 1), (1, 1),
                                         out_spatial=(8, 8))
                want = brute_conv_forward(mid, w2, None, (1, 1), (1, 1), (1, 1),
                                          out_spatial=(8, 8))
                # Winograd's rounding: relative to the largest sum
                np.testing.assert_allclose(cg(x, w1, w2), want, rtol=0,
                                           atol=3e-5 * np.abs(want).max())
        except BaseException as exc:  # noqa: BLE001 - raised in the test's own thread
            failed.append(exc)
        finally:
            base.scratch = winograd.scratch = real

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    assert len(seen) >= 2 and all(buf is seen[0] for buf in seen)
    assert seen[0].nbytes >= needs[1]


def test_a_step_bound_once_reads_a_strided_input_at_each_call():
    # the graph's input a strided view (its shape is the graph's): bound each call, read then
    x = rand((1, 2, 6, 12))
    view = x[..., ::2]
    w = rand((2, 2, 3, 3), seed=3)
    g = dml.GraphDesc(2, 1, (N(conv((1, 2, 6, 6), (2, 2, 3, 3))),), (IN(0, 0, 0), IN(1, 0, 1)),
                      (OUT(0, 0, 0),), ())
    for algorithm in ("blocked", "direct"):
        cg = dml.compile_graph(g, "cpu", algorithm=algorithm)
        for _ in range(2):
            np.testing.assert_allclose(
                cg(view, w), brute_conv_forward(view, w, None, (1, 1), (1, 1), (0, 0),
                                                out_spatial=(4, 4)),
                rtol=1e-5, atol=1e-5)
            x *= -1.5  # the view's memory, changed between calls


def _strided_step_cases():
    """(name, graph inputs as (array, strided view), the one node, what NumPy computes)."""
    a, b = rand((1, 2, 4, 12)), rand((1, 2, 4, 6), seed=1)
    h = rand((1, 2, 6, 12)).astype(np.float16)
    wh = rand((2, 2, 3, 3), seed=3).astype(np.float16)
    return [
        ("add", a, [a[..., ::2], b], dml.functional.element_wise_add_desc(
            a[..., ::2], b, fused_activation=dml.ActivationReluOperatorDesc()),
         lambda xs: np.maximum(xs[0] + xs[1], 0)),
        ("max-pooling", a, [a[..., ::2]], dml.functional.max_pooling_desc(
            a[..., ::2], (2, 2), (2, 2)),
         lambda xs: xs[0].reshape(1, 2, 2, 2, 3, 2).max(axis=(3, 5))),
        ("convolution-float16", h, [h[..., ::2], wh], dml.functional.convolution_desc(
            h[..., ::2], wh),
         lambda xs: brute_conv_forward(xs[0].astype(np.float32), xs[1].astype(np.float32),
                                       None, (1, 1), (1, 1), (0, 0), out_spatial=(4, 4))),
    ]


@pytest.mark.parametrize("case", _strided_step_cases(), ids=lambda c: c[0])
def test_every_kind_of_step_reads_its_strided_or_converted_input_at_each_call(case):
    # element-wise (its contiguous call), pooling (its first input as it is) and a float16
    # convolution (converted to its accumulator at each call): a graph input that is a strided
    # view, its memory changed between calls, read again each call
    _, base, inputs, op, want = case
    g = dml.GraphDesc(len(inputs), 1, (N(op),),
                      tuple(IN(k, 0, k) for k in range(len(inputs))), (OUT(0, 0, 0),), ())
    cg = dml.compile_graph(g, "cpu")
    for _ in range(2):
        got = cg(*inputs)
        np.testing.assert_allclose(got.astype(np.float32), want(inputs),
                                   rtol=2e-3 if got.dtype == np.float16 else 1e-6,
                                   atol=2e-2 if got.dtype == np.float16 else 1e-6)
        base *= -1.5  # the view's memory, changed between calls


def test_out_is_written_in_place_and_returned():
    g = chain_graph(tile((2, 3), (2, 2)), slice1((4, 6), (0, 0), (4, 6), (2, 1)))
    x = rand((2, 3))
    out = np.empty((2, 6), np.float32)
    assert dml.compile_graph(g, "cpu")(x, out=out) is out
    np.testing.assert_array_equal(out, np.tile(x, (2, 2))[::2])


def test_compiled_graphs_are_cached():
    g = chain_graph(tile((2, 3), (2, 2)))
    assert dml.compile_graph(g, "cpu") is dml.compile_graph(g, "cpu")
    assert dml.compile_graph(g, "cpu") is not dml.compile_graph(g, "cpu", fuse=False)


def test_unfused_graph_on_cpu_runs_node_by_node():
    g = chain_graph(tile((2, 3), (2, 2)), slice1((4, 6), (0, 0), (4, 6), (2, 1)))
    cg = dml.compile_graph(g, "cpu", fuse=False)
    assert len(cg.steps) == 2
    np.testing.assert_array_equal(cg(rand((2, 3))), np.tile(rand((2, 3)), (2, 2))[::2])


# -- validation ---------------------------------------------------------------------------------

TL = tile((2, 2), (1, 2))
TL2 = tile((2, 4), (2, 1))
#: a max pooling with its indices output: two outputs
MAXI = dml.MaxPooling2OperatorDesc(dml.TensorDesc(1, (1, 1, 4)), dml.TensorDesc(1, (1, 1, 2)),
                                   dml.TensorDesc(dml.DataType.UINT32, (1, 1, 2)), (2,), (2,),
                                   (0,), (0,), (1,))
CONV = conv((1, 2, 4, 4), (2, 2, 3, 3), bias=True)


@pytest.mark.parametrize("make, message", [
    (lambda: dml.GraphDesc(0, 1, (N(TL),), (), (OUT(0, 0, 0),)), "GraphDesc.input_count: 0"),
    (lambda: dml.GraphDesc(1, 1, (), (IN(0, 0, 0),), (OUT(0, 0, 0),)), "at least one node"),
    (lambda: dml.GraphDesc(1, 1, (TL,), (IN(0, 0, 0),), (OUT(0, 0, 0),)),
     "GraphDesc.nodes[0]: TileOperatorDesc"),
    (lambda: dml.GraphDesc(2, 1, (N(TL),), (IN(1, 0, 0), IN(0, 0, 0)), (OUT(0, 0, 0),)),
     "input_edges[1].to_node_input_index: 0 is invalid; nodes[0]'s input_tensor is already fed "
     "by input_edges[0]"),
    (lambda: dml.GraphDesc(1, 1, (N(TL),), (IN(1, 0, 0),), (OUT(0, 0, 0),)),
     "input_edges[0].graph_input_index: 1 is invalid; expected an index below input_count (1)"),
    (lambda: dml.GraphDesc(1, 1, (N(TL),), (IN(0, 3, 0),), (OUT(0, 0, 0),)),
     "input_edges[0].to_node_index: 3 is invalid"),
    (lambda: dml.GraphDesc(1, 1, (N(TL, "t"),), (IN(0, 0, 1),), (OUT(0, 0, 0),)),
     "to_node_input_index: 1 is invalid; expected an input index below 1 (the inputs of "
     "nodes[0] ('t')"),
    (lambda: dml.GraphDesc(1, 1, (N(TL, "t"), N(TL2, "u")), (IN(0, 0, 0), IN(0, 1, 0)),
                           (OUT(1, 0, 0),)),
     "input_edges[1] (nodes[1] ('u').input_tensor): 'FLOAT32 (2, 4)' is invalid; expected "
     "FLOAT32 (2, 2), the tensor graph input 0 is to nodes[0] ('t').input_tensor"),
    (lambda: dml.GraphDesc(1, 1, (N(TL, "a"), N(TL, "b")), (IN(0, 0, 0),), (OUT(1, 0, 0),),
                           (MID(0, 0, 1, 0, "e"),)),
     "intermediate_edges[0] ('e') (nodes[1] ('b').input_tensor): 'FLOAT32 (2, 2)' is invalid; "
     "expected FLOAT32 (2, 4), the output tensor of nodes[0] ('a')"),
    (lambda: dml.GraphDesc(1, 1, (N(TL, "a"),), (IN(0, 0, 0),), (OUT(0, 1, 0),)),
     "output_edges[0].from_node_output_index: 1 is invalid; expected an output index below 1 "
     "(the outputs of nodes[0] ('a'): output_tensor)"),
    (lambda: dml.GraphDesc(1, 1, (N(MAXI, "m"),), (IN(0, 0, 0),), (OUT(0, 0, 0),)),
     "nodes[0] ('m').output_indices_tensor: 'unconnected' is invalid; expected an intermediate "
     "or output edge from every node output"),
    (lambda: dml.GraphDesc(1, 1, (N(MAXI, "m"),), (IN(0, 0, 0),), (OUT(0, 1, 0),)),
     "nodes[0] ('m').output: 'unconnected' is invalid"),
    (lambda: dml.GraphDesc(1, 2, (N(MAXI, "m"),), (IN(0, 0, 0),), (OUT(0, 0, 0), OUT(0, 2, 1))),
     "output_edges[1].from_node_output_index: 2 is invalid; expected an output index below 2 "
     "(the outputs of nodes[0] ('m'): output_tensor, output_indices_tensor)"),
    (lambda: dml.GraphDesc(1, 2, (N(TL),), (IN(0, 0, 0),), (OUT(0, 0, 0),)),
     "output_edges: 'graph output 1' is invalid; expected an output edge to every graph output"),
    (lambda: dml.GraphDesc(1, 1, (N(TL),), (IN(0, 0, 0),), (OUT(0, 0, 0), OUT(0, 0, 0))),
     "output_edges[1].graph_output_index: 0 is invalid; graph output 0 is already produced by "
     "output_edges[0]"),
    (lambda: dml.GraphDesc(2, 1, (N(TL),), (IN(0, 0, 0),), (OUT(0, 0, 0),)),
     "input_edges: 'graph input 1' is invalid; expected an input edge from every graph input"),
    (lambda: dml.GraphDesc(1, 1, (N(TL, "t"), N(TL2)), (IN(0, 0, 0),), (OUT(0, 0, 0),)),
     "GraphDesc.nodes[1].input_tensor: 'unconnected' is invalid"),
    (lambda: dml.GraphDesc(1, 1, (N(TL, "t"), N(TL2, "u")), (IN(0, 0, 0),), (OUT(0, 0, 0),),
                           (MID(0, 0, 1, 0),)),
     "GraphDesc.nodes[1] ('u').output: 'unconnected' is invalid; expected an intermediate or "
     "output edge from every node output"),
    (lambda: dml.GraphDesc(1, 1, (N(TL), N(tile((2, 2), (1, 1)), "loop")), (IN(0, 0, 0),),
                           (OUT(0, 0, 0),), (MID(1, 0, 1, 0),)),
     "expected a directed acyclic graph; these nodes lie on or behind a cycle"),
    (lambda: dml.GraphDesc(2, 1, (N(conv((1, 2, 4, 4), (2, 2, 3, 3)), "c"),),
                           (IN(0, 0, 0), IN(1, 0, 1), IN(1, 0, 2)), (OUT(0, 0, 0),)),
     "input_edges[2].to_node_input_index: 2 is invalid; nodes[0] ('c')'s bias_tensor is absent "
     "from its operator; expected no edge to it"),
    (lambda: dml.GraphDesc(2, 1, (N(CONV, "c"),), (IN(0, 0, 0), IN(1, 0, 1)), (OUT(0, 0, 0),)),
     "GraphDesc.nodes[0] ('c').bias_tensor: 'unconnected' is invalid"),
    (lambda: IN(-1, 0, 0), "InputGraphEdgeDesc.graph_input_index: -1 is invalid"),
    (lambda: MID(0, 0, 1, 0, name=3), "IntermediateGraphEdgeDesc.name: 3 is invalid"),
])
def test_validation_names_the_node_or_edge(make, message):
    with pytest.raises(dml.ValidationError) as e:
        make()
    assert message in str(e.value), str(e.value)


def test_a_cycle_among_several_nodes_is_refused():
    a, b = tile((2, 2), (1, 1)), tile((2, 2), (1, 1))
    with pytest.raises(dml.ValidationError, match="cycle"):
        dml.GraphDesc(1, 1, (N(TL), N(a, "a"), N(b, "b")), (IN(0, 0, 0),), (OUT(0, 0, 0),),
                      (MID(1, 0, 2, 0), MID(2, 0, 1, 0)))


def test_calls_are_checked_before_anything_runs():
    g = chain_graph(tile((2, 3), (2, 2)))
    cg = dml.compile_graph(g, "cpu")
    with pytest.raises(dml.ValidationError, match="0 inputs are invalid; expected 1"):
        cg()
    with pytest.raises(dml.ValidationError, match=r"input 0: ndarray float64 \(2, 3\) is invalid; "
                                                  r"expected float32 \(2, 3\)"):
        cg(np.zeros((2, 3)))
    with pytest.raises(dml.ValidationError, match="out"):
        cg(rand((2, 3)), out=np.zeros((4, 6), np.float64))
    with pytest.raises(dml.ValidationError, match="GraphDesc"):
        dml.compile_graph("graph", "cpu")
    with pytest.raises(dml.ValidationError, match="device"):
        dml.compile_graph(g, "gpu")
    with pytest.raises(dml.ValidationError, match="parallel: 'yes' is invalid"):
        dml.compile_graph(g, "cpu", parallel="yes")
    with pytest.raises(dml.ValidationError, match="'algorithm'"):
        dml.compile_graph(g, "cpu", algorithm="blocked")  # no step takes it


# -- a padding operator folded into the convolution's own input reads (CPU) ---------------------

NP_MODE = {"EDGE": "edge", "REFLECTION": "reflect", "SYMMETRIC": "symmetric", "WRAP": "wrap"}


DEPTHWISE, DENSE, STAGED, CHANNELS = (((2, 8, 12, 20), (8, 1, 3, 3), 8, "blocked-depthwise"),
                                      ((1, 4, 9, 30), (4, 4, 5, 5), 1, "blocked"),
                                      # staged, by the pixels tile (the 16-lane pick) or the
                                      # channels tile (the 8-lane one): each host stages it
                                      ((2, 32, 20, 20), (32, 8, 3, 3), 4,
                                       ("blocked-staged", "blocked-channels-staged")),
                                      ((2, 8, 12, 20), (32, 8, 3, 3), 1, "blocked-channels"))


@pytest.mark.parametrize("mode, xs, ws, groups, kind", [
    ("REFLECTION", *DEPTHWISE), ("EDGE", *DEPTHWISE), ("SYMMETRIC", *DENSE), ("WRAP", *STAGED),
    ("REFLECTION", *CHANNELS)])
def test_mode_padding_folds_into_the_blocked_convolution(mode, xs, ws, groups, kind):
    """The padding never exists as a tensor: phase 1 of the blocked kernel reads the input
    through the mode's map; the result equals np.pad followed by the convolution. (Every
    kernel's phase 1 is the same emitter, each mode's map the shared one: each mode once, each
    kernel at least once.)"""
    k = ws[-1] // 2
    p = pad(xs, (0, 0, k, k + 1), (0, 0, k + 1, k), dml.PaddingMode[mode])
    padded = tuple(n + (2 * k + 1 if i >= 2 else 0) for i, n in enumerate(xs))
    c = conv(padded, ws, groups=groups, act=dml.ActivationReluOperatorDesc(), bias=True)
    g = dml.GraphDesc(3, 1, (N(p, "pad"), N(c, "conv")), (IN(0, 0, 0), IN(1, 1, 1), IN(2, 1, 2)),
                      (OUT(1, 0, 0),), (MID(0, 0, 1, 0),))
    x, w, b = rand(xs), rand(ws, seed=1), rand((1, ws[0], 1, 1), seed=2)
    cg = dml.compile_graph(g, "cpu", algorithm="blocked")  # (the static choice may be direct)
    assert len(cg.steps) == 1 and cg.steps[0].options == (("input_padding", mode),)
    assert cg.ops[0].kernel.key.kernel in ((kind,) if isinstance(kind, str) else kind)
    assert f"with a {cg.ops[0].kernel.plan.fold} padding folded in" in cg.source
    pads = [(0, 0), (0, 0), (k, k + 1), (k + 1, k)]
    ref = dml.convolution(np.pad(x, pads, mode=NP_MODE[mode]), w, b, group_count=groups,
                          fused_activation=dml.ActivationReluOperatorDesc(), device="numpy")
    assert_close(cg(x, w, b), ref, np.float32)


@pytest.mark.parametrize("mode, window, strides, ceil", [
    ("REFLECTION", (3, 3), (1, 1), False), ("EDGE", (3, 3), (2, 2), True),
    ("SYMMETRIC", (3, 2), (2, 2), False), ("WRAP", (3, 3), (2, 3), True)])
def test_mode_padding_folds_into_lp_pooling(mode, window, strides, ceil):
    """Every LP pooling kernel reads a folded padding through its map: one step, no padded
    tensor, the result of np.pad followed by the pooling (with a ceil-mode output too, whose last
    windows reach past the padded input and read nothing there)."""
    xs, (s0, e0), (s1, e1) = (2, 3, 7, 8), (1, 2), (2, 1)
    padded = (xs[0], xs[1], xs[2] + s0 + e0, xs[3] + s1 + e1)
    lp = pool(padded, window, strides, p=3)
    if ceil:  # ceil mode: one more output where the windows do not end at the padded edge
        sizes = lp.output_tensor.sizes[:2] + tuple(
            -(-(n - k) // st) + 1 for n, k, st in zip(padded[2:], window, strides))
        assert sizes != lp.output_tensor.sizes
        lp = dataclasses.replace(lp, output_tensor=t(*sizes))
    p = pad(xs, (0, 0, s0, s1), (0, 0, e0, e1), dml.PaddingMode[mode])
    g = dml.GraphDesc(1, 1, (N(p, "pad"), N(lp, "pool")), (IN(0, 0, 0),), (OUT(1, 0, 0),),
                      (MID(0, 0, 1, 0),))
    x = rand(xs)
    cg = dml.compile_graph(g, "cpu")
    assert len(cg.steps) == 1 and cg.steps[0].options == (("input_padding", mode),)
    assert f"fold {dml.ops.convolution.FOLDS[mode]}" in cg.source
    ref = dml.compile_operator(lp, "numpy")(np.pad(x, [(0, 0), (0, 0), (s0, e0), (s1, e1)],
                                                  mode=NP_MODE[mode]))
    assert_close(cg(x), ref, np.float32)


@pytest.mark.parametrize("mode, xs, ws, strides, dtype, starts, ends", [
    ("REFLECTION", (1, 2, 8, 10), (3, 2, 3, 3), (1, 2), np.float32, None, None),  # phases
    ("WRAP", (1, 2, 7, 9), (2, 2, 3, 5), (2, 1), np.float64, None, None),  # no blocked kernel
    ("EDGE", (1, 3, 13), (2, 3, 5), (1,), np.float32, None, None),
    # more taps than the direct kernel fuses: each tap its own pass, its padded part read
    # through the map up to the padded extent
    ("SYMMETRIC", (1, 2, 7, 8), (2, 2, 6, 6), (1, 1), np.float64, None, None),
    ("WRAP", (1, 1, 6, 11), (1, 1, 5, 7), (1, 2), np.float64, None, None),
    # an edge padding three times the row: the first and last taps read padding only
    ("EDGE", (1, 1, 3, 2), (1, 1, 3, 13), (1, 1), np.float64, (1, 6), (1, 6))])
def test_mode_padding_folds_into_the_direct_kernel(mode, xs, ws, strides, dtype, starts, ends):
    """Where the blocked kernel cannot read a folded padding (a strided last axis, float64),
    the direct loop nest does: the taps in the padding read the input through the map."""
    nd = len(xs) - 2
    if starts is None:
        starts, ends = ((2,), (3,)) if nd == 1 else ((1, 2)[:nd], (2, 1)[:nd])
    p = pad(xs, (0, 0) + starts, (0, 0) + ends, dml.PaddingMode[mode],
            dtype=dml.DataType.from_numpy(dtype))
    padded = xs[:2] + tuple(n + a + b for n, a, b in zip(xs[2:], starts, ends))
    c = dml.functional.convolution_desc(np.zeros(padded, dtype), np.zeros(ws, dtype),
                                        strides=strides)
    g = dml.GraphDesc(2, 1, (N(p), N(c)), (IN(0, 0, 0), IN(1, 1, 1)), (OUT(1, 0, 0),),
                      (MID(0, 0, 1, 0),))
    x, w = rand(xs, dtype), rand(ws, dtype, seed=1)
    cg = dml.compile_graph(g, "cpu")
    assert len(cg.steps) == 1 and cg.steps[0].options == (("input_padding", mode),)
    assert cg.ops[0].kernel.algorithm == "direct"
    ref = dml.convolution(np.pad(x, [(0, 0), (0, 0)] + list(zip(starts, ends)),
                                 mode=NP_MODE[mode]), w, strides=strides, device="numpy")
    assert_close(cg(x, w), ref, dtype)


def test_mode_padding_stays_a_step_where_no_kernel_can_fold_it():
    """A convolution with padding of its own, a transposed one, the numpy device: the padding
    runs as its own step."""
    x, w = rand((1, 2, 8, 8)), rand((2, 2, 3, 3), seed=1)
    p = pad((1, 2, 8, 8), (0, 0, 1, 1), (0, 0, 1, 1), R)
    padded_too = conv((1, 2, 10, 10), (2, 2, 3, 3), pads=(1, 1))
    transposed = dml.functional.convolution_desc(np.zeros((1, 2, 10, 10), np.float32), w,
                                                 direction=1)
    for c in (padded_too, transposed):
        g = dml.GraphDesc(2, 1, (N(p), N(c)), (IN(0, 0, 0), IN(1, 1, 1)), (OUT(1, 0, 0),),
                          (MID(0, 0, 1, 0),))
        run_both(g, x, w, exact=False)
        assert len(dml.compile_graph(g, "cpu").steps) == 2


@pytest.mark.parametrize("algorithm", ["blocked", "direct"])
def test_input_padding_runs_the_algorithm_asked_for(algorithm):
    x, w = rand((1, 2, 8, 9)), rand((2, 2, 3, 3), seed=1)
    c = dml.functional.convolution_desc(x, w, start_padding=(1, 1), end_padding=(1, 1))
    op = dml.compile_operator(c, "cpu", input_padding="SYMMETRIC", algorithm=algorithm)
    assert op.kernel.algorithm == algorithm
    ref = dml.convolution(np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)], mode="symmetric"), w,
                          device="numpy")
    assert_close(op(x, w), ref, np.float32)


def test_input_padding_option_is_refused_where_it_cannot_apply():
    c = dml.functional.convolution_desc(np.zeros((1, 2, 10, 10), np.float32),
                                        np.zeros((2, 2, 3, 3), np.float32), strides=(1, 2),
                                        start_padding=(1, 1), end_padding=(1, 1))
    for options in ({"algorithm": "blocked"}, {"algorithm": "gemm"}):  # strided last axis
        with pytest.raises(dml.ValidationError, match="input_padding: 'REFLECTION' is invalid"):
            dml.compile_operator(c, "cpu", input_padding="REFLECTION", **options)
    transposed = dml.functional.convolution_desc(np.zeros((1, 2, 10, 10), np.float32),
                                                 np.zeros((2, 2, 3, 3), np.float32),
                                                 direction=1)
    with pytest.raises(dml.ValidationError, match="needs a FORWARD convolution"):
        dml.compile_operator(transposed, "cpu", input_padding="EDGE")
    with pytest.raises(dml.ValidationError, match="input_padding"):
        dml.compile_operator(c, "numpy", input_padding="REFLECTION")
    with pytest.raises(dml.ValidationError, match="'CONSTANT' is invalid"):
        dml.compile_operator(c, "cpu", input_padding="CONSTANT")


@pytest.mark.parametrize("window, offsets, strides", [
    ("conv", (0, 0, 0, 0), (1, 1, 2, 1)),
    ("conv", (0, 0, 1, 1), (1, 1, 2, 3)),
    ("pool", (0, 0, 0, 0), (1, 1, 2, 1)),
    ("pool", (0, 0, 1, 1), (1, 1, 1, 2)),
])
def test_a_slice_after_a_window_computes_only_the_kept_windows(window, offsets, strides):
    x, w = rand((2, 3, 11, 12)), rand((3, 3, 3, 3), seed=5)
    op = conv((2, 3, 11, 12), (3, 3, 3, 3), pads=(1, 1)) if window == "conv" else \
        pool((2, 3, 11, 12), (3, 2), (1, 1), pads=(1, 1))
    sizes = op.output_tensor.sizes
    s = slice1(sizes, offsets, tuple(n - o for n, o in zip(sizes, offsets)), strides)
    nodes = (N(op), N(s))
    ins = (IN(0, 0, 0), IN(1, 0, 1)) if window == "conv" else (IN(0, 0, 0),)
    g = dml.GraphDesc(len(ins), 1, nodes, ins, (OUT(1, 0, 0),), (MID(0, 0, 1, 0),))
    args = (x, w) if window == "conv" else (x,)
    ref, got = run_both(g, *args, exact=False)
    full = dml.compile_operator(op, "numpy")(*args)
    idx = tuple(slice(o, None, k) for o, k in zip(offsets, strides))
    assert_close(got, full[idx], np.float32)
    cg = dml.compile_graph(g, "cpu")
    assert len(cg.steps) == 1 and cg.steps[0].op.output_tensor.sizes == got.shape
    assert cg.steps[0].op.strides == tuple(a * b for a, b in zip(op.strides, strides[2:]))


def test_a_slice_the_window_cannot_express_stays_a_step():
    """Reversed, a slice of the channels, an offset past the start padding (the first kept
    window would start before the padded input)."""
    x, w = rand((1, 2, 8, 8)), rand((2, 2, 3, 3), seed=5)
    op = conv((1, 2, 8, 8), (2, 2, 3, 3))
    for s in (slice1((1, 2, 6, 6), (0, 0, 0, 0), (1, 2, 6, 6), (1, 1, -1, 1)),
              slice1((1, 2, 6, 6), (0, 1, 0, 0), (1, 1, 6, 6), (1, 1, 1, 1)),
              slice1((1, 2, 6, 6), (0, 0, 1, 0), (1, 2, 5, 6), (1, 1, 2, 1))):
        g = dml.GraphDesc(2, 1, (N(op), N(s)), (IN(0, 0, 0), IN(1, 0, 1)), (OUT(1, 0, 0),),
                          (MID(0, 0, 1, 0),))
        run_both(g, x, w, exact=False)
        assert len(dml.compile_graph(g, "cpu").steps) == 2


# -- out= arrays that alias the inputs or each other ----------------------------------------------

def two_outputs_graph():
    """Inputs x (2, 3) and y (1, 3): output 0 = tile(y) (2, 3), output 1 = an EDGE padding of
    x, sliced back to (2, 3) (the padding's buffer is read after output 0 is written)."""
    p = pad((2, 3), (1, 1), (1, 1), dml.PaddingMode.EDGE)
    s = slice1((4, 5), (1, 1), (2, 3), (1, 1))
    return dml.GraphDesc(2, 2, (N(tile((1, 3), (2, 1)), "tile"), N(p, "pad"), N(s, "slice")),
                         (IN(1, 0, 0), IN(0, 1, 0)), (OUT(0, 0, 0), OUT(2, 0, 1)),
                         (MID(1, 0, 2, 0),))


def _aliasing_cases():
    """name -> make(x, y) -> (inputs, out, the refusal's message or None where it is right)."""
    def fresh():
        return np.zeros((2, 3), np.float32)

    def halves():
        b = np.zeros((4, 3), np.float32)
        return b[:2], b[2:]

    def overlapping():
        b = np.zeros((3, 3), np.float32)
        return b[:2], b[1:]

    def input_in_buffer(x, y):
        b = np.zeros((4, 3), np.float32)
        b[2:] = x
        return (b[2:], y), (b[:2], fresh())

    def read_only():
        a = fresh()
        a.flags.writeable = False
        return a

    def input_overlapped(x, y):
        b = np.zeros((3, 3), np.float32)
        b[1:] = x
        return (b[1:], y), (b[:2], fresh())

    return {
        "out 0 is input 0": (lambda x, y: ((x, y), (x, fresh())), "out\\[0\\]: an array "
                             "overlapping input 0"),
        "out 1 is input 0": (lambda x, y: ((x, y), (fresh(), x)), "out\\[1\\]: an array "
                             "overlapping input 0"),
        "out 0 a view of input 0": (lambda x, y: ((x, y), (x[::-1], fresh())), "input 0"),
        "out 0 overlaps input 0 in one buffer": (input_overlapped, "overlapping input 0"),
        "one array for both outputs": (lambda x, y: ((x, y), (lambda a: (a, a))(fresh())),
                                       "out\\[1\\]: an array overlapping out\\[0\\]"),
        "overlapping views as the outputs": (lambda x, y: ((x, y), overlapping()),
                                             "out\\[1\\]: an array overlapping out\\[0\\]"),
        "a read-only out": (lambda x, y: ((x, y), (fresh(), read_only())),
                            "out\\[1\\]: a read-only array is invalid"),
        "disjoint halves of one buffer": (lambda x, y: ((x, y), halves()), None),
        "input and output in one buffer, apart": (input_in_buffer, None),
    }


@pytest.mark.parametrize("case", list(_aliasing_cases()))
def test_out_aliasing_an_input_or_another_out_is_refused_before_anything_is_written(device,
                                                                                    case):
    """Every aliasing of graph outputs with graph inputs or with each other (the same array,
    overlapping views) is a ValidationError naming both, with nothing written; disjoint parts
    of one buffer are fine and computed right."""
    make, message = _aliasing_cases()[case]
    x0, y0 = rand((2, 3)), rand((1, 3), seed=1)
    inputs, out = make(x0.copy(), y0.copy())
    g = two_outputs_graph()
    before = [a.copy() for a in inputs + out]
    run = dml.compile_graph(g, device)
    if message is None:
        assert run(*inputs, out=out) is out
        np.testing.assert_array_equal(out[0], np.tile(y0, (2, 1)))
        np.testing.assert_array_equal(out[1], x0)
        return
    with pytest.raises(dml.ValidationError, match=message):
        run(*inputs, out=out)
    for a, b in zip(inputs + out, before):
        np.testing.assert_array_equal(a, b)


def test_out_aliasing_an_input_is_refused_for_pytorch_tensors_too():
    torch = pytest.importorskip("torch", reason="PyTorch is in the [test] extra on Linux x86-64")
    x, y = torch.from_numpy(rand((2, 3))), torch.from_numpy(rand((1, 3), seed=1))
    run = dml.compile_graph(two_outputs_graph(), "cpu")
    with pytest.raises(dml.ValidationError, match="out\\[0\\]: an array overlapping input 0"):
        run(x, y, out=(x, torch.zeros(2, 3)))
    o = torch.zeros(2, 3)
    with pytest.raises(dml.ValidationError, match="overlapping out\\[0\\]"):
        run(x, y, out=(o, o[:, :]))
