"""The thread pool the parallel kernels run on, chosen for machines that are not idle.

Numba's default threading layer here is ``omp`` (libgomp), whose worker threads spin for a
while after each parallel region. On a machine where anything else runs (a second process with
parallel kernels, Dask workers, pytest-xdist), the spinning pools take each other's cores and a
forced-parallel call can cost a scheduler quantum (~8 ms) whatever its size. Measured
(``benchmarks/bench_threading.py``, ``benchmarks/HISTORY.md``) over every layer and wait policy:

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

Where the pool has as many threads as the process has CPUs, GNU OpenMP's workers are each kept
on a core of their own (:mod:`dml_numba.cpu._affinity`, ``DML_NUMBA_PIN_WORKERS=0`` to leave
them be): a worker woken after an idle spell was otherwise placed beside the calling thread and
waited for its spin to run out (a call after 0.1 s of idle took milliseconds, not
microseconds).

fork: GNU OpenMP cannot run a parallel region in a child forked from a process whose OpenMP
pool has started (libgomp prints "fork() called from a process already using GNU OpenMP" and
terminates the child; a ``multiprocessing.Pool`` with the ``fork`` start method loses its
workers and hangs). Numba starts the pool when it first compiles or loads a parallel kernel.
A child forked after that is marked (:data:`FORKED_AFTER_GOMP`, set by an at-fork hook before
any user code runs in the child) and every kernel runs its serial variant there: automatic ones
silently, forced ``parallel=True`` ones with one :class:`ForkWarning`. Children forked before
the pool started, ``spawn`` and ``forkserver`` children, and fork-safe layers (``tbb``) keep
their parallel kernels.
"""
from __future__ import annotations

import os
import sys
import warnings

from . import _env
from ._errors import outside_stacklevel

#: True in a process forked after GNU OpenMP's pool started in its parent (see above)
FORKED_AFTER_GOMP = False
#: ``{native thread id: cpu}`` of the workers pinned to a core of their own in this process
#: (:mod:`dml_numba.cpu._affinity`, which fills it; :func:`pinned_now` keeps those still
#: running: a calling thread's pool ends with it)
PINNED: dict = {}


def pinned_now() -> dict:
    """:data:`PINNED` less the workers that have ended since (a short-lived calling thread's
    pool): those whose thread is no longer in ``/proc/self/task`` (Linux's, where workers are
    pinned; :data:`PINNED` as it is elsewhere)."""
    if not os.path.isdir("/proc/self/task"):
        return dict(PINNED)
    return {tid: cpu for tid, cpu in PINNED.items()
            if os.path.exists(f"/proc/self/task/{tid}")}


class ForkWarning(RuntimeWarning):
    """A forced-parallel kernel runs serially in a child forked after GNU OpenMP started."""


def gomp_started() -> bool:
    """Whether this process's Numba thread pool is GNU OpenMP's and has started."""
    par = sys.modules.get("numba.np.ufunc.parallel")
    if par is None or not getattr(par, "_is_initialized", False):
        return False
    if getattr(par, "_threading_layer", None) != "omp":
        return False
    omp = sys.modules.get("numba.np.ufunc.omppool")
    return getattr(omp, "openmp_vendor", "GNU") == "GNU"  # unknown vendor: assume the unsafe one


def _after_fork_in_child() -> None:
    global FORKED_AFTER_GOMP
    if gomp_started():
        FORKED_AFTER_GOMP = True


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)

_fork_warned = False


def warn_forced_parallel_in_fork() -> None:
    """Once per process: a forced-parallel kernel runs serially in this forked child."""
    global _fork_warned
    if not _fork_warned:
        _fork_warned = True
        warnings.warn("dml_numba: this process was forked after GNU OpenMP started in its "
                      "parent, and libgomp would terminate it at a parallel region: "
                      "parallel=True kernels run serially here (use the 'spawn' or "
                      "'forkserver' start method, or NUMBA_THREADING_LAYER=tbb, for parallel "
                      "kernels in child processes)", ForkWarning, stacklevel=outside_stacklevel())

POLICIES = ("passive", "numba")


def policy() -> str:
    return _env.choice("DML_NUMBA_THREADING", POLICIES, "numba")


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
    forked = ", forked after GNU OpenMP started: kernels run serially" if FORKED_AFTER_GOMP else ""
    live = len(pinned_now())
    pinned = ("workers not pinned" if not live else "1 worker on a core of its own"
              if live == 1 else f"{live} workers each on a core of its own")
    return (f"threading: policy {policy()}, layer {layer}{forked}, "
            f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}, "
            f"{_threads()} threads, {pinned}")


def _threads() -> int:
    try:
        import numba

        return numba.get_num_threads()
    except ImportError:  # pragma: no cover
        return 1
