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

import functools
import os
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


#: float32 lanes of the kernels a BLAS library runs, by the CPU type it reports (threadpoolctl's
#: ``architecture``, lower case: OpenBLAS's core types, BLIS's configurations). A core type can
#: be older than the machine: OpenBLAS takes ``OPENBLAS_CORETYPE`` from the environment, and a
#: release that does not know a CPU runs the kernels of an older one.
LANES = {
    **dict.fromkeys(("skylakex", "cooperlake", "sapphirerapids", "skx", "zen4", "zen5"), 16),
    **dict.fromkeys(("haswell", "zen", "zen2", "zen3", "sandybridge", "excavator",
                     "steamroller", "piledriver", "bulldozer"), 8),
    **dict.fromkeys(("nehalem", "core2", "penryn", "dunnington", "atom", "prescott",
                     "barcelona", "opteron", "opteron_sse3", "katmai", "coppermine", "northwood",
                     "banias", "yonah", "nano"), 4),
}

#: LLVM's names of the CPUs that run vectors narrower than their widest at the same
#: multiply-add rate: AMD's Zen 4 splits each 512-bit operation over its two 256-bit units;
#: Intel's client cores with AVX-512 have one 512-bit multiply-add unit where they have two
#: of 256 bits. On the others (Zen 5, Intel's server cores) half-width code runs at half rate.
NARROW_AT_FULL_RATE = frozenset({"znver4", "cannonlake", "icelake-client", "tigerlake",
                                 "rocketlake"})


def kernel_lanes() -> int | None:
    """The float32 lanes of the process's BLAS kernels: the fewest of its libraries' known
    CPU types (:data:`LANES`), None where none reports a type known here (MKL, which reports
    none, runs the widest the machine has)."""
    known = [LANES[arch.lower()] for lib in libraries()
             if isinstance(arch := getattr(lib, "architecture", None), str)
             and arch.lower() in LANES]
    return min(known) if known else None


@functools.cache
def rate(lanes: int, cpu: str) -> float:
    """BLAS's multiply-add rate against the generated kernels' on a host of ``lanes`` float32
    lanes whose CPU LLVM names ``cpu``: 1.0, or less where BLAS runs narrower vectors
    (:func:`kernel_lanes`) on a CPU that runs those at a lower rate (not
    :data:`NARROW_AT_FULL_RATE`). What the convolution's cost model divides BLAS's
    multiply-adds by."""
    blas = kernel_lanes()
    if blas is None or blas >= lanes or cpu in NARROW_AT_FULL_RATE:
        return 1.0
    return blas / lanes


def describe(lanes: int, cpu: str) -> str:
    """One line for ``dml-numba info``: each BLAS library, its CPU type, and the rate the
    convolution's cost model gives its products on this host (:func:`rate`)."""
    libs = ", ".join(f"{lib.internal_api} {getattr(lib, 'architecture', None) or '(no type)'}"
                     for lib in libraries()) or "none found"
    found = kernel_lanes()
    width = f"{found} float32 lanes" if found is not None else "its widest"
    line = (f"BLAS: {libs}; its kernels {width} on this {lanes}-lane {cpu}: products counted "
            f"at {rate(lanes, cpu):g}x the generated kernels' rate")
    forced = os.environ.get("OPENBLAS_CORETYPE")
    if rate(lanes, cpu) < 1.0 and forced:  # the usual cause, and what lifts it
        line += (f" (OPENBLAS_CORETYPE={forced} is set: without it OpenBLAS picks the kernels "
                 "of this CPU)")
    return line
