"""Every worked example of DirectML's reference pages for these operators, and of
docs/SEMANTICS.md, exactly, on every device.

The expected arrays are copied from the pages (as test data, here), not from our output.
"""
import numpy as np
import pytest

import dml_numba as dml
from tests.conftest import ALL_DEVICES


@pytest.fixture(params=ALL_DEVICES)
def device(request):
    """The seed examples must hold on every device, CUDA (hardware or simulator) included."""
    return request.param

F32 = dml.DataType.FLOAT32
SEED_PAD_INPUT = np.array([[1, 2, 3, 4], [5, 6, 7, 8], [1, 2, 3, 4], [5, 6, 7, 8]],
                          np.float32).reshape(1, 1, 4, 4)

SEED_PAD = {  # seeds/000: DML_PADDING_OPERATOR_DESC examples 1-4
    dml.PaddingMode.CONSTANT: [[9] * 10, [9, 9, 1, 2, 3, 4, 9, 9, 9, 9], [9, 9, 5, 6, 7, 8, 9, 9, 9, 9],
                               [9, 9, 1, 2, 3, 4, 9, 9, 9, 9], [9, 9, 5, 6, 7, 8, 9, 9, 9, 9],
                               [9] * 10, [9] * 10, [9] * 10],
    dml.PaddingMode.EDGE: [[1, 1, 1, 2, 3, 4, 4, 4, 4, 4], [1, 1, 1, 2, 3, 4, 4, 4, 4, 4],
                           [5, 5, 5, 6, 7, 8, 8, 8, 8, 8], [1, 1, 1, 2, 3, 4, 4, 4, 4, 4],
                           [5, 5, 5, 6, 7, 8, 8, 8, 8, 8], [5, 5, 5, 6, 7, 8, 8, 8, 8, 8],
                           [5, 5, 5, 6, 7, 8, 8, 8, 8, 8], [5, 5, 5, 6, 7, 8, 8, 8, 8, 8]],
    dml.PaddingMode.REFLECTION: [[7, 6, 5, 6, 7, 8, 7, 6, 5, 6], [3, 2, 1, 2, 3, 4, 3, 2, 1, 2]] * 4,
    dml.PaddingMode.SYMMETRIC: [[2, 1, 1, 2, 3, 4, 4, 3, 2, 1], [2, 1, 1, 2, 3, 4, 4, 3, 2, 1],
                                [6, 5, 5, 6, 7, 8, 8, 7, 6, 5], [2, 1, 1, 2, 3, 4, 4, 3, 2, 1],
                                [6, 5, 5, 6, 7, 8, 8, 7, 6, 5], [6, 5, 5, 6, 7, 8, 8, 7, 6, 5],
                                [2, 1, 1, 2, 3, 4, 4, 3, 2, 1], [6, 5, 5, 6, 7, 8, 8, 7, 6, 5]],
}


@pytest.mark.parametrize("mode", list(SEED_PAD), ids=lambda m: m.name)
def test_seed_padding_examples(device, mode):
    desc = dml.PaddingOperatorDesc(dml.TensorDesc(F32, (1, 1, 4, 4)),
                                   dml.TensorDesc(F32, (1, 1, 8, 10)), mode, 9.0,
                                   (0, 0, 1, 2), (0, 0, 3, 4))
    y = dml.compile_operator(desc, device)(SEED_PAD_INPUT)
    np.testing.assert_array_equal(y, np.array(SEED_PAD[mode], np.float32).reshape(1, 1, 8, 10))


def test_seed_tile_example(device):  # seeds/003
    desc = dml.TileOperatorDesc(dml.TensorDesc(F32, (1, 1, 2, 3)), dml.TensorDesc(F32, (1, 1, 6, 9)),
                                (1, 1, 3, 3))
    y = dml.compile_operator(desc, device)(np.array([[[[1, 2, 3], [4, 5, 6]]]], np.float32))
    row_a, row_b = [1, 2, 3] * 3, [4, 5, 6] * 3
    np.testing.assert_array_equal(y[0, 0], np.array([row_a, row_b] * 3, np.float32))


@pytest.mark.parametrize("strides,expected", [((1, 1, 2, 2), [[2, 4], [10, 12]]),
                                              ((1, 1, -2, 2), [[14, 16], [6, 8]])])
def test_seed_slice1_examples(device, strides, expected):  # seeds/004
    desc = dml.Slice1OperatorDesc(dml.TensorDesc(F32, (1, 1, 4, 4)), dml.TensorDesc(F32, (1, 1, 2, 2)),
                                  (0, 0, 0, 1), (1, 1, 4, 3), strides)
    y = dml.compile_operator(desc, device)(np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4))
    np.testing.assert_array_equal(y[0, 0], np.array(expected, np.float32))


@pytest.mark.parametrize("offsets,sizes,strides,expected", [
    ((0, 0, 1, 2), (1, 1, 3, 2), (1, 1, 1, 1), [[7, 8], [11, 12], [15, 16]]),
    ((0, 0, 1, 0), (1, 1, 2, 2), (1, 1, 2, 3), [[5, 8], [13, 16]]),
])
def test_slice_doc_examples(device, offsets, sizes, strides, expected):  # docs/SEMANTICS.md §5
    desc = dml.SliceOperatorDesc(dml.TensorDesc(F32, (1, 1, 4, 4)), dml.TensorDesc(F32, sizes),
                                 offsets, sizes, strides)
    y = dml.compile_operator(desc, device)(np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4))
    np.testing.assert_array_equal(y[0, 0], np.array(expected, np.float32))


def _variants(device):
    """Every kernel of a device: on CUDA also the tiled (shared-memory) and direct kernels."""
    return [{}] + ([{"algorithm": "tiled"}, {"algorithm": "direct"}] if device == "cuda" else [])


def _conv(device, x, w, out_len, mode, direction, strides, pads, **options):
    desc = dml.ConvolutionOperatorDesc(
        dml.TensorDesc(F32, (1, 1, len(x))), dml.TensorDesc(F32, (1, 1, len(w))), None,
        dml.TensorDesc(F32, (1, 1, out_len)), mode, direction, (strides,), (1,), (pads,), (pads,),
        (0,), 1)
    return dml.compile_operator(desc, device, **options)(
        np.array(x, np.float32).reshape(1, 1, -1), np.array(w, np.float32).reshape(1, 1, -1))[0, 0]


CC, CV = dml.ConvolutionMode.CROSS_CORRELATION, dml.ConvolutionMode.CONVOLUTION
FWD, BWD = dml.ConvolutionDirection.FORWARD, dml.ConvolutionDirection.BACKWARD


@pytest.mark.parametrize("mode,direction,x,out_len,pads,expected", [
    (CC, FWD, [1, 2, 3, 4, 5], 3, 1, [210, 432, 54]),               # docs/SEMANTICS.md §2
    (CV, FWD, [1, 2, 3, 4, 5], 3, 1, [12, 234, 450]),
    (CC, BWD, [1, 2, 3], 7, 0, [1, 10, 102, 20, 203, 30, 300]),     # docs/SEMANTICS.md §2
    (CC, BWD, [1, 2, 3], 5, 1, [10, 102, 20, 203, 30]),
    (CV, BWD, [1, 2, 3], 7, 0, [100, 10, 201, 20, 302, 30, 3]),
], ids=["cc-fwd", "conv-fwd", "cc-bwd", "cc-bwd-pad", "conv-bwd"])
def test_convolution_worked_examples(device, mode, direction, x, out_len, pads, expected):
    for options in _variants(device):
        y = _conv(device, x, [1, 10, 100], out_len, mode, direction, 2, pads, **options)
        np.testing.assert_array_equal(y, np.array(expected, np.float32))


def test_lp_pooling_uses_absolute_value(device):  # docs/SEMANTICS.md §3: P=1 over [-1, -2] -> 3, not -3
    desc = dml.LpPoolingOperatorDesc(dml.TensorDesc(F32, (1, 1, 1, 2)), dml.TensorDesc(F32, (1, 1, 1, 1)),
                                     (1, 1), (1, 2), (0, 0), (0, 0), 1)
    for options in _variants(device):
        y = dml.compile_operator(desc, device, **options)(np.array([[[[-1, -2]]]], np.float32))
        assert y.reshape(-1).tolist() == [3.0]


@pytest.mark.parametrize("mode,expected", [
    (dml.PaddingMode.REFLECTION, "babababababa"), (dml.PaddingMode.SYMMETRIC, "aabbaabbaabb"),
    (dml.PaddingMode.WRAP, "babababababa"), (dml.PaddingMode.EDGE, "aaaaaabbbbbb"),
])
def test_semantics_pad_two_elements_by_five(device, mode, expected):  # docs/SEMANTICS.md §4 table
    y = dml.padding(np.array([1, 2], np.int32), (5,), (5,), mode, device=device)
    assert "".join("ab"[v - 1] for v in y) == expected


def test_semantics_reflect_three_by_seven(device):
    # The published example prints "2 3 2 1 2 3 2 1 [1 2 3] 2 1 2 3 2 1 2": 8 values before the
    # input for a pad of 7, a typo. The 17 values below follow the period-4 formula and numpy.pad.
    y = dml.padding(np.array([1, 2, 3], np.int32), (7,), (7,), "reflection", device=device)
    expected = [2, 3, 2, 1, 2, 3, 2, 1, 2, 3, 2, 1, 2, 3, 2, 1, 2]
    assert y.tolist() == expected == np.pad([1, 2, 3], 7, mode="reflect").tolist()


@pytest.mark.parametrize("mode,expected", [("reflection", [3, 2, 1, 2, 3, 4, 3, 2, 1, 2]),
                                           ("symmetric", [2, 1, 1, 2, 3, 4, 4, 3, 2, 1])])
def test_semantics_row_examples(device, mode, expected):
    y = dml.padding(np.array([1, 2, 3, 4], np.int16), (2,), (4,), mode, device=device)
    assert y.tolist() == expected
