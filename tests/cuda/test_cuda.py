"""The "cuda" device on Numba's simulator (or a real GPU when present): every catalogue case
agrees with the vectorised device; device arrays stay on the device; the same errors as every
other device; nothing written when a call is refused."""
import numpy as np
import pytest

import dml_numba as dml
from tests.cases import CV, catalogue, compare, conv_case

pytestmark = pytest.mark.cuda
CASES = catalogue()


@pytest.fixture(scope="module")
def cuda():
    from numba import cuda as numba_cuda

    assert dml.device_status()["cuda"] == "available", dml.device_status()["cuda"]
    return numba_cuda


@pytest.mark.parametrize("name", list(CASES))
def test_case_agrees_with_numpy(cuda, name):
    desc, inputs = CASES[name]
    ref = dml.compile_operator(desc, "numpy")(*inputs)
    y = dml.compile_operator(desc, "cuda")(*inputs)
    # numpy in, numpy out (every output of max pooling's values and indices)
    assert all(isinstance(a, np.ndarray) for a in (y if isinstance(y, tuple) else (y,)))
    compare(desc, y, ref)


def test_device_arrays_stay_on_device(cuda):
    desc, inputs = CASES["conv-fwd-groups"]
    d_inputs = [cuda.to_device(a) for a in inputs]
    y = dml.compile_operator(desc, "cuda")(*d_inputs)
    from dml_numba.cuda._device import is_device_array

    assert is_device_array(cuda, y) and not isinstance(y, np.ndarray)
    compare(desc, y.copy_to_host(), dml.compile_operator(desc, "numpy")(*inputs))


def test_device_out_and_stream(cuda):
    desc, inputs = CASES["pad-reflection-f16-2d"]
    stream = cuda.stream()
    d_out = cuda.device_array(desc.output_tensor.sizes, np.float16)
    res = dml.compile_operator(desc, "cuda")(cuda.to_device(inputs[0]), out=d_out, stream=stream)
    stream.synchronize()
    assert res is d_out
    compare(desc, d_out.copy_to_host(), dml.compile_operator(desc, "numpy")(*inputs))


def test_host_out_and_strided_host_buffer(cuda):
    t = dml.DataType.INT32
    desc = dml.TileOperatorDesc(dml.TensorDesc(t, (2, 3), (5, 1)), dml.TensorDesc(t, (4, 3)),
                                (2, 1))
    buf = np.arange(10, dtype=np.int32)
    out = np.zeros((4, 3), np.int32)
    assert dml.compile_operator(desc, "cuda")(buf, out=out) is out
    np.testing.assert_array_equal(out, np.tile(np.array([[0, 1, 2], [5, 6, 7]], np.int32), (2, 1)))


def test_same_errors_as_host_devices(cuda):
    desc, inputs = CASES["slice-i32-neg"]
    messages = []
    for device in ("numpy", "cpu", "cuda"):
        with pytest.raises(dml.ValidationError) as info:
            dml.compile_operator(desc, device)(inputs[0].astype(np.int64))
        messages.append(str(info.value))
    assert len(set(messages)) == 1 and "Slice1OperatorDesc.input_tensor: dtype int64" in messages[0]


def test_bad_device_input_refused(cuda):
    desc, inputs = CASES["tile-u16-3d"]
    with pytest.raises(
        dml.ValidationError, match=r"TileOperatorDesc.input_tensor: device array shape"
    ):
        dml.compile_operator(desc, "cuda")(cuda.to_device(inputs[0].reshape(-1)))


def test_overlapping_device_out_refused_nothing_written(cuda):
    t = dml.DataType.FLOAT32
    desc = dml.Slice1OperatorDesc(dml.TensorDesc(t, (6,)), dml.TensorDesc(t, (6,)), (0,), (6,),
                                  (-1,))
    d = cuda.to_device(np.arange(6, dtype=np.float32))
    with pytest.raises(dml.ValidationError, match="overlapping input 0"):
        dml.compile_operator(desc, "cuda")(d, out=d)
    np.testing.assert_array_equal(d.copy_to_host(), np.arange(6, dtype=np.float32))


def test_element_wise_operators_run_in_place_on_device_and_host_arrays(cuda):
    """An activation and an addition written over an input: a device array (the kernel reads
    each element before writing it) and a host array (copied in, computed, copied back); a
    device output overlapping an input otherwise stays refused."""
    x = np.array([-2.0, -0.5, 0.0, 1.5, 3.0, -1.0], np.float32)
    d = cuda.to_device(x)
    assert dml.activation(d, "leaky_relu", [0.5], device="cuda", out=d) is d
    np.testing.assert_array_equal(d.copy_to_host(), np.where(x >= 0, x, 0.5 * x))
    view = d[:]  # another view object of the very same memory
    assert view is not d and dml.activation(d, "relu", device="cuda", out=view) is view
    np.testing.assert_array_equal(d.copy_to_host(), np.maximum(x, 0))
    a, b = cuda.to_device(x), cuda.to_device(x * 2)
    dml.element_wise_add(a, b, device="cuda", out=b)
    np.testing.assert_array_equal(b.copy_to_host(), x * 3)
    h = x.copy()
    dml.activation(h, "relu", device="cuda", out=h)
    np.testing.assert_array_equal(h, np.maximum(x, 0))
    d2 = cuda.to_device(np.arange(8, dtype=np.float32))
    with pytest.raises(dml.ValidationError, match="overlapping input 0"):
        dml.activation(d2[1:], "relu", device="cuda", out=d2[:7])
    np.testing.assert_array_equal(d2.copy_to_host(), np.arange(8, dtype=np.float32))


def test_generated_cuda_source_is_inspectable(cuda):
    desc, _ = CASES["conv-bwd-stride2"]
    op = dml.compile_operator(desc, "cuda")
    assert "@cuda.jit" in op.source and "cuda.gridsize(1)" in op.source
    assert "atomic" not in op.source  # backward convolution in gather form


def test_importing_a_missing_name_is_an_import_error():
    with pytest.raises(ImportError, match="missing_name"):
        from dml_numba.cuda import missing_name  # noqa: F401
    with pytest.raises(ModuleNotFoundError):
        import dml_numba.cuda.no_such_module  # noqa: F401


CHANNEL_BLOCKS = {
    # output channels a group -> channels a thread: 8 -> 4 (dense), 4 -> 4 (2 groups), 6 -> 2,
    # with bias and activation; the transposed ones through the gather form
    "fwd-8": (conv_case((1, 3, 4, 5), (8, 3, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1,
                        act=dml.ActivationLeakyReluOperatorDesc(0.2)), 4),
    "fwd-groups-4": (conv_case((2, 4, 3, 4), (8, 2, 2, 3), (1, 2), (1, 1), (0, 1), (1, 0), 2), 4),
    "fwd-6": (conv_case((1, 2, 3, 3), (6, 2, 1, 2), (1, 1), (1, 1), (0, 0), (0, 1), 1, mode=CV), 2),
    "bwd-groups-4": (conv_case((1, 4, 2, 3), (4, 4, 2, 2), (2, 2), (1, 1), (0, 1), (1, 0), 2,
                               direction=1), 4),
    "bwd-6-f16": (conv_case((1, 2, 3, 2), (2, 6, 3, 2), (2, 1), (1, 1), (1, 0), (0, 0), 1,
                            direction=1, dtype=np.float16), 2),
}


@pytest.mark.parametrize("name", list(CHANNEL_BLOCKS))
def test_threads_computing_several_output_channels(cuda, name):
    """A thread computes a block of output channels (4 or 2, never across a group); every
    channel of the block gets its own taps' weights, bias and activation."""
    from dml_numba.elements.convolution import channel_block

    (desc, inputs), block = CHANNEL_BLOCKS[name]
    assert channel_block(desc) == block
    op = dml.compile_operator(desc, "cuda", algorithm="direct")
    assert f"mb * {block}" in op.source and "acc1" in op.source
    y = op(*inputs)
    y = y.copy_to_host() if hasattr(y, "copy_to_host") else y
    compare(desc, y, dml.compile_operator(desc, "numpy")(*inputs))


@pytest.mark.parametrize("mode, np_mode", [("constant", "constant"), ("edge", "edge"),
                                           ("reflection", "reflect"), ("symmetric", "symmetric"),
                                           ("wrap", "wrap")])
def test_row_wise_data_movement_against_numpy(cuda, mode, np_mode):
    """Rows of 32 or more outputs run row-wise (a warp per chunk of a row, several chunks a row
    here, pads wider than the axis): against numpy.pad, numpy.tile and NumPy slicing."""
    from dml_numba.cuda import kernel_for

    x = np.arange(2 * 3 * 7, dtype=np.float32).reshape(2, 3, 7) - 20
    kw = {"constant_values": 2.5} if np_mode == "constant" else {}
    pads = ((1, 0), (2, 3), (150, 140))  # rows of 297: two chunks of up to 256
    expected = np.pad(x, pads, mode=np_mode, **kw)
    start, end = zip(*pads)
    y = dml.padding(x, start, end, mode, 2.5, device="cuda")
    np.testing.assert_array_equal(y, expected)
    assert kernel_for(dml.functional.padding_desc(x, start, end, mode, 2.5)).warps
    np.testing.assert_array_equal(dml.tile(x, (1, 2, 6), device="cuda"), np.tile(x, (1, 2, 6)))
    z = np.arange(3 * 4 * 70, dtype=np.int32).reshape(3, 4, 70)
    np.testing.assert_array_equal(dml.slice1(z, (1, 0, 0), (2, 4, 70), (-1, 3, -2),
                                             device="cuda"), z[2:0:-1, 0:4:3, 69::-2])


FUNCTIONAL = {  # every function of the functional layer, on a tiny (N, C, H, W) input
    "padding": lambda x, d: dml.padding(x, pad_width=((0, 0), (0, 0), (1, 0), (0, 2)),
                                        mode="reflect", device=d),
    "lp_pooling": lambda x, d: dml.lp_pooling(x, (2, 2), p=1, device=d),
    "convolution": lambda x, d: dml.convolution(x, np.ones((2, 2, 3, 3), np.float32),
                                                device=d),
    "tile": lambda x, d: dml.tile(x, (1, 1, 2, 1), device=d),
    "slice1": lambda x, d: dml.slice1(x, (0, 0, 0, 1), (1, 2, 3, 3), (1, 1, 2, -1), device=d),
    "max_pooling": lambda x, d: dml.max_pooling(x, (2, 2), 1, 1, 0, device=d),
    "average_pooling": lambda x, d: dml.average_pooling(x, (2, 3), 1, device=d),
    "element_wise_add": lambda x, d: dml.element_wise_add(x, x, device=d),
    "element_wise_multiply": lambda x, d: dml.element_wise_multiply(x, x, device=d),
    "batch_normalization": lambda x, d: dml.batch_normalization(
        x, [1, 2], [4, 1], [0.5, 2], [0, 1], device=d),
    "gemm": lambda x, d: dml.gemm(x, x, trans_b=True, device=d),
    "join": lambda x, d: dml.join([x, x], 2, device=d),
    "activation": lambda x, d: dml.activation(x, dml.ActivationEluOperatorDesc(0.5), device=d),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONAL))
def test_device_arrays_stay_device_arrays_through_the_functional_layer(cuda, name):
    from dml_numba.cuda._device import is_device_array

    assert set(FUNCTIONAL) == set(dml.functional.__all__)
    x = np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4)
    y = FUNCTIONAL[name](cuda.to_device(x), "cuda")
    assert is_device_array(cuda, y) and not isinstance(y, np.ndarray)
    np.testing.assert_allclose(y.copy_to_host(), FUNCTIONAL[name](x, "numpy"))
    assert isinstance(FUNCTIONAL[name](x, "cuda"), np.ndarray)  # host in, host out


def test_gpus_are_named_as_pytorch_and_cupy_name_them(cuda):
    """"cuda:N" is the N-th GPU (the calls run in its context); one past the last is refused
    with the GPUs there are, before anything is compiled."""
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    for name in (f"cuda:{i}" for i in range(len(cuda.gpus))):
        np.testing.assert_array_equal(dml.tile(x, (2, 1), device=name), np.tile(x, (2, 1)))
        desc = dml.functional.slice1_desc(x, (0, 1), (3, 3), (2, 1))
        np.testing.assert_array_equal(dml.compile_operator(desc, name)(x), x[::2, 1:])
    n = len(cuda.gpus)
    with pytest.raises(dml.DeviceUnavailableError, match=rf"device 'cuda:{n}' is not usable here: "
                       rf"{n} GPUs? \(cuda:0"):
        dml.tile(x, (2, 1), device=f"cuda:{n}")


@pytest.mark.parametrize("name", sorted(FUNCTIONAL))
def test_a_host_tensor_on_the_cuda_device_comes_back_a_tensor(cuda, name):
    torch = pytest.importorskip("torch", reason="PyTorch is optional: not installed")
    x = np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4)
    y = FUNCTIONAL[name](torch.from_numpy(x), "cuda")
    assert isinstance(y, torch.Tensor)
    np.testing.assert_allclose(y.numpy(), FUNCTIONAL[name](x, "numpy"))


# -- graphs ---------------------------------------------------------------------------------------

def _graph_catalogue():
    from tests.test_graph import IN, MID, OUT, N, R, chain_graph, conv, pad, pool, slice1, tile

    chain = chain_graph(pad((1, 2, 3, 4), (0, 0, 1, 2), (0, 0, 2, 1), R),
                        pad((1, 2, 6, 7), (0, 0, 1, 0), (0, 0, 0, 1), value=5.0),
                        slice1((1, 2, 7, 8), (0, 0, 0, 1), (1, 2, 7, 7), (1, 1, 2, -2)),
                        tile((1, 2, 4, 4), (1, 1, 1, 2)))
    z = pad((1, 2, 4, 4), (0, 0, 1, 1), (0, 0, 1, 1))
    c = conv((1, 2, 6, 6), (2, 2, 3, 3), act=dml.ActivationReluOperatorDesc())
    lp = pool((1, 2, 4, 4), (2, 2), (2, 2))
    s = slice1((1, 2, 4, 4), (0, 0, 0, 0), (1, 2, 4, 4), (1, 1, 2, 1))
    mixed = dml.GraphDesc(2, 2, (N(z), N(c), N(lp), N(s)), (IN(0, 0, 0), IN(1, 1, 1)),
                          (OUT(2, 0, 0), OUT(3, 0, 1)),
                          (MID(0, 0, 1, 0), MID(1, 0, 2, 0), MID(1, 0, 3, 0)))
    rng = np.random.default_rng(0)
    return {"chain": (chain, [rng.standard_normal((1, 2, 3, 4)).astype(np.float32)]),
            "conv-fan-out": (mixed, [rng.standard_normal((1, 2, 4, 4)).astype(np.float32),
                                     rng.standard_normal((2, 2, 3, 3)).astype(np.float32)])}


@pytest.mark.parametrize("name", ["chain", "conv-fan-out"])
def test_graphs_agree_with_node_by_node(cuda, name):
    g, inputs = _graph_catalogue()[name]
    ref = dml.compile_graph(g, "numpy")(*inputs)
    cg = dml.compile_graph(g, "cuda")
    got = cg(*inputs)
    refs, gots = (ref, got) if isinstance(ref, tuple) else ((ref,), (got,))
    for r, o in zip(refs, gots):
        assert isinstance(o, np.ndarray)
        np.testing.assert_allclose(o, r, rtol=1e-5, atol=1e-6)
    if name == "chain":
        assert len(cg.steps) == 1 and "gather_chain" in cg.source
    # device arrays in: device arrays out, intermediates on the device
    d_out = cg(*[cuda.to_device(a) for a in inputs])
    d_outs = d_out if isinstance(d_out, tuple) else (d_out,)
    for r, o in zip(refs, d_outs):
        assert not isinstance(o, np.ndarray)
        np.testing.assert_allclose(o.copy_to_host(), r, rtol=1e-5, atol=1e-6)


def test_a_join_done_in_place_on_the_device(cuda):
    """The skip-connection graph of the host suite: the join is no step, its inputs written
    into its parts of the device buffer; equal to the nodes on the "numpy" device and to
    NumPy's concatenate."""
    from tests.test_join_in_place import _joined_oracle, _skips

    graph, inputs = _skips()
    cg = dml.compile_graph(graph, "cuda")
    assert not any(isinstance(s.op, dml.JoinOperatorDesc) for s in cg.steps)
    for got in (cg(*inputs), cg(*[cuda.to_device(a) for a in inputs]).copy_to_host()):
        np.testing.assert_allclose(got, dml.compile_graph(graph, "numpy")(*inputs), rtol=1e-5,
                                   atol=1e-5)
        np.testing.assert_allclose(got, _joined_oracle(*inputs), rtol=1e-5, atol=1e-5)


def test_onnx_model_on_cuda(cuda):
    pytest.importorskip("onnx", reason="the onnx package is in the [test] extra")
    from onnx import TensorProto, helper

    from dml_numba.onnx import compile_model

    node = helper.make_node("Pad", ["x", "pads"], ["y"], mode="reflect")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6])],
                          [helper.make_tensor("pads", TensorProto.INT64, [4], [0, 1, 0, 1])])
    y = compile_model(helper.make_model(g), "cuda")(np.array([[1, 2, 3, 4]], np.float32))
    np.testing.assert_array_equal(y, [[2, 1, 2, 3, 4, 3]])


def test_random_graphs_agree_with_node_by_node(cuda):
    """A few random graphs of the host suite's strategy (every rule's trigger and blocker) on
    the CUDA device, fused, against the nodes one by one on "numpy"."""
    from hypothesis import HealthCheck, given, settings

    from tests.test_graph_rules import check_against_nodes, graphs

    @settings(max_examples=4, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(case=graphs(most=3))
    def check(case):
        g, inputs, moving = case
        check_against_nodes(dml.compile_graph(g, "cuda")(*inputs), g, inputs, moving)

    check()


DW_LAYER = ((2, 1, 3, 3), 2, "plane patches")  # filter, groups, what the source says
DENSE_LAYER = ((4, 2, 3, 3), 1, "implicit GEMM")
DIRECT_LAYER = ((2, 2, 3, 3), 1, "direct")  # two output channels: no tile pays


@pytest.mark.parametrize("mode, layer", [("REFLECTION", DW_LAYER), ("REFLECTION", DENSE_LAYER),
                                         ("EDGE", DW_LAYER), ("SYMMETRIC", DENSE_LAYER),
                                         ("WRAP", DW_LAYER), ("WRAP", DIRECT_LAYER),
                                         ("SYMMETRIC", DIRECT_LAYER)])
def test_mode_padding_folds_into_every_cuda_kernel(cuda, mode, layer):
    """On CUDA a padding operator in front of a convolution is read through its map as each
    kernel reads its input (the depthwise plane kernel's shared-memory region, the implicit
    GEMM's gather, the direct kernel's taps): one step, no padded tensor, the result of np.pad
    followed by the convolution. Each mode once, each kernel at least once."""
    from tests.test_graph import IN, MID, NP_MODE, OUT, N, conv, pad

    ws, groups, kernel = layer
    xs = (1, 2, 5, 6)
    p = pad(xs, (0, 0, 1, 2), (0, 0, 2, 1), dml.PaddingMode[mode])
    c = conv((1, 2, 8, 9), ws, groups=groups, act=dml.ActivationReluOperatorDesc(), bias=True)
    g = dml.GraphDesc(3, 1, (N(p, "pad"), N(c, "conv")), (IN(0, 0, 0), IN(1, 1, 1), IN(2, 1, 2)),
                      (OUT(1, 0, 0),), (MID(0, 0, 1, 0),))
    rng = np.random.default_rng(3)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in (xs, ws, (1, ws[0], 1, 1)))
    cg = dml.compile_graph(g, "cuda")
    assert len(cg.steps) == 1 and cg.steps[0].options == (("input_padding", mode),)
    assert f"fold {dml.ops.convolution.FOLDS[mode]}" in cg.source
    tiled = [k for _, _, k in (DW_LAYER, DENSE_LAYER)]
    assert [k for k in tiled if k in cg.source] == ([kernel] if kernel in tiled else [])
    ref = dml.convolution(np.pad(x, [(0, 0), (0, 0), (1, 2), (2, 1)], mode=NP_MODE[mode]), w, b,
                          group_count=groups, fused_activation=dml.ActivationReluOperatorDesc(),
                          device="numpy")
    np.testing.assert_allclose(cg(x, w, b), ref, rtol=1e-5, atol=1e-5)


def test_cuda_input_padding_is_refused_for_a_transposed_convolution():
    """A transposed convolution's padding crops its output: nothing to read through a map."""
    back = dml.functional.convolution_desc(np.zeros((1, 2, 8, 8), np.float32),
                                           np.zeros((2, 2, 3, 3), np.float32),
                                           start_padding=(1, 1), end_padding=(1, 1),
                                           direction=dml.ConvolutionDirection.BACKWARD)
    with pytest.raises(dml.ValidationError, match="input_padding: 'REFLECTION' is invalid; "
                                                  "expected None for this descriptor on CUDA"):
        dml.compile_operator(back, "cuda", input_padding="REFLECTION")


@pytest.mark.parametrize("mode, window, strides, kernel", [
    ("REFLECTION", (3, 3), (1, 1), "plane patches"), ("WRAP", (2, 2), (2, 2), "direct")])
def test_mode_padding_folds_into_cuda_lp_pooling(cuda, mode, window, strides, kernel):
    """Both CUDA LP pooling kernels read a folded padding through its map: the plane kernel's
    region loads (overlapping windows) and the direct kernel's window loop (disjoint ones)."""
    from tests.test_graph import IN, MID, NP_MODE, OUT, N, pad, pool

    xs = (1, 2, 5, 6)
    p = pad(xs, (0, 0, 1, 2), (0, 0, 2, 1), dml.PaddingMode[mode])
    lp = pool((1, 2, 8, 9), window, strides, p=2)
    g = dml.GraphDesc(1, 1, (N(p, "pad"), N(lp, "pool")), (IN(0, 0, 0),), (OUT(1, 0, 0),),
                      (MID(0, 0, 1, 0),))
    x = np.random.default_rng(4).standard_normal(xs).astype(np.float32)
    cg = dml.compile_graph(g, "cuda")
    assert len(cg.steps) == 1 and cg.steps[0].options == (("input_padding", mode),)
    assert f"fold {dml.ops.convolution.FOLDS[mode]}" in cg.source
    assert (kernel in cg.source) == (kernel == "plane patches")
    ref = dml.compile_operator(lp, "numpy")(np.pad(x, [(0, 0), (0, 0), (1, 2), (2, 1)],
                                                  mode=NP_MODE[mode]))
    np.testing.assert_allclose(cg(x), ref, rtol=1e-5, atol=1e-6)


def test_a_long_chain_reads_its_tables_on_the_device(cuda):
    """A chain past TABLE_CHAIN operators reads its composed maps from module tables (constant
    memory on a GPU): bit for bit the operators one by one with NumPy's functions."""
    from tests.ops.test_gather_chain import _input, chain, long_chain, run_oracles

    links = long_chain(np.float32, (2, 3), 20)
    d = chain(links, np.float32, (2, 3))
    op = dml.compile_operator(d, "cuda")
    assert "A0 = np.array(" in op.source
    x = _input(np.float32, (2, 3), 4)
    np.testing.assert_array_equal(op(x), run_oracles(links, x))


def test_graph_out_aliasing_is_refused_for_device_arrays_too(cuda):
    """On the CUDA device: a device out that is a device input, one device array for two
    outputs, a host out that is a host input: refused, nothing written; separate device
    arrays are right."""
    from tests.test_graph import rand, two_outputs_graph

    x0, y0 = rand((2, 3)), rand((1, 3), seed=1)
    run = dml.compile_graph(two_outputs_graph(), "cuda")
    dx, dy = cuda.to_device(x0), cuda.to_device(y0)
    d_out = cuda.device_array((2, 3), np.float32)
    for inputs, out, message in (
            ((dx, dy), (dx, d_out), "out\\[0\\]: an array overlapping input 0"),
            ((dx, dy), (d_out, d_out), "out\\[1\\]: an array overlapping out\\[0\\]"),
            ((x0, y0), (np.zeros((2, 3), np.float32), x0), "out\\[1\\]: an array overlapping "
                                                           "input 0")):
        with pytest.raises(dml.ValidationError, match=message):
            run(*inputs, out=out)
        np.testing.assert_array_equal(dx.copy_to_host(), x0)
        np.testing.assert_array_equal(x0, rand((2, 3)))
    o0, o1 = cuda.device_array((2, 3), np.float32), cuda.device_array((2, 3), np.float32)
    run(dx, dy, out=(o0, o1))
    np.testing.assert_array_equal(o0.copy_to_host(), np.tile(y0, (2, 1)))
    np.testing.assert_array_equal(o1.copy_to_host(), x0)


def test_graph_device_arrays_of_other_shapes_or_dtypes_are_refused_at_its_entry(cuda):
    """A compiled graph's steps launch their kernels unchecked (``run_checked``): every device
    array it is given, input or out, is checked at its entry against the graph's tensors --
    shape and dtype -- and a wrong one is a ValidationError naming it, with nothing written."""
    from tests.test_graph import rand, two_outputs_graph

    x0, y0 = rand((2, 3)), rand((1, 3), seed=1)
    run = dml.compile_graph(two_outputs_graph(), "cuda")
    dx, dy = cuda.to_device(x0), cuda.to_device(y0)

    def out(shape=(2, 3), dtype=np.float32):
        return cuda.to_device(np.full(shape, 7, dtype))

    for inputs, outs, message in (
            ((cuda.to_device(x0[:1]), dy), (out(), out()), "input 0: .* \\(1, 3\\) is invalid"),
            ((dx, cuda.to_device(y0.astype(np.float64))), (out(), out()),
             "input 1: .*float64 .* is invalid; expected float32"),
            ((dx, dy), (out(), out((3, 2))), "out\\[1\\]: .* \\(3, 2\\) is invalid"),
            ((dx, dy), (out(dtype=np.float64), out()), "out\\[0\\]: .*float64 .* is invalid")):
        with pytest.raises(dml.ValidationError, match=message):
            run(*inputs, out=outs)
        for o in outs:
            assert (o.copy_to_host() == 7).all()


def test_a_graph_on_a_numbered_gpu_runs_its_steps_in_that_gpus_context(cuda):
    """"cuda:0": the steps launch through that GPU's device (its context entered for each),
    unchecked as on "cuda", and give the same outputs."""
    from tests.test_graph import rand, two_outputs_graph

    x0, y0 = rand((2, 3)), rand((1, 3), seed=1)
    y, x = dml.compile_graph(two_outputs_graph(), "cuda:0")(cuda.to_device(x0), cuda.to_device(y0))
    np.testing.assert_array_equal(y.copy_to_host(), np.tile(y0, (2, 1)))
    np.testing.assert_array_equal(x.copy_to_host(), x0)


def test_max_pooling_indices_on_device_arrays(cuda):
    """Two outputs on the GPU: device arrays in, both outputs device arrays; ``out=`` device
    arrays written in place; two outputs over one allocation refused before the launch; a
    graph reading a node's output 1 (the indices as a graph output and through a Tile)."""
    from tests.ops.test_max_pooling import test_indices_in_a_graph_as_output_and_intermediate

    x = np.random.default_rng(3).integers(0, 3, (1, 2, 5, 6)).astype(np.float32)
    y_ref, i_ref = dml.max_pooling(x, (2, 2), 2, 1, 0, return_indices=True, device="numpy")
    y, yi = dml.max_pooling(cuda.to_device(x), (2, 2), 2, 1, 0, return_indices=True,
                            device="cuda")
    assert not isinstance(yi, np.ndarray)
    np.testing.assert_array_equal(y.copy_to_host(), y_ref)
    np.testing.assert_array_equal(yi.copy_to_host(), i_ref)
    d_y, d_i = cuda.device_array(y_ref.shape, np.float32), cuda.device_array(i_ref.shape,
                                                                              np.uint64)
    got = dml.max_pooling(x, (2, 2), 2, 1, 0, return_indices=True, device="cuda",
                          out=(d_y, d_i))
    assert got[0] is d_y and got[1] is d_i
    np.testing.assert_array_equal(d_i.copy_to_host(), i_ref)
    both = cuda.to_device(np.zeros(2 * y_ref.size, np.float32))
    with pytest.raises(dml.ValidationError, match=r"out\[1\]: an array overlapping out\[0\]"):
        dml.max_pooling(x, (2, 2), 2, 1, 0, return_indices=True, device="cuda",
                        out=(both[:y_ref.size].reshape(y_ref.shape),
                             both.view(np.uint64).reshape(i_ref.shape)))
    assert not both.copy_to_host().any()
    host = np.zeros(2 * y_ref.size, np.float32)  # host outputs over one buffer, likewise
    with pytest.raises(dml.ValidationError, match=r"out\[1\]: an array overlapping out\[0\]"):
        dml.max_pooling(x, (2, 2), 2, 1, 0, return_indices=True, device="cuda",
                        out=(host[:y_ref.size].reshape(y_ref.shape),
                             host.view(np.uint64).reshape(i_ref.shape)))
    assert not host.any()
    test_indices_in_a_graph_as_output_and_intermediate("cuda")
