"""Batch normalization (inference) against onnx.reference BatchNormalization, PyTorch and the
formula in float64; per channel and per position; every float type; the fused activation."""
import numpy as np
import pytest

import dml_numba as dml
from tests.helpers import assert_close, onnx_run, random_array


def _params(c, dtype, shape=None, seed=2):
    rng = np.random.default_rng(seed)
    shape = shape or (c,)
    mean, scale, bias = (random_array(shape, dtype, rng) for _ in range(3))
    var = rng.uniform(0.2, 3, shape).astype(dtype)
    return mean, var, scale, bias


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64],
                         ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(2, 3, 5, 4), (1, 4, 7), (2, 2, 2, 3, 2)], ids=str)
def test_per_channel_against_onnx_reference(device, dtype, shape):
    x = random_array(shape, dtype)
    mean, var, scale, bias = _params(shape[1], dtype)
    y = dml.batch_normalization(x, mean, var, scale, bias, epsilon=0.25, device=device)
    ref = onnx_run("BatchNormalization", [x.astype(np.float64), scale.astype(np.float64),
                                          bias.astype(np.float64), mean.astype(np.float64),
                                          var.astype(np.float64)], epsilon=0.25)  # exact in float32
    assert_close(y, ref, dtype)


def test_against_pytorch(device):
    torch = pytest.importorskip("torch", reason="PyTorch is optional: not installed")
    x = random_array((2, 5, 6, 6), np.float32)
    mean, var, scale, bias = _params(5, np.float32)
    ref = torch.nn.functional.batch_norm(*(torch.from_numpy(a) for a in (x, mean, var, scale,
                                                                          bias)), False, 0., 1e-5)
    assert_close(dml.batch_normalization(x, mean, var, scale, bias, device=device), ref.numpy(),
                 np.float32)


def test_per_position_parameters(device):
    """Spatial FALSE: parameters of sizes {1, C, spatial...}, one value per channel and
    position."""
    x = random_array((3, 2, 4, 5), np.float64)
    mean, var, scale, bias = _params(2, np.float64, (1, 2, 4, 5))
    y = dml.batch_normalization(x, mean, var, scale, bias, epsilon=0.5, device=device)
    assert not dml.functional.batch_normalization_desc(x, mean, var, scale, bias).spatial
    assert_close(y, scale * (x - mean) / np.sqrt(var + 0.5) + bias, np.float64)


def test_a_parameter_for_every_channel_broadcasts(device):
    """A parameter of sizes {1, 1, 1...}: one value for every channel."""
    x = random_array((1, 3, 2, 2), np.float32)
    mean, var, scale, _ = _params(3, np.float32)
    bias = np.full((1, 1, 1, 1), 0.25, np.float32)
    y = dml.batch_normalization(x, mean, var, scale, bias, device=device)
    r = lambda a: a.reshape(1, 3, 1, 1)  # noqa: E731
    assert_close(y, r(scale) * (x - r(mean)) / np.sqrt(r(var) + 1e-5) + 0.25, np.float32)


def test_fused_activation(device):
    x = random_array((2, 3, 4, 4), np.float32)
    mean, var, scale, bias = _params(3, np.float32)
    y = dml.batch_normalization(x, mean, var, scale, bias, 1e-5,
                                dml.ActivationReluOperatorDesc(), device=device)
    ref = dml.batch_normalization(x, mean, var, scale, bias, device="numpy")
    assert_close(y, np.maximum(ref, 0), np.float32)


@pytest.mark.parametrize("field, value, message", [
    ("mean_tensor", dml.TensorDesc(1, (1, 2, 1, 1)),
     r"mean_tensor.sizes: \(1, 2, 1, 1\) is invalid; expected \(1, 3, 1, 1\)"),
    ("epsilon", -1.0, "epsilon: -1.0 is invalid; expected a real number >= 0"),
    ("spatial", 2, "spatial: 2 is invalid; expected a bool"),
    ("scale_tensor", dml.TensorDesc(9, (1, 3, 1, 1)),
     "scale_tensor.data_type: 'FLOAT64' is invalid; expected FLOAT32"),
])
def test_invalid_fields_are_named(field, value, message):
    x, p = dml.TensorDesc(1, (2, 3, 4, 4)), dml.TensorDesc(1, (1, 3, 1, 1))
    fields = dict(input_tensor=x, mean_tensor=p, variance_tensor=p, scale_tensor=p,
                  bias_tensor=p, output_tensor=x, spatial=True, epsilon=1e-5)
    fields[field] = value
    with pytest.raises(dml.ValidationError, match="BatchNormalizationOperatorDesc." + message):
        dml.BatchNormalizationOperatorDesc(**fields)
