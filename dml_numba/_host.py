"""What generated CPU code is planned for (:class:`Host`: vector lanes and threads) and the
host it is planned for now (this machine, or one pinned by :func:`planned_for`). Below the
backends: the tuner's wisdom and the profiler's machine record read it too."""
from __future__ import annotations

import contextvars
import dataclasses
import functools
from contextlib import contextmanager


@functools.cache
def vector_lanes() -> int:
    """float32 lanes of the host's widest vector registers: 16 with AVX-512, 8 with AVX/AVX2,
    4 otherwise (SSE, NEON, and any CPU LLVM does not describe)."""
    try:
        from llvmlite import binding as ll

        features = ll.get_host_cpu_features()
    except Exception:  # pragma: no cover  # noqa: BLE001 - no feature detection here
        return 4
    if features.get("avx512f"):
        return 16
    if features.get("avx"):
        return 8
    return 4


@dataclasses.dataclass(frozen=True)
class Host:
    """What generated CPU code is planned for: the float32 lanes of the widest vector registers
    and the threads of Numba's pool. Plans read these, never the machine, and go into the
    kernel's key, so ``emit(key)`` is a function of its key alone and the sources for another
    machine can be generated here (``tests/golden``)."""

    lanes: int
    threads: int
    #: BLAS's multiply-add rate against the generated kernels' (1.0: the same, where a host is
    #: described); None (:meth:`current`): this machine's, looked up only where it decides a
    #: choice (:func:`dml_numba.cpu.convolution.choice.rated`)
    blas: float | None = 1.0

    @classmethod
    def current(cls) -> Host:
        """This machine (or the host pinned by :func:`planned_for`)."""
        pinned = _PINNED.get()
        if pinned is not None:
            return pinned
        import numba

        return cls(vector_lanes(), numba.config.NUMBA_NUM_THREADS, None)


_PINNED: contextvars.ContextVar = contextvars.ContextVar("dml_numba_host", default=None)


def planning_elsewhere() -> bool:
    """Whether kernels are being planned for another host (:func:`planned_for`): nothing built
    now is timed here (the tuner keeps to the static rule)."""
    return _PINNED.get() is not None


@contextmanager
def planned_for(host: Host):
    """Plan the kernels built inside for ``host`` instead of this machine (for generating the
    sources another machine would run; such kernels are not for calling here)."""
    token = _PINNED.set(host)
    try:
        yield host
    finally:
        _PINNED.reset(token)
