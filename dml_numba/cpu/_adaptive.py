"""Serial or parallel, decided by measurement while the program runs.

A parallel kernel is faster on an idle machine and can be many times slower on a busy one: when
another process's threads hold the cores, when a Python loop spins on one of them, or when
several Python threads call kernels at once (each serial kernel then already keeps a core busy).
No cheap signal from the operating system tells these apart from our own threads' load, so the
choice is made the way an autotuner makes it. While another Python thread is inside one of our
kernels (or was, within the last 50 ms), the serial variant runs (the cores are already taken).
Otherwise the parallel variant runs while it behaves; the serial variant is wanted when three
calls in a row take more than 1.5x the best time seen (and a millisecond more: a short call's
jitter is not contention), or when other programs keep at least
BUSY_CORES of the machine's cores busy (the machine's CPU time from ``/proc/stat`` less this
process's, sampled at most every LOAD_S seconds by whichever call comes: a process that starts
on a busy machine has no fast time to compare with, every parallel call a scheduler quantum or
more). Then the serial variant is timed too, and the faster runs. On an idle machine it is
never built.

No call waits for a compile it did not ask for: the serial variant is built (compiled, or loaded
from the disk cache) in a background thread the first time it is wanted, and until it is ready the
parallel variant runs in its place on one thread (Numba's ``set_num_threads`` for the call: under
contention a parallel region waits for cores others hold: in a new install's first busy machine,
where the serial variants are compiled, not loaded, the worst 20-call windows of
``bench_contention``'s workloads were 4.8-107x the serial variant's time, 0.95-8.2x with this and
:class:`AdaptiveBatch`'s deadline). From then on both are timed (the serial variant afresh once
built: its times so far were the interim's), the faster recent one runs and the other is tried again
after PROBE_CALLS calls and an interval that starts at PROBE_S and doubles each time the other
variant is confirmed slower (up to PROBE_S_MAX: under lasting contention a parallel probe, a
scheduler quantum, costs little), back to PROBE_S when it wins (a switch made on a burst of slow
calls is undone quickly); the probes of parallel variants start PROBE_GAP_S apart across the process
(a graph's fifty kernels probing on their own would spend most of a busy machine's time waiting for
cores). A probe is PROBE_RUN calls, the fastest counting (the first call of a variant left alone a
while wakes its thread pool), and counts as it is where faster than its variant's running average.
The bookkeeping costs two clock reads a call.

A run of automatic kernels decided as one (:class:`AdaptiveBatch`: a compiled graph's steps)
skips each kernel's own bookkeeping while the machine is quiet and is timed as a whole instead.

In a child forked after GNU OpenMP started (:data:`dml_numba._threads.FORKED_AFTER_GOMP`) only
the serial variant can run: it is built on the spot if it is not there yet.

Used only when the variant was chosen automatically (``parallel=None``, the default); an explicit
``parallel=True`` or ``False`` is never second-guessed (:class:`ForkSafeKernel` only keeps a
forced-parallel kernel alive in a forked child).
"""
from __future__ import annotations

import threading
import time

from .. import _env, _threads
from .._machine import CpuShare
from . import _affinity

#: whether this thread's pool was looked at (:func:`_affinity.pin_workers`: a thread calling
#: kernels another thread built has a pool of its own)
_pins = _affinity.LOCAL

#: weight of the newest time in the running averages
ALPHA = 0.25
#: re-measure the variant not in use after this many calls and PROBE_S seconds, the interval
#: doubling (up to PROBE_S_MAX) while probes confirm the variant in use
PROBE_CALLS, PROBE_S, PROBE_S_MAX = 32, 0.05, 1.0
#: the process's probes of a parallel variant (kernels running their serial variant) start at
#: least this far apart, whichever kernel's: under lasting contention each costs a scheduler
#: quantum or two (its threads wait for cores others hold), and a graph of fifty kernels each
#: probing once a PROBE_S_MAX spent most of its time in them (MobileNetV2 at batch 1 beside two
#: processes spinning parallel kernels: 36 ms a call, its kernels' serial variants 15 ms)
PROBE_GAP_S = 0.25
#: calls a probe lasts, the fastest counting: a variant's first call after a while pays for
#: waking its thread pool and refilling caches, which would bias every probe against it
PROBE_RUN = 2
#: a parallel call this much slower than its best (and by at least SLOW_S: less is a noisy
#: machine's jitter on a short call, not a scheduler quantum lost), STREAK times in a row, is a
#: sign of contention (one slow call is just a noisy machine)
SLOWER, SLOW_S, STREAK = 1.5, 1e-3, 3

#: other programs using this many cores' worth of CPU (over the last LOAD_S seconds) make the
#: serial variant worth timing: our parallel region then shares a core with them
BUSY_CORES, LOAD_S = 0.75, 0.1

_running = 0  # our kernels running right now, in any thread
_overlap_at = -1.0  # when a call last started while another was running
#: after an overlap, calls run serially for this long (threads calling kernels come in bursts)
OVERLAP_S = 0.05
#: the thread running an :class:`AdaptiveBatch` directly (its kernels' parallel variants, no
#: bookkeeping of their own), or None
_direct = None
#: the direct run's deadline, by its batch's clock: ``(clock, until)``. A kernel of the run that
#: starts past it ends the run's directness (:func:`_leave_direct`): the run is already slow,
#: and under contention each of its parallel calls waits for cores others hold, while a
#: kernel deciding for itself runs its serial variant (or the interim, :func:`_one_thread`)
_direct_until = (time.perf_counter, float("inf"))
_ident = threading.get_ident
_batch_lock = threading.Lock()


def running_directly() -> bool:
    """Whether this thread is in a batch's direct run, before its deadline."""
    if _direct is None or _direct != _ident():
        return False
    run_clock, until = _direct_until
    return run_clock() < until


def _leave_direct() -> None:
    """The rest of this thread's direct run decided kernel by kernel, as when the batch is not
    direct (the batch's own share of ``_running`` handed back)."""
    global _direct, _running
    with _batch_lock:
        if _direct is not None and _direct == _ident():
            _direct = None
            _running -= 1
#: calls that ran a serial variant by choice (not a probe's): a kernel that judged its parallel
#: variant the slower or the cores taken by another thread, in any thread. A batch that handed
#: the choice to its kernels reads it: unchanged, they all kept what its direct runs run
_serial_runs = 0
#: when a probe of a parallel variant last started, by the clock that timed it (kernels with
#: clocks of their own, tests', keep apart): PROBE_GAP_S
_parallel_probe_at: dict = {}
#: a batch's first BATCH_WARM runs leave the choice to its kernels (each learns its best time,
#: against which it judges its calls once the batch hands the choice back to it); after a
#: streak of slow runs its kernels decide one by one for BATCH_S seconds, and a batch still
#: slow when it runs directly again doubles the interval (up to BATCH_S_MAX)
BATCH_WARM, BATCH_S, BATCH_S_MAX = 3, 1.0, 60.0


def _slow(dt: float, best: float) -> bool:
    """Whether a call of ``dt`` seconds is slow against the ``best`` seen: SLOWER times it and
    SLOW_S more (a kernel's call, or a batch's run)."""
    return dt > SLOWER * best and dt - best > SLOW_S


class LoadWatch:
    """Whether other programs keep at least BUSY_CORES of the cores busy: their share of the
    machine's CPU time over the last completed interval of at least LOAD_S seconds
    (:class:`~dml_numba._machine.CpuShare`, read at most once an interval, by whichever call
    comes: a clock comparison otherwise). One per process; ``meter`` and ``cores`` are
    injectable for tests."""

    def __init__(self, meter=CpuShare, cores: int | None = None, enabled: bool = True):
        import os

        self.enabled = enabled
        self._meter = meter
        self._cores = cores or os.cpu_count() or 1
        self._since = None
        self._share = None
        self.busy_now = False
        self.seen = None  # the others' share last measured (None: not yet)

    def busy(self, now: float) -> bool:
        if not self.enabled:
            return False
        if self._since is None:
            self._since, self._share = now, self._meter()
        elif now - self._since >= LOAD_S:
            others = self._share.others()
            then = getattr(self._share, "then", None)  # (a meter of the tests' has none)
            self._since, self._share = now, then() if then else self._meter()
            if others is not None:
                self.seen = others
                self.busy_now = others * self._cores >= BUSY_CORES
        return self.busy_now


#: the process's load watch (every automatic kernel's); ``DML_NUMBA_LOAD_WATCH=0`` turns it
#: off (the slow-streak signal alone, as a test suite whose workers load each other wants)
LOAD = LoadWatch(enabled=_env.flag("DML_NUMBA_LOAD_WATCH", True))


def _in_background(build) -> None:
    """Run ``build()`` in a daemon thread (the default way to build the serial variant)."""
    threading.Thread(target=build, name="dml_numba-build-serial", daemon=True).start()


def _one_thread(parallel):
    """``parallel`` called with its parallel loops on one thread (Numba's ``set_num_threads``
    for this thread, restored after): what runs as the serial variant while that is built.
    Under contention a parallel region waits for cores others hold (a scheduler quantum or more
    at every call, a network's fifty kernels up to a second a call); on one thread it runs as
    the serial variant does, within a few percent (MobileNetV2 at batch 1, every kernel so:
    idle 8.6 ms against 8.4, beside two spinning processes 21.6 against 23.0), from the first
    call, while the serial variant is built (compiled, where the disk cache lacks it, on the
    busy machine that asked for it)."""
    import numba

    def call(*args):
        n = numba.get_num_threads()
        numba.set_num_threads(1)
        try:
            return parallel(*args)
        finally:
            numba.set_num_threads(n)

    return call


class _SerialBuilder:
    """The serial variant: built once, on demand, in the background or on the spot; meanwhile
    (:meth:`request`) the parallel variant on one thread (``interim``)."""

    def __init__(self, build, start, interim=None):
        self._build = build
        self._start = start
        self._lock = threading.Lock()
        self._started = False
        self.fn = None
        self.error = None
        self.interim = interim

    def _run(self):
        try:
            fn = self._build()
        except BaseException as exc:  # noqa: BLE001 - kept: the parallel variant stays in use
            self.error = exc
            return
        self.fn = fn

    def request(self):
        """The serial variant if it is ready; otherwise start building it and return the
        interim (None where there is none)."""
        if self.fn is None and not self._started:
            with self._lock:
                if not self._started:
                    self._started = True
                    self._start(self._run)
        return self.fn if self.fn is not None else self.interim

    def now(self):
        """The serial variant, built on the spot (waiting for a build already running)."""
        with self._lock:
            if self.fn is None:
                self._started = True
                if self.error is None:
                    self._run()
                if self.error is not None:
                    raise self.error
        return self.fn


class AdaptiveKernel:
    """Calls whichever of ``parallel`` and the serial variant (``build_serial()``, built in the
    background on first need) has been faster. ``clock``, ``start_build`` (how a build is
    started: a background thread) and ``load`` (a :class:`LoadWatch`; the process's) are
    injectable for tests."""

    def __init__(self, parallel, build_serial, *, clock=time.perf_counter,
                 start_build=_in_background, load=None):
        self._load = load or LOAD
        self._load.busy(clock())  # the watch's first interval starts no later than here
        self._parallel = parallel
        # the interim calls whatever ``_parallel`` is then (tests slow it down)
        self._serial = _SerialBuilder(build_serial, start_build,
                                      _one_thread(lambda *args: self._parallel(*args)))
        self._interim_timed = False  # the serial variant's times so far are the interim's
        self._clock = clock
        self._avg = {True: None, False: None}
        self._best = None
        self._use = True
        self._contended = False
        self._slow = 0
        self._since = 0
        self._last_probe = clock()
        self._probe_s = PROBE_S
        self._probing = 0  # calls left in the probe under way
        self._probe_best = None

    def variant(self) -> str:
        """The variant the next call will use (``"parallel"`` or ``"serial"``): during a probe,
        the variant probed."""
        return "parallel" if self._use != bool(self._probing) else "serial"

    def serial_built(self) -> bool:
        """Whether the serial variant exists (it is built only once contention was seen)."""
        return self._serial.fn is not None

    def __call__(self, *args):
        global _running
        if _direct is not None and _direct == _ident():  # a batch decided as one: parallel
            run_clock, until = _direct_until
            if run_clock() < until:
                return self._parallel(*args)
            _leave_direct()  # the run is slow already: its other kernels decide for themselves
        if not getattr(_pins, "done", False):
            _affinity.pin_workers()
        clock = self._clock
        now = clock()
        # the common case first, in as few steps as it takes (~1.2 us a call of its own instead
        # of ~2.5): nothing seen yet but the parallel variant's own times (no contention, no
        # probe, the serial variant never timed), no other thread in a kernel, a quiet machine
        if (self._avg[False] is None and not self._contended and not self._probing
                and not _running and now - _overlap_at >= OVERLAP_S
                and not self._load.busy(now) and not _threads.FORKED_AFTER_GOMP):
            _running += 1
            try:
                result = self._parallel(*args)
                dt = clock() - now
            finally:
                _running -= 1
            best = self._best
            if best is not None and (dt <= SLOWER * best or dt - best <= SLOW_S):
                self._slow = 0  # not slow: the streak ends
                if dt < best:
                    self._best = dt
            else:
                self._timed_parallel(dt)
            self._since += 1
            avg = self._avg[True]
            self._avg[True] = dt if avg is None else (1 - ALPHA) * avg + ALPHA * dt
            return result
        return self._call(now, args)

    def _timed_parallel(self, dt: float) -> None:
        """A parallel call's time: the best, and the streak of calls slower than it."""
        self._best = dt if self._best is None else min(self._best, dt)
        slow = _slow(dt, self._best)
        self._slow = self._slow + 1 if slow else 0
        self._contended = self._slow >= STREAK
        if self._contended:
            self._serial.request()  # start building it now: ready the sooner

    def _call(self, now: float, args):
        """Every other call: contention seen, a probe, both variants timed, a forked child."""
        global _running, _overlap_at, _serial_runs
        if _threads.FORKED_AFTER_GOMP:  # libgomp would terminate this child
            _serial_runs += 1
            return self._serial.now()(*args)
        if _running > 0:  # another thread is in one of our kernels: the cores are taken
            _overlap_at = now
        if now - _overlap_at < OVERLAP_S:
            serial = self._serial.request()
            if serial is not None:
                _serial_runs += 1
                return self._run_untimed(serial, args)
        if self._interim_timed and self._serial.fn is not None:  # built: timed afresh
            self._interim_timed, self._avg[False] = False, None
        if not self._probing:
            if self._avg[False] is None:  # serial never timed: only on a sign of contention
                probe = self._contended or _running > 0 or self._load.busy(now)
            else:
                probe = self._since >= PROBE_CALLS and now - self._last_probe >= self._probe_s
                if probe and not self._use:  # a parallel probe: the process's, spaced
                    last = _parallel_probe_at.get(self._clock)
                    probe = last is None or now - last >= PROBE_GAP_S
                    if probe:
                        _parallel_probe_at[self._clock] = now
            if probe and self._avg[self._use] is not None:
                other = self._parallel if not self._use else self._serial.request()
                if other is not None:
                    self._probing, self._probe_best = PROBE_RUN, None
                    self._since = 0
                    self._last_probe = now
        use = not self._use if self._probing else self._use
        fn = self._parallel if use else self._serial.request()
        if not use and self._serial.fn is None:
            self._interim_timed = True
        if not (use or self._probing):
            _serial_runs += 1
        _running += 1
        try:
            t0 = self._clock()
            result = fn(*args)
            dt = self._clock() - t0
        finally:
            _running -= 1
        if use:
            self._timed_parallel(dt)
        self._since += 1
        if self._probing:
            self._probing -= 1
            self._probe_best = dt if self._probe_best is None else min(self._probe_best, dt)
            if not self._probing:  # the probe's fastest call, the interval after it
                won = self._record(use, self._probe_best, probe=True)
                if self._avg[not use] is not None:
                    self._probe_s = PROBE_S if won else min(2 * self._probe_s, PROBE_S_MAX)
            return result
        self._record(use, dt)
        return result

    def _record(self, variant: bool, dt: float, probe: bool = False) -> bool:
        """``dt`` into ``variant``'s running average (a probe's taken as it is where faster:
        noise only ever makes a call slower); the faster average runs next. Whether
        ``variant`` did."""
        avg = self._avg[variant]
        self._avg[variant] = dt if avg is None or probe and dt < avg else \
            (1 - ALPHA) * avg + ALPHA * dt
        other = self._avg[not variant]
        won = other is None or self._avg[variant] <= other
        self._use = variant if won else not variant
        return won

    @staticmethod
    def _run_untimed(fn, args):
        global _running
        _running += 1
        try:
            return fn(*args)
        finally:
            _running -= 1

    def __getattr__(self, name):  # the parallel dispatcher's attributes (signatures, stats...)
        return getattr(self._parallel, name)


class AdaptiveBatch:
    """``batch(body, *args)``: ``body(*args)``, a run of calls of automatic kernels (a compiled
    graph's steps) decided as one. Each kernel's own choice costs 1.5-2.5 us a call in Python
    (two clock reads, its averages), 0.13 ms of MobileNetV2's 5.4 at batch 1 (54 calls).
    After its first BATCH_WARM runs (its kernels deciding and timing themselves, so that each
    knows its best time), where a single kernel would take its common path (no other thread
    in a kernel or within OVERLAP_S, a quiet machine, not a forked child) the batch runs its
    kernels' parallel variants directly and times itself as one kernel's call is timed:
    STREAK runs in a row more than SLOWER times its best (and SLOW_S more) are a sign of
    contention. Then, and whenever the common path does not hold, each kernel decides for
    itself as it always does (judging its calls against its own best, the serial variant
    timed where they are slow). After a slow streak the kernels decide one by one for BATCH_S
    seconds; then the batch runs directly once: slow again, and some kernel ran its serial
    variant by choice meanwhile (``_serial_runs``), the interval doubles (up to BATCH_S_MAX),
    else it stays direct. Slow with every kernel keeping its parallel variant is a noisy
    machine (a hypervisor's neighbours), not contention a serial variant relieves: the kernels
    deciding one by one would only cost their bookkeeping, for up to BATCH_S_MAX after the
    noise is gone. A direct run that passes its deadline (SLOWER times the batch's best and SLOW_S
    more: a run already slow) hands its later kernels their own choice (:func:`_leave_direct`;
    one clock read a kernel): a direct run calls the parallel variants as they are, so a
    machine turning busy mid-run, or a run made on a stale quiet load reading, kept every
    step's region waiting for cores. ``bench_contention``'s graphs with their serial variants
    not yet built, worst 20-call window over serial: the two-step graph 1.60 and 1.32 and the
    36-convolution one 3.49 and 8.21 with the deadline, 3.26 and 18.98, 5.25 and 12.09 with
    only the interim (before either: 15.97 and 4.81, 8.51 and 30.63; 22.58 and 13.07, 6.75 and
    12.78). ``clock`` and ``load`` are injectable for tests."""

    def __init__(self, *, clock=time.perf_counter, load=None):
        self._clock = clock
        self._load = load or LOAD
        self._best = None
        self._slow = 0
        self._until = None  # the kernels decide one by one until then (after a slow streak)
        self._back_s = BATCH_S
        self._warm = BATCH_WARM  # runs left before the first direct one
        self._serial_mark = 0  # ``_serial_runs`` when the kernels were last given the choice

    @property
    def direct(self) -> bool:
        """Whether the batch runs directly where the common path holds (past its first runs,
        no slow streak being waited out)."""
        return self._until is None and not self._warm

    def __call__(self, body, *args):
        global _direct, _running, _direct_until
        if not getattr(_pins, "done", False):
            _affinity.pin_workers()
        clock = self._clock
        now = clock()
        with _batch_lock:  # two threads' batches: one runs directly, the other's kernels see it
            direct = not (self._warm or _direct is not None or _running
                          or now - _overlap_at < OVERLAP_S
                          or self._until is not None and now < self._until
                          or self._load.busy(now) or _threads.FORKED_AFTER_GOMP)
            if direct:
                _direct = _ident()
                _running += 1
                best = self._best
                # slow from then on (``_slow``): its later kernels decide one by one
                _direct_until = (clock, now + max(SLOWER * best, best + SLOW_S)
                                 if best is not None else float("inf"))
            elif self._warm:
                self._warm -= 1
        if not direct:
            return body(*args)
        try:
            result = body(*args)
        finally:
            _leave_direct()
        self._timed(now, clock() - now)
        return result

    def _timed(self, now: float, dt: float) -> None:
        best = self._best
        slow = best is not None and _slow(dt, best)
        if best is None or dt < best:
            self._best = dt
        if self._until is not None:  # the first direct run after an interval one by one
            if slow and _serial_runs != self._serial_mark:  # a kernel chose serial meanwhile
                self._back_s = min(2 * self._back_s, BATCH_S_MAX)
                self._until = now + self._back_s
                self._serial_mark = _serial_runs
            else:
                self._until, self._back_s, self._slow = None, BATCH_S, 0
            return
        self._slow = self._slow + 1 if slow else 0
        if self._slow >= STREAK:
            self._slow = 0
            self._until = now + self._back_s
            self._serial_mark = _serial_runs


class ForkSafeKernel:
    """A forced-parallel kernel (``parallel=True``): itself, except in a child forked after GNU
    OpenMP started, where it runs the serial variant (built there on first use) with one
    :class:`~dml_numba._threads.ForkWarning`."""

    def __init__(self, parallel, build_serial):
        self._parallel = parallel
        self._serial = _SerialBuilder(build_serial, _in_background)

    def __call__(self, *args):
        if _threads.FORKED_AFTER_GOMP:
            _threads.warn_forced_parallel_in_fork()
            return self._serial.now()(*args)
        if not getattr(_pins, "done", False):
            _affinity.pin_workers()
        return self._parallel(*args)

    def __getattr__(self, name):
        return getattr(self._parallel, name)
