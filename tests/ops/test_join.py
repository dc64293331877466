"""Join against numpy.concatenate and onnx.reference Concat: every axis, every data type
(bit for bit), many inputs, and the binding of its inputs array."""
import numpy as np
import pytest

import dml_numba as dml
from tests.helpers import assert_exact, every_type_on_each_device, onnx_run, random_array

ALL = [np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8,
       np.uint16, np.uint32, np.uint64]


@pytest.mark.parametrize("device, dtype", every_type_on_each_device(
    ALL, {np.float16, np.float64, np.int8}))
def test_every_type_bit_for_bit(device, dtype):
    rng = np.random.default_rng(0)
    xs = [random_array((2, n, 3), dtype, rng) for n in (1, 4, 2)]
    if np.dtype(dtype).kind == "f":
        xs[0][0, 0, 0] = -0.0
        xs[1][1, 2, 1] = np.nan
    assert_exact(dml.join(xs, 1, device=device), np.concatenate(xs, 1))


@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1])
def test_every_axis_against_onnx_reference(device, axis):
    rng = np.random.default_rng(1)
    base = [2, 3, 4, 5]
    xs = []
    for n in (1, 3):
        shape = list(base)
        shape[axis] = n
        xs.append(random_array(tuple(shape), np.float32, rng))
    assert_exact(dml.join(xs, axis, device=device), onnx_run("Concat", xs, axis=axis))


def test_many_inputs_and_one(device):
    xs = [np.full((1, 2), k, np.int32) for k in range(9)]
    assert_exact(dml.join(xs, 0, device=device), np.concatenate(xs))
    assert_exact(dml.join(xs[:1], 1, device=device), xs[0])


def test_inputs_bind_as_directml_names_them():
    t = dml.TensorDesc
    d = dml.JoinOperatorDesc((t(1, (2, 3)), t(1, (2, 1))), t(1, (2, 4)), 1)
    assert [f for f, _ in d.bound_inputs()] == ["input_tensors[0]", "input_tensors[1]"]
    with pytest.raises(dml.ValidationError, match=r"JoinOperatorDesc.input_tensors\[1\]: shape "
                                                  r"\(2, 2\) is invalid; expected \(2, 1\)"):
        dml.compile_operator(d, "cpu")(np.ones((2, 3), np.float32), np.ones((2, 2), np.float32))


@pytest.mark.parametrize("make, message", [
    (lambda t: dml.JoinOperatorDesc((t(1, (2, 3)), t(1, (3, 1))), t(1, (2, 4)), 1),
     r"input_tensors\[1\].sizes: \(3, 1\) is invalid; expected the sizes of input_tensors\[0\]"),
    (lambda t: dml.JoinOperatorDesc((t(1, (2, 3)), t(6, (2, 1))), t(1, (2, 4)), 1),
     r"input_tensors\[1\].data_type: 'INT32' is invalid; expected FLOAT32"),
    (lambda t: dml.JoinOperatorDesc((t(1, (2, 3)),), t(1, (2, 3)), 2),
     "axis: 2 is invalid; expected an integer <= 1"),
    (lambda t: dml.JoinOperatorDesc((), t(1, (2, 3)), 0),
     r"input_tensors: \(\) is invalid; expected a non-empty sequence"),
    (lambda t: dml.JoinOperatorDesc((t(1, (2, 3)), t(1, (2, 1))), t(1, (2, 5)), 1),
     r"output_tensor.sizes: \(2, 5\) is invalid; expected \(2, 4\)"),
])
def test_invalid_descriptors_are_named(make, message):
    with pytest.raises(dml.ValidationError, match="JoinOperatorDesc." + message):
        make(dml.TensorDesc)
