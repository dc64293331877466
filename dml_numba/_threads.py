"""The thread pool the parallel kernels run on, chosen for machines that are not idle.

Numba's default threading layer here is ``omp`` (libgomp), whose worker threads spin after each
parallel region. On a machine where anything else runs (a second process with parallel kernels,
Dask workers, pytest-xdist), the spinning pools take each other's cores and one parallel call
costs a scheduler quantum (~8 ms) whatever its size. Measured (``benchmarks/bench_threading.py``,
``benchmarks/RESULTS.md``): a passive wait policy keeps the idle speed-up and removes the
collapse, while ``workqueue`` aborts when two Python threads launch kernels at once and ``tbb``
is not loadable from a plain venv everywhere.

Policy, applied once at import, before Numba starts its pool (``DML_NUMBA_THREADING``):

* ``passive`` (default): ``OMP_WAIT_POLICY=PASSIVE`` for the ``omp`` layer (workers sleep as
  soon as a region ends). This applies to the process's libgomp, so any other library that uses
  the same libgomp also stops spinning (its regions may start a few microseconds later);
  libraries with their own OpenMP runtime (PyTorch's bundled one, Intel's) are unaffected.
  Subprocesses inherit the variable.
* ``numba``: leave Numba's and OpenMP's settings alone.

Numba's and OpenMP's own variables win: if ``NUMBA_THREADING_LAYER`` or ``OMP_WAIT_POLICY`` is
already set, nothing is changed.
"""
from __future__ import annotations

import os

POLICIES = ("passive", "numba")


def policy() -> str:
    value = os.environ.get("DML_NUMBA_THREADING", "passive").strip().lower() or "passive"
    return value if value in POLICIES else "passive"


def apply() -> dict:
    """Apply the policy (idempotent); returns what was set, for ``dml-numba info``."""
    done = {}
    if policy() == "numba":
        return done
    if "NUMBA_THREADING_LAYER" in os.environ or "OMP_WAIT_POLICY" in os.environ:
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
