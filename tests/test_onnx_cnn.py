"""Real CNNs from PyTorch through the ONNX loader: a ResNet-18, a MobileNetV2 and a U-Net
(tests/cnn_models.py) exported by ``torch.onnx.export``, against ONNX Runtime; what the loader
recognises in PyTorch's exports (constant subgraphs, LPPool2d, batch norms to fold); every
unsupported operator named at once."""
import numpy as np
import pytest

import dml_numba as dml

onnx = pytest.importorskip("onnx", reason="the onnx package is in the [test] extra")
ort = pytest.importorskip("onnxruntime", reason="ONNX Runtime is in the [test] extra")
torch = pytest.importorskip("torch", reason="PyTorch is optional: exports need it")
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from dml_numba.onnx import compile_model  # noqa: E402
from tests import cnn_models as C  # noqa: E402

RTOL = 1e-4  # float32 against ONNX Runtime, relative to the output's largest magnitude


def _run_ort(model_bytes, x):
    s = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    return s.run(None, {s.get_inputs()[0].name: x})[0]


def _close(y, ref):
    assert y.shape == ref.shape and y.dtype == ref.dtype
    err = np.abs(y.astype(np.float64) - ref).max() / np.abs(ref).max()
    assert err <= RTOL, err


@pytest.fixture(scope="module")
def exports():
    """Each network exported once per module: (name, PyTorch folds batch norms) -> bytes."""
    cache = {}

    def get(name, fold=True, size=32):
        key = (name, fold, size)
        if key not in cache:
            make = {"tiny_resnet": C.tiny_resnet, **C.MODELS}[name]
            cache[key] = C.export(make(), (1, 3, size, size), fold=fold)
        return cache[key]

    return get


@pytest.mark.parametrize("fold", [True, False], ids=["pytorch-folded", "batch-norm-nodes"])
@pytest.mark.parametrize("name", sorted(C.MODELS))
def test_networks_match_onnx_runtime_on_numpy(exports, name, fold):
    """Each network, as PyTorch exports it (with its batch norms folded by PyTorch, or kept as
    nodes that the loader folds into the convolutions before them)."""
    b = exports(name, fold)
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    m = compile_model(onnx.load_from_string(b), "numpy")
    _close(m(x), _run_ort(b, x))
    kinds = {type(n.operator).__name__ for n in m.graph.nodes}
    assert "BatchNormalizationOperatorDesc" not in kinds  # folded, whoever folded them


@pytest.mark.parametrize("name", ["tiny_resnet", pytest.param("unet", marks=pytest.mark.slow)])
def test_small_networks_on_cpu_run_fused(exports, name):
    """On the CPU, compiled and fused: every batch norm folded, every ReLU fused into the
    convolution or the residual addition before it; a batch of 2."""
    net = C.tiny_resnet() if name == "tiny_resnet" else C.unet(base=4, depth=1)
    b = C.export(net, (1, 3, 16, 16), fold=False, batch="n")
    model = onnx.load_from_string(b)
    m = compile_model(model, "cpu", input_shapes={"x": (2, 3, 16, 16)})
    x = np.random.default_rng(1).standard_normal((2, 3, 16, 16)).astype(np.float32)
    _close(m(x), _run_ort(b, x))
    relus = sum(n.op_type == "Relu" for n in model.graph.node)
    fused = sum(getattr(n.operator, "fused_activation", None) is not None for n in m.graph.nodes)
    kinds = {type(n.operator).__name__ for n in m.graph.nodes}
    assert fused == relus and "BatchNormalizationOperatorDesc" not in kinds


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(C.MODELS))
def test_full_networks_on_cpu(exports, name):
    b = exports(name, True, 64)
    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)
    _close(compile_model(onnx.load_from_string(b), "cpu")(x), _run_ort(b, x))


# -- what the loader recognises in PyTorch's exports --------------------------------------------

class _PadConvLp(torch.nn.Module):
    """The model a new user tried first: ReflectionPad2d -> Conv2d -> ReLU -> LPPool2d."""

    def __init__(self, p):
        super().__init__()
        self.pad = torch.nn.ReflectionPad2d((1, 2, 1, 0))
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.pool = torch.nn.LPPool2d(p, 2, 2)

    def forward(self, x):
        return self.pool(torch.relu(self.conv(self.pad(x))))


@pytest.mark.parametrize("device", ["numpy", "cpu"])
def test_pytorch_padding_subgraph_and_lppool_export_load(device):
    """PyTorch writes the padding amounts as a constant subgraph (ConstantOfShape, Concat,
    Reshape, Slice, Transpose, Cast: evaluated at load) and LPPool2d as seven nodes (one LP
    pooling)."""
    b = C.export(_PadConvLp(2).eval(), (1, 3, 12, 12))
    ops = [n.op_type for n in onnx.load_from_string(b).graph.node]
    assert {"ConstantOfShape", "Pow", "Sign", "AveragePool"} <= set(ops)
    m = compile_model(onnx.load_from_string(b), device)
    kinds = [type(n.operator).__name__ for n in m.graph.nodes]
    assert kinds == ["Padding1OperatorDesc", "ConvolutionOperatorDesc",
                     "LpPooling1OperatorDesc"], kinds
    x = np.random.default_rng(3).standard_normal((1, 3, 12, 12)).astype(np.float32)
    _close(m(x), _run_ort(b, x))


def test_pytorch_lppool_of_an_odd_power_is_refused():
    """PyTorch sums x**p: for an odd p it is not DirectML's LP pooling (which sums |x|**p)."""
    b = C.export(_PadConvLp(3).eval(), (1, 3, 12, 12))
    with pytest.raises(dml.ValidationError, match="PyTorch's LPPool2d with p = 3 is invalid; "
                                                  "expected an even p"):
        compile_model(onnx.load_from_string(b), "numpy")


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TP.FLOAT, s)
                                       for n, s in inputs],
                          [helper.make_tensor_value_info(n, TP.FLOAT, s) for n, s in outputs],
                          list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)],
                          producer_name="tests", producer_version="1.0")
    m.ir_version = 8
    return m


def test_every_unsupported_operator_is_named_at_once():
    nodes = [helper.make_node("Softmax", ["x"], ["a"], name="s1"),
             helper.make_node("Softmax", ["a"], ["b"], name="s2"),
             helper.make_node("Erf", ["b"], ["c"]),
             helper.make_node("Relu", ["c"], ["y"])]
    m = _model(nodes, [("x", [2, 3])], [("y", [2, 3])])
    with pytest.raises(dml.ValidationError) as e:
        compile_model(m, "numpy")
    msg = str(e.value)
    assert "the model (opset 17, exported by tests 1.0) has operators dml_numba cannot run: " \
           "Softmax at 's1' (node 0), 's2' (node 1); Erf at (node 2); expected only" in msg, msg


def test_nodes_whose_inputs_are_constant_are_evaluated_at_load():
    """A shape computation (Shape of a model input, Gather, Concat, Cast) feeding Pad's pads,
    and an operator no DirectML operator runs (Erf) on constants: evaluated by ONNX's reference
    evaluator; the graph holds the padding alone."""
    inits = [numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([0.5], np.float32), "h")]
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"]),  # [2]
             helper.make_node("Concat", ["zero", "zero", "n", "zero"], ["p"], axis=0),
             helper.make_node("Erf", ["h"], ["e"]),
             helper.make_node("Pad", ["x", "p", "e"], ["y"])]
    m = compile_model(_model(nodes, [("x", [2, 3])], [("y", [4, 3])], inits), "cpu")
    assert len(m.graph.nodes) == 1
    x = np.ones((2, 3), np.float32)
    y = m(x)
    from math import erf

    np.testing.assert_allclose(y[2:], erf(0.5), rtol=1e-6)
    np.testing.assert_array_equal(y[:2], 1)


def _conv_bn(extra=(), transposed=False, groups=1):
    rng = np.random.default_rng(4)
    c = 4
    w = rng.standard_normal((c, c // groups, 3, 3)).astype(np.float32)
    params = [rng.uniform(0.5, 2, c), rng.standard_normal(c), rng.standard_normal(c),
              rng.uniform(0.5, 2, c)]
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(
        rng.standard_normal(c).astype(np.float32), "B")] + [
        numpy_helper.from_array(p.astype(np.float32), n) for p, n in
        zip(params, ("s", "b", "m", "v"))]
    conv = helper.make_node("ConvTranspose" if transposed else "Conv", ["x", "W", "B"], ["c"],
                            pads=[1, 1, 1, 1], group=groups)
    nodes = [conv, helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["y"],
                                    epsilon=1e-3), *extra]
    outputs = [("y", [1, 4, 5, 5])] + ([("c", [1, 4, 5, 5])] if extra == "out" else [])
    return _model([n for n in nodes if not isinstance(n, str)], [("x", [1, 4, 5, 5])], outputs,
                  inits)


@pytest.mark.parametrize("transposed, groups", [(False, 1), (False, 2), (True, 1), (True, 2)])
def test_batch_norm_after_a_convolution_folds_into_its_filter(transposed, groups):
    m_ = _conv_bn(transposed=transposed, groups=groups)
    m = compile_model(m_, "numpy")
    assert [type(n.operator).__name__ for n in m.graph.nodes] == ["ConvolutionOperatorDesc"]
    x = np.random.default_rng(5).standard_normal((1, 4, 5, 5)).astype(np.float32)
    _close(m(x), _run_ort(m_.SerializeToString(), x))


def test_batch_norm_after_a_convolution_seen_elsewhere_is_an_operator():
    """Folding would change the convolution's output for its other reader: not folded."""
    m_ = _conv_bn(extra="out")
    m = compile_model(m_, "cpu")
    assert "BatchNormalizationOperatorDesc" in [type(n.operator).__name__ for n in m.graph.nodes]
    x = np.random.default_rng(5).standard_normal((1, 4, 5, 5)).astype(np.float32)
    s = ort.InferenceSession(m_.SerializeToString(), providers=["CPUExecutionProvider"])
    for y, ref in zip(m(x), s.run(None, {"x": x})):
        _close(y, ref)


def test_views_between_operators_and_of_model_inputs():
    """Reshape and Flatten of a node's output are views (a graph edge with other sizes), of
    a model input a reshape of the argument; a constant operand broadcasts at load."""
    rng = np.random.default_rng(6)
    inits = [numpy_helper.from_array(rng.standard_normal((5, 12)).astype(np.float32), "W"),
             numpy_helper.from_array(np.array([2, 6], np.int64), "shape"),
             numpy_helper.from_array(rng.standard_normal((3, 1, 1)).astype(np.float32), "c")]
    nodes = [helper.make_node("Flatten", ["x"], ["f"], axis=2),        # (1, 3, 2, 2) -> (6, 2)
             helper.make_node("Reshape", ["f", "shape"], ["r"]),       # a view of an input
             helper.make_node("Add", ["x", "c"], ["a"]),               # bias broadcast
             helper.make_node("Flatten", ["a"], ["af"]),               # (1, 12): a view
             helper.make_node("Gemm", ["af", "W"], ["g"], transB=1),
             helper.make_node("Relu", ["r"], ["y2"])]
    m_ = _model(nodes, [("x", [1, 3, 2, 2])], [("g", [1, 5]), ("y2", [2, 6])], inits)
    m = compile_model(m_, "cpu")
    x = rng.standard_normal((1, 3, 2, 2)).astype(np.float32)
    s = ort.InferenceSession(m_.SerializeToString(), providers=["CPUExecutionProvider"])
    for y, ref in zip(m(x), s.run(None, {"x": x})):
        _close(y, ref)
    assert m.graph.reshaping_edges()  # the Flatten between Add and Gemm


def test_an_output_that_is_a_view_is_written_into_out():
    """A model output that is a view of a node's output (Flatten) comes back with the model's
    sizes, and ``out=`` of those sizes is written in place."""
    w = np.random.default_rng(7).standard_normal((2, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("Flatten", ["c"], ["y"])]
    m = compile_model(_model(nodes, [("x", [1, 3, 4, 4])], [("y", [1, 8])],
                             [numpy_helper.from_array(w, "w")]), "numpy")
    x = np.random.default_rng(8).standard_normal((1, 3, 4, 4)).astype(np.float32)
    ref = dml.convolution(x, w, device="numpy").reshape(1, 8)
    y = m(x)
    assert y.shape == (1, 8)
    np.testing.assert_allclose(y, ref, rtol=1e-6)
    out = np.full((1, 8), np.nan, np.float32)
    assert m(x, out=out) is out
    np.testing.assert_allclose(out, ref, rtol=1e-6)


def test_an_inverted_residual_block_runs_its_pair_as_one_step():
    """MobileNet's expansion (1 x 1 convolution, ReLU6) and the stride-2 depthwise layer after
    it, from an ONNX file: one step on the CPU, its weights the model's own (frozen: packed
    once, kept between calls), against ONNX Runtime on two inputs one after another."""
    from dml_numba.cpu.pointwise_depthwise import PointwiseDepthwiseKernel

    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.5, n)
             for n, s in (("w1", (16, 8, 1, 1)), ("b1", (16,)), ("w2", (16, 1, 3, 3)),
                          ("b2", (16,)), ("w3", (8, 16, 1, 1)))]
    six = [numpy_helper.from_array(np.float32(v), n) for n, v in (("lo", 0.0), ("hi", 6.0))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["e"]),
             helper.make_node("Clip", ["e", "lo", "hi"], ["e6"]),
             helper.make_node("Conv", ["e6", "w2", "b2"], ["d"], group=16, strides=[2, 2],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["d", "lo", "hi"], ["d6"]),
             helper.make_node("Conv", ["d6", "w3"], ["y"])]
    model = _model(nodes, [("x", (1, 8, 13, 21))], [("y", (1, 8, 7, 11))], inits + six)
    m = compile_model(model, "cpu")
    steps = m.compiled.steps
    assert [type(s.op).__name__ for s in steps] == ["PointwiseDepthwiseDesc",
                                                    "ConvolutionOperatorDesc"]
    assert isinstance(m.compiled.ops[0].kernel, PointwiseDepthwiseKernel)
    data = model.SerializeToString()
    for seed in (0, 1):
        x = np.random.default_rng(seed).standard_normal((1, 8, 13, 21)).astype(np.float32)
        _close(m(x), _run_ort(data, x))
