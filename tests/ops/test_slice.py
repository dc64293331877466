"""Slice1 and Slice against NumPy basic slicing (incl. negative steps via ORT's mapping) and a
brute-force loop; every dtype; the INFERRED stride-0 rejection of SLICE."""
import itertools

import numpy as np
import pytest

import dml_numba as dml
from tests.helpers import DTYPES, assert_exact, random_array, sampled


def ort_slice_window(dim, start, end, step):
    """ONNX Slice -> DML SLICE1 window, as ORT maps it (docs/SEMANTICS.md §5)."""
    start = start + dim if start < 0 else start
    end = end + dim if end < 0 else end
    if step < 0:
        start, end = end + 1, start + 1
    start, end = min(max(start, 0), dim), min(max(end, 0), dim)
    size = max(end - start, 0)
    return start, size, step, -(-size // abs(step))


@pytest.mark.parametrize("shape,slices", [
    ((10,), [(3, 0, -2)]),                               # SEMANTICS: copies x[3], x[1]
    ((6, 7), [(5, -7, -1), (1, 7, 3)]),
    ((4, 5, 6), [(0, 4, 1), (4, 0, -3), (-1, -6, -2)]),
    ((3, 4, 2, 5), [(2, 0, -1), (0, 4, 2), (1, 2, 1), (-2, -5, -1)]),
], ids=str)
def test_matches_numpy_slicing(device, shape, slices):
    x = random_array(shape, np.float32)
    offs, sizes, strides = [], [], []
    for dim, (a, b, s) in zip(shape, slices):
        o, n, st, _ = ort_slice_window(dim, a, b, s)
        offs.append(o), sizes.append(n), strides.append(st)
    y = dml.slice1(x, offs, sizes, strides, device=device)
    assert_exact(y, x[tuple(slice(a, b, s) for a, b, s in slices)])


def test_fewer_elements_than_reachable(device):
    """Out.Sizes may be smaller than the window allows: the first elements are copied."""
    x = np.arange(30, dtype=np.int32).reshape(5, 6)
    t = dml.DataType.INT32
    desc = dml.Slice1OperatorDesc(dml.TensorDesc(t, (5, 6)), dml.TensorDesc(t, (2, 1)),
                                  (0, 1), (5, 5), (-2, 2))
    y = dml.compile_operator(desc, device)(x)
    brute = np.array([[x[4 - 2 * i, 1 + 2 * j] for j in range(1)] for i in range(2)], np.int32)
    assert_exact(y, brute)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_every_dtype_brute_force(device, dtype):
    x = random_array((3, 4, 5), dtype)
    offs, sizes, strides = (1, 0, 0), (2, 4, 5), (-1, 3, -2)
    y = dml.slice1(x, offs, sizes, strides, device=device)
    starts = [o + (n - 1 if s < 0 else 0) for o, n, s in zip(offs, sizes, strides)]
    out_shape = [1 + (n - 1) // abs(s) for n, s in zip(sizes, strides)]
    brute = np.empty(out_shape, dtype)
    for o in itertools.product(*(range(n) for n in out_shape)):
        brute[o] = x[tuple(a + s * c for a, s, c in zip(starts, strides, o))]
    assert_exact(y, brute)


def test_slice_canonicalises_to_slice1(device):
    t = dml.DataType.UINT8
    x = random_array((5, 9), np.uint8)
    desc = dml.SliceOperatorDesc(dml.TensorDesc(t, (5, 9)), dml.TensorDesc(t, (2, 3)),
                                 (1, 2), (2, 3), (3, 3))
    assert_exact(dml.compile_operator(desc, device)(x), x[1:5:3, 2:9:3])


def test_inferred_slice_rejects_stride_zero():
    """INFERRED (docs/SEMANTICS.md §5): SLICE's page does not exclude stride 0; dml_numba rejects
    it,
    as SLICE1 does, rather than silently repeating one element."""
    t = dml.DataType.FLOAT32
    with pytest.raises(dml.ValidationError, match=r"SliceOperatorDesc\.strides\[1\]: 0 is invalid"):
        dml.SliceOperatorDesc(dml.TensorDesc(t, (4, 4)), dml.TensorDesc(t, (2, 2)), (0, 0),
                              (2, 2), (1, 0))


#: every element width serial; the parallel variant (the serial loop nest, its outer loop a
#: prange) by default with the most lanes and the fewest, every width with --runslow
STRIDED_VARIANTS = [(d, p) for p in (False, True)
                    for d in (np.float32, np.float16, np.int8, np.float64, np.uint16)]


@pytest.mark.parametrize("dtype,parallel", sampled(
    STRIDED_VARIANTS, lambda run: f"{np.dtype(run[0]).name}-{'parallel' if run[1] else 'serial'}",
    lambda run: not run[1] or run[0] in (np.int8, np.float64)))
@pytest.mark.parametrize("stride", [-4, -3, -2, 2, 3, 4])
def test_strided_rows_are_read_in_vectors(stride, dtype, parallel):
    """Last-axis strides of 2-4 either way are read on the cpu device as one vector load and a
    shuffle per step (whole vectors, then a scalar remainder): every element width, rank 1 and
    3, both variants, against NumPy slicing; an offset row start and a window shorter than the
    row."""
    from dml_numba.cpu._emit import strided_lanes

    for shape, offs, sizes in [((3, 2, 301), (1, 0, 5), (2, 2, 290)), ((4001,), (3,), (3990,))]:
        x = random_array(shape, dtype)
        strides = (1,) * (len(shape) - 1) + (stride,)
        desc = dml.functional.slice1_desc(x, offs, sizes, strides)
        op = dml.compile_operator(desc, "cpu", parallel=parallel)
        lanes = strided_lanes(desc.gather_plan(), np.dtype(dtype).itemsize)
        assert lanes and "vload_stride" in op.source
        assert desc.output_tensor.sizes[-1] % lanes  # a remainder after the vectors
        window = tuple(slice(o + (n - 1 if s < 0 else 0), None, s) if s < 0 else slice(o, o + n, s)
                       for o, n, s in zip(offs, sizes, strides))
        expected = x[window][tuple(slice(0, k) for k in desc.output_tensor.sizes)]
        assert_exact(op(x), expected)
