"""The generated CPU loop nest in both variants (prange-parallel and serial) on every catalogue
case agrees with the vectorised device (tiny shapes would otherwise always pick serial); and the
automatic choice on shapes on both sides of the threshold agrees with NumPy's own functions."""
import numpy as np
import pytest

import dml_numba as dml
from dml_numba.cpu._emit import PARALLEL_MIN_WORK
from tests.cases import catalogue, compare

CASES = catalogue()


@pytest.mark.parametrize("parallel", [True, False], ids=["parallel", "serial"])
@pytest.mark.parametrize("name", list(CASES))
def test_cpu_variants_agree_with_numpy(name, parallel):
    desc, inputs = CASES[name]
    ref = dml.compile_operator(desc, "numpy")(*inputs)
    op = dml.compile_operator(desc, "cpu", parallel=parallel)
    assert ("numba.prange" in op.source) == parallel
    compare(desc, op(*inputs), ref)


SIDES = {"below": PARALLEL_MIN_WORK - 7, "above": PARALLEL_MIN_WORK + 5}


@pytest.mark.parametrize("side", list(SIDES))
@pytest.mark.parametrize("value", [0, 3])
@pytest.mark.parametrize("shape", ["1d", "2d"])
def test_constant_padding_on_both_sides_of_the_threshold(side, value, shape):
    n = SIDES[side]
    x = np.arange(n, dtype=np.int32) % 1000 + 7
    pads = [(3, 2)]
    if shape == "2d":
        x = x[: n // 64 * 64].reshape(64, -1)
        pads = [(1, 2), (3, 2)]
    start, end = tuple(p[0] for p in pads), tuple(p[1] for p in pads)
    y = dml.padding(x, start, end, "constant", value, device="cpu")
    op = dml.compile_operator(dml.Padding1OperatorDesc(
        dml.TensorDesc.like(x), dml.TensorDesc.like(y), dml.PaddingMode.CONSTANT,
        dml.DataType.INT32, value, start, end), "cpu")
    assert ("numba.prange" in op.source) == (y.size >= PARALLEL_MIN_WORK)
    np.testing.assert_array_equal(y, np.pad(x, pads, constant_values=value))


@pytest.mark.parametrize("side", list(SIDES))
def test_tile_and_slice_on_both_sides_of_the_threshold(side):
    x = np.arange(SIDES[side] // 2, dtype=np.float32)
    np.testing.assert_array_equal(dml.tile(x, (2,), device="cpu"), np.tile(x, 2))
    np.testing.assert_array_equal(dml.slice1(np.tile(x, 2), (1,), (2 * x.size - 1,), (-1,),
                                             device="cpu"), np.tile(x, 2)[:0:-1])
