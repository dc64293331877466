"""BLAS in the calling thread while our kernels call it: one thread pool at a time.

NumPy's and SciPy's BLAS (OpenBLAS, MKL, BLIS...) keep thread pools of their own whose workers
spin for a while after each product, as Numba's OpenMP workers spin after each parallel region.
A kernel that calls BLAS between our parallel kernels would hand the cores from one spinning
pool to the other and back, slowing the product and the parallel kernels after it (measured in
``benchmarks/HISTORY.md``, "ONNX CNNs: one thread pool at a time"). Inside :func:`one_thread`,
every BLAS library of the process runs its products in the calling thread; the parallelism is
Numba's pool's, around the product.

The libraries are found by ``threadpoolctl`` (a dependency), once, after SciPy's BLAS is loaded
(Numba's ``np.dot`` calls it). Thread-safe: the first thread in sets one thread and the last one
out restores the count it found, so calls from several threads at once leave BLAS as it was.
While one of our kernels is inside, another thread's own NumPy products run on one thread too
(the price of a process-wide setting; they are not wrong, only serial).
"""
from __future__ import annotations

import threading
from contextlib import contextmanager

_lock = threading.Lock()
_inside = 0
_saved: list = []  # (library controller, its thread count) while anyone is inside
_libraries = None


def libraries() -> list:
    """threadpoolctl's controllers of the process's BLAS libraries (found on first use)."""
    global _libraries
    if _libraries is None:
        try:
            import scipy.linalg.cython_blas  # noqa: F401 - loads the BLAS Numba's np.dot calls
        except ImportError:  # pragma: no cover - SciPy is a dependency
            pass
        from threadpoolctl import ThreadpoolController

        _libraries = list(ThreadpoolController().select(user_api="blas").lib_controllers)
    return _libraries


@contextmanager
def one_thread():
    """BLAS products in the calling thread for the duration (see the module's docstring)."""
    global _inside
    with _lock:
        if _inside == 0:
            _saved[:] = [(lib, lib.num_threads) for lib in libraries()]
            for lib, n in _saved:
                if n != 1:
                    lib.set_num_threads(1)
        _inside += 1
    try:
        yield
    finally:
        with _lock:
            _inside -= 1
            if _inside == 0:
                for lib, n in _saved:
                    if n != 1:
                        lib.set_num_threads(n)
                _saved.clear()


def threads() -> dict:
    """Each BLAS library's thread count now, by its file (for tests and ``dml-numba info``)."""
    return {lib.filepath: lib.num_threads for lib in libraries()}
