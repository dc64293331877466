"""The thread pool the parallel kernels run on, chosen for machines that are not idle.

Numba's default threading layer here is ``omp`` (libgomp), whose worker threads spin for a
while after each parallel region. On a machine where anything else runs (a second process with
parallel kernels, Dask workers, pytest-xdist), the spinning pools take each other's cores and a
forced-parallel call can cost a scheduler quantum (~8 ms) whatever its size. Measured
(``benchmarks/bench_threading.py``, ``benchmarks/RESULTS.md``) over every layer and wait policy:

* libgomp's own wait keeps the idle speed-up (the spin is what makes a 0.5 ms call 1.5x faster
  on two cores); a passive wait loses it for small kernels (each region pays the wake-up);
* what removes the collapse without losing the idle speed-up is choosing the variant by
  measurement (:mod:`dml_numba.cpu._adaptive`, the default ``parallel=None``);
* ``workqueue`` aborts when two Python threads launch kernels at once, and ``tbb`` needs a
  library a plain venv does not put on the loader path everywhere.

Policy, applied once at import, before Numba starts its pool (``DML_NUMBA_THREADING``):

* ``numba`` (default): Numba's layer choice and libgomp's own wait policy;
* ``passive``: ``OMP_WAIT_POLICY=PASSIVE`` for the ``omp`` layer (workers sleep as soon as a
  region ends), for machines shared with processes that force parallel kernels. It applies to
  the process's libgomp, so any other library using the same libgomp also stops spinning;
  libraries with their own OpenMP runtime (PyTorch's bundled one, Intel's) are unaffected.
  Subprocesses inherit the variable.

Numba's and OpenMP's own variables win: ``OMP_WAIT_POLICY`` already set is kept, and a
``NUMBA_THREADING_LAYER`` that cannot be ``omp`` (``tbb``, ``workqueue``) is left alone.
"""
from __future__ import annotations

import os

POLICIES = ("passive", "numba")


def policy() -> str:
    value = os.environ.get("DML_NUMBA_THREADING", "numba").strip().lower() or "numba"
    return value if value in POLICIES else "numba"


def apply() -> dict:
    """Apply the policy (idempotent); returns what was set, for ``dml-numba info``."""
    done = {}
    if policy() == "numba":
        return done
    if "OMP_WAIT_POLICY" in os.environ or os.environ.get("NUMBA_THREADING_LAYER", "omp") not in (
            "omp", "default", "safe", "threadsafe", "forksafe"):
        return done
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    done["OMP_WAIT_POLICY"] = "PASSIVE"
    return done


def describe() -> str:
    """One line: the policy, the layer Numba loaded (if any yet) and the wait policy."""
    layer = "not started"
    try:
        import numba

        layer = numba.threading_layer()
    except (ValueError, ImportError):
        pass
    return (f"threading: policy {policy()}, layer {layer}, "
            f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}, "
            f"{_threads()} threads")


def _threads() -> int:
    try:
        import numba

        return numba.get_num_threads()
    except ImportError:  # pragma: no cover
        return 1
