"""Inside a user's real program: forked children and process pools, a warm operator that must
never stall for a compile it did not ask for, long-running processes that see more shapes than
the memory cache holds, and environment variables read one way.

Process-level behaviour runs in real subprocesses with time limits."""
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import dml_numba as dml
from dml_numba import _env
from dml_numba.cpu import _adaptive
from dml_numba.cpu._adaptive import AdaptiveKernel
from tests.helpers import assert_warned_at

POSIX_FORK = hasattr(os, "fork")


def _python(script, timeout=120, **env):
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True,
                         text=True, timeout=timeout, env=dict(os.environ, **env))
    return out


# -- fork ------------------------------------------------------------------------------------

FORK = """
    import os, sys, warnings, multiprocessing as mp
    import numpy as np, numba, dml_numba as dml
    warnings.simplefilter("always")
    x = np.random.default_rng(0).standard_normal((8, 16, 64, 64)).astype(np.float32)
    w = np.random.default_rng(1).standard_normal((16, 16, 3, 3)).astype(np.float32)
    cases = {{
        "pad": (dml.functional.padding_desc(x, (0, 0, 2, 2), (0, 0, 1, 3), "symmetric"), (x,)),
        "pool": (dml.functional.lp_pooling_desc(x, (3, 3), (2, 2)), (x,)),
        "conv": (dml.functional.convolution_desc(x, w, start_padding=(1, 1),
                                                 end_padding=(1, 1)), (x, w)),
    }}
    ops = {{k: dml.compile_operator(d, "cpu", parallel={parallel}) for k, (d, _) in cases.items()}}
    ref = {{k: dml.compile_operator(d, "numpy")(*a) for k, (d, a) in cases.items()}}
    {before}

    def check(_=None):
        ok = True
        for k, (d, a) in cases.items():
            y = ops[k](*a)
            ok &= bool(np.allclose(y, ref[k], rtol=1e-4, atol=1e-4))
        # a kernel first built in the child, through the functional layer
        z = dml.padding(x, (0, 0, 1, 1), (0, 0, 1, 1), "reflection")
        return ok and np.array_equal(z, np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)], "reflect"))

    if __name__ == "__main__":
        print("parent", check(), flush=True)
        pid = os.fork()
        if pid == 0:
            ok = check()
            print("child", ok, flush=True)
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        print("status", status, flush=True)
        with mp.get_context("fork").Pool(2) as pool:
            print("pool", pool.map(check, range(4)), flush=True)
"""


@pytest.mark.skipif(not POSIX_FORK, reason="os.fork is POSIX-only")
@pytest.mark.parametrize("parallel", [None, True])
def test_operators_in_forked_children_and_fork_pools(parallel):
    """After parallel kernels ran in the parent (GNU OpenMP's pool started), a forked child and
    the workers of a fork Pool get right answers (serially), instead of libgomp terminating them
    and ``map`` hanging. A forced parallel=True says once that it runs serially there."""
    out = _python(FORK.format(parallel=parallel, before=""), timeout=240)
    assert out.returncode == 0, out.stderr
    assert "Terminating" not in out.stderr
    lines = out.stdout.split("\n")
    assert lines[:3] == ["parent True", "child True", "status 0"], out.stdout
    assert lines[3] == "pool [True, True, True, True]"
    forced_warning = "parallel=True kernels run serially here"
    assert (forced_warning in out.stderr) == (parallel is True), out.stderr


CHILD_BEFORE_POOL = """
    import os, numpy as np, numba, dml_numba as dml
    from dml_numba import _threads
    x = np.arange(1 << 18, dtype=np.float32).reshape(64, 4096)
    d = dml.functional.padding_desc(x, (1, 1), (1, 1), "edge")
    pid = os.fork()  # before any parallel kernel: the child's OpenMP is fresh
    if pid == 0:
        op = dml.compile_operator(d, "cpu", parallel=True)
        ok = np.array_equal(op(x), np.pad(x, 1, "edge"))
        print("child", ok, _threads.FORKED_AFTER_GOMP, numba.threading_layer(), flush=True)
        os._exit(0 if ok and not _threads.FORKED_AFTER_GOMP else 3)
    print("status", os.waitpid(pid, 0)[1])
"""


@pytest.mark.skipif(not POSIX_FORK, reason="os.fork is POSIX-only")
def test_a_child_forked_before_the_pool_started_keeps_parallel_kernels():
    out = _python(CHILD_BEFORE_POOL)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["child True False omp", "status 0"], out.stdout


def test_info_names_a_forked_process():
    out = _python("""
        import os, numpy as np, dml_numba as dml
        from dml_numba._threads import describe
        dml.compile_operator(dml.functional.tile_desc(np.ones((300, 300)), (2, 2)), "cpu",
                             parallel=True)
        if os.fork() == 0:
            print(describe(), flush=True)
            os._exit(0)
        os.wait()
    """)
    assert "forked after GNU OpenMP started: kernels run serially" in out.stdout, out


# -- import ------------------------------------------------------------------------------------

def test_importing_the_package_loads_no_backend():
    """``import dml_numba`` (and its ONNX loader, graphs and functional layer) loads neither
    backend nor SciPy's BLAS: the CPU backend comes with the first CPU kernel, CUDA with the
    first CUDA one (a graph importing the CPU backend at import put ~90 ms on every start)."""
    out = _python("""
        import sys, dml_numba, dml_numba.onnx, dml_numba.graph, dml_numba.functional
        print(sorted(m for m in ("dml_numba.cpu", "dml_numba.cuda", "scipy.linalg",
                                 "numba.cuda") if m in sys.modules))
    """)
    assert out.stdout.strip() == "[]", out


# -- the automatic variant: measured, never stalling ------------------------------------------

@pytest.fixture(autouse=True)
def _no_recent_overlap(monkeypatch):
    """The chooser's process-wide record of overlapping calls is in real time; the fake clocks
    below start at 0: no earlier test's overlap may count."""
    monkeypatch.setattr(_adaptive, "_overlap_at", float("-inf"))
    monkeypatch.setattr(_adaptive, "_running", 0)
    monkeypatch.setattr(_adaptive, "_parallel_probe_at", {})
    # ... and the machine's load is what each test says (quiet unless it says otherwise: the
    # suite's other workers are real load)
    monkeypatch.setattr(_adaptive, "LOAD", _watch())


def _watch(*shares, then=0.0, cores=2):
    """A load watch reading ``shares`` in turn, then ``then`` for ever."""
    it = iter(shares)
    return _adaptive.LoadWatch(meter=lambda: Meter(next(it, then)), cores=cores)


class Meter:
    """A fake CpuShare: other programs' share of the CPU, as the test sets it."""

    reads = 0

    def __init__(self, share):
        self.share = share
        Meter.reads += 1

    def others(self):
        return self.share


class Clock:
    """A fake clock that the fake kernels advance: calls cost what the test says."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _kernels(clock, parallel_costs, serial_cost=0.002):
    calls = []
    costs = list(parallel_costs)

    def parallel():
        calls.append("p")
        clock.t += costs.pop(0) if costs else parallel_costs[-1]

    def serial():
        calls.append("s")
        clock.t += serial_cost

    return calls, parallel, serial


def _adaptive_kernel(parallel_costs, **kw):
    clock = Clock()
    calls, parallel, serial = _kernels(clock, parallel_costs, **kw)
    builds = []
    k = AdaptiveKernel(parallel, lambda: builds.append(1) or serial, clock=clock,
                       start_build=lambda run: run())  # built on the spot: deterministic
    return k, calls, builds


@pytest.mark.parametrize("pattern", [
    [0.001, 0.01, 0.001, 0.01, 0.001, 0.01, 0.001, 0.01] * 4,  # slow, fast, slow, fast...
    [0.001, 0.01, 0.01, 0.001, 0.01, 0.01, 0.001] * 4,  # never three slow in a row
    [0.001] * 10 + [0.0014] * 20,  # steadily a little slower: under 1.5x the best
])
def test_scattered_slow_calls_never_build_the_serial_variant(pattern):
    """A noisy idle machine: however many slow calls, unless three come in a row, the serial
    variant is neither built nor run."""
    k, calls, builds = _adaptive_kernel(pattern)
    for _ in pattern:
        k()
    assert builds == [] and set(calls) == {"p"} and k.variant() == "parallel"


@pytest.mark.parametrize("fast_first", [1, 4, 9])
def test_three_consecutive_slow_calls_build_and_switch_to_serial(fast_first):
    k, calls, builds = _adaptive_kernel([0.001] * fast_first + [0.01] * 20)
    for _ in range(fast_first + 2):
        k()
    assert builds == []  # two slow calls in a row: not yet
    k()
    assert builds == [1] and calls == ["p"] * (fast_first + 3)  # the third: wanted now
    k()  # the serial variant is tried...
    assert calls[-1] == "s"
    for _ in range(5):
        k()
    assert k.variant() == "serial" and calls[-1] == "s"  # ...and kept: it is faster


@pytest.mark.parametrize("fast, slow, builds_after", [
    (0.001, 0.0022, 3),  # 2.2x the best and 1.2 ms more: slow by both measures
    (0.001, 0.0019, None),  # 1.9x but 0.9 ms more: a short call's jitter
    (0.0001, 0.0009, None),  # 9x but 0.8 ms more: the same
    (0.001, 0.00145, None),  # 0.45 ms more but under 1.5x the best
])
def test_a_slow_call_is_both_slower_than_the_best_and_a_millisecond_more(fast, slow,
                                                                        builds_after):
    """A call counts towards the streak only when it is more than SLOWER times the best and
    SLOW_S more (each bound alone decides nothing), on the path every call of a quiet kernel
    takes as on the others."""
    k, calls, builds = _adaptive_kernel([fast] * 3 + [slow] * 10)
    for i in range(13):
        k()
        if builds_after is not None and i == 2 + builds_after:
            assert builds == [1]
            return
        assert builds == []
    assert builds_after is None and set(calls) == {"p"}


@pytest.mark.parametrize("share, cores, switches", [
    (1.0, 2, True),  # two other programs' parallel kernels on two cores
    (0.5, 2, True),  # one core's worth: our region shares a core
    (0.3, 2, False),  # a little background work: no serial variant
    (0.1, 16, True),  # 1.6 cores' worth of sixteen
])
def test_a_busy_machine_from_the_start_times_the_serial_variant(share, cores, switches):
    """Every parallel call slow from the first (a scheduler quantum each: never 1.5x a best
    that was never fast): other programs keeping BUSY_CORES of the cores busy, seen over the
    first LOAD_S seconds, make the serial variant built and timed, and it runs once faster;
    below that, nothing is built."""
    clock = Clock()
    calls, parallel, serial = _kernels(clock, [0.012] * 100, serial_cost=0.0005)
    builds = []
    load = _watch(then=share, cores=cores)
    k = AdaptiveKernel(parallel, lambda: builds.append(1) or serial, clock=clock,
                       start_build=lambda run: run(), load=load)
    for _ in range(40):
        k()
    if not switches:
        assert builds == [] and set(calls) == {"p"}
        return
    first = calls.index("s")
    assert builds == [1] and first <= 1 + round(_adaptive.LOAD_S / 0.012) + 1
    assert k.variant() == "serial" and calls[first:].count("p") <= 1


def test_the_load_is_read_at_most_once_an_interval():
    clock = Clock()
    Meter.reads = 0
    load = _adaptive.LoadWatch(meter=lambda: Meter(0.0), cores=2)
    for _ in range(1000):
        load.busy(clock())
        clock.t += 0.001  # a thousand calls of a millisecond: 1 s
    assert Meter.reads <= 1 + 1.0 / _adaptive.LOAD_S + 1


def test_a_machine_that_turns_quiet_returns_to_the_parallel_variant():
    """Busy for the first second (parallel calls 12 ms, serial 0.5 ms), quiet after (parallel
    0.2 ms): serial runs while busy, and the first probe of the parallel variant once quiet
    (PROBE_CALLS calls and at most PROBE_S_MAX seconds after the last) brings it back."""
    clock, calls = Clock(), []

    def parallel():
        calls.append("p")
        clock.t += 0.012 if clock.t < 1.0 else 0.0002

    def serial():
        calls.append("s")
        clock.t += 0.0005

    k = AdaptiveKernel(parallel, lambda: serial, clock=clock, start_build=lambda run: run(),
                       load=_watch(*[1.0] * 10))
    for _ in range(30):
        k()
    assert k.variant() == "serial"
    while clock.t < 1.0:
        k()
    quiet = len(calls)
    while clock.t < 1.0 + _adaptive.PROBE_S_MAX + 0.1:
        k()
    assert k.variant() == "parallel" and calls[-1] == "p"
    assert calls[quiet:].index("p") < _adaptive.PROBE_S_MAX / 0.0005 + 1


def test_probes_back_off_while_they_confirm_and_return_after_a_switch():
    """Lasting contention: each parallel probe confirms serial, and the interval doubles to
    PROBE_S_MAX (a contended probe costs a quantum); a burst of slow parallel calls on a quiet
    machine: the first probe brings parallel back, within PROBE_S."""
    clock, calls = Clock(), []
    state = {"busy": True}

    def parallel():
        calls.append(("p", clock.t))
        clock.t += 0.012 if state["busy"] else 0.0002

    def serial():
        calls.append(("s", clock.t))
        clock.t += 0.0005

    k = AdaptiveKernel(parallel, lambda: serial, clock=clock, start_build=lambda run: run(),
                       load=_watch(then=1.0))
    while clock.t < 10.0:
        k()
    # each probe's first call (a probe is PROBE_RUN calls), once the interval has doubled to
    # PROBE_S_MAX (0.05, 0.1, 0.2 s, each at least PROBE_GAP_S, then 0.4 and 0.8: by 2 s)
    probes = [t for (v, t), (before, _) in zip(calls[1:], calls) if v == "p" and before == "s"
              and t > 2.0]
    gaps = [b - a for a, b in zip(probes, probes[1:])]
    assert gaps and min(gaps) >= _adaptive.PROBE_S_MAX  # backed off fully
    assert len(probes) <= 10
    # quiet again: the next probe wins, and parallel stays
    state["busy"] = False
    start = clock.t
    while clock.t < start + _adaptive.PROBE_S_MAX + 0.1:
        k()
    assert k.variant() == "parallel"


@pytest.mark.parametrize("gap", [True, False], ids=["spaced", "each-its-own"])
def test_a_graph_s_kernels_probe_their_parallel_variants_in_turn(gap, monkeypatch):
    """Fifty kernels run one after another (a graph's steps, their own choice each: the machine
    busy), under lasting contention (a parallel call 12 ms, a scheduler quantum; serial 0.5
    ms): their parallel probes start PROBE_GAP_S apart across the process, so probing takes a
    small share of the time. Each kernel probing on its own interval alone (the gap removed),
    the fifty probes of a PROBE_S_MAX take most of it (MobileNetV2 beside two spinning
    processes: 36 ms a call against its serial variants' 15)."""
    if not gap:
        monkeypatch.setattr(_adaptive, "PROBE_GAP_S", 0.0)
    clock, spent, starts = Clock(), {"p": 0.0, "s": 0.0}, []

    def make(i):
        state = {"last": None}

        def parallel():
            if state["last"] == "s":
                starts.append(clock.t)
            state["last"] = "p"
            spent["p"] += 0.012
            clock.t += 0.012

        def serial():
            state["last"] = "s"
            spent["s"] += 0.0005
            clock.t += 0.0005

        return AdaptiveKernel(parallel, lambda: serial, clock=clock,
                              start_build=lambda run: run(), load=_watch(then=1.0))

    kernels = [make(i) for i in range(50)]
    while clock.t < 20.0:
        for k in kernels:
            k()
    late = [t for t in starts if t > 5.0]  # past the first switches: lasting contention
    share = spent["p"] / (spent["p"] + spent["s"])
    if gap:
        assert min(b - a for a, b in zip(late, late[1:])) >= _adaptive.PROBE_GAP_S
        assert share < 0.2, share
    else:
        assert share > 0.4, share


def test_a_short_kernels_jitter_is_not_contention():
    """A 0.1 ms kernel whose calls wander up to 0.3 ms (a noisy idle machine: 3x its best,
    but a fraction of a millisecond): the serial variant is never built."""
    k, calls, builds = _adaptive_kernel([0.0001, 0.0003, 0.00028, 0.00025, 0.0003] * 20)
    for _ in range(100):
        k()
    assert builds == [] and k.variant() == "parallel"


def test_two_slow_then_fast_resets_the_streak():
    k, calls, builds = _adaptive_kernel([0.001, 0.01, 0.01, 0.001, 0.01, 0.01, 0.001])
    for _ in range(7):
        k()
    assert builds == []


def test_a_serial_build_in_progress_never_blocks_a_call():
    """The serial variant takes long to build: no call waits for it. Once its calls look
    contended, the kernel runs its parallel variant on one thread meanwhile (Numba's
    ``set_num_threads`` for the call, restored after it), which under contention runs as the
    serial variant would (here: fast on one thread, slow on all), and the serial variant once
    it is ready."""
    import threading

    import numba

    clock = Clock()
    calls, counts = [], []
    full = numba.get_num_threads()

    def parallel():
        n = numba.get_num_threads()
        calls.append("p" if n == full else "p1")
        clock.t += 0.001 if not calls[:-1] else 0.002 if n == 1 else 0.01

    def serial():
        calls.append("s")
        clock.t += 0.002

    release, started = threading.Event(), threading.Event()

    def slow_build():
        started.set()
        release.wait(30)
        return serial

    k = AdaptiveKernel(parallel, slow_build, clock=clock)  # the real background thread
    for _ in range(4):  # one fast call, then three slow: contention, the build started
        k()
        counts.append(numba.get_num_threads())
    assert started.wait(10)
    for _ in range(10):  # while the build is held: the parallel variant on one thread
        k()
        counts.append(numba.get_num_threads())
    if full > 1:
        assert calls == ["p"] * 4 + ["p1"] * 10, calls
    assert counts == [full] * 14  # restored after every call
    release.set()
    for _ in range(200):
        if k.serial_built():
            break
        threading.Event().wait(0.01)
    k()
    assert calls[-1] == "s"


def test_the_one_thread_interim_restores_the_thread_count_when_the_kernel_raises():
    import numba

    from dml_numba.cpu._adaptive import _one_thread

    full, seen = numba.get_num_threads(), []

    def failing():
        seen.append(numba.get_num_threads())
        raise ValueError("inside the kernel")

    with pytest.raises(ValueError, match="inside the kernel"):
        _one_thread(failing)()
    assert seen == [1] and numba.get_num_threads() == full


def test_the_one_thread_interim_leaves_other_threads_their_threads():
    """Numba's thread count is per calling thread: while one thread runs a kernel on one
    thread, another's parallel calls keep every thread."""
    import threading

    import numba

    from dml_numba.cpu._adaptive import _one_thread

    full = numba.get_num_threads()
    inside, release, seen = threading.Event(), threading.Event(), []

    def held():
        seen.append(numba.get_num_threads())
        inside.set()
        release.wait(10)

    t = threading.Thread(target=_one_thread(held))
    t.start()
    assert inside.wait(10)
    other = numba.get_num_threads()
    release.set()
    t.join(10)
    assert seen == [1] and other == full


def test_a_warm_operator_never_stalls_for_the_serial_build(monkeypatch):
    """A real operator whose parallel calls look contended: the serial variant is compiled in
    another thread while the calls go on (some complete during the compile), and the variant is
    then used."""
    import threading
    import time

    x = np.random.default_rng(0).standard_normal((16, 64, 70)).astype(np.float32)
    desc = dml.functional.padding_desc(x, (0, 5, 3), (0, 4, 2), "symmetric")
    op = dml.compile_operator(desc, "cpu")
    fn = op.kernel.fn
    assert isinstance(fn, AdaptiveKernel) and not fn.serial_built()
    real = fn._parallel
    monkeypatch.setattr(fn, "_parallel", lambda *a: (time.sleep(0.02), real(*a))[1])
    fn._best = 1e-4  # a fast best time seen: every call now looks contended
    build, span = fn._serial._build, {}

    def recorded_build():
        span["thread"], span["start"] = threading.get_ident(), time.perf_counter()
        try:
            return build()
        finally:
            span["end"] = time.perf_counter()

    monkeypatch.setattr(fn._serial, "_build", recorded_build)
    ended = []
    for _ in range(400):
        y = op(x)
        ended.append(time.perf_counter())
        if fn.serial_built():
            break
    np.testing.assert_array_equal(y, np.pad(x, [(0, 0), (5, 4), (3, 2)], "symmetric"))
    assert fn.serial_built() and span["thread"] != threading.get_ident()
    during = [t for t in ended if span["start"] < t < span["end"]]
    assert during, "no call completed while the serial variant was being built"
    op(x)
    assert fn.variant() == "serial"  # faster than the (slowed) parallel variant


# -- long-running processes: eviction keeps memory flat --------------------------------------

def test_an_evicted_kernel_comes_back_without_loading_again():
    """More shapes than the memory cache holds, in rotation: each kernel is compiled once per
    process and evictions hand back the same machine code (before: every reload added a copy,
    23 MiB per 1,000 calls)."""
    from dml_numba._cache import KernelCache

    saved = dml.cache.max_entries
    dml.cache.max_entries = 4
    try:
        xs = [np.ones((1, 1, 4 + i, 5), np.float32) for i in range(6)]
        first = {}
        kept_before = dml.cache.stats()["kept"]
        for _ in range(3):
            for i, x in enumerate(xs):
                y = dml.padding(x, (0, 0, 1, 1), (0, 0, 1, 1), "reflection")
                assert y.shape == (1, 1, 6 + i, 7)
                fn = dml.compile_operator(
                    dml.functional.padding_desc(x, (0, 0, 1, 1), (0, 0, 1, 1), "reflection"),
                    "cpu").kernel.fn
                assert first.setdefault(i, fn) is fn  # the same dispatcher every round
        stats = dml.cache.stats()
        assert stats["evictions"] > 0 and stats["returns"] > 0
        assert stats["kept"] - kept_before <= len(xs)
    finally:
        dml.cache.max_entries = saved
    assert KernelCache(max_entries=2).stats()["kept"] == 0


MEMORY = """
    import numpy as np, dml_numba as dml, resource
    xs = [np.ones((1, 1, 4 + i, 5), np.float32) for i in range(12)]
    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096 / 2**20
    for i in range(600):
        dml.padding(xs[i % 12], (0, 0, 1, 1), (0, 0, 1, 1), "reflection")
    before = rss()
    for i in range(2400):
        dml.padding(xs[i % 12], (0, 0, 1, 1), (0, 0, 1, 1), "reflection")
    print(round(rss() - before, 2), dml.cache.stats()["kept"])
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads Linux's /proc")
def test_memory_stays_flat_while_the_cache_evicts():
    out = _python(MEMORY, DML_NUMBA_MEMORY_CACHE_SIZE="4")
    assert out.returncode == 0, out.stderr
    grown, kept = out.stdout.split()
    assert int(kept) == 12 and float(grown) < 8, out.stdout  # before: ~50 MiB over 2,400 calls


def test_info_reports_the_kernels_held():
    out = _python("""
        import numpy as np, dml_numba as dml
        from dml_numba.__main__ import main
        dml.tile(np.ones((3, 3), np.float32), (2, 2))
        main(["info"])
    """)
    assert out.returncode == 0, out.stderr
    assert "compiled kernels held by this process: 1" in out.stdout


# -- environment variables: one parser per kind ----------------------------------------------

@pytest.mark.parametrize("name,default", [("DML_NUMBA_DISK_CACHE", True),
                                          ("DML_NUMBA_FAST_LOAD", True),
                                          ("DML_NUMBA_DEBUG", False)])
@pytest.mark.parametrize("word,value", [("0", False), ("false", False), ("False", False),
                                        ("OFF", False), ("no", False), (" No ", False),
                                        ("1", True), ("true", True), ("ON", True),
                                        ("yes", True), ("", None)])
def test_every_boolean_variable_reads_the_same_words(monkeypatch, name, default, word, value):
    monkeypatch.setenv(name, word)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _env.flag(name, default) is (default if value is None else value)


def test_the_readers_of_boolean_variables_use_the_one_parser(monkeypatch):
    from dml_numba import _diskcache
    from dml_numba.cpu import _warmstart

    for word in ("False", "OFF", "no"):
        monkeypatch.setenv("DML_NUMBA_FAST_LOAD", word)
        monkeypatch.setenv("DML_NUMBA_DISK_CACHE", word)
        assert not _warmstart.enabled() and not _diskcache.enabled()


@pytest.mark.parametrize("name,raw,reader", [
    ("DML_NUMBA_DISK_CACHE", "maybe", lambda: _env.flag("DML_NUMBA_DISK_CACHE", True)),
    ("DML_NUMBA_MEMORY_CACHE_SIZE", "abc", lambda: _env.count("DML_NUMBA_MEMORY_CACHE_SIZE", 2048)),
    ("DML_NUMBA_MEMORY_CACHE_SIZE", "1e9", lambda: _env.count("DML_NUMBA_MEMORY_CACHE_SIZE", 2048)),
    ("DML_NUMBA_MEMORY_CACHE_SIZE", "0", lambda: _env.count("DML_NUMBA_MEMORY_CACHE_SIZE", 2048)),
    ("DML_NUMBA_THREADING", "pasive", lambda: _env.choice("DML_NUMBA_THREADING",
                                                          ("passive", "numba"), "numba")),
])
def test_a_value_not_understood_warns_once_naming_it(monkeypatch, name, raw, reader):
    monkeypatch.setenv(name, raw)
    monkeypatch.setattr(_env, "_warned", set())
    with pytest.warns(_env.ConfigWarning) as record:
        first = reader()
        assert reader() == first  # the default, and a second read says nothing more
    assert len(record) == 1
    message = str(record[0].message)
    assert f"{name}={raw!r} is invalid" in message and f"using {first!r}" in message
    assert_warned_at(record[0], __file__)  # the line that read it, not the library's


def test_the_memory_cache_size_variable_in_a_new_process():
    out = _python("import dml_numba as dml; print(dml.cache.max_entries)",
                  DML_NUMBA_MEMORY_CACHE_SIZE="1e9")
    assert out.stdout.strip() == "2048"
    assert "DML_NUMBA_MEMORY_CACHE_SIZE='1e9' is invalid" in out.stderr
    out = _python("import dml_numba as dml; print(dml.cache.max_entries)",
                  DML_NUMBA_MEMORY_CACHE_SIZE="16")
    assert out.stdout.strip() == "16" and not out.stderr


# -- clear errors for the rest -----------------------------------------------------------------

F32 = dml.DataType.FLOAT32


@pytest.mark.parametrize("make,message", [
    (lambda: dml.TensorDesc(F32, np.array(4)),
     "TensorDesc.sizes: array(4) is invalid; expected a sequence of integers"),
    (lambda: dml.TensorDesc(F32, (2, 3), np.array(1)),
     "TensorDesc.strides: array(1) is invalid; expected a sequence of integers"),
    (lambda: dml.TileOperatorDesc(dml.TensorDesc(F32, (2,)), dml.TensorDesc(F32, (4,)),
                                  np.array(2)),
     "TileOperatorDesc.repeats: array(2) is invalid; expected a sequence of integers"),
    (lambda: dml.Slice1OperatorDesc(dml.TensorDesc(F32, (4,)), dml.TensorDesc(F32, (2,)),
                                    np.array(0), (2,), (1,)),
     "Slice1OperatorDesc.input_window_offsets: array(0) is invalid; expected a sequence"),
])
def test_a_0d_array_in_a_tuple_field_is_a_validation_error(make, message):
    with pytest.raises(dml.ValidationError) as info:
        make()
    assert str(info.value).startswith(message)


@pytest.mark.parametrize("device", [["cpu"], {"cpu": 1}, None, 0, "cpuu", "CPU", "cuda:",
                                    "cuda:x", "cuda:-1", "cpu:0", "cuda:1:0"])
@pytest.mark.parametrize("entry", ["compile_operator", "functional"])
def test_a_device_that_is_not_a_name_is_a_validation_error(device, entry):
    x = np.ones((2, 2), np.float32)
    desc = dml.functional.tile_desc(x, (1, 2))
    with pytest.raises(dml.ValidationError) as info:
        if entry == "compile_operator":
            dml.compile_operator(desc, device)
        else:
            dml.tile(x, (1, 2), device=device)
    assert str(info.value) == (f"compile_operator.device: {device!r} is invalid; expected one of "
                               "'numpy', 'cpu', 'cuda' (or 'cuda:N', the N-th GPU)")


def test_a_burst_of_slow_calls_on_a_quiet_machine_is_undone_at_the_first_probe():
    """Three slow parallel calls in a row (a scheduler blip) switch to serial; the machine is
    quiet, so the first probe, PROBE_CALLS calls and PROBE_S seconds later, brings parallel
    back: a wrong switch costs at most that."""
    clock = Clock()
    calls, parallel, serial = _kernels(clock, [0.0002] * 5 + [0.01] * 3 + [0.0002] * 10_000,
                                       serial_cost=0.0005)
    k = AdaptiveKernel(parallel, lambda: serial, clock=clock, start_build=lambda run: run(),
                       load=_watch())
    for _ in range(10):
        k()
    assert k.variant() == "serial"
    switched = clock.t
    while k.variant() == "serial":
        k()
    assert clock.t - switched <= _adaptive.PROBE_S + _adaptive.PROBE_CALLS * 0.0005 + 0.01


def test_a_probe_is_not_judged_on_its_wake_up_call():
    """The parallel variant's first call after a long run of serial calls pays for waking its
    thread pool (0.5 ms here; its threads sleep once idle a while), later ones not (0.1 ms;
    serial 0.2 ms): a probe of PROBE_RUN calls counts the fastest, so parallel wins it; judged
    on the first call alone it never would."""
    clock, calls = Clock(), []
    state = {"serial_run": 0, "busy": True}

    def parallel():
        asleep = state["serial_run"] >= 8
        clock.t += 0.012 if state["busy"] else 0.0005 if asleep else 0.0001
        calls.append("p")
        state["serial_run"] = 0

    def serial():
        clock.t += 0.0002
        calls.append("s")
        state["serial_run"] += 1

    k = AdaptiveKernel(parallel, lambda: serial, clock=clock, start_build=lambda run: run(),
                       load=_watch(*[1.0] * 5))
    for _ in range(40):
        k()
    assert k.variant() == "serial"
    state["busy"] = False
    start = clock.t
    while clock.t < start + 3 * _adaptive.PROBE_S_MAX:
        k()
    assert _adaptive.PROBE_RUN >= 2 and k.variant() == "parallel"


def test_the_load_watch_can_be_turned_off(monkeypatch):
    """DML_NUMBA_LOAD_WATCH=0 (a test suite's workers load each other): the watch reads no
    load and says the machine is quiet; on by default."""
    import os
    import subprocess
    import sys

    off = _adaptive.LoadWatch(meter=lambda: pytest.fail("read the load"), enabled=False)
    assert not off.busy(0.0) and not off.busy(10.0)
    code = "from dml_numba.cpu import _adaptive; print(_adaptive.LOAD.enabled)"
    env = {k: v for k, v in os.environ.items() if k != "DML_NUMBA_LOAD_WATCH"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "True", out.stderr
    env["DML_NUMBA_LOAD_WATCH"] = "0"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr


# -- a run of kernels decided as one (a compiled graph's steps) --------------------------------

class CountingClock(Clock):
    """The fake clock, counting its reads: a kernel deciding for itself reads it twice a call,
    a batch run directly twice a run."""

    reads = 0

    def __call__(self):
        self.reads += 1
        return self.t


def _batch_of(clock, *costs, serial_cost=0.0005, load=None):
    """An AdaptiveBatch on ``clock`` and one automatic kernel per list of parallel costs (serial
    variants built on the spot), each kernel's calls in ``calls``: a run calls each once."""
    calls = []
    kernels = []
    for k, cost in enumerate(costs):
        _, parallel, serial = _kernels(clock, cost, serial_cost=serial_cost)

        def p(parallel=parallel, k=k):
            calls.append(f"p{k}")
            parallel()

        def s(serial=serial, k=k):
            calls.append(f"s{k}")
            serial()

        kernels.append(AdaptiveKernel(p, lambda s=s: s, clock=clock,
                                      start_build=lambda run: run(), load=load or _watch()))
    batch = _adaptive.AdaptiveBatch(clock=clock, load=load or _watch())
    batch.direct_runs = []  # the start of each run made directly (the batch times only those)
    timed = batch._timed

    def recorded(now, dt):
        batch.direct_runs.append(now)
        timed(now, dt)
    batch._timed = recorded

    def run():
        return batch(lambda *ks: [kk() for kk in ks], *kernels)
    return batch, kernels, calls, run


def _ran_directly(batch, run) -> bool:
    """``run()``, and whether the batch ran it directly."""
    n = len(batch.direct_runs)
    run()
    return len(batch.direct_runs) > n


def test_a_batch_on_a_quiet_machine_runs_its_kernels_directly_after_its_first_runs():
    """Quiet: the first BATCH_WARM runs leave each kernel its own choice (two clock reads a
    call: each learns its best time); then the batch runs the parallel variants directly,
    two clock reads a run and one a kernel (the run's deadline; their own bookkeeping
    skipped)."""
    clock = CountingClock()
    batch, kernels, calls, run = _batch_of(clock, [0.0002], [0.0003], [0.0001])
    clock.reads = 0  # the kernels' own start
    assert not batch.direct
    for _ in range(_adaptive.BATCH_WARM):
        run()
    assert clock.reads == _adaptive.BATCH_WARM * (1 + 2 * 3)
    clock.reads = 0
    calls.clear()
    for _ in range(10):
        run()
    assert batch.direct and clock.reads == 10 * (2 + 3) and calls == ["p0", "p1", "p2"] * 10


def test_a_direct_run_past_its_deadline_hands_its_later_kernels_their_own_choice():
    """A direct run whose time passes its deadline (SLOWER times the batch's best and SLOW_S
    more: a run already slow) hands its later kernels the choice: the machine turned busy
    during the run (the first kernel's call waited 150 ms for the cores), and the next
    kernels, seeing the load, run serially from this run on (before, the whole run kept its
    parallel calls: up to 1.4 s for MobileNetV2's fifty steps). The batch's own count of
    running kernels is handed back once."""
    clock = CountingClock()
    fast = [0.0002] * (_adaptive.BATCH_WARM + 5)
    load = _watch(1.0, then=1.0)  # busy at the first reading (after LOAD_S)
    batch, kernels, calls, run = _batch_of(clock, fast + [0.15] * 100, fast + [0.012] * 100,
                                           fast + [0.012] * 100, load=load)
    for _ in range(_adaptive.BATCH_WARM + 5):
        run()
    assert batch.direct and calls[-3:] == ["p0", "p1", "p2"]
    since = [k._since for k in kernels]
    assert _ran_directly(batch, run)  # started directly: quiet when it began
    assert calls[-3:] == ["p0", "s1", "s2"], calls[-6:]
    assert kernels[0]._since == since[0]  # called directly
    assert all(k._since != c for k, c in zip(kernels[1:], since[1:]))  # their own choice
    assert _adaptive._running == 0 and _adaptive._direct is None
    run()  # the next run: the machine busy, not direct; every kernel serial
    assert calls[-3:] == ["s0", "s1", "s2"] or calls[-3:] == ["p0", "s1", "s2"], calls[-6:]


@pytest.mark.parametrize("why", ["busy", "another thread in a kernel", "recent overlap",
                                 "forked", "nested"])
def test_a_batch_leaves_the_choice_to_its_kernels_where_one_kernel_would(monkeypatch, why):
    """Where a kernel alone would leave its common path (the machine busy, another thread in
    one of our kernels or lately, a child forked after OpenMP started), or inside a batch
    already running directly, the batch does not run directly: each kernel decides (and
    times) itself."""
    clock = CountingClock()
    load = _watch(then=1.0 if why == "busy" else 0.0)
    batch, kernels, calls, run = _batch_of(clock, [0.0002], [0.0002], load=load)
    for _ in range(_adaptive.BATCH_WARM):
        run()
    clock.t += _adaptive.LOAD_S  # the watch's first interval over
    if why == "another thread in a kernel":
        monkeypatch.setattr(_adaptive, "_running", 1)
    if why == "recent overlap":
        monkeypatch.setattr(_adaptive, "_overlap_at", clock.t)
    if why == "forked":
        monkeypatch.setattr(_adaptive._threads, "FORKED_AFTER_GOMP", True)
    if why == "nested":
        monkeypatch.setattr(_adaptive, "_direct", _adaptive._ident() + 1)
    clock.reads = 0
    run()
    assert clock.reads >= 1 + 2  # the batch's clock read, and each kernel's own (direct: 2)
    if why == "forked":
        assert calls[-2:] == ["s0", "s1"]


def test_a_kernel_called_by_another_thread_during_a_direct_batch_decides_for_itself():
    """A batch runs directly for its own thread only: another thread's call meanwhile sees one
    of our kernels running and runs its serial variant, as it would beside any kernel."""
    import threading

    clock = Clock()
    batch, kernels, calls, run = _batch_of(clock, [0.0002], [0.0002])
    _, (other,), other_calls, _ = _batch_of(clock, [0.0002])

    def body(*ks):
        for kk in ks:
            kk()
        t = threading.Thread(target=other)
        t.start()
        t.join()
    for _ in range(_adaptive.BATCH_WARM):
        run()
    batch(body, *kernels)
    assert batch.direct and calls[-2:] == ["p0", "p1"] and other_calls == ["s0"]


def test_two_threads_batches_at_once_one_runs_directly():
    """Two threads' batches (a graph called from two threads) overlapping: the first runs its
    kernels directly; the second, starting while it runs, leaves the choice to its kernels,
    which see one of our kernels running and run serially; after both, the next runs directly
    again."""
    import threading

    clock = Clock()
    batch_a, kernels_a, calls_a, run_a = _batch_of(clock, [0.0002])
    batch_b, kernels_b, calls_b, run_b = _batch_of(clock, [0.0002])
    for _ in range(_adaptive.BATCH_WARM):
        run_a()
        run_b()
    inside, done = threading.Event(), threading.Event()

    def body_a(k):
        k()
        inside.set()
        assert done.wait(10)

    t = threading.Thread(target=batch_a, args=(body_a, kernels_a[0]))
    t.start()
    assert inside.wait(10)
    run_b()
    done.set()
    t.join()
    assert calls_a[-1] == "p0" and calls_b[-1] == "s0"
    clock.t += _adaptive.OVERLAP_S  # the overlap's serial interval over
    run_b()
    assert calls_b[-1] == "p0" and _adaptive._direct is None and _adaptive._running == 0


def test_a_slow_streak_hands_the_choice_to_the_kernels_and_backs_off_while_still_slow():
    """Fast runs, then every parallel call slow (12 ms; serial 0.5 ms) on a machine whose load
    the watch does not see (a spinning thread of this process): STREAK slow runs in a row
    hand the choice back to the kernels, which judge their calls against the best they
    learned in the batch's first runs and switch to their serial variants; the batch runs
    directly again once BATCH_S later, slow, and waits twice as long before the next."""
    clock = CountingClock()
    fast = [0.0002] * (_adaptive.BATCH_WARM + 5)
    batch, kernels, calls, run = _batch_of(clock, fast + [0.012] * 10_000,
                                           fast + [0.012] * 10_000)
    for _ in range(_adaptive.BATCH_WARM + 5):
        run()
    assert batch.direct
    for _ in range(_adaptive.STREAK):
        run()
    assert not batch.direct
    start = clock.t
    direct_at = []
    while clock.t < start + _adaptive.BATCH_S + 2 * _adaptive.BATCH_S + 0.5:
        at = clock.t
        if _ran_directly(batch, run):
            direct_at.append(at - start)
    assert "s0" in calls and "s1" in calls  # the kernels chose their serial variants
    assert len(direct_at) == 2, direct_at  # after BATCH_S, then after twice that
    # (BATCH_S from the start of the streak's last run, 24 ms before ``start``)
    assert abs(direct_at[0] - _adaptive.BATCH_S) < 0.05, direct_at
    assert abs(direct_at[1] - direct_at[0] - 2 * _adaptive.BATCH_S) < 0.05, direct_at


def test_a_batch_whose_kernels_keep_their_parallel_variants_does_not_back_off():
    """A noisy machine (a hypervisor's neighbours): every parallel call slow (12 ms) for a
    long while, the serial variants slower still (20 ms; the kernels probe them, lose, and keep
    their parallel ones). The slow streak hands the choice to the kernels for BATCH_S; the
    direct run after it is slow too, but no kernel ran its serial variant by choice meanwhile:
    the batch does not double its interval (it would stay one by one, every kernel's
    bookkeeping for nothing, up to BATCH_S_MAX after the noise ends), it runs directly again,
    and the next streak hands the choice back for BATCH_S once more."""
    clock = CountingClock()
    fast = [0.0002] * (_adaptive.BATCH_WARM + 5)
    batch, kernels, calls, run = _batch_of(clock, fast + [0.012] * 10_000,
                                           fast + [0.012] * 10_000, serial_cost=0.020)
    for _ in range(_adaptive.BATCH_WARM + 5):
        run()
    for _ in range(_adaptive.STREAK):
        run()
    assert not batch.direct
    start = clock.t
    direct_at = []
    while clock.t < start + 3 * _adaptive.BATCH_S + 0.5:
        at = clock.t
        if _ran_directly(batch, run):
            direct_at.append(at - start)
    assert "s0" in calls  # the serial variants were probed (and lost)
    assert all(k.variant() == "parallel" for k in kernels)
    firsts = [t for k, t in enumerate(direct_at) if k == 0 or t - direct_at[k - 1] > 0.1]
    assert len(firsts) == 3, direct_at  # after BATCH_S each time: never twice as long
    gaps = [b - a for a, b in zip(firsts, firsts[1:])]
    assert all(abs(g - _adaptive.BATCH_S) < 0.1 for g in gaps), direct_at


def test_a_batch_whose_kernels_ran_serially_beside_another_thread_backs_off(monkeypatch):
    """As above (a long slow phase, serial variants slower when timed), but during the first
    interval one by one another thread was in our kernels (the cores taken): the kernels ran
    their serial variants untimed, a choice the batch's direct runs would not make, so the
    slow direct run after it doubles the wait."""
    clock = CountingClock()
    fast = [0.0002] * (_adaptive.BATCH_WARM + 5)
    batch, kernels, calls, run = _batch_of(clock, fast + [0.012] * 10_000, serial_cost=0.020)
    for _ in range(_adaptive.BATCH_WARM + 5 + _adaptive.STREAK):
        run()
    assert not batch.direct
    monkeypatch.setattr(_adaptive, "_overlap_at", clock.t)  # another thread's kernel, now
    start = clock.t
    run()
    assert calls[-1] == "s0"
    direct_at = []
    while clock.t < start + 3 * _adaptive.BATCH_S + 0.5:
        at = clock.t
        if _ran_directly(batch, run):
            direct_at.append(at - start)
    firsts = [t for k, t in enumerate(direct_at) if k == 0 or t - direct_at[k - 1] > 0.1]
    assert len(firsts) == 2, direct_at  # after about BATCH_S, then twice that
    assert abs(firsts[1] - firsts[0] - 2 * _adaptive.BATCH_S) < 0.1, direct_at


def test_a_batch_returns_to_direct_runs_once_the_machine_is_quiet_again():
    """A burst of slow runs hands the choice back; the first direct run BATCH_S later is fast
    again: the batch stays direct from then on."""
    clock = Clock()
    warm = [0.0002] * (_adaptive.BATCH_WARM + 5)
    burst = [0.012] * _adaptive.STREAK
    batch, kernels, calls, run = _batch_of(clock, warm + burst + [0.0002] * 100_000)
    for _ in range(_adaptive.BATCH_WARM + 5 + _adaptive.STREAK):
        run()
    assert not batch.direct
    while clock.t < _adaptive.BATCH_S + 1.0:
        run()
    assert batch.direct


def test_a_compiled_graphs_steps_run_as_one_batch(monkeypatch):
    """A CPU graph's steps are one batch: after its first runs each step's automatic kernel is
    called directly (its own count of calls stops), and the answers stay those of the numpy
    device; where the batch cannot run directly (here: inside another batch), each step
    decides for itself again."""
    from tests.test_graph import chain_graph, pool, rand, tile

    monkeypatch.setattr(_adaptive, "SLOW_S", 10.0)  # no run this noisy machine slows is slow
    g = chain_graph(tile((1, 4, 150, 150), (1, 1, 2, 2)), pool((1, 4, 300, 300), (3, 3), (1, 1)))
    cg = dml.compile_graph(g, "cpu")
    kernels = [op.kernel.fn for op in cg.ops]
    assert len(kernels) == 2 and all(isinstance(k, AdaptiveKernel) for k in kernels)
    x = rand((1, 4, 150, 150))
    want = dml.compile_graph(g, "numpy")(x)
    for _ in range(_adaptive.BATCH_WARM):
        cg(x)
    counts = [k._since for k in kernels]
    assert all(c >= _adaptive.BATCH_WARM for c in counts)
    for _ in range(3):
        np.testing.assert_allclose(cg(x), want, rtol=1e-5)
    assert [k._since for k in kernels] == counts  # called directly
    monkeypatch.setattr(_adaptive, "_direct", _adaptive._ident() + 1)
    cg(x)
    assert all(k._since == c + 1 for k, c in zip(kernels, counts))
