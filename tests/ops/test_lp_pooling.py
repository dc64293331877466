"""LP pooling against onnx.reference LpPool and a brute-force loop; INFERRED choices pinned."""
import itertools

import numpy as np
import pytest

import dml_numba as dml
from tests.helpers import assert_close, onnx_run, random_array

CASES = [  # shape, window, strides, start, end, dilations, p
    ((2, 3, 9, 10), (3, 2), (2, 3), (1, 0), (1, 2), (1, 1), 2),
    ((1, 2, 7, 5), (2, 2), (1, 1), (0, 1), (2, 0), (2, 2), 1),
    ((2, 1, 4, 5, 6), (2, 3, 2), (1, 2, 2), (1, 1, 0), (0, 1, 1), (1, 1, 2), 3),
    ((3, 2, 8, 6), (4, 3), (3, 2), (2, 1), (2, 1), (1, 1), 4),
]


def _desc(x, window, strides, start, end, dil, p, out_spatial=None):
    t = dml.DataType.from_numpy(x.dtype)
    if out_spatial is None:
        out_spatial = [(n + a + b - ((w - 1) * d + 1)) // s + 1 for n, a, b, w, d, s in
                       zip(x.shape[2:], start, end, window, dil, strides)]
    return dml.LpPooling1OperatorDesc(dml.TensorDesc(t, x.shape),
                                      dml.TensorDesc(t, x.shape[:2] + tuple(out_spatial)),
                                      strides, window, start, end, dil, p)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_matches_onnx_reference(device, case):
    shape, window, strides, start, end, dil, p = case
    x = random_array(shape, np.float32)
    y = dml.compile_operator(_desc(x, window, strides, start, end, dil, p), device)(x)
    ref = onnx_run("LpPool", [x], kernel_shape=list(window), strides=list(strides),
                   pads=list(start) + list(end), dilations=list(dil), p=p)
    assert_close(y, ref, np.float32)


def brute(x, window, strides, start, dil, p, out_spatial):
    y = np.zeros(x.shape[:2] + tuple(out_spatial))
    for idx in np.ndindex(*y.shape):
        n, c, o = idx[0], idx[1], idx[2:]
        acc = 0.0
        for k in itertools.product(*(range(w) for w in window)):
            xi = tuple(oo * s + kk * d - a for oo, s, kk, d, a in zip(o, strides, k, dil, start))
            if all(0 <= v < S for v, S in zip(xi, x.shape[2:])):
                acc += abs(float(x[(n, c) + xi])) ** p
        y[idx] = acc ** (1 / p)
    return y


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64],
                         ids=lambda d: np.dtype(d).name)
def test_brute_force_every_float_type(device, dtype):
    x = random_array((2, 3, 6, 7), dtype)
    d = _desc(x, (3, 2), (2, 1), (1, 1), (0, 1), (1, 2), 2)
    y = dml.compile_operator(d, device)(x)
    assert_close(y, brute(x, (3, 2), (2, 1), (1, 1), (1, 2), 2, d.output_tensor.sizes[2:]), dtype)


def test_one_spatial_dimension_extension(device):
    """dml_numba extension: 3-D tensors (DirectML pools 4-D and 5-D only)."""
    x = random_array((2, 3, 11), np.float64)
    d = _desc(x, (3,), (2,), (1,), (2,), (2,), 3)
    assert_close(dml.compile_operator(d, device)(x),
                 brute(x, (3,), (2,), (1,), (2,), 3, d.output_tensor.sizes[2:]), np.float64)


def test_inferred_ceil_mode_output_reads_past_end_as_padding(device):
    """INFERRED (docs/SEMANTICS.md §3): an output up to the ceil-mode size is accepted; taps past
    the
    padded end count as padding (zero)."""
    x = random_array((1, 2, 5, 5), np.float32)
    d = _desc(x, (2, 2), (2, 2), (0, 0), (0, 0), (1, 1), 2, out_spatial=(3, 3))  # floor: 2
    y = dml.compile_operator(d, device)(x)
    assert_close(y, brute(x, (2, 2), (2, 2), (0, 0), (1, 1), 2, (3, 3)), np.float32)
    assert y[0, 0, 2, 2] == pytest.approx(abs(float(x[0, 0, 4, 4])))


def test_lp_pooling_v1_equals_lp_pooling1_with_unit_dilation(device):
    x = random_array((2, 2, 5, 6), np.float32)
    t = dml.DataType.FLOAT32
    old = dml.LpPoolingOperatorDesc(dml.TensorDesc(t, x.shape), dml.TensorDesc(t, (2, 2, 2, 3)),
                                    (2, 2), (2, 2), (0, 0), (0, 1), 2)
    new = _desc(x, (2, 2), (2, 2), (0, 0), (0, 1), (1, 1), 2)
    np.testing.assert_array_equal(dml.compile_operator(old, device)(x),
                                  dml.compile_operator(new, device)(x))


def test_window_entirely_in_padding_is_zero(device):
    x = random_array((1, 1, 2, 2), np.float32) + 5
    d = _desc(x, (2, 2), (3, 3), (3, 0), (0, 0), (1, 1), 1, out_spatial=None)
    y = dml.compile_operator(d, device)(x)
    assert y[0, 0, 0].tolist() == [0.0]


def test_nan_propagates(device):
    """No in-band sentinel: a real NaN inside the window yields NaN."""
    x = np.array([[[1.0, np.nan, 2.0, 3.0]]], np.float32)
    y = dml.lp_pooling(x, (2,), (2,), p=2, device=device)
    assert np.isnan(y[0, 0, 0]) and y[0, 0, 1] == pytest.approx(np.sqrt(13))


EDGES = [  # (value, p, expected result of a 2x2 window of it): both ends of float32's range
    (1e20, 2, 2e20), (1e-25, 2, 2e-25), (1.5e38, 2, 3e38), (1e-30, 3, 1e-30 * 4 ** (1 / 3)),
    (2e38, 1, np.inf), (3e38, 2, np.inf), (1e-44, 2, 2 * float(np.float32(1e-44))),
]


@pytest.mark.parametrize("variant", [("numpy", {}), ("cpu", {"parallel": False}),
                                     ("cpu", {"parallel": True}),
                                     pytest.param(("cuda", {}), marks=pytest.mark.cuda)],
                         ids=["numpy", "cpu-serial", "cpu-parallel", "cuda"])
@pytest.mark.parametrize("value,p,expected", EDGES, ids=[f"{v:g}-p{p}" for v, p, _ in EDGES])
# Numba's CUDA simulator stores a float beyond float32's range through NumPy, which warns; a
# GPU (and every other device here) gives infinity silently, as these cases expect
@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
def test_float32_edges_agree_on_every_device(value, p, expected, variant):
    """Sums of |x|**p overflow or underflow float32 long before the result does: every device
    returns the correctly rounded float32 of the exact result when it is representable."""
    device, options = variant
    x = np.full((1, 1, 2, 2), value, np.float32)
    t = dml.TensorDesc(dml.DataType.FLOAT32, (1, 1, 2, 2))
    desc = dml.LpPooling1OperatorDesc(t, dml.TensorDesc(dml.DataType.FLOAT32, (1, 1, 1, 1)),
                                      (1, 1), (2, 2), (0, 0), (0, 0), (1, 1), p)
    y = dml.compile_operator(desc, device, **options)(x)
    exact = (4 * float(np.float32(value)) ** p) ** (1 / p)
    assert y[0, 0, 0, 0] == np.float32(exact if np.isfinite(expected) else np.inf)
    np.testing.assert_allclose(float(y[0, 0, 0, 0]), expected, rtol=1e-6)
