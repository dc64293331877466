"""Serial or parallel, decided by measurement while the program runs.

A parallel kernel is faster on an idle machine and can be many times slower on a busy one: when
another process's threads hold the cores, when a Python loop spins on one of them, or when
several Python threads call kernels at once (each serial kernel then already keeps a core busy).
No cheap signal from the operating system tells these apart from our own threads' load, so the
choice is made the way an autotuner makes it. While another Python thread is inside one of our
kernels (or was, within the last 50 ms), the serial variant runs (the cores are already taken). Otherwise the parallel variant
runs while it behaves; when three calls in a row take more than 1.5x the best time seen, the
serial variant is tried (compiled, or loaded from the disk cache, the
first time); from then on both are timed, the faster recent one runs and the other is tried
again every PROBE_CALLS calls (at most every PROBE_S seconds), so a machine that becomes idle or
busy is followed within a few calls. On an idle machine the serial variant is never built. The
bookkeeping costs two clock reads a call.

Used only when the variant was chosen automatically (``parallel=None``, the default); an explicit
``parallel=True`` or ``False`` is never second-guessed.
"""
from __future__ import annotations

import time

#: weight of the newest time in the running averages
ALPHA = 0.25
#: re-measure the variant not in use after this many calls (and after PROBE_S seconds)
PROBE_CALLS, PROBE_S = 32, 0.5
#: a parallel call this much slower than its best, STREAK times in a row, is a sign of
#: contention (one slow call is just a noisy machine)
SLOWER, STREAK = 1.5, 3

_running = 0  # our kernels running right now, in any thread
_overlap_at = -1.0  # when a call last started while another was running
#: after an overlap, calls run serially for this long (threads calling kernels come in bursts)
OVERLAP_S = 0.05


class AdaptiveKernel:
    """Calls whichever of ``parallel`` and ``serial()`` (built on first use) has been faster."""

    def __init__(self, parallel, build_serial):
        self._fns = {True: parallel, False: None}
        self._build_serial = build_serial
        self._avg = {True: None, False: None}
        self._best = None
        self._use = True
        self._contended = False
        self._slow = 0
        self._since = 0
        self._last_probe = time.perf_counter()

    def variant(self) -> str:
        """The variant the next call will use (``"parallel"`` or ``"serial"``)."""
        return "parallel" if self._use else "serial"

    def _fn(self, parallel: bool):
        fn = self._fns[parallel]
        if fn is None:
            fn = self._fns[parallel] = self._build_serial()
        return fn

    def __call__(self, *args):
        global _running, _overlap_at
        now = time.perf_counter()
        if _running > 0:  # another thread is in one of our kernels: the cores are taken
            _overlap_at = now
        if now - _overlap_at < OVERLAP_S:
            return self._run_serial(args)
        use = self._use
        if self._avg[False] is None:  # serial never tried: only on a sign of contention
            probe = self._contended or _running > 0
        else:
            probe = self._since >= PROBE_CALLS and now - self._last_probe >= PROBE_S
        if probe and self._avg[use] is not None:
            use = not use
            self._since = 0
            self._last_probe = now
        fn = self._fn(use)
        _running += 1
        try:
            t0 = time.perf_counter()
            result = fn(*args)
            dt = time.perf_counter() - t0
        finally:
            _running -= 1
        if use:
            self._best = dt if self._best is None else min(self._best, dt)
            self._slow = self._slow + 1 if dt > SLOWER * self._best else 0
            self._contended = self._slow >= STREAK
        avg = self._avg[use]
        self._avg[use] = dt if avg is None else (1 - ALPHA) * avg + ALPHA * dt
        other = self._avg[not use]
        self._use = use if other is None or self._avg[use] <= other else not use
        self._since += 1
        return result

    def _run_serial(self, args):
        global _running
        fn = self._fn(False)
        _running += 1
        try:
            return fn(*args)
        finally:
            _running -= 1

    def __getattr__(self, name):  # the parallel dispatcher's attributes (signatures, stats...)
        return getattr(self._fns[True], name)
