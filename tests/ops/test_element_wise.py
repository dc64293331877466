"""Element-wise addition (with its fused activation) and multiplication against NumPy's
operators and onnx.reference; every data type, integers wrapping around; broadcasting through
strides of 0 (DirectML's way) and NumPy's (the functional layer's)."""
import numpy as np
import pytest

import dml_numba as dml
from tests.helpers import (
    assert_close,
    assert_exact,
    every_type_on_each_device,
    onnx_run,
    random_array,
)

ALL = [np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8,
       np.uint16, np.uint32, np.uint64]


def _extremes(dtype, shape, rng):
    """Values that overflow when added or multiplied (integers), or random floats."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return random_array(shape, dtype, rng)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)


@pytest.mark.parametrize("device, dtype", every_type_on_each_device(
    ALL, {np.float16, np.float32, np.int8, np.uint64}))
@pytest.mark.parametrize("op", ["add", "multiply"])
def test_every_type_against_numpy(device, op, dtype):
    """NumPy's operators in the tensor's type: integers wrap around (two's complement),
    float16 is rounded once from the exact result."""
    rng = np.random.default_rng(1)
    a, b = _extremes(dtype, (3, 4, 5), rng), _extremes(dtype, (3, 4, 5), rng)
    fn = dml.element_wise_add if op == "add" else dml.element_wise_multiply
    with np.errstate(over="ignore"):
        ref = (a + b) if op == "add" else (a * b)
    assert_exact(fn(a, b, device=device), ref)


@pytest.mark.parametrize("op, onnx_op", [("add", "Add"), ("multiply", "Mul")])
def test_matches_onnx_reference_with_broadcasting(device, op, onnx_op):
    a = random_array((2, 3, 4, 5), np.float32)
    b = random_array((3, 1, 5), np.float32)
    fn = dml.element_wise_add if op == "add" else dml.element_wise_multiply
    assert_exact(fn(a, b, device=device), onnx_run(onnx_op, [a, b]))
    assert_exact(fn(b, a, device=device), onnx_run(onnx_op, [b, a]))


def test_broadcasting_through_strides_of_zero_as_directml_binds_it(device):
    """A TensorDesc with strides of 0 over a small buffer: DirectML's broadcasting."""
    a = random_array((2, 3, 4), np.float32)
    bias = np.array([1.0, 2.0, 3.0], np.float32)
    t = dml.TensorDesc(1, (2, 3, 4))
    b = dml.TensorDesc(1, (2, 3, 4), (0, 1, 0))
    op = dml.compile_operator(dml.ElementWiseAdd1OperatorDesc(t, b, t), device)
    assert_exact(op(a, bias), a + bias[None, :, None])


@pytest.mark.parametrize("activation, formula", [
    (dml.ActivationReluOperatorDesc(), lambda v: np.maximum(v, 0)),
    (dml.ActivationSigmoidOperatorDesc(), lambda v: 1 / (1 + np.exp(-v))),
    (dml.ElementWiseClipOperatorDesc(-0.5, 1.0), lambda v: np.clip(v, -0.5, 1.0)),
])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64],
                         ids=lambda d: np.dtype(d).name)
def test_add1_fused_activation(device, activation, formula, dtype):
    a, b = random_array((2, 3, 7), dtype), random_array((2, 3, 7), dtype, np.random.default_rng(9))
    y = dml.element_wise_add(a, b, activation, device=device)
    assert_close(y, formula(a.astype(np.float64) + b.astype(np.float64)), dtype)


def test_add_v1_canonicalises_to_add1(device):
    t = dml.TensorDesc(1, (4,))
    a, b = np.arange(4, dtype=np.float32), np.ones(4, np.float32)
    d = dml.ElementWiseAddOperatorDesc(t, t, t)
    assert d.canonical() == dml.ElementWiseAdd1OperatorDesc(t, t, t)
    assert_exact(dml.compile_operator(d, device)(a, b), a + b)


@pytest.mark.parametrize("make, message", [
    (lambda t: dml.ElementWiseAdd1OperatorDesc(t, dml.TensorDesc(1, (2, 4)), t),
     r"ElementWiseAdd1OperatorDesc.b_tensor.sizes: \(2, 4\) is invalid; expected \(2, 3\)"),
    (lambda t: dml.ElementWiseMultiplyOperatorDesc(t, dml.TensorDesc(9, (2, 3)), t),
     "ElementWiseMultiplyOperatorDesc.b_tensor.data_type: 'FLOAT64' is invalid; expected "
     "FLOAT32"),
    (lambda t: dml.ElementWiseAdd1OperatorDesc(dml.TensorDesc(6, (2, 3)), dml.TensorDesc(
        6, (2, 3)), dml.TensorDesc(6, (2, 3)), dml.ActivationReluOperatorDesc()),
     "ElementWiseAdd1OperatorDesc.a_tensor.data_type: 'INT32' is invalid; expected one of "
     "FLOAT32, FLOAT16, FLOAT64 \\(a fused activation computes in floating point\\)"),
])
def test_invalid_descriptors_are_named(make, message):
    with pytest.raises(dml.ValidationError, match=message):
        make(dml.TensorDesc(1, (2, 3)))


def test_shapes_that_do_not_broadcast_are_named():
    with pytest.raises(dml.ValidationError, match=r"element_wise_add.b.shape: \(4,\) is "
                                                  "invalid; expected a shape that broadcasts"):
        dml.element_wise_add(np.ones((2, 3), np.float32), np.ones(4, np.float32))
