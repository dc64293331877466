"""ONNX models through graphs: ONNX's own backend node tests for the operators we map, random
chains built with onnx.helper against ONNX Runtime at several opsets, and errors that name the
first unsupported node and attribute."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dml_numba as dml

onnx = pytest.importorskip("onnx", reason="the onnx package is in the [test] extra")
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from dml_numba.onnx import compile_model  # noqa: E402

#: ONNX's own backend test cases for the operators we map (their modules of onnx's node cases)
MODULES = ("pad", "lppool", "conv", "convtranspose", "tile", "slice", "maxpool", "averagepool",
           "globalaveragepool", "globalmaxpool", "add", "mul", "batch_normalization", "gemm",
           "matmul", "concat", "flatten", "reshape", "squeeze", "unsqueeze", "relu", "clip",
           "leakyrelu", "sigmoid")
#: the operator of each module's cases
OPS = {"pad": "Pad", "lppool": "LpPool", "conv": "Conv", "convtranspose": "ConvTranspose",
       "tile": "Tile", "slice": "Slice", "maxpool": "MaxPool", "averagepool": "AveragePool",
       "globalaveragepool": "GlobalAveragePool", "globalmaxpool": "GlobalMaxPool", "add": "Add",
       "mul": "Mul", "batch_normalization": "BatchNormalization", "gemm": "Gemm",
       "matmul": "MatMul", "concat": "Concat", "flatten": "Flatten", "reshape": "Reshape",
       "squeeze": "Squeeze", "unsqueeze": "Unsqueeze", "relu": "Relu", "clip": "Clip",
       "leakyrelu": "LeakyRelu", "sigmoid": "Sigmoid"}
#: backend cases DirectML's operators cannot express, and why
REFUSED = {
    "test_slice_start_out_of_bounds": "non-empty slice",
    # column-major indices: DirectML numbers the maxima row-major only
    "test_maxpool_with_argmax_2d_precomputed_strides": "storage_order: 1 is invalid",
    "test_batchnorm_example_training_mode": "training_mode: 1 is invalid; expected 0",
    "test_batchnorm_epsilon_training_mode": "training_mode: 1 is invalid; expected 0",
    "test_matmul_bcast": "expected the batch sizes",  # batch broadcast of a computed tensor
    "test_matmul_1d_3d": "expected 1 dimensions",  # GEMM is matrices: no vector operands
    "test_matmul_4d_1d": "expected 4 dimensions",
    "test_matmul_1d_1d": "expected 2 to 4 dimensions",
    "test_reshape_allowzero_reordered": "each >= 1",  # DirectML has no empty dimensions
    "test_clip_min_greater_than_max": "expected min <= max",
    "test_clip_default_int8_min": "expected a floating-point tensor",
    "test_clip_default_int8_max": "expected a floating-point tensor",
    "test_clip_default_int8_inbounds": "expected a floating-point tensor",
}
#: cases whose expected output ONNX rounded to 4 decimals (ONNX Runtime agrees with us to the
#: last bit: test_new_operators_agree_with_onnx_runtime)
ROUNDED = {"test_averagepool_2d_ceil_last_window_starts_on_pad"}


def _backend_cases():
    """The cases of those modules only (importing one records its cases; collecting every
    operator's would take seconds)."""
    import importlib
    import warnings

    from onnx.backend.test.case import node

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for m in MODULES:
            importlib.import_module(f"onnx.backend.test.case.node.{m}")
    ops = {OPS[m] for m in MODULES}
    return {c.name: c for c in node._NodeTestCases if c.model.graph.node[0].op_type in ops}


CASES = _backend_cases()


#: the backend cases also run on "cpu" (one or two a family: the loader is the same for every
#: device, and the kernels have their own tests; every case runs on "numpy")
ON_CPU = {"test_reflect_pad", "test_constant_pad_axes", "test_lppool_2d_dilations",
          "test_conv_with_strides_and_asymmetric_padding", "test_convtranspose_group_2",
          "test_tile", "test_slice_neg_steps", "test_maxpool_2d_ceil", "test_maxpool_2d_uint8",
          "test_averagepool_2d_pads_count_include_pad", "test_globalaveragepool",
          "test_add_bcast", "test_mul", "test_batchnorm_epsilon", "test_gemm_all_attributes",
          "test_matmul_3d", "test_concat_3d_axis_negative_1", "test_flatten_axis2",
          "test_relu", "test_clip_default_max", "test_unsqueeze_negative_axes",
          "test_maxpool_with_argmax_2d_precomputed_pads"}


@pytest.mark.parametrize("name, device", [(n, "numpy") for n in sorted(CASES)] +
                         [(n, "cpu") for n in sorted(ON_CPU)])
def test_onnx_backend_node_cases(name, device):
    case = CASES[name]
    model = case.model
    names = [i.name for i in model.graph.input]
    for inputs, outputs in case.data_sets:
        feed = dict(zip(names, inputs))
        # DirectML takes pads, repeats, starts and weights as parameters: fixed at load time
        consts = {k: v for k, v in feed.items() if k != names[0]}
        if name in REFUSED:
            with pytest.raises(dml.ValidationError, match=REFUSED[name]):
                compile_model(model, device, constants=consts)
            return
        m = compile_model(model, device, constants=consts)
        ys = m(*[feed[n] for n in m.input_names])
        ys = ys if isinstance(ys, tuple) else (ys,)
        assert len(ys) == len(outputs)
        tol = dict(rtol=0, atol=1e-4) if name in ROUNDED else dict(rtol=1e-4, atol=1e-5)
        for y, ref in zip(ys, outputs):
            assert y.dtype == ref.dtype  # (MaxPool's Indices: int64, as ONNX has them)
            if ref.dtype.kind == "f":
                np.testing.assert_allclose(y, ref, **tol)
            else:
                np.testing.assert_array_equal(y, ref)


def test_backend_catalogue_is_not_empty():
    assert len(CASES) >= 170 and ON_CPU <= set(CASES) and set(REFUSED) <= set(CASES), \
        sorted(set(ON_CPU) - set(CASES))


# -- random chains against ONNX Runtime ---------------------------------------------------------

def _ort():
    return pytest.importorskip("onnxruntime", reason="ONNX Runtime is in the [test] extra")


def _chain_model(draw, opset):
    """A random chain Pad -> Conv (+activation) -> LpPool -> Slice -> Tile, each present or not."""
    rng = np.random.default_rng(draw(st.integers(0, 1000)))
    c = draw(st.integers(1, 3))
    shape = [1, c, draw(st.integers(5, 9)), draw(st.integers(5, 9))]
    nodes, inits, cur, k = [], [], "x", 0

    def name():
        nonlocal k
        k += 1
        return f"t{k}"

    if draw(st.booleans()):
        mode = draw(st.sampled_from(["constant", "reflect", "edge"] +
                                    (["wrap"] if opset >= 19 else [])))
        pads = [0, 0, draw(st.integers(0, 2)), draw(st.integers(0, 2)), 0, 0,
                draw(st.integers(0, 2)), draw(st.integers(0, 2))]
        out = name()
        inits.append(numpy_helper.from_array(np.array(pads, np.int64), "pads"))
        nodes.append(helper.make_node("Pad", [cur, "pads"], [out], mode=mode))
        shape = [n + pads[i] + pads[i + 4] for i, n in enumerate(shape)]
        cur = out
    if draw(st.booleans()):
        cout = draw(st.sampled_from([c, 2 * c]))
        group = draw(st.sampled_from([1, c]))
        kh = draw(st.integers(1, 3))
        w = rng.standard_normal((cout, c // group, kh, kh)).astype(np.float32)
        inits += [numpy_helper.from_array(w, "W"),
                  numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32), "B")]
        out = name()
        p = draw(st.integers(0, 1))
        nodes.append(helper.make_node("Conv", [cur, "W", "B"], [out], group=group,
                                      pads=[p, p, p, p], kernel_shape=[kh, kh]))
        shape = [1, cout, shape[2] + 2 * p - kh + 1, shape[3] + 2 * p - kh + 1]
        cur = out
        act = draw(st.sampled_from([None, "Relu", "LeakyRelu", "Sigmoid", "Tanh"]))
        if act:
            out = name()
            nodes.append(helper.make_node(act, [cur], [out]))
            cur = out
    if draw(st.booleans()) and min(shape[2:]) >= 2:
        out = name()
        nodes.append(helper.make_node("LpPool", [cur], [out], kernel_shape=[2, 2],
                                      strides=[2, 2], p=draw(st.sampled_from([1, 2, 3]))))
        shape = shape[:2] + [(n - 2) // 2 + 1 for n in shape[2:]]
        cur = out
    if draw(st.booleans()):
        step = draw(st.sampled_from([1, 2, -1]))
        out = name()
        inits += [numpy_helper.from_array(np.array(v, np.int64), n) for v, n in
                  (([0 if step > 0 else -1], "st"), ([100 if step > 0 else -100], "en"),
                   ([3], "ax"), ([step], "sp"))]
        nodes.append(helper.make_node("Slice", [cur, "st", "en", "ax", "sp"], [out]))
        shape[3] = len(range(shape[3])[::step])
        cur = out
    reps = [1, 1, draw(st.integers(1, 2)), draw(st.integers(1, 2))]
    inits.append(numpy_helper.from_array(np.array(reps, np.int64), "reps"))
    nodes.append(helper.make_node("Tile", [cur, "reps"], ["y"]))
    shape = [n * r for n, r in zip(shape, reps)]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TP.FLOAT,
                                                                         [1, c, None, None])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, shape)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), opset=st.sampled_from([13, 18, 19]))
def test_random_chains_match_onnx_runtime(data, opset):
    ort = _ort()
    model = _chain_model(data.draw, opset)
    onnx.checker.check_model(model)
    # the input's height and width are symbolic: fixed with input_shapes
    rng = np.random.default_rng(1)
    h = data.draw(st.integers(5, 9))
    w = data.draw(st.integers(5, 9))
    c = model.graph.input[0].type.tensor_type.shape.dim[1].dim_value
    x_shape = (1, c, h, w)
    x = rng.standard_normal(x_shape).astype(np.float32)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = sess.run(None, {"x": x})[0]
    model.graph.output[0].type.tensor_type.ClearField("shape")
    for device in ("numpy", "cpu"):
        y = compile_model(model, device, input_shapes={"x": x_shape})({"x": x})
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)


# -- loading and errors -------------------------------------------------------------------------

def _pad_model(mode="reflect", node_name="p"):
    node = helper.make_node("Pad", ["x", "pads"], ["y"], mode=mode, name=node_name)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TP.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, [1, 6])],
                          [helper.make_tensor("pads", TP.INT64, [4], [0, 1, 0, 1])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_a_model_from_its_bytes():
    model = _pad_model()
    m = compile_model(model.SerializeToString(), "numpy")
    np.testing.assert_array_equal(m(np.array([[1, 2, 3, 4]], np.float32)),
                                  compile_model(model, "numpy")(np.array([[1, 2, 3, 4]],
                                                                         np.float32)))


def test_a_model_from_a_path_with_inputs_by_name(tmp_path):
    path = tmp_path / "pad.onnx"
    onnx.save(_pad_model(), str(path))
    m = compile_model(str(path), "cpu")
    x = np.array([[1, 2, 3, 4]], np.float32)
    np.testing.assert_array_equal(m({"x": x}), [[2, 1, 2, 3, 4, 3]])
    np.testing.assert_array_equal(m(x), m({"x": x}))
    with pytest.raises(dml.ValidationError, match="expected \\['x'\\]"):
        m({"z": x})


def test_conv_and_its_activation_become_one_fused_node():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((2, 1, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["c", "lo", "hi"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT,
                                                                     [1, 1, 4, 4])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, [1, 2, 4, 4])],
                          [numpy_helper.from_array(w, "W"),
                           numpy_helper.from_array(np.array(-0.5, np.float32), "lo"),
                           numpy_helper.from_array(np.array(0.5, np.float32), "hi")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m = compile_model(model, "cpu")
    assert len(m.graph.nodes) == 1
    assert isinstance(m.graph.nodes[0].operator.fused_activation,
                      dml.ElementWiseClipOperatorDesc)
    x = rng.standard_normal((1, 1, 4, 4)).astype(np.float32)
    ref = dml.convolution(x, w, start_padding=(1, 1), end_padding=(1, 1), device="numpy")
    np.testing.assert_allclose(m(x), np.clip(ref, -0.5, 0.5), rtol=1e-5, atol=1e-6)
    # the model's own weights are checked once, when it is made; the caller's inputs at every
    # call, NumPy or not, by position or by name
    torch = pytest.importorskip("torch")
    for bad, what in ((x.astype(np.float64), "float64"), (x[..., :3], r"\(1, 1, 4, 3\)"),
                      (torch.from_numpy(x[..., :3].copy()), r"\(1, 1, 4, 3\)")):
        with pytest.raises(dml.ValidationError, match=f"input 0: .*{what}.* is invalid"):
            m(bad)
        with pytest.raises(dml.ValidationError, match=f"input 0: .*{what}.* is invalid"):
            m({"x": bad})


def _two_convs(seed):
    """Conv(x, W1) -> Conv(., W2) -> Tile: the second convolution reads the model's weights
    and a buffer only (its binding is kept between calls)."""
    rng = np.random.default_rng(seed)
    w1, w2 = (rng.standard_normal((2, 2, 3, 3)).astype(np.float32) for _ in range(2))
    nodes = [helper.make_node("Conv", ["x", "W1"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["c", "W2"], ["d"], pads=[1, 1, 1, 1]),
             helper.make_node("Tile", ["d", "reps"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT,
                                                                     [1, 2, 5, 5])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, [1, 2, 5, 10])],
                          [numpy_helper.from_array(w1, "W1"), numpy_helper.from_array(w2, "W2"),
                           numpy_helper.from_array(np.array([1, 1, 1, 2], np.int64), "reps")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])

    def want(x):
        c = dml.convolution(x, w1, start_padding=(1, 1), end_padding=(1, 1), device="numpy")
        d = dml.convolution(c, w2, start_padding=(1, 1), end_padding=(1, 1), device="numpy")
        return np.tile(d, (1, 1, 1, 2))
    return model, want


def test_models_sharing_a_compiled_graph_keep_their_own_bindings_and_free_their_weights():
    # two models of one architecture share the cached compiled graph; each keeps the steps
    # bound to its own weights (alternating calls stay right), and a deleted model's weights
    # are freed though the graph lives on in the cache
    import gc
    import weakref

    (a, want_a), (b, want_b) = _two_convs(0), _two_convs(1)
    ma, mb = compile_model(a, "cpu"), compile_model(b, "cpu")
    assert ma.compiled is mb.compiled
    x = np.random.default_rng(2).standard_normal((1, 2, 5, 5)).astype(np.float32)
    for m, want in ((ma, want_a), (mb, want_b), (ma, want_a), (mb, want_b)):
        np.testing.assert_allclose(m(x), want(x), rtol=1e-5, atol=1e-5)
    graph = ma.compiled
    weights = [weakref.ref(c) for c in mb._consts]
    del m, mb
    gc.collect()
    assert [w() for w in weights] == [None] * len(weights)
    np.testing.assert_allclose(ma(x), want_a(x), rtol=1e-5, atol=1e-5)
    assert graph is ma.compiled


def _conv_then_relu(extra_nodes, outputs, relu_input="c"):
    """Conv 'c', ``extra_nodes``, then Relu 'r' of ``relu_input`` into 'y'; ``outputs``: (name,
    shape) of the model's outputs."""
    w = np.random.default_rng(1).standard_normal((2, 1, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]), *extra_nodes,
             helper.make_node("Relu", [relu_input], ["y"], name="r")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT,
                                                                     [1, 1, 4, 4])],
                          [helper.make_tensor_value_info(n, TP.FLOAT, s) for n, s in outputs],
                          [numpy_helper.from_array(w, "W")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), w


_I = helper.make_node
_Y, _C = ("y", [1, 2, 4, 4]), ("c", [1, 2, 4, 4])


@pytest.mark.parametrize("extra, outputs, relu_input", [
    ([], [_Y, _C], "c"),  # the convolution is a model output too
    ([_I("Tile", ["c", "reps"], ["t"])], [_Y, ("t", [1, 2, 4, 8])], "c"),  # a second reader
    ([_I("Identity", ["c"], ["i"])], [_Y, _C], "i"),  # read through an alias, itself an output
    ([_I("Identity", ["c"], ["i"])], [_Y, ("i", [1, 2, 4, 4])], "c"),  # its alias an output
    ([_I("Identity", ["c"], ["i"]), _I("Identity", ["i"], ["j"]),
      _I("Tile", ["i", "reps"], ["t"])], [_Y, ("t", [1, 2, 4, 8])], "j"),  # aliases both read
], ids=["output", "second-reader", "via-alias-output", "alias-output", "aliases-read"])
def test_an_activation_whose_convolution_output_is_seen_elsewhere_is_not_fused(extra, outputs,
                                                                               relu_input):
    """Fusing would hand every other reader the activated values: the activation runs as an
    operator of its own (DirectML's activation operator), however the convolution's
    output is seen (a model output, a second node, under an Identity's name); every output is
    ONNX Runtime's."""
    ort = _ort()
    model, _ = _conv_then_relu(extra, outputs, relu_input)
    model.graph.initializer.append(numpy_helper.from_array(np.array([1, 1, 1, 2], np.int64),
                                                           "reps"))
    m = compile_model(model, "numpy")
    convs = [n.operator for n in m.graph.nodes if hasattr(n.operator, "filter_tensor")]
    assert len(convs) == 1 and convs[0].fused_activation is None
    assert [type(n.operator) for n in m.graph.nodes].count(dml.ActivationReluOperatorDesc) == 1
    x = np.random.default_rng(2).standard_normal((1, 1, 4, 4)).astype(np.float32)
    refs = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for y, ref in zip(m(x), refs):
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)


def test_an_activation_after_an_alias_of_a_convolution_read_by_it_alone_fuses():
    model, w = _conv_then_relu([_I("Identity", ["c"], ["i"])], [_Y], "i")
    m = compile_model(model, "cpu")
    assert len(m.graph.nodes) == 1
    x = np.random.default_rng(2).standard_normal((1, 1, 4, 4)).astype(np.float32)
    ref = dml.convolution(x, w, start_padding=(1, 1), end_padding=(1, 1), device="numpy")
    np.testing.assert_allclose(m(x), np.maximum(ref, 0), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("change, message", [
    (lambda m: m.graph.node[0].__setattr__("op_type", "Resize"),
     "has operators dml_numba cannot run: Resize at 'p' (node 0); expected only "),
    (lambda m: m.graph.node[0].attribute[0].__setattr__("s", b"mirror"),
     "Pad 'p' (node 0).mode: 'mirror' is invalid; expected one of constant, reflect, edge, wrap"),
    (lambda m: m.graph.input[0].type.tensor_type.shape.dim[1].__setattr__("dim_param", "W"),
     "input 'x' has the symbolic dimension 'W'; expected static shapes"),
    (lambda m: m.graph.output[0].type.tensor_type.shape.dim[1].__setattr__("dim_value", 7),
     "output 'y' is declared (1, 7); its nodes compute (1, 6)"),
])
def test_errors_name_the_node_and_attribute(change, message):
    model = _pad_model()
    change(model)
    with pytest.raises(dml.ValidationError) as e:
        compile_model(model, "cpu")
    assert message in str(e.value), str(e.value)


@pytest.mark.parametrize("op, formula", [
    ("Relu", lambda v: np.maximum(v, 0)), ("Sigmoid", lambda v: 1 / (1 + np.exp(-v))),
    ("LeakyRelu", lambda v: np.where(v > 0, v, 0.01 * v))])
def test_an_activation_with_nothing_to_fuse_into_is_exact(op, formula):
    """A standalone activation is DirectML's activation operator over the tensor (no constant
    operand): it sees the tensor exactly, a -0.0 stays -0.0."""
    node = helper.make_node(op, ["x"], ["y"], name="r")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TP.FLOAT, [5])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, [5])])
    x = np.array([-0.0, 0.0, -2.5, 3.0, 1e-30], np.float32)
    for device in ("numpy", "cpu"):
        m = compile_model(helper.make_model(g), device)
        (only,) = [n.operator for n in m.graph.nodes]
        assert isinstance(only, dml.ops.activation.ActivationDesc) and not only.fused
        y = m(x)
        np.testing.assert_allclose(y, formula(x), rtol=1e-6)
        if op == "LeakyRelu":
            assert np.signbit(y[0]) and not np.signbit(y[1])  # -0.0 * 0.01 is -0.0


@pytest.mark.parametrize("elem, dtype", [(TP.INT32, np.int32), (TP.INT16, np.int16),
                                         (TP.INT8, np.int8)])
def test_an_integer_relu_runs_as_directml_s(elem, dtype):
    """DirectML's RELU takes INT32, INT16 and INT8 (FL5.1): ONNX's Relu of those runs, equal to
    ONNX's reference evaluator at the type's extremes."""
    node = helper.make_node("Relu", ["x"], ["y"], name="r")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", elem, [5])],
                          [helper.make_tensor_value_info("y", elem, [5])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    info = np.iinfo(dtype)
    x = np.array([info.min, -1, 0, 1, info.max], dtype)
    from onnx.reference import ReferenceEvaluator

    ref = ReferenceEvaluator(model).run(None, {"x": x})[0]
    for device in ("numpy", "cpu"):
        y = compile_model(model, device)(x)
        assert y.dtype == dtype
        np.testing.assert_array_equal(y, ref)


@pytest.mark.parametrize("op, elem, name", [("Relu", TP.INT64, "int64"),
                                            ("LeakyRelu", TP.INT32, "int32"),
                                            ("Relu", TP.UINT8, "uint8")])
def test_an_activation_of_a_type_directml_s_has_not_is_refused(op, elem, name):
    node = helper.make_node(op, ["x"], ["y"], name="r")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", elem, [2])],
                          [helper.make_tensor_value_info("y", elem, [2])])
    with pytest.raises(dml.ValidationError, match=f"{op} 'r' \\(node 0\\).input\\[0\\]: 'x' is "
                                                  f"invalid; expected a tensor of float32, "
                                                  f".* \\(DirectML's {op} takes no {name}\\)"):
        compile_model(helper.make_model(g), "cpu")


def test_a_parameter_that_is_not_constant_is_named():
    node = helper.make_node("Tile", ["x", "r"], ["y"], name="t")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TP.FLOAT, [2]),
                                        helper.make_tensor_value_info("r", TP.INT64, [1])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, [4])])
    model = helper.make_model(g)
    with pytest.raises(dml.ValidationError, match="Tile 't' \\(node 0\\).repeats: 'r' is "
                                                  "invalid; expected a constant"):
        compile_model(model, "cpu")
    m = compile_model(model, "cpu", constants={"r": np.array([2])})
    np.testing.assert_array_equal(m(np.array([1, 2], np.float32)), [1, 2, 1, 2])
    with pytest.raises(dml.ValidationError, match="constants: 'q' is invalid"):
        compile_model(model, "cpu", constants={"q": np.array([2])})


def _axes_model(op, axes, shape=(3, 2, 3, 4)):
    """A Pad (pads 1, 2 on each named axis) or Slice (starts 0, ends 2 on each) of a rank-4
    input, with ``axes`` as its constant input, at opset 18."""
    n = len(axes)
    if op == "Pad":
        consts = [helper.make_tensor("pads", TP.INT64, [2 * n], [1] * n + [2] * n)]
        node = helper.make_node("Pad", ["x", "pads", "", "axes"], ["y"], name="n")
    else:
        consts = [helper.make_tensor("starts", TP.INT64, [n], [0] * n),
                  helper.make_tensor("ends", TP.INT64, [n], [2] * n)]
        node = helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["y"], name="n")
    consts.append(helper.make_tensor("axes", TP.INT64, [n], list(axes)))
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TP.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None)], consts)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("op", ["Pad", "Slice"])
@pytest.mark.parametrize("axes, message", [
    ([4], "expected axes in \\[-4, 3\\]"),
    ([-5], "expected axes in \\[-4, 3\\]"),
    ([6], "expected axes in \\[-4, 3\\]"),
    ([3, 3], "expected each axis once \\(axis 3 is named twice\\)"),
    ([1, -3], "expected each axis once \\(axis 1 is named twice\\)"),
])
def test_onnx_axes_out_of_range_or_repeated_are_refused(op, axes, message):
    """As the spec and ONNX Runtime: an axis outside [-r, r-1] or named twice is an error
    naming the node (it used to wrap around, or the last of two won)."""
    with pytest.raises(dml.ValidationError,
                       match=f"compile_model: {op} 'n' \\(node 0\\).axes: .* is invalid; "
                             + message):
        compile_model(_axes_model(op, axes), "numpy")


@pytest.mark.parametrize("op", ["Pad", "Slice"])
@pytest.mark.parametrize("axes", [[-1], [0, -1], [-4, 2]])
def test_onnx_negative_axes_in_range_agree_with_onnx_runtime(op, axes):
    ort = _ort()
    model = _axes_model(op, axes)
    x = np.random.default_rng(5).standard_normal((3, 2, 3, 4)).astype(np.float32)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(compile_model(model, "numpy")(x), sess.run(None, {"x": x})[0])


def _maxpool_with_indices(read_indices=False):
    """MaxPool (ceil mode, padding) whose Indices output is a model output (or, with
    ``read_indices``, read by a Tile), its values through a Relu."""
    nodes = [helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[3, 2], strides=[2, 1],
                              pads=[1, 0, 1, 1], ceil_mode=1),
             helper.make_node("Relu", ["y"], ["z"])]
    outputs = [helper.make_tensor_value_info("z", TP.FLOAT, None),
               helper.make_tensor_value_info("i", TP.INT64, None)]
    if read_indices:
        nodes += [helper.make_node("Constant", [], ["r"], value=numpy_helper.from_array(
                      np.array([1, 2, 1, 1], np.int64))),
                  helper.make_node("Tile", ["i", "r"], ["t"])]
        outputs = [helper.make_tensor_value_info("z", TP.FLOAT, None),
                   helper.make_tensor_value_info("t", TP.INT64, None)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT,
                                                                      [2, 3, 8, 7])], outputs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("device", ["numpy", "cpu"])
def test_maxpool_indices_are_int64_model_outputs(device):
    """Ties in most windows: values and indices as ONNX Runtime's, the indices as int64 (into
    out= int64 arrays too); an out= of another dtype, a node reading the indices and
    column-major indices are refused, naming what is wrong."""
    ort = _ort()
    m = _maxpool_with_indices()
    x = np.random.default_rng(0).integers(-2, 3, (2, 3, 8, 7)).astype(np.float32)
    ref = ort.InferenceSession(m.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, {"x": x})
    cm = compile_model(m, device)
    z, i = cm(x)
    assert i.dtype == np.int64
    np.testing.assert_array_equal(z, ref[0])
    np.testing.assert_array_equal(i, ref[1])
    oz, oi = np.empty_like(ref[0]), np.full_like(ref[1], -7)
    assert cm(x, out=(oz, oi))[1] is oi
    np.testing.assert_array_equal(oi, ref[1])
    with pytest.raises(dml.ValidationError, match=r"out\[1\]: dtype int32 is invalid; expected "
                                                  "int64"):
        cm(x, out=(oz, np.empty(ref[1].shape, np.int32)))
    with pytest.raises(dml.ValidationError, match="expected a tensor other than a MaxPool's "
                                                  "Indices output"):
        compile_model(_maxpool_with_indices(read_indices=True), device)
    m.graph.node[0].attribute.append(helper.make_attribute("storage_order", 1))
    with pytest.raises(dml.ValidationError, match="storage_order: 1 is invalid; expected 0"):
        compile_model(m, device)
