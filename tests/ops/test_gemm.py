"""GEMM against onnx.reference Gemm, NumPy's matmul in float64 and PyTorch; transposes, alpha,
beta, C broadcast, batches, every float type, the fused activation."""
import numpy as np
import pytest

import dml_numba as dml
from tests.helpers import assert_close, onnx_run, random_array


@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
def test_matches_onnx_reference(device, trans_a, trans_b):
    rng = np.random.default_rng(3)
    a = random_array((7, 5) if trans_a else (5, 7), np.float32, rng)
    b = random_array((6, 7) if trans_b else (7, 6), np.float32, rng)
    c = random_array((6,), np.float32, rng)
    y = dml.gemm(a, b, c, trans_a, trans_b, 0.75, -1.5, device=device)
    ref = onnx_run("Gemm", [a, b, c], transA=int(trans_a), transB=int(trans_b), alpha=0.75,
                   beta=-1.5)
    assert_close(y, ref, np.float32)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64],
                         ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("rank", [2, 3, 4])
def test_batches_and_types_against_matmul(device, dtype, rank):
    rng = np.random.default_rng(rank)
    batch = (2, 3)[:rank - 2]
    a = random_array(batch + (4, 9), dtype, rng)
    b = random_array(batch + (9, 5), dtype, rng)
    c = random_array(batch + (4, 5), dtype, rng)
    y = dml.gemm(a, b, c, alpha=2.0, beta=0.5, device=device)
    ref = 2.0 * np.matmul(a.astype(np.float64), b.astype(np.float64)) + 0.5 * c
    assert_close(y, ref, dtype)


def test_against_pytorch_linear(device):
    torch = pytest.importorskip("torch", reason="PyTorch is optional: not installed")
    x = random_array((8, 64), np.float32)
    w = random_array((10, 64), np.float32, np.random.default_rng(1))
    bias = random_array((10,), np.float32, np.random.default_rng(2))
    ref = torch.nn.functional.linear(*(torch.from_numpy(v) for v in (x, w, bias)))
    assert_close(dml.gemm(x, w, bias, trans_b=True, device=device), ref.numpy(), np.float32)


def test_fused_activation_and_no_c(device):
    a, b = random_array((3, 4), np.float32), random_array((4, 2), np.float32)
    y = dml.gemm(a, b, fused_activation=dml.ActivationReluOperatorDesc(), device=device)
    assert_close(y, np.maximum(a.astype(np.float64) @ b, 0), np.float32)


@pytest.mark.parametrize("b_sizes, message", [
    ((5, 2), r"GemmOperatorDesc.b_tensor.sizes: \(5, 2\) is invalid; expected K = 4"),
    ((2, 4, 2), r"a_tensor.*expected 3 dimensions|b_tensor.sizes: \(2, 4, 2\) is invalid; "
                "expected 2 dimensions"),
])
def test_invalid_shapes_are_named(b_sizes, message):
    t = dml.TensorDesc
    with pytest.raises(dml.ValidationError, match=message):
        dml.GemmOperatorDesc(t(1, (3, 4)), t(1, b_sizes), None, t(1, (3, 2)), 0, 0, 1.0, 0.0)


def test_c_of_another_shape_is_named():
    t = dml.TensorDesc
    with pytest.raises(dml.ValidationError, match=r"GemmOperatorDesc.c_tensor.sizes: \(1, 2\) "
                                                  r"is invalid; expected \(3, 2\)"):
        dml.GemmOperatorDesc(t(1, (3, 4)), t(1, (4, 2)), t(1, (1, 2)), t(1, (3, 2)), 0, 0, 1.0,
                             1.0)


@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("m, k, n", [(1, 37, 1000), (2, 19, 33), (3, 8, 17)])
def test_rows_cut_into_column_blocks_against_matmul(trans_a, trans_b, m, k, n):
    """The loop nest's items are (batch, row, column block): a classifier's one row over
    1,000 columns in 16 blocks of 63 (the last 55), uneven blocks, and a row too narrow to
    cut (17 columns: one block); each transposition, against float64 matmul."""
    from dml_numba.cpu.gemm import column_blocks

    assert column_blocks(m, n) == {1000: 16, 33: 2, 17: 1}[n]
    rng = np.random.default_rng(n)
    a = random_array((k, m) if trans_a else (m, k), np.float32, rng)
    b = random_array((n, k) if trans_b else (k, n), np.float32, rng)
    c = random_array((n,), np.float32, rng)
    y = dml.gemm(a, b, c, trans_a, trans_b, 1.5, 0.5, device="cpu")
    ref = 1.5 * (a.T if trans_a else a).astype(np.float64) @ (b.T if trans_b else b) + 0.5 * c
    assert_close(y, ref, np.float32)


@pytest.mark.parametrize("lanes", [4, 8, 16])
@pytest.mark.parametrize("batch, m, k, n, trans_a, dtype", [
    ((), 2, 1280, 1000, False, np.float32),  # a classifier at batch 2: 2 x 2 tiles
    ((), 8, 37, 33, True, np.float32),  # K's last elements one by one; an odd block's last
    ((2,), 5, 19, 7, False, np.float16),  # a row tile of 1 after the full ones, two batches
    ((2, 3), 16, 8, 1, False, np.float32),  # one column: 1-column tiles only
    ((), 3, 3, 2, True, np.float32),  # K shorter than a vector
    ((), 1, 37, 9, False, np.float32),  # one row: K in four partial sums, vectors and a tail
    ((2,), 1, 300, 40, True, np.float16),  # one row, two batches, K's runs of four vectors
])
def test_the_rows_kernel_against_matmul(lanes, batch, m, k, n, trans_a, dtype):
    """B transposed with few rows: the rows kernel (its tiles planned for 4, 8 and 16 lanes)
    against float64 matmul, with alpha, beta * C and an activation that has no vector form;
    every output written (the output starts as NaN)."""
    from dml_numba._host import Host, planned_for
    from dml_numba.cpu.gemm import GemmKernel, RowsPlan

    rng = np.random.default_rng(m * 100 + n)
    a = random_array(batch + ((k, m) if trans_a else (m, k)), dtype, rng)
    b = random_array(batch + (n, k), dtype, rng)
    c = random_array(batch + (m, n), dtype, rng)
    act = dml.ActivationLeakyReluOperatorDesc(0.1)
    desc = dml.functional.gemm_desc(a, b, c, trans_a, True, 1.5, 0.5, act)
    with planned_for(Host(lanes, 2)):
        kernel = GemmKernel(desc, {"parallel": None})
    assert kernel.key.kernel == "rows" and kernel.key.plan == RowsPlan.for_host(m, n,
                                                                                 Host(lanes, 2))
    y = np.full(batch + (m, n), np.nan, dtype)
    kernel([a, b, c], y)
    at = np.swapaxes(a, -1, -2) if trans_a else a
    ref = 1.5 * np.matmul(at.astype(np.float64), np.swapaxes(b, -1, -2).astype(np.float64)) \
        + 0.5 * c.astype(np.float64)
    ref = np.where(ref > 0, ref, 0.1 * ref)
    # float32 sums of K products: within a few units of the last place of the largest magnitude
    tol = 2e-3 if dtype == np.float16 else 1e-5
    assert np.max(np.abs(y.astype(np.float64) - ref)) <= tol * np.max(np.abs(ref))


def test_the_rows_kernel_takes_b_transposed_with_few_rows():
    """B transposed with one to ROWS_MAX rows in float32 or float16: the rows kernel; B as it
    is, more than ROWS_MAX rows, or float64: the loop nest or BLAS. One row: tiles of one B
    row (one stream of B a thread) with K in four partial sums; more rows: one sum a pair."""
    from dml_numba._host import Host
    from dml_numba.cpu.gemm import ROWS_MAX, ROWS_MIN, RowsPlan, takes_rows

    def desc(m, trans_b, dtype=np.float32):
        a = np.zeros((m, 8), dtype)
        b = np.zeros((4, 8) if trans_b else (8, 4), dtype)
        return dml.functional.gemm_desc(a, b, trans_b=trans_b)

    assert ROWS_MIN == 1
    assert takes_rows(desc(ROWS_MAX, True)) and takes_rows(desc(ROWS_MIN, True, np.float16))
    assert not takes_rows(desc(ROWS_MAX + 1, True))
    assert not takes_rows(desc(4, False)) and not takes_rows(desc(4, True, np.float64))
    for lanes in (8, 16):
        assert RowsPlan.for_host(1, 1000, Host(lanes, 2)) == RowsPlan(lanes, 1, 1, 4)
        assert RowsPlan.for_host(2, 1000, Host(lanes, 2)) == RowsPlan(lanes, 2, 2, 1)
    assert RowsPlan.for_host(8, 1000, Host(8, 2)) == RowsPlan(8, 4, 2, 1)


@pytest.mark.parametrize("m, trans_b", [(1, True), (4, True), (3, False)])
def test_a_bound_step_runs_the_generated_kernel_on_the_arrays(m, trans_b):
    """A compiled graph's GEMM step (``bind``) calls the generated kernel itself on the
    arrays (flat views for the rows kernel), no conversion a call: right against float64
    matmul, again after the inputs change in place; a strided (not contiguous) input is bound
    through the adapting call and is right too."""
    from dml_numba.cpu.gemm import GemmKernel

    rng = np.random.default_rng(m)
    a = random_array((m, 40), np.float32, rng)
    b = random_array((24, 40) if trans_b else (40, 24), np.float32, rng)
    c = random_array((m, 24), np.float32, rng)
    desc = dml.functional.gemm_desc(a, b, c, trans_b=trans_b)
    kernel = GemmKernel(desc, {"parallel": None})
    y = np.full((m, 24), np.nan, np.float32)
    step = kernel.bind([a, b, c], y)
    assert step.func is kernel.fn
    for _ in range(2):
        step()
        assert_close(y, a.astype(np.float64) @ (b.T if trans_b else b) + c, np.float32)
        a += 1.0
    wide = np.zeros((m, 80), np.float32)
    wide[:, ::2] = a
    at = wide[:, ::2]  # the same values, every other element: not bound to the kernel itself
    y[...] = np.nan
    step = kernel.bind([at, b, c], y)
    assert step.func is not kernel.fn
    step()
    assert_close(y, a.astype(np.float64) @ (b.T if trans_b else b) + c, np.float32)
