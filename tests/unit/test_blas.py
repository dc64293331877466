"""BLAS in the calling thread while our kernels call it (dml_numba._blas): set while inside,
restored after, whatever the nesting and the threads; the gemm convolution's products run
inside it, in both its variants."""
import threading

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import dml_numba as dml
from dml_numba import _blas
from dml_numba.cpu.convolution import gemm as conv_gemm


@pytest.fixture
def two_threads():
    """Every BLAS library at two threads (the machine's own count may already be one)."""
    if not _blas.libraries():
        pytest.skip("threadpoolctl finds no BLAS library in this process (NumPy built "
                    "without one it knows): nothing to hold to one thread")
    with threadpool_limits(limits=2, user_api="blas"):
        if set(_blas.threads().values()) != {2}:
            pytest.skip(f"this BLAS keeps its own thread count ({_blas.threads()}): "
                        "two threads cannot be set to see them reduced")
        yield


def test_one_thread_while_inside_then_restored(two_threads):
    with _blas.one_thread():
        assert set(_blas.threads().values()) == {1}
        with _blas.one_thread():  # nested: still one, and the outer exit restores
            assert set(_blas.threads().values()) == {1}
        assert set(_blas.threads().values()) == {1}
    assert set(_blas.threads().values()) == {2}


def test_restored_when_the_body_raises(two_threads):
    with pytest.raises(KeyError), _blas.one_thread():
        raise KeyError("the body")
    assert set(_blas.threads().values()) == {2}


class _Library:
    """A BLAS library's controller as threadpoolctl gives it (its count and its setter), for
    the bookkeeping across threads: OpenBLAS ignores a count set from another thread once the
    main thread has set one (seen with 0.3.30), so the real libraries cannot show it."""

    def __init__(self, n):
        self.num_threads, self.filepath = n, f"lib{n}"

    def set_num_threads(self, n):
        self.num_threads = n


def test_threads_overlapping_restore_the_count_found_first(monkeypatch):
    """Two threads in at once, leaving in the other order than they came: the last one out
    restores the counts found by the first one in (a second thread saving the one it saw
    would leave BLAS serial for good), and BLAS is serial while either is inside."""
    libs = [_Library(2), _Library(4)]
    monkeypatch.setattr(_blas, "_libraries", libs)
    first_in, second_in, first_may_leave = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def first():
        with _blas.one_thread():
            first_in.set()
            second_in.wait(5)
            first_may_leave.wait(5)
        seen["after first"] = [lib.num_threads for lib in libs]

    def second():
        first_in.wait(5)
        with _blas.one_thread():
            second_in.set()
            seen["inside second"] = [lib.num_threads for lib in libs]
            first_may_leave.set()
            t1.join(5)  # the first left while this one is still inside
            seen["second, first gone"] = [lib.num_threads for lib in libs]

    t1, t2 = threading.Thread(target=first), threading.Thread(target=second)
    t1.start(), t2.start()
    t2.join(10)
    assert seen == {"inside second": [1, 1], "after first": [1, 1],
                    "second, first gone": [1, 1]}
    assert [lib.num_threads for lib in libs] == [2, 4]


class _Spy:
    """NumPy as the gemm convolution's module sees it, recording BLAS's thread counts at each
    ``matmul``."""

    def __init__(self):
        self.counts = []

    def __getattr__(self, name):
        return getattr(np, name)

    def matmul(self, *args, **kwargs):
        self.counts.append(set(_blas.threads().values()))
        return np.matmul(*args, **kwargs)


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("direction", ["FORWARD", "BACKWARD"])
@pytest.mark.parametrize("pointwise", [False, True])
def test_the_gemm_convolution_multiplies_in_one_thread(two_threads, monkeypatch, parallel,
                                                       direction, pointwise):
    rng = np.random.default_rng(0)
    k = 1 if pointwise else 3
    x = rng.standard_normal((2, 4, 6, 6)).astype(np.float32)
    w = rng.standard_normal((4, 4, k, k)).astype(np.float32)
    desc = dml.functional.convolution_desc(x, w, direction=direction)
    op = dml.compile_operator(desc, "cpu", algorithm="gemm", parallel=parallel)
    spy = _Spy()
    monkeypatch.setattr(conv_gemm, "np", spy)  # BACKWARD: NumPy's matmul
    product = op.kernel.product
    if product is not None:  # FORWARD: the generated product's BLAS calls, in Numba's threads

        def spied(*args):
            spy.counts.append(set(_blas.threads().values()))
            return product(*args)

        monkeypatch.setattr(op.kernel, "product", spied)
    y = op(x, w)
    assert spy.counts and all(c == {1} for c in spy.counts)
    assert set(_blas.threads().values()) == {2}
    monkeypatch.undo()
    np.testing.assert_allclose(y, dml.functional.convolution(x, w, direction=direction,
                                                             device="numpy"), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("m, expect", [(64, [{1}]), (2, [])])
def test_the_gemm_operator_multiplies_through_blas_in_one_thread(two_threads, monkeypatch, m,
                                                                 expect):
    """GEMM above the loop nest's bound (64 x 512 x 300: 9.8 M multiply-adds) calls BLAS
    inside :func:`_blas.one_thread`; the loop nest (2 rows) calls no BLAS and does not enter."""
    from contextlib import contextmanager

    from dml_numba.cpu import gemm as cpu_gemm

    real, entered = _blas.one_thread, []

    @contextmanager
    def recorded():
        with real():
            entered.append(set(_blas.threads().values()))
            yield

    monkeypatch.setattr(cpu_gemm._blas, "one_thread", recorded)
    rng = np.random.default_rng(m)
    a = rng.standard_normal((m, 512)).astype(np.float32)
    b = rng.standard_normal((512, 300)).astype(np.float32)
    y = dml.gemm(a, b, device="cpu")
    assert entered == expect
    assert (a.shape[0] * 512 * 300 > cpu_gemm.LOOP_MACS) == bool(expect)
    np.testing.assert_allclose(y, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
