"""The 18 fusable activations: each with a non-default value for every parameter, against a
formula written independently here, fused after the bias, on every device (the jitted CPU in
both variants, and CUDA on the simulator); and the one function contract the formulas share."""
import ast
import math
from dataclasses import MISSING, replace

import numpy as np
import pytest

import dml_numba as dml
from dml_numba.ops.activation import FUNCTIONS, parameter_fields
from tests.helpers import brute_conv_forward, random_array, sampled

_erf = np.vectorize(math.erf)
SELU_A, SELU_G = 1.67326319217681884765625, 1.05070102214813232421875  # DirectMLX's defaults

# (class, non-default keyword values, independent formula of (v, **values))
TABLE = [
    (dml.ActivationLinearOperatorDesc, dict(alpha=0.5, beta=-1.0),
     lambda v, alpha, beta: alpha * v + beta),
    (dml.ActivationSigmoidOperatorDesc, {}, lambda v: 1 / (1 + np.exp(-v))),
    (dml.ActivationHardSigmoidOperatorDesc, dict(alpha=0.35, beta=0.4),
     lambda v, alpha, beta: np.clip(alpha * v + beta, 0, 1)),
    (dml.ActivationTanhOperatorDesc, {}, np.tanh),
    (dml.ActivationScaledTanhOperatorDesc, dict(alpha=1.5, beta=0.7),
     lambda v, alpha, beta: alpha * np.tanh(beta * v)),
    (dml.ActivationReluOperatorDesc, {}, lambda v: np.maximum(v, 0)),
    (dml.ActivationLeakyReluOperatorDesc, dict(alpha=0.1),
     lambda v, alpha: np.where(v >= 0, v, alpha * v)),
    (dml.ActivationThresholdedReluOperatorDesc, dict(alpha=0.3),
     lambda v, alpha: np.where(v > alpha, v, 0)),
    (dml.ActivationEluOperatorDesc, dict(alpha=0.8),
     lambda v, alpha: np.where(v >= 0, v, alpha * (np.exp(v) - 1))),
    (dml.ActivationCeluOperatorDesc, dict(alpha=1.3),
     lambda v, alpha: np.maximum(0, v) + np.minimum(0, alpha * (np.exp(v / alpha) - 1))),
    (dml.ActivationScaledEluOperatorDesc, dict(alpha=1.2, gamma=0.9),
     lambda v, alpha, gamma: gamma * np.where(v > 0, v, alpha * np.exp(v) - alpha)),
    (dml.ActivationSoftplusOperatorDesc, dict(steepness=2.0),
     lambda v, steepness: np.log1p(np.exp(steepness * v)) / steepness),
    (dml.ActivationParametricSoftplusOperatorDesc, dict(alpha=0.5, beta=1.5),
     lambda v, alpha, beta: alpha * np.log1p(np.exp(beta * v))),
    (dml.ActivationSoftsignOperatorDesc, {}, lambda v: v / (1 + np.abs(v))),
    (dml.ActivationIdentityOperatorDesc, {}, lambda v: v),
    (dml.ActivationShrinkOperatorDesc, dict(bias=0.1, threshold=0.4),
     lambda v, bias, threshold: np.where(v > threshold, v - bias,
                                         np.where(v < -threshold, v + bias, 0))),
    (dml.ActivationGeluOperatorDesc, {}, lambda v: 0.5 * v * (1 + _erf(v / np.sqrt(2)))),
    (dml.ElementWiseClipOperatorDesc, dict(min=-0.5, max=0.75, scale_bias=(2.0, 0.1)),
     lambda v, min, max, scale_bias: np.clip(scale_bias[0] * v + scale_bias[1], min, max)),
]
IDS = [cls.__name__ for cls, _, _ in TABLE]


def test_the_table_covers_every_activation_and_every_parameter_off_its_default():
    assert [cls for cls, _, _ in TABLE] == list(dml.FUSABLE_ACTIVATIONS)
    for cls, values, _ in TABLE:
        for f in parameter_fields(cls):  # (not the standalone operator's tensors)
            assert f.name in values, (cls.__name__, f.name)
            if f.default is not MISSING:
                assert values[f.name] != f.default, (cls.__name__, f.name)


@pytest.mark.parametrize("cls", dml.FUSABLE_ACTIVATIONS, ids=lambda c: c.__name__)
def test_formulas_call_only_the_shared_functions(cls):
    values = next(v for c, v, _ in TABLE if c is cls)
    tree = ast.parse(cls(**values).expression("x"), mode="eval")
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    attributes = [n for n in ast.walk(tree) if isinstance(n, ast.Attribute)]
    assert names <= set(FUNCTIONS) | {"x"} and not attributes


def _run(cls, values, device, **options):
    rng = np.random.default_rng(3)
    x = random_array((1, 2, 3, 4), np.float64, rng)
    w = random_array((2, 2, 2, 2), np.float64, rng)
    bias = np.array([0.3, -0.2])
    act = cls(**values)
    t = lambda shape: dml.TensorDesc(dml.DataType.FLOAT64, shape)  # noqa: E731
    desc = dml.ConvolutionOperatorDesc(
        t(x.shape), t(w.shape), t((1, 2, 1, 1)), t((1, 2, 3, 3)),
        dml.ConvolutionMode.CROSS_CORRELATION, dml.ConvolutionDirection.FORWARD, (1, 1), (1, 1),
        (1, 0), (0, 0), (0, 0), 1, act)
    y = dml.compile_operator(desc, device, **options)(x, w, bias.reshape(1, 2, 1, 1))
    pre = brute_conv_forward(x, w, bias, (1, 1), (1, 1), (1, 0), out_spatial=(3, 3))
    return y, pre


#: every activation on the vectorised device and the serial kernel; in the parallel kernel
#: (the same expression in the serial loop nest, its outer loop a prange) a select, a
#: transcendental function and the one with the most parameters (every one with --runslow)
PARALLEL_ACTIVATIONS = (dml.ActivationReluOperatorDesc, dml.ActivationSoftplusOperatorDesc,
                        dml.ElementWiseClipOperatorDesc)
VARIANTS = {"numpy": ("numpy", {}), "cpu-serial": ("cpu", {"parallel": False}),
            "cpu-parallel": ("cpu", {"parallel": True})}
ACTIVATION_RUNS = [(row, variant) for row in TABLE for variant in VARIANTS]


@pytest.mark.parametrize("row,variant", sampled(
    ACTIVATION_RUNS, lambda run: f"{run[0][0].__name__}-{run[1]}",
    lambda run: run[1] != "cpu-parallel" or run[0][0] in PARALLEL_ACTIVATIONS))
def test_activation_with_every_parameter_set(row, variant):
    cls, values, formula = row
    device, options = VARIANTS[variant]
    y, pre = _run(cls, values, device, **options)
    np.testing.assert_allclose(y, formula(pre, **values), rtol=1e-9, atol=1e-12)


@pytest.mark.cuda
@pytest.mark.parametrize("cls,values,formula", TABLE, ids=IDS)
def test_activation_with_every_parameter_set_on_cuda(cls, values, formula):
    y, pre = _run(cls, values, "cuda")
    np.testing.assert_allclose(y, formula(pre, **values), rtol=1e-9, atol=1e-12)


def test_clip_with_min_equal_to_max_is_valid_and_constant(device):
    """min <= max is the rule: min == max is allowed and clips everything to that value."""
    x = np.array([-2.0, 0.5, 3.0], np.float32)
    act = dml.ElementWiseClipOperatorDesc(0.5, 0.5)
    y = dml.convolution(x.reshape(1, 1, 3), np.ones((1, 1, 1), np.float32),
                        fused_activation=act, device=device)
    assert y.ravel().tolist() == [0.5, 0.5, 0.5]


# -- the activations as operators of their own (DML_ACTIVATION_*, ELEMENT_WISE_CLIP) ----------

def _standalone(cls, values, dtype, shape, strides=None):
    t = dml.TensorDesc(dml.DataType.from_numpy(np.dtype(dtype)), shape, strides)
    return cls(**values, input_tensor=t,
               output_tensor=dml.TensorDesc(t.data_type, shape))


def _points(dtype, shape=(2, 3, 5)):
    """Random values, with the table's kinks and thresholds among them (0, -0, +-0.4, 0.3)."""
    x = (np.random.default_rng(11).standard_normal(shape) * 2).astype(dtype)
    x.flat[:6] = [0.0, -0.0, 0.4, -0.4, 1.0, 0.3]
    return x


@pytest.mark.parametrize("row,variant", sampled(
    ACTIVATION_RUNS, lambda run: f"{run[0][0].__name__}-{run[1]}",
    lambda run: run[1] != "cpu-parallel" or run[0][0] in PARALLEL_ACTIVATIONS))
def test_every_activation_as_an_operator_of_its_own(row, variant):
    """The standalone form (both tensors given) with every parameter off its default, against
    the independent formula, in float64."""
    cls, values, formula = row
    device, options = VARIANTS[variant]
    x = _points(np.float64)
    op = dml.compile_operator(_standalone(cls, values, np.float64, x.shape), device, **options)
    np.testing.assert_allclose(op(x), formula(x, **values), rtol=1e-12, atol=1e-15)


@pytest.mark.cuda
@pytest.mark.parametrize("cls,values,formula", TABLE, ids=IDS)
def test_every_activation_as_an_operator_of_its_own_on_cuda(cls, values, formula):
    x = _points(np.float64, (2, 3))
    op = dml.compile_operator(_standalone(cls, values, np.float64, x.shape), "cuda")
    np.testing.assert_allclose(op(x), formula(x, **values), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("cls,values,formula", [TABLE[1], TABLE[5], TABLE[16], TABLE[17]],
                         ids=lambda v: getattr(v, "__name__", ""))
def test_float32_and_float16(cls, values, formula, dtype, device):
    """float16 is computed in float32 and rounded once: within half a float16 ulp of the exact
    value rounded (one ulp); float32 within a few of its own."""
    x = _points(dtype)
    y = dml.compile_operator(_standalone(cls, values, dtype, x.shape), device)(x)
    assert y.dtype == dtype
    exact = formula(x.astype(np.float64), **values)
    if dtype == np.float16:
        np.testing.assert_allclose(y.astype(np.float64), exact.astype(dtype).astype(np.float64),
                                   rtol=2 ** -10, atol=2 ** -24)
    else:
        np.testing.assert_allclose(y, exact, rtol=4e-7, atol=1e-30)


def test_a_broadcast_input_and_a_bound_buffer(device):
    """DirectML's broadcasting: an input of strides 0 bound to a 1-D buffer reads each of its
    elements for every row."""
    buf = np.array([-1.5, -0.2, 0.0, 2.5], np.float32)
    desc = _standalone(dml.ActivationEluOperatorDesc, {"alpha": 0.5}, np.float32, (3, 4), (0, 1))
    y = dml.compile_operator(desc, device)(buf)
    row = np.where(buf >= 0, buf, 0.5 * np.expm1(buf.astype(np.float64)))
    np.testing.assert_allclose(y, np.broadcast_to(row, (3, 4)), rtol=1e-6)


def test_the_fused_form_is_refused_as_an_operator_and_the_standalone_one_as_fused():
    """One struct for both uses, as in DirectML: without tensors it is a fused activation
    (compile_operator and a graph refuse it, naming what to give); with them an operator (a
    convolution refuses it as its fused activation)."""
    relu = dml.ActivationReluOperatorDesc()
    with pytest.raises(dml.ValidationError, match=r"compile_operator.desc.output_tensor: None "
                                                  r"is invalid; expected a TensorDesc \("
                                                  r"ActivationReluOperatorDesc without tensors"):
        dml.compile_operator(relu, "cpu")
    with pytest.raises(dml.ValidationError, match=r"OperatorGraphNodeDesc.operator: .* is "
                                                  r"invalid; expected an operator with its"):
        dml.OperatorGraphNodeDesc(relu)
    x = np.ones((1, 1, 3), np.float32)
    standalone = dml.functional.activation_desc(x, relu)
    assert not standalone.fused and relu.fused and standalone != relu
    assert repr(relu) == "ActivationReluOperatorDesc()"  # the fused form's null tensors unshown
    with pytest.raises(dml.ValidationError, match=r"convolution.fused_activation.input_tensor: "
                                                  r".* is invalid; expected None"):
        dml.convolution(x, np.ones((1, 1, 1), np.float32), fused_activation=standalone)


def test_names_and_parameters():
    """Each activation by DirectML's name, lower case, its parameters in field order (clip's
    optional scale and bias as two more); the functional layer takes either form."""
    from dml_numba.ops.activation import BY_NAME

    assert list(BY_NAME.values()) == list(dml.FUSABLE_ACTIVATIONS)
    assert {"relu", "leaky_relu", "hard_sigmoid", "scaled_elu", "parametric_softplus",
            "clip"} <= set(BY_NAME)
    for cls, values, _ in TABLE:
        act = cls(**values)
        named = dml.functional.activation_desc(np.zeros(2, np.float32),
                                               act.activation_name(), act.parameters())
        assert replace(named, input_tensor=None, output_tensor=None) == act
    with pytest.raises(dml.ValidationError, match="activation.parameters: .* expected None "
                                                  "with an activation descriptor"):
        dml.activation(np.zeros(2, np.float32), dml.ActivationReluOperatorDesc(), [1.0])
    x = np.array([-2.0, 3.0], np.float32)  # one value stands for the first parameter
    for one in (0.5, np.float32(0.5), np.array(0.5)):
        np.testing.assert_array_equal(dml.activation(x, "leaky_relu", one), [-1.0, 3.0])
    with pytest.raises(dml.ValidationError, match="activation.alpha: 'a' is invalid"):
        dml.activation(x, "elu", ["a"])


@pytest.mark.parametrize("cls,values,formula", TABLE, ids=IDS)
def test_each_derivative_is_its_formula_s_slope(cls, values, formula):
    """The gradient's derivative against central differences of the independent formula, on
    points away from every kink of the table."""
    from dml_numba.vectorized._activation import apply_formula

    x = np.linspace(-3, 3, 61) + 0.013
    h = 1e-6
    slope = (formula(x + h, **values) - formula(x - h, **values)) / (2 * h)
    got = apply_formula(cls(**values).derivative("x"), x)
    np.testing.assert_allclose(got, slope, rtol=1e-6, atol=1e-7)


def test_the_derivative_at_each_kink_is_pytorch_s():
    """INFERRED (DirectML defines no gradient): at a kink the gradient is PyTorch's for the
    same function -- RELU 0 at 0, LEAKY_RELU alpha at 0, ELU, CELU and SELU their x <= 0
    branch's at 0, CLIP 1 at both bounds (inclusive), HARD_SIGMOID 0 at both ends, a threshold
    or shrink 0 at its threshold -- checked against torch.autograd at exactly those points."""
    torch = pytest.importorskip("torch", reason="PyTorch is optional: the gradient's peer")
    F_ = torch.nn.functional
    cases = [
        ("relu", None, F_.relu, [0.0, -0.0]),
        ("leaky_relu", [0.1], lambda t: F_.leaky_relu(t, 0.1), [0.0]),
        ("elu", [0.7], lambda t: F_.elu(t, 0.7), [0.0]),
        ("celu", [1.3], lambda t: F_.celu(t, 1.3), [0.0]),
        ("scaled_elu", None, F_.selu, [0.0]),
        ("clip", [-0.5, 0.75], lambda t: torch.clamp(t, -0.5, 0.75), [-0.5, 0.75]),
        ("hard_sigmoid", [1 / 6, 0.5], F_.hardsigmoid, [-3.0, 3.0]),
        ("thresholded_relu", [0.25], lambda t: F_.threshold(t, 0.25, 0.0), [0.25]),
        ("shrink", [0.5, 0.5], lambda t: F_.softshrink(t, 0.5), [0.5, -0.5]),
    ]
    pytest.importorskip("dml_numba.torch")  # registers the operator and its gradient
    for name, params, fn, points in cases:
        x = torch.tensor(points, dtype=torch.float64, requires_grad=True)
        fn(x).sum().backward()
        t = torch.tensor(points, dtype=torch.float64, requires_grad=True)
        torch.ops.dml_numba.activation(t, name, params).sum().backward()
        np.testing.assert_allclose(t.grad.numpy(), x.grad.numpy(), rtol=1e-7, err_msg=name)


@pytest.mark.parametrize("dtype", [np.int32, np.int16, np.int8])
def test_relu_of_its_own_on_directml_s_integer_types(dtype, device):
    """RELU alone also takes INT32, INT16 and INT8 (DirectML FL5.1): exact at the type's
    extremes; the other activations and the other integer types are refused by name."""
    info = np.iinfo(dtype)
    x = np.array([[info.min, -1, 0], [1, info.max - 1, info.max]], dtype)
    y = dml.activation(x, "relu", device=device)
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, np.maximum(x, 0))


def test_integer_types_relu_does_not_take_are_refused():
    t = dml.TensorDesc(dml.DataType.INT32, (3,))
    with pytest.raises(dml.ValidationError, match=r"ActivationLeakyReluOperatorDesc.input_tensor."
                                                  r"data_type: 'INT32' is invalid; expected one "
                                                  r"of FLOAT32, FLOAT16, FLOAT64 \(this "
                                                  r"activation computes in floating point\)"):
        dml.ActivationLeakyReluOperatorDesc(input_tensor=t, output_tensor=t)
    for dt in (dml.DataType.INT64, dml.DataType.UINT8):
        u = dml.TensorDesc(dt, (3,))
        with pytest.raises(dml.ValidationError, match=rf"ActivationReluOperatorDesc.input_tensor"
                                                      rf".data_type: '{dt.name}' is invalid; "
                                                      r"expected one of FLOAT32, FLOAT16, "
                                                      r"FLOAT64, INT32, INT16, INT8$"):
            dml.ActivationReluOperatorDesc(input_tensor=u, output_tensor=u)


@pytest.mark.cuda
def test_relu_of_its_own_on_integer_types_on_cuda():
    x = np.array([-128, -1, 0, 1, 127], np.int8)
    np.testing.assert_array_equal(dml.activation(x, "relu", device="cuda"), np.maximum(x, 0))
