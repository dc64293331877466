"""Property tests over random descriptors (a bounded number of examples each)."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dml_numba as dml
from tests.helpers import (
    assert_close,
    assert_exact,
    brute_conv_backward,
    brute_conv_forward,
)

SETTINGS = settings(max_examples=25, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])
NP_MODE = {dml.PaddingMode.CONSTANT: "constant", dml.PaddingMode.EDGE: "edge",
           dml.PaddingMode.REFLECTION: "reflect", dml.PaddingMode.SYMMETRIC: "symmetric",
           dml.PaddingMode.WRAP: "wrap"}
DTYPES = st.sampled_from([np.float32, np.float16, np.float64, np.int8, np.uint8, np.int16,
                          np.uint16, np.int32, np.uint32, np.int64, np.uint64])


def _array(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * 20).astype(dtype) if np.dtype(dtype).kind == "f" else \
        rng.integers(0, 100, size=shape).astype(dtype)


@st.composite
def shapes(draw, lo_rank=1, hi_rank=5, hi=5):
    return tuple(draw(st.lists(st.integers(1, hi), min_size=lo_rank, max_size=hi_rank)))


@SETTINGS
@given(shape=shapes(), data=st.data(), dtype=DTYPES, mode=st.sampled_from(list(dml.PaddingMode)),
       device=st.sampled_from(["numpy", "cpu"]))
def test_padding_matches_numpy_pad(shape, data, dtype, mode, device):
    start = tuple(data.draw(st.lists(st.integers(0, 7), min_size=len(shape), max_size=len(shape))))
    end = tuple(data.draw(st.lists(st.integers(0, 7), min_size=len(shape), max_size=len(shape))))
    x = _array(shape, dtype, 1)
    value = 3
    y = dml.padding(x, start, end, mode, value, device=device)
    kw = {"constant_values": value} if mode == dml.PaddingMode.CONSTANT else {}
    assert_exact(y, np.pad(x, list(zip(start, end)), NP_MODE[mode], **kw))


@SETTINGS
@given(shape=shapes(hi_rank=6, hi=4), data=st.data(), dtype=DTYPES,
       device=st.sampled_from(["numpy", "cpu"]))
def test_tile_matches_numpy_tile(shape, data, dtype, device):
    reps = tuple(data.draw(st.lists(st.integers(1, 3), min_size=len(shape), max_size=len(shape))))
    x = _array(shape, dtype, 2)
    assert_exact(dml.tile(x, reps, device=device), np.tile(x, reps))


@SETTINGS
@given(shape=shapes(hi=7), data=st.data(), dtype=DTYPES, device=st.sampled_from(["numpy", "cpu"]))
def test_slice1_matches_numpy_slicing(shape, data, dtype, device):
    offs, sizes, strides, slices = [], [], [], []
    for n in shape:
        o = data.draw(st.integers(0, n - 1))
        size = data.draw(st.integers(1, n - o))
        s = data.draw(st.integers(1, 4)) * data.draw(st.sampled_from([1, -1]))
        count = 1 + (size - 1) // abs(s)
        start = o + (size - 1 if s < 0 else 0)
        stop = start + s * count
        offs.append(o), sizes.append(size), strides.append(s)
        slices.append(slice(start, stop if stop >= 0 else None, s))
    x = _array(shape, dtype, 3)
    assert_exact(dml.slice1(x, offs, sizes, strides, device=device), x[tuple(slices)])


@st.composite
def conv_params(draw):
    nd = draw(st.integers(1, 2))
    g = draw(st.integers(1, 3))
    cin_g, cout_g = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    k = tuple(draw(st.lists(st.integers(1, 3), min_size=nd, max_size=nd)))
    s = tuple(draw(st.lists(st.integers(1, 3), min_size=nd, max_size=nd)))
    d = tuple(draw(st.lists(st.integers(1, 2), min_size=nd, max_size=nd)))
    a = tuple(draw(st.lists(st.integers(0, 2), min_size=nd, max_size=nd)))
    b = tuple(draw(st.lists(st.integers(0, 2), min_size=nd, max_size=nd)))
    spatial = tuple(draw(st.integers((kk - 1) * dd + 1, 7)) for kk, dd in zip(k, d))
    n = draw(st.integers(1, 2))
    direction = draw(st.sampled_from([0, 1]))
    mode = draw(st.sampled_from([0, 1]))
    return nd, g, cin_g, cout_g, k, s, d, a, b, spatial, n, direction, mode


@SETTINGS
@given(p=conv_params(), device=st.sampled_from(["numpy", "cpu"]))
def test_convolution_matches_brute_force(p, device):
    nd, g, cin_g, cout_g, k, s, d, a, b, spatial, n, direction, mode = p
    rng = np.random.default_rng(4)
    x = rng.standard_normal((n, cin_g * g) + spatial)
    if direction == 0:
        w = rng.standard_normal((cout_g * g, cin_g) + k)
        cout = cout_g * g
    else:
        w = rng.standard_normal((cin_g * g, cout_g) + k)
        cout = cout_g * g
        natural = [(sz - 1) * st_ + (kk - 1) * dd + 1 - p0 - p1
                   for sz, st_, kk, dd, p0, p1 in zip(spatial, s, k, d, a, b)]
        if min(natural) < 1:
            return  # no valid transposed output for these paddings
    bias = rng.standard_normal(cout)
    y = dml.convolution(x, w, bias, s, d, a, b, group_count=g, mode=mode, direction=direction,
                        device=device)
    if direction == 0:
        ref = brute_conv_forward(x, w, bias, s, d, a, flip=mode == 0, groups=g,
                                 out_spatial=y.shape[2:])
    else:
        ref = brute_conv_backward(x, w, bias, s, d, a, y.shape[2:], flip=mode == 0, groups=g)
    assert_close(y, ref, np.float64)


@SETTINGS
@given(shape=shapes(lo_rank=3, hi_rank=5, hi=6), data=st.data(), pp=st.integers(1, 3),
       device=st.sampled_from(["numpy", "cpu"]))
def test_lp_pooling_cpu_agrees_with_numpy(shape, data, pp, device):
    nd = len(shape) - 2
    w = tuple(data.draw(st.integers(1, n)) for n in shape[2:])
    s = tuple(data.draw(st.lists(st.integers(1, 3), min_size=nd, max_size=nd)))
    a = tuple(data.draw(st.lists(st.integers(0, 1), min_size=nd, max_size=nd)))
    x = _array(shape, np.float64, 5)
    y = dml.lp_pooling(x, w, s, a, a, p=pp, device=device)
    ref = dml.lp_pooling(x, w, s, a, a, p=pp, device="numpy" if device == "cpu" else "cpu")
    assert_close(y, ref, np.float64)


GARBAGE = st.one_of(st.none(), st.integers(-3, 3), st.floats(allow_nan=True), st.text(max_size=2),
                    st.lists(st.integers(-2, 5), max_size=5), st.booleans())


@settings(max_examples=200, deadline=None, derandomize=True)
@given(field=st.sampled_from(["input_window_offsets", "input_window_sizes", "input_window_strides",
                              "output_tensor", "input_tensor"]), value=GARBAGE)
def test_any_garbage_field_raises_only_validation_error(field, value):
    t = dml.TensorDesc(dml.DataType.FLOAT32, (4, 4))
    args = dict(
        input_tensor=t,
        output_tensor=dml.TensorDesc(dml.DataType.FLOAT32, (2, 2)),
        input_window_offsets=(0, 1),
        input_window_sizes=(4, 3),
        input_window_strides=(-2, 2),
    )
    args[field] = value
    try:
        dml.Slice1OperatorDesc(**args)
    except dml.ValidationError as exc:
        assert str(exc).startswith("Slice1OperatorDesc.")


@settings(max_examples=200, deadline=None, derandomize=True)
@given(field=st.sampled_from(["strides", "dilations", "start_padding", "end_padding",
                              "output_padding", "group_count", "mode", "direction"]), value=GARBAGE)
def test_any_garbage_conv_field_raises_only_validation_error(field, value):
    f32 = dml.DataType.FLOAT32
    args = dict(
        input_tensor=dml.TensorDesc(f32, (1, 2, 5, 5)),
        filter_tensor=dml.TensorDesc(f32, (2, 2, 3, 3)),
        bias_tensor=None,
        output_tensor=dml.TensorDesc(f32, (1, 2, 3, 3)),
        mode=1,
        direction=0,
        strides=(1, 1),
        dilations=(1, 1),
        start_padding=(0, 0),
        end_padding=(0, 0),
        output_padding=(0, 0),
        group_count=1,
    )
    args[field] = value
    try:
        dml.ConvolutionOperatorDesc(**args)
    except dml.ValidationError as exc:
        assert str(exc).startswith("ConvolutionOperatorDesc.")


