"""Max pooling against onnx.reference MaxPool (ceil mode, dilations, padding) and a brute-force
loop; every float type; INFERRED choices pinned."""
import itertools

import numpy as np
import pytest

import dml_numba as dml
from dml_numba._dims import pooled_size, pooled_size_ceil
from tests.helpers import assert_exact, every_type_on_each_device, onnx_run, random_array

CASES = [  # shape, window, strides, start, end, dilations, ceil
    ((2, 3, 9, 10), (3, 2), (2, 3), (1, 0), (1, 1), (1, 1), False),
    ((1, 2, 7, 5), (2, 2), (1, 1), (0, 1), (1, 0), (2, 2), False),
    ((2, 1, 4, 5, 6), (2, 3, 2), (1, 2, 2), (1, 1, 0), (0, 1, 1), (1, 1, 2), False),
    ((1, 2, 8, 7), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), True),
    ((1, 1, 6, 6), (2, 2), (3, 3), (0, 0), (0, 0), (1, 1), True),
]


def _desc(x, window, strides, start, end, dil, ceil=False, out=None):
    t = dml.DataType.from_numpy(x.dtype)
    size = pooled_size_ceil if ceil else pooled_size
    if out is None:
        out = [size(n, a, b, w, s, d) for n, a, b, w, s, d in
               zip(x.shape[2:], start, end, window, strides, dil)]
        if ceil:  # ONNX's rule: the last window starts inside the input or its start padding
            out = [o - 1 if (o - 1) * s >= n + a else o for o, s, n, a in
                   zip(out, strides, x.shape[2:], start)]
    return dml.MaxPooling2OperatorDesc(dml.TensorDesc(t, x.shape),
                                       dml.TensorDesc(t, x.shape[:2] + tuple(out)), None,
                                       strides, window, start, end, dil)


def brute(x, window, strides, start, dil, out):
    """Python's max over the taps inside the input (Python numbers: exact for every type)."""
    y = np.empty(x.shape[:2] + tuple(out), x.dtype)
    for idx in np.ndindex(*y.shape):
        n, c, o = idx[0], idx[1], idx[2:]
        taps = []
        for k in itertools.product(*(range(w) for w in window)):
            xi = tuple(oo * s + kk * d - a for oo, s, kk, d, a in zip(o, strides, k, dil, start))
            if all(0 <= v < S for v, S in zip(xi, x.shape[2:])):
                taps.append(x[(n, c) + xi].item())
        y[idx] = max(taps)
    return y


@pytest.mark.parametrize("case", CASES, ids=str)
def test_matches_onnx_reference(device, case):
    shape, window, strides, start, end, dil, ceil = case
    x = random_array(shape, np.float32)
    y = dml.compile_operator(_desc(x, window, strides, start, end, dil, ceil), device)(x)
    ref = onnx_run("MaxPool", [x], kernel_shape=list(window), strides=list(strides),
                   pads=list(start) + list(end), dilations=list(dil), ceil_mode=int(ceil))
    assert_exact(y, ref)


@pytest.mark.parametrize("device, dtype", every_type_on_each_device(
    [np.float16, np.float32, np.float64, np.int8, np.uint8, np.int16, np.uint16, np.int32,
     np.uint32, np.int64, np.uint64], {np.float16, np.float32, np.int64, np.uint8}))
def test_brute_force_every_type(device, dtype):
    x = random_array((2, 3, 6, 7), dtype)
    d = _desc(x, (3, 2), (2, 1), (1, 1), (0, 1), (1, 2))
    assert_exact(dml.compile_operator(d, device)(x),
                 brute(x, (3, 2), (2, 1), (1, 1), (1, 2), d.output_tensor.sizes[2:]))


def test_against_pytorch(device):
    torch = pytest.importorskip("torch", reason="PyTorch is optional: not installed")
    x = random_array((2, 4, 11, 9), np.float32)
    y = dml.max_pooling(x, (3, 2), (2, 2), (1, 0), (1, 0), (1, 2), device=device)
    ref = torch.nn.functional.max_pool2d(torch.from_numpy(x), (3, 2), (2, 2), (1, 0), (1, 2))
    assert_exact(y, ref.numpy())


def test_inferred_padding_never_wins_even_against_negative_values(device):
    """DirectML: the padding is not a value. A window of negative numbers over the padding
    gives the largest negative number, not 0."""
    x = -np.arange(1, 10, dtype=np.float32).reshape(1, 1, 3, 3)
    y = dml.max_pooling(x, (2, 2), 1, 1, 1, device=device)
    assert y[0, 0, 0, 0] == -1 and y.max() < 0


def test_inferred_nan_propagates(device):
    """INFERRED (as numpy.max and PyTorch): a NaN in a window gives NaN, wherever it sits."""
    x = np.zeros((1, 1, 2, 4), np.float32)
    x[0, 0, 0, 1] = np.nan
    x[0, 0, 1, 3] = 5
    y = dml.max_pooling(x, (2, 2), 2, device=device)
    assert np.isnan(y[0, 0, 0, 0]) and y[0, 0, 0, 1] == 5


@pytest.mark.parametrize("dtype, least", [(np.float32, -np.inf), (np.int16, -2**15),
                                          (np.uint32, 0)], ids=["float32", "int16", "uint32"])
def test_inferred_an_all_padding_window_is_the_least_value(device, dtype, least):
    """INFERRED: in ceil mode a declared output may hold a window that reads only padding
    (the descriptor accepts sizes up to the ceil size): -infinity, the maximum of nothing (an
    integer type's least value)."""
    x = random_array((1, 1, 3), dtype)
    d = _desc(x, (1,), (2,), (0,), (2,), (1,), out=(3,))  # window 2 reads x[4]: end padding
    y = dml.compile_operator(d, device)(x)
    assert y[0, 0, 2] == least and y[0, 0, 0] == x[0, 0, 0]


def test_earlier_versions_canonicalise_to_max_pooling2(device):
    x = random_array((1, 2, 5, 6), np.float32)
    t, o = dml.TensorDesc(1, x.shape), dml.TensorDesc(1, (1, 2, 2, 3))
    v0 = dml.MaxPoolingOperatorDesc(t, o, (2, 2), (2, 2), (0, 0), (0, 0))
    v1 = dml.MaxPooling1OperatorDesc(t, o, None, (2, 2), (2, 2), (0, 0), (0, 0))
    ref = dml.compile_operator(v0.canonical(), device)(x)
    assert type(v0.canonical()) is type(v1.canonical()) is dml.MaxPooling2OperatorDesc
    for d in (v0, v1):
        assert_exact(dml.compile_operator(d, device)(x), ref)


@pytest.mark.parametrize("field, value, message", [
    ("output_indices_tensor", dml.TensorDesc(dml.DataType.UINT32, (1, 2, 2, 3)),
     "output_indices_tensor: .* is invalid; expected None"),
    ("window_size", (2, 9), r"window_size\[1\]: 9 is invalid; the dilated window \(9\) must fit"),
    ("strides", (0, 1), r"strides\[0\]: 0 is invalid; expected an integer >= 1"),
    ("output_tensor", dml.TensorDesc(1, (1, 2, 4, 3)),
     r"output_tensor.sizes\[2\]: 4 is invalid; expected 2 to 3 \(floor to ceil mode\)"),
    ("output_tensor", dml.TensorDesc(dml.DataType.INT32, (1, 2, 2, 3)),
     "output_tensor.data_type: 'INT32' is invalid; expected FLOAT32"),
])
def test_invalid_fields_are_named(field, value, message):
    fields = dict(input_tensor=dml.TensorDesc(1, (1, 2, 5, 6)),
                  output_tensor=dml.TensorDesc(1, (1, 2, 2, 3)), output_indices_tensor=None,
                  strides=(2, 2), window_size=(2, 2), start_padding=(0, 0), end_padding=(0, 0),
                  dilations=(1, 1))
    fields[field] = value
    with pytest.raises(dml.ValidationError, match="MaxPooling2OperatorDesc." + message):
        dml.MaxPooling2OperatorDesc(**fields)
