"""Convolution against onnx.reference (Conv; ConvTranspose for group 1), brute-force loops, and
the adjoint identity for grouped backward convolution; activations; INFERRED choices pinned."""
import numpy as np
import pytest

import dml_numba as dml
from tests.helpers import (
    assert_close,
    brute_conv_backward,
    brute_conv_forward,
    onnx_run,
    random_array,
)

CC, CV = dml.ConvolutionMode.CROSS_CORRELATION, dml.ConvolutionMode.CONVOLUTION
FWD, BWD = dml.ConvolutionDirection.FORWARD, dml.ConvolutionDirection.BACKWARD

FORWARD_CASES = [  # x shape, w shape, strides, dilations, start, end, groups
    ((2, 3, 9, 10), (4, 3, 4, 5), (1, 2), (1, 1), (1, 2), (2, 0), 1),
    ((2, 4, 7, 6), (6, 2, 3, 2), (2, 1), (2, 1), (0, 1), (1, 1), 2),
    ((1, 6, 5, 8), (6, 1, 3, 3), (1, 1), (1, 2), (1, 1), (1, 1), 6),   # depthwise
    ((2, 2, 11), (3, 2, 4), (3,), (2,), (2,), (1,), 1),                # 3-D (1 spatial dim)
    ((1, 2, 4, 5, 3), (2, 1, 2, 3, 2), (1, 2, 1), (1, 1, 2), (1, 0, 1), (0, 2, 1), 2),  # 5-D
]


@pytest.mark.parametrize("case", FORWARD_CASES, ids=str)
def test_forward_matches_onnx_conv(device, case):
    xs, ws, s, d, a, b, g = case
    x, w = random_array(xs, np.float32), random_array(ws, np.float32, np.random.default_rng(1))
    bias = random_array((ws[0],), np.float32, np.random.default_rng(2))
    y = dml.convolution(x, w, bias, s, d, a, b, group_count=g, device=device)
    ref = onnx_run("Conv", [x, w, bias], strides=list(s), dilations=list(d),
                   pads=list(a) + list(b), group=g)
    assert_close(y, ref, np.float32)


@pytest.mark.parametrize("case", FORWARD_CASES[:2], ids=str)
def test_forward_convolution_mode_flips_the_kernel(device, case):
    xs, ws, s, d, a, b, g = case
    x, w = random_array(xs, np.float64), random_array(ws, np.float64, np.random.default_rng(1))
    y = dml.convolution(x, w, None, s, d, a, b, group_count=g, mode=CV, device=device)
    out = y.shape[2:]
    assert_close(y, brute_conv_forward(x, w, None, s, d, a, flip=True, groups=g, out_spatial=out),
                 np.float64)


BACKWARD_CASES = [  # x shape, w shape {C_in, C_out/G, k}, strides, dilations, start, end, groups
    ((2, 3, 4, 5), (3, 2, 3, 2), (2, 3), (1, 1), (1, 0), (0, 1), 1),
    ((1, 2, 5, 3), (2, 3, 2, 3), (1, 2), (2, 1), (0, 1), (1, 0), 1),
    ((2, 4, 3, 4), (4, 1, 3, 3), (2, 2), (1, 2), (1, 1), (0, 2), 2),
    ((1, 3, 3, 3), (3, 2, 2, 2), (3, 1), (1, 1), (0, 0), (0, 0), 3),
    ((2, 2, 6), (2, 2, 3), (2,), (2,), (1,), (2,), 1),
]


@pytest.mark.parametrize("case", [c for c in BACKWARD_CASES if c[-1] == 1], ids=str)
def test_backward_matches_onnx_conv_transpose_group1(device, case):
    xs, ws, s, d, a, b, g = case
    x, w = random_array(xs, np.float32), random_array(ws, np.float32, np.random.default_rng(1))
    y = dml.convolution(x, w, None, s, d, a, b, group_count=g, direction=BWD, device=device)
    ref = onnx_run("ConvTranspose", [x, w], strides=list(s), dilations=list(d),
                   pads=list(a) + list(b), group=g)
    assert_close(y, ref, np.float32)


@pytest.mark.parametrize("case", BACKWARD_CASES, ids=str)
@pytest.mark.parametrize("mode", [CC, CV], ids=["xcorr", "conv"])
def test_backward_is_the_adjoint_of_forward(device, case, mode):
    """<Fwd(u), v> == <u, Bwd(v)> with the same filter and parameters (docs/SEMANTICS.md §2), which
    also covers groups, where onnx.reference's ConvTranspose is broken."""
    xs, ws, s, d, a, b, g = case
    rng = np.random.default_rng(3)
    v, w = random_array(xs, np.float64, rng), random_array(ws, np.float64, rng)
    bwd = dml.convolution(v, w, None, s, d, a, b, group_count=g, mode=mode, direction=BWD,
                          device=device)
    u = random_array(bwd.shape, np.float64, rng)
    fwd = dml.convolution(u, w, None, s, d, a, b, group_count=g, mode=mode, device=device)
    assert fwd.shape == v.shape
    assert np.vdot(fwd, v) == pytest.approx(np.vdot(u, bwd), rel=1e-10)


@pytest.mark.parametrize("case", BACKWARD_CASES[2:4], ids=str)
def test_backward_grouped_brute_force_scatter(device, case):
    xs, ws, s, d, a, b, g = case
    x, w = random_array(xs, np.float32), random_array(ws, np.float32, np.random.default_rng(1))
    bias = random_array((ws[1] * g,), np.float32, np.random.default_rng(2))
    y = dml.convolution(x, w, bias, s, d, a, b, group_count=g, direction=BWD, device=device)
    assert_close(y, brute_conv_backward(x, w, bias, s, d, a, y.shape[2:], groups=g), np.float32)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64],
                         ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("direction", [FWD, BWD], ids=["fwd", "bwd"])
def test_every_float_type(device, dtype, direction):
    x = random_array((2, 4, 5, 6), dtype)
    w = random_array((4, 2, 3, 2), dtype, np.random.default_rng(1))
    bias = random_array((4,), dtype, np.random.default_rng(2))
    y = dml.convolution(x, w, bias, (2, 1), (1, 2), (1, 0), (0, 1), group_count=2,
                        direction=direction, device=device)
    if direction == FWD:
        ref = brute_conv_forward(x, w, bias, (2, 1), (1, 2), (1, 0), groups=2,
                                 out_spatial=y.shape[2:])
    else:
        ref = brute_conv_backward(x, w, bias, (2, 1), (1, 2), (1, 0), y.shape[2:], groups=2)
    assert_close(y, ref, dtype)


def test_inferred_output_padding_computes_every_element(device):
    """INFERRED (docs/SEMANTICS.md §2): OutputPadding only enlarges the output; the extra positions
    are
    computed by the transposed formula (ONNX/PyTorch), not literal zeros. They differ from the
    literal-zeros reading exactly when EndPadding > 0, as here."""
    x = random_array((1, 2, 4), np.float32)
    w = random_array((2, 1, 3), np.float32, np.random.default_rng(1))
    y = dml.convolution(x, w, None, (2,), (1,), (0,), (2,), (1,), direction=BWD, device=device)
    assert y.shape == (1, 1, 8)  # (4-1)*2 + 3 - 0 - 2 + 1
    ref = onnx_run("ConvTranspose", [x, w], strides=[2], pads=[0, 2], output_padding=[1])
    assert_close(y, ref, np.float32)
    assert y[0, 0, -1] != 0  # the literal-zeros reading would give 0 here


def test_inferred_backward_accepts_larger_output_without_output_padding(device):
    """INFERRED: with OutputPadding 0, outputs up to stride-1 larger than the natural size are
    accepted (TF's Conv2DBackpropInput shapes) and computed by the same formula."""
    x = random_array((1, 1, 3), np.float32)
    w = random_array((1, 1, 2), np.float32, np.random.default_rng(1))
    t = dml.DataType.FLOAT32
    desc = dml.ConvolutionOperatorDesc(dml.TensorDesc(t, (1, 1, 3)), dml.TensorDesc(t, (1, 1, 2)),
                                       None, dml.TensorDesc(t, (1, 1, 8)), CC, BWD, (3,), (1,),
                                       (0,), (0,), (0,), 1)
    y = dml.compile_operator(desc, device)(x, w)
    assert_close(y, brute_conv_backward(x, w, None, (3,), (1,), (0,), (8,)), np.float32)


def test_impulse_response_recovers_the_filter(device):
    """One-hot input at every position x a powers-of-two kernel (ONNX test_conv style)."""
    w = (2.0 ** np.arange(6)).reshape(1, 1, 2, 3)
    for pos in [(0, 0), (1, 2), (3, 4)]:
        x = np.zeros((1, 1, 4, 5))
        x[(0, 0) + pos] = 1
        y = dml.convolution(x, w, start_padding=(1, 2), end_padding=(1, 2), device=device)
        ref = brute_conv_forward(x, w, None, (1, 1), (1, 1), (1, 2), out_spatial=y.shape[2:])
        np.testing.assert_array_equal(y, ref)
