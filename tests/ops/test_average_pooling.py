"""Average pooling against onnx.reference AveragePool (padding counted or not, ceil mode,
dilations) and a brute-force loop; every float type; INFERRED choices pinned."""
import itertools

import numpy as np
import pytest

import dml_numba as dml
from dml_numba._dims import pooled_size, pooled_size_ceil
from tests.helpers import assert_close, onnx_run, random_array

CASES = [  # shape, window, strides, start, end, dilations, include padding, ceil
    ((2, 3, 9, 10), (3, 2), (2, 3), (1, 0), (1, 1), (1, 1), True, False),
    ((2, 3, 9, 10), (3, 2), (2, 3), (1, 0), (1, 1), (1, 1), False, False),
    ((1, 2, 7, 5), (2, 2), (1, 1), (0, 1), (1, 0), (2, 2), False, False),
    ((2, 1, 4, 5, 6), (2, 3, 2), (1, 2, 2), (1, 1, 0), (0, 1, 1), (1, 1, 1), True, False),
    ((1, 2, 8, 7), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), True, True),
    ((1, 2, 8, 7), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), False, True),
]


def _desc(x, window, strides, start, end, dil, include, ceil=False, out=None):
    t = dml.DataType.from_numpy(x.dtype)
    size = pooled_size_ceil if ceil else pooled_size
    if out is None:
        out = [size(n, a, b, w, s, d) for n, a, b, w, s, d in
               zip(x.shape[2:], start, end, window, strides, dil)]
        if ceil:
            out = [o - 1 if (o - 1) * s >= n + a else o for o, s, n, a in
                   zip(out, strides, x.shape[2:], start)]
    return dml.AveragePooling1OperatorDesc(dml.TensorDesc(t, x.shape),
                                           dml.TensorDesc(t, x.shape[:2] + tuple(out)), strides,
                                           window, start, end, dil, include)


def brute(x, window, strides, start, end, dil, include, out):
    y = np.zeros(x.shape[:2] + tuple(out))
    for idx in np.ndindex(*y.shape):
        n, c, o = idx[0], idx[1], idx[2:]
        total, count = 0.0, 0
        for k in itertools.product(*(range(w) for w in window)):
            padded = tuple(oo * s + kk * d for oo, s, kk, d in zip(o, strides, k, dil))
            xi = tuple(p - a for p, a in zip(padded, start))
            inside = all(0 <= v < S for v, S in zip(xi, x.shape[2:]))
            in_padded = all(p < S + a + b for p, S, a, b in zip(padded, x.shape[2:], start, end))
            if inside:
                total += float(x[(n, c) + xi])
            count += inside or (include and in_padded)
        y[idx] = total / count if count else np.nan
    return y


@pytest.mark.parametrize("case", CASES, ids=str)
def test_matches_onnx_reference(device, case):
    shape, window, strides, start, end, dil, include, ceil = case
    x = random_array(shape, np.float32)
    y = dml.compile_operator(_desc(x, window, strides, start, end, dil, include, ceil),
                             device)(x)
    ref = onnx_run("AveragePool", [x], opset=19, kernel_shape=list(window), strides=list(strides),
                   pads=list(start) + list(end), dilations=list(dil), ceil_mode=int(ceil),
                   count_include_pad=int(include))
    assert_close(y, ref, np.float32)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64],
                         ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("include", [False, True])
def test_brute_force_every_float_type(device, dtype, include):
    x = random_array((2, 3, 6, 7), dtype)
    d = _desc(x, (3, 2), (2, 1), (1, 1), (0, 1), (1, 2), include)
    assert_close(dml.compile_operator(d, device)(x),
                 brute(x, (3, 2), (2, 1), (1, 1), (0, 1), (1, 2), include,
                       d.output_tensor.sizes[2:]), dtype)


@pytest.mark.parametrize("ceil", [False, True])
@pytest.mark.parametrize("include", [False, True])
def test_against_pytorch(device, include, ceil):
    torch = pytest.importorskip("torch", reason="PyTorch is optional: not installed")
    x = random_array((2, 4, 11, 9), np.float32)
    d = _desc(x, (3, 2), (2, 2), (1, 1), (1, 1), (1, 1), include, ceil)
    ref = torch.nn.functional.avg_pool2d(torch.from_numpy(x), (3, 2), (2, 2), (1, 1), ceil,
                                         include)
    assert_close(dml.compile_operator(d, device)(x), ref.numpy(), np.float32)


def test_inferred_the_overhang_past_the_padded_input_never_counts(device):
    """INFERRED (ONNX Runtime's and PyTorch's rule): in ceil mode a window that reaches past
    the padded end is divided by its taps inside the padded input only, even with the padding
    counted."""
    x = np.arange(1, 6, dtype=np.float32).reshape(1, 1, 5)
    d = _desc(x, (2,), (2,), (1,), (0,), (1,), True, ceil=True)  # windows [-1,0] [1,2] [3,4]
    y = dml.compile_operator(d, device)(x)
    np.testing.assert_allclose(y[0, 0], [0.5, 2.5, 4.5])
    d = _desc(x, (3,), (2,), (0,), (1,), (1,), True, out=(3,))  # third window: 4, pad, past
    y = dml.compile_operator(d, device)(x)
    assert y[0, 0, 2] == pytest.approx(5 / 2)


def test_inferred_a_window_with_nothing_to_count_is_nan(device):
    """INFERRED: 0/0 where a declared ceil-mode output reads only padding, not counted."""
    x = random_array((1, 1, 3), np.float32)
    d = _desc(x, (1,), (2,), (0,), (2,), (1,), False, out=(3,))
    assert np.isnan(dml.compile_operator(d, device)(x)[0, 0, 2])


def test_average_pooling_v1_equals_average_pooling1_with_unit_dilation(device):
    x = random_array((1, 2, 5, 6), np.float32)
    t, o = dml.TensorDesc(1, x.shape), dml.TensorDesc(1, (1, 2, 3, 3))
    v0 = dml.AveragePoolingOperatorDesc(t, o, (2, 2), (2, 2), (1, 0), (0, 0), True)
    assert type(v0.canonical()) is dml.AveragePooling1OperatorDesc
    assert_close(dml.compile_operator(v0, device)(x),
                 dml.compile_operator(v0.canonical(), device)(x), np.float32)


def test_the_window_trait_reads_zeros_only_when_the_padding_counts():
    """A zero padding in front may be absorbed into the window only when padded taps count:
    otherwise the divisor changes."""
    x = random_array((1, 1, 4, 4), np.float32)
    assert _desc(x, (2, 2), (1, 1), (1, 1), (0, 0), (1, 1), True).window().padding_reads_zero
    assert not _desc(x, (2, 2), (1, 1), (1, 1), (0, 0), (1, 1), False).window() \
        .padding_reads_zero


def test_include_padding_must_be_a_bool():
    t = dml.TensorDesc(1, (1, 1, 4, 4))
    with pytest.raises(dml.ValidationError, match="AveragePooling1OperatorDesc.include_padding: "
                                                  "'yes' is invalid; expected a bool"):
        dml.AveragePooling1OperatorDesc(t, dml.TensorDesc(1, (1, 1, 3, 3)), (1, 1), (2, 2),
                                        (0, 0), (0, 0), (1, 1), "yes")


@pytest.mark.parametrize("shape", [(2, 3, 7, 7), (1, 2, 9, 10), (2, 2, 3, 4, 2), (1, 1, 1, 1),
                                   (1, 2, 24, 24), (1, 1, 32, 32)], ids=str)
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64],
                         ids=lambda d: np.dtype(d).name)
def test_a_window_over_the_whole_plane(device, shape, dtype):
    """A global window (ONNX's GlobalAveragePool; the CPU's plane sums: float32 in vectors,
    in chunks of 512 past that (576: a chunk and a rest, 1024: two chunks); other types
    unrolled up to 64 elements, looped in fours past that: 90 here): the plane's float64 sum
    over its size, against the brute-force loop and NumPy's mean; every float type, 1-D to
    3-D planes, a plane of one element."""
    x = random_array(shape, dtype, np.random.default_rng(len(shape)))
    nd = len(shape) - 2
    d = _desc(x, shape[2:], (1,) * nd, (0,) * nd, (0,) * nd, (1,) * nd, False)
    assert d.output_tensor.sizes == shape[:2] + (1,) * nd
    op = dml.compile_operator(d, device)
    if device == "cpu":
        assert op.kernel.key.kernel == "global"
    y = op(x)
    assert_close(y, brute(x, shape[2:], (1,) * nd, (0,) * nd, (0,) * nd, (1,) * nd, False,
                          (1,) * nd), dtype)
    assert_close(y, x.astype(np.float64).mean(axis=tuple(range(2, x.ndim)), keepdims=True), dtype)
    view = np.ascontiguousarray(np.swapaxes(x, -1, -2)).swapaxes(-1, -2)  # strided, same values
    assert not view.flags.c_contiguous or x.shape[-1] == 1
    np.testing.assert_array_equal(op(view), y)
