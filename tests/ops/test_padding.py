"""Padding against numpy.pad (an independent oracle) for every mode, incl. pads wider than the
input, every dtype and rank 1-8; the INFERRED choices each pinned by name."""
import numpy as np
import pytest

import dml_numba as dml
from tests.helpers import DTYPES, assert_exact, random_array

NP_MODE = {dml.PaddingMode.EDGE: "edge", dml.PaddingMode.REFLECTION: "reflect",
           dml.PaddingMode.SYMMETRIC: "symmetric", dml.PaddingMode.WRAP: "wrap"}

CASES = [  # (shape, start, end): never only N = C = 1 or square
    ((2, 3, 5, 4), (1, 0, 2, 3), (0, 2, 4, 1)),
    ((3, 2, 1), (4, 5, 3), (6, 1, 2)),          # size-1 axis padded, pads wider than input
    ((7,), (15,), (9,)),                        # pads > 2x the input (folds repeatedly)
    ((2, 1, 3, 1, 2), (0, 1, 2, 3, 1), (1, 0, 4, 2, 5)),
    ((2, 2, 1, 2, 1, 2, 1, 3), (1, 0, 1, 0, 2, 0, 0, 1), (0, 1, 0, 2, 0, 1, 1, 0)),  # 8-D
]


@pytest.mark.parametrize("mode", list(NP_MODE), ids=lambda m: m.name)
@pytest.mark.parametrize("shape,start,end", CASES, ids=lambda v: str(v))
def test_mirror_modes_match_numpy_pad(device, mode, shape, start, end):
    x = random_array(shape, np.float32)
    y = dml.padding(x, start, end, mode, device=device)
    assert_exact(y, np.pad(x, list(zip(start, end)), mode=NP_MODE[mode]))


@pytest.mark.parametrize("shape,start,end", CASES[:3], ids=lambda v: str(v))
def test_constant_matches_numpy_pad(device, shape, start, end):
    x = random_array(shape, np.int32)
    y = dml.padding(x, start, end, dml.PaddingMode.CONSTANT, -7, device=device)
    assert_exact(y, np.pad(x, list(zip(start, end)), constant_values=-7))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("mode", list(dml.PaddingMode), ids=lambda m: m.name)
def test_every_dtype(device, dtype, mode):
    x = random_array((2, 3, 4), dtype)
    value = 3 if np.dtype(dtype).kind != "f" else 2.5
    y = dml.padding(x, (1, 0, 5), (0, 2, 6), mode, value, device=device)
    if mode == dml.PaddingMode.CONSTANT:
        expected = np.pad(x, [(1, 0), (0, 2), (5, 6)], constant_values=value)
    else:
        expected = np.pad(x, [(1, 0), (0, 2), (5, 6)], mode=NP_MODE[mode])
    assert_exact(y, expected)


def test_inferred_wrap_is_i_mod_n(device):
    """INFERRED (docs/SEMANTICS.md §4): WRAP reads input index (o - start) mod n."""
    x = np.arange(3, dtype=np.int64)
    y = dml.padding(x, (4,), (5,), dml.PaddingMode.WRAP, device=device)
    assert y.tolist() == [(i - 4) % 3 for i in range(12)]


def test_inferred_reflection_of_a_single_element_repeats_it(device):
    """INFERRED: REFLECTION with n == 1 is undefined in the docs; it reads element 0 (numpy)."""
    y = dml.padding(np.array([5], np.uint8), (3,), (2,), dml.PaddingMode.REFLECTION, device=device)
    assert y.tolist() == [5] * 6


@pytest.mark.parametrize("dtype,value,expected", [
    (np.int32, 10.6, 10),          # the doc's example
    (np.int32, -10.6, -10),        # toward zero, not floor
    (np.int8, 1000.0, 127),        # saturates
    (np.int8, -1000.0, -128),
    (np.uint8, -3.5, 0),
    (np.uint16, float("nan"), 0),  # NaN -> 0
    (np.int64, float("inf"), np.iinfo(np.int64).max),
    (np.int16, float("-inf"), np.iinfo(np.int16).min),  # -inf saturates low
    (np.uint8, float("-inf"), 0),
])
def test_inferred_padding_value_truncates_and_saturates(device, dtype, value, expected):
    """INFERRED (docs/SEMANTICS.md §4): PADDING's FLOAT value truncates toward zero, saturates,
    NaN -> 0."""
    t = dml.DataType.from_numpy(dtype)
    desc = dml.PaddingOperatorDesc(dml.TensorDesc(t, (2,)), dml.TensorDesc(t, (4,)),
                                   dml.PaddingMode.CONSTANT, value, (1,), (1,))
    y = dml.compile_operator(desc, device)(np.array([1, 2], dtype))
    assert y.tolist() == [expected, 1, 2, expected]


def test_padding_value_float16_rounds_to_nearest(device):
    t = dml.DataType.FLOAT16
    desc = dml.PaddingOperatorDesc(dml.TensorDesc(t, (1,)), dml.TensorDesc(t, (2,)),
                                   dml.PaddingMode.CONSTANT, 0.1, (1,), (0,))
    y = dml.compile_operator(desc, device)(np.array([1], np.float16))
    assert y.view(np.uint16)[0] == np.float16(0.1).view(np.uint16)


def test_padding1_int64_value_is_exact(device):
    """PADDING1 carries 64-bit integers exactly (a FLOAT could not: the reason it exists)."""
    t = dml.DataType.INT64
    big = 2**62 + 1
    desc = dml.Padding1OperatorDesc(dml.TensorDesc(t, (2,)), dml.TensorDesc(t, (3,)),
                                    dml.PaddingMode.CONSTANT, t, big, (0,), (1,))
    y = dml.compile_operator(desc, device)(np.array([1, 2], np.int64))
    assert y.tolist() == [1, 2, big]


def test_padding1_uint64_max_value(device):
    t = dml.DataType.UINT64
    top = 2**64 - 1
    desc = dml.Padding1OperatorDesc(dml.TensorDesc(t, (1,)), dml.TensorDesc(t, (2,)),
                                    dml.PaddingMode.CONSTANT, t, top, (1,), (0,))
    assert dml.compile_operator(desc, device)(np.array([7], np.uint64)).tolist() == [top, 7]


def test_nan_and_signed_zero_move_bit_exactly(device):
    x = np.array([np.nan, -0.0, np.inf, 1.0], np.float16)
    assert_exact(dml.padding(x, (2,), (3,), "symmetric", device=device),
                 np.pad(x, (2, 3), mode="symmetric"))


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_constant_padding_with_a_non_finite_value(device, value):
    """The constant reaches the generated kernel as a literal: infinities and NaN included."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = dml.padding(x, (1, 0), (0, 2), "constant", value, device=device)
    np.testing.assert_array_equal(y, np.pad(x, ((1, 0), (0, 2)), constant_values=value))


@pytest.mark.parametrize("mode", list(dml.PaddingMode))
@pytest.mark.parametrize("start, end", [((0,), (3,)), ((2,), (0,)), ((0,), (0,))])
def test_one_dimensional_parallel_kernels_compile_for_every_mode(mode, start, end):
    """A 1-D parallel kernel's loop index is unsigned: an EDGE map with nothing in front once
    compared it with a signed 0 (a float in Numba) and did not compile."""
    x = np.arange(5, dtype=np.float32)
    out = (5 + start[0] + end[0],)
    t = dml.DataType.FLOAT32
    desc = dml.Padding1OperatorDesc(dml.TensorDesc(t, (5,)), dml.TensorDesc(t, out), mode, t, 4,
                                    start, end)
    np_mode = {0: "constant", 1: "edge", 2: "reflect", 3: "symmetric", 4: "wrap"}[int(mode)]
    kw = {"constant_values": 4} if mode == dml.PaddingMode.CONSTANT else {}
    np.testing.assert_array_equal(dml.compile_operator(desc, "cpu", parallel=True)(x),
                                  np.pad(x, [(start[0], end[0])], mode=np_mode, **kw))
