"""The threading policy's parts in this process: what the fork tests (tests/test_real_program.py)
exercise only in forked children, where a coverage or mutation tool does not see them. The
child's state is set by hand here (the at-fork hook called directly, the flag patched), and
nothing is forked."""
import os
import sys
import threading
import time
import types
import warnings

import numpy as np
import pytest

import dml_numba as dml
from dml_numba import _threads
from dml_numba.cpu import _adaptive
from tests.helpers import assert_warned_at


@pytest.fixture
def forked(monkeypatch):
    """This process as a child forked after GNU OpenMP started (the flag the hook sets)."""
    monkeypatch.setattr(_threads, "FORKED_AFTER_GOMP", True)
    monkeypatch.setattr(_threads, "_fork_warned", False)


def _modules(monkeypatch, initialized, layer, vendor):
    par = types.SimpleNamespace(_is_initialized=initialized, _threading_layer=layer)
    monkeypatch.setitem(sys.modules, "numba.np.ufunc.parallel", par)
    if vendor is None:
        monkeypatch.setitem(sys.modules, "numba.np.ufunc.omppool", types.SimpleNamespace())
    else:
        monkeypatch.setitem(sys.modules, "numba.np.ufunc.omppool",
                            types.SimpleNamespace(openmp_vendor=vendor))


@pytest.mark.parametrize("initialized, layer, vendor, started", [
    (True, "omp", "GNU", True),
    (True, "omp", None, True),  # a vendor not reported: taken for the unsafe one
    (True, "omp", "Intel", False),
    (True, "tbb", "GNU", False),
    (True, "workqueue", "GNU", False),
    (False, "omp", "GNU", False),
])
def test_gnu_openmp_started_only_with_its_pool_running(monkeypatch, initialized, layer, vendor,
                                                       started):
    _modules(monkeypatch, initialized, layer, vendor)
    assert _threads.gomp_started() is started
    monkeypatch.setattr(_threads, "FORKED_AFTER_GOMP", False)
    _threads._after_fork_in_child()  # the at-fork hook, as the child runs it
    assert _threads.FORKED_AFTER_GOMP is started


def test_gnu_openmp_not_started_before_numba_loads_its_pool(monkeypatch):
    monkeypatch.delitem(sys.modules, "numba.np.ufunc.parallel", raising=False)
    assert _threads.gomp_started() is False
    monkeypatch.setitem(sys.modules, "numba.np.ufunc.omppool",
                        types.SimpleNamespace(openmp_vendor="GNU"))
    for attrs in ({}, {"_threading_layer": "omp"}, {"_is_initialized": True}):
        # loaded but never initialised, or a layer not (yet) named: not started
        monkeypatch.setitem(sys.modules, "numba.np.ufunc.parallel", types.SimpleNamespace(**attrs))
        assert _threads.gomp_started() is False


def test_a_forced_parallel_operator_runs_serially_in_a_forked_child_with_one_warning(forked):
    x = np.arange(2 * 3 * 40 * 40, dtype=np.float32).reshape(2, 3, 40, 40)
    op = dml.compile_operator(dml.functional.padding_desc(x, (0, 0, 2, 2), (0, 0, 2, 2),
                                                          "reflection"), "cpu", parallel=True)
    kernel = op.kernel.fn
    assert isinstance(kernel, _adaptive.ForkSafeKernel)
    ref = np.pad(x, ((0, 0), (0, 0), (2, 2), (2, 2)), mode="reflect")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        np.testing.assert_array_equal(op(x), ref)
        np.testing.assert_array_equal(op(x), ref)
    forks = [w for w in caught if issubclass(w.category, _threads.ForkWarning)]
    assert len(forks) == 1  # once a process
    assert str(forks[0].message) == (
        "dml_numba: this process was forked after GNU OpenMP started in its parent, and libgomp "
        "would terminate it at a parallel region: parallel=True kernels run serially here (use "
        "the 'spawn' or 'forkserver' start method, or NUMBA_THREADING_LAYER=tbb, for parallel "
        "kernels in child processes)")
    assert_warned_at(forks[0], __file__)  # it names the user's call
    assert kernel._serial.fn is not None  # built on the spot


def test_a_fork_safe_kernel_calls_the_parallel_variant_outside_a_forked_child(monkeypatch):
    monkeypatch.setattr(_threads, "FORKED_AFTER_GOMP", False)
    calls = []
    kernel = _adaptive.ForkSafeKernel(
        lambda *a: calls.append(("parallel", a)) or "p",
        lambda: (lambda *a: calls.append(("serial", a)) or "s"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert kernel(1, 2) == "p" and calls == [("parallel", (1, 2))]
    assert kernel._serial.fn is None  # never built
    wrapped = _adaptive.ForkSafeKernel(types.SimpleNamespace(signatures=["sig"]), lambda: None)
    assert wrapped.signatures == ["sig"]  # the dispatcher's attributes pass through


def test_a_fork_safe_kernel_in_a_forked_child(forked):
    calls = []
    kernel = _adaptive.ForkSafeKernel(lambda *a: calls.append("parallel"),
                                      lambda: (lambda *a: calls.append(("serial", a)) or "s"))
    with pytest.warns(_threads.ForkWarning):
        assert kernel(3) == "s"
    assert calls == [("serial", (3,))]


def test_an_automatic_kernel_passes_the_dispatchers_attributes_through():
    kernel = _adaptive.AdaptiveKernel(types.SimpleNamespace(signatures=["sig"], stats=3),
                                      lambda: None)
    assert kernel.signatures == ["sig"] and kernel.stats == 3
    with pytest.raises(AttributeError):
        kernel.nothing_of_that_name  # noqa: B018


def test_an_automatic_kernel_in_a_forked_child_builds_its_serial_variant_on_the_spot(forked):
    started, calls = [], []
    kernel = _adaptive.AdaptiveKernel(
        lambda *a: calls.append("parallel"), lambda: (lambda *a: calls.append(a) or "s"),
        start_build=started.append)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: the variant was not forced
        assert kernel(7) == "s" and kernel(8) == "s"
    assert calls == [(7,), (8,)] and started == []  # built here, not in the background
    assert kernel.serial_built()


def test_a_serial_build_that_fails_is_raised_where_it_is_needed_and_not_retried():
    builds = []

    def build():
        builds.append(1)
        raise RuntimeError("no serial variant")

    serial = _adaptive._SerialBuilder(build, lambda run: run())
    assert serial.request() is None and serial.error is not None  # in the background: kept
    with pytest.raises(RuntimeError, match="no serial variant"):
        serial.now()
    with pytest.raises(RuntimeError, match="no serial variant"):
        serial.now()
    assert len(builds) == 1 and serial.request() is None
    # built on the spot first: a later request starts nothing either
    started = []
    spot = _adaptive._SerialBuilder(build, started.append)
    with pytest.raises(RuntimeError, match="no serial variant"):
        spot.now()
    assert spot.request() is None and started == [] and len(builds) == 2


def test_a_serial_build_waits_for_nothing_when_done():
    serial = _adaptive._SerialBuilder(lambda: "fn", lambda run: None)  # never started by itself
    assert serial.request() is None and serial.fn is None
    assert serial.now() == "fn" and serial.request() == "fn"


def test_while_another_thread_is_in_a_kernel_the_serial_variant_runs_untimed(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(_adaptive, "_running", 0)
    monkeypatch.setattr(_adaptive, "_overlap_at", -1.0)
    calls = []
    quiet = _adaptive.LoadWatch(meter=lambda: types.SimpleNamespace(others=lambda: 0.0))
    kernel = _adaptive.AdaptiveKernel(
        lambda *a: calls.append("parallel"), lambda: (lambda *a: calls.append("serial")),
        clock=lambda: now[0], start_build=lambda run: run(), load=quiet)
    kernel()
    assert calls == ["parallel"]
    _adaptive._running = 1  # another thread inside one of our kernels
    kernel()
    assert calls[-1] == "serial" and kernel._avg[False] is None  # untimed
    assert _adaptive._running == 1  # restored after the call
    _adaptive._running = 0
    now[0] += _adaptive.OVERLAP_S / 2  # within the burst: still serial
    kernel()
    assert calls[-1] == "serial"
    now[0] += _adaptive.OVERLAP_S  # the burst is over
    kernel()
    assert calls[-1] == "parallel"


@pytest.mark.parametrize("env, done", [
    ({"DML_NUMBA_THREADING": "passive"}, {"OMP_WAIT_POLICY": "PASSIVE"}),
    ({"DML_NUMBA_THREADING": "passive", "NUMBA_THREADING_LAYER": "omp"},
     {"OMP_WAIT_POLICY": "PASSIVE"}),
    ({"DML_NUMBA_THREADING": "passive", "NUMBA_THREADING_LAYER": "forksafe"},
     {"OMP_WAIT_POLICY": "PASSIVE"}),
    ({"DML_NUMBA_THREADING": "passive", "NUMBA_THREADING_LAYER": "default"},
     {"OMP_WAIT_POLICY": "PASSIVE"}),
    ({"DML_NUMBA_THREADING": "passive", "NUMBA_THREADING_LAYER": "safe"},
     {"OMP_WAIT_POLICY": "PASSIVE"}),
    ({"DML_NUMBA_THREADING": "passive", "NUMBA_THREADING_LAYER": "threadsafe"},
     {"OMP_WAIT_POLICY": "PASSIVE"}),
    ({"DML_NUMBA_THREADING": "passive", "NUMBA_THREADING_LAYER": "tbb"}, {}),
    ({"DML_NUMBA_THREADING": "passive", "NUMBA_THREADING_LAYER": "workqueue"}, {}),
    ({"DML_NUMBA_THREADING": "passive", "OMP_WAIT_POLICY": "ACTIVE"}, {}),
    ({"DML_NUMBA_THREADING": "numba"}, {}),
    ({}, {}),
])
def test_the_policy_applied(monkeypatch, env, done):
    for name in ("DML_NUMBA_THREADING", "NUMBA_THREADING_LAYER", "OMP_WAIT_POLICY"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert _threads.apply() == done
    assert os.environ.get("OMP_WAIT_POLICY") == (done.get("OMP_WAIT_POLICY")
                                                 or env.get("OMP_WAIT_POLICY"))
    assert _threads.apply() == {}  # idempotent: nothing more to set, the setting kept
    assert os.environ.get("OMP_WAIT_POLICY") == (done.get("OMP_WAIT_POLICY")
                                                 or env.get("OMP_WAIT_POLICY"))


def test_describe_names_the_policy_layer_fork_wait_and_threads(monkeypatch):
    import numba

    monkeypatch.setenv("DML_NUMBA_THREADING", "passive")
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.setattr(numba, "threading_layer", lambda: "omp")
    monkeypatch.setattr(numba, "get_num_threads", lambda: 6)
    monkeypatch.setattr(_threads, "FORKED_AFTER_GOMP", False)
    monkeypatch.setattr(_threads, "PINNED", {})
    assert _threads.describe() == ("threading: policy passive, layer omp, "
                                   "OMP_WAIT_POLICY=PASSIVE, 6 threads, workers not pinned")
    hold = threading.Event()
    alive = threading.Thread(target=hold.wait)  # a running thread, as a pinned worker
    alive.start()
    try:
        me = threading.get_native_id()
        monkeypatch.setattr(_threads, "PINNED", {me: 1, alive.native_id: 2})
        assert _threads.describe().endswith("6 threads, 2 workers each on a core of its own")
        monkeypatch.setattr(_threads, "PINNED", {me: 1})
        assert _threads.describe().endswith("6 threads, 1 worker on a core of its own")
    finally:
        hold.set()
        alive.join()
    monkeypatch.setattr(_threads, "PINNED", {})
    monkeypatch.setattr(_threads, "FORKED_AFTER_GOMP", True)
    monkeypatch.delenv("OMP_WAIT_POLICY")

    def not_started():
        raise ValueError("Threading layer is not initialized.")

    monkeypatch.setattr(numba, "threading_layer", not_started)
    assert _threads.describe() == (
        "threading: policy passive, layer not started, forked after GNU OpenMP started: "
        "kernels run serially, OMP_WAIT_POLICY=unset, 6 threads, workers not pinned")


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"),
                    reason="no /proc/self/task: workers are pinned on Linux only")
def test_describe_counts_only_the_pinned_workers_still_running(monkeypatch):
    """A calling thread's pool ends with the thread: its workers, pinned once, are no longer
    counted (``dml-numba info`` after many short-lived calling threads)."""
    import numba

    monkeypatch.setattr(numba, "threading_layer", lambda: "omp")
    monkeypatch.setattr(numba, "get_num_threads", lambda: 2)
    hold = threading.Event()
    alive = threading.Thread(target=hold.wait)
    alive.start()
    ended = threading.Thread(target=lambda: None)  # started while the other runs: its own id
    ended.start()
    ended.join()
    deadline = time.monotonic() + 10  # join returns before Linux removes the thread
    while os.path.exists(f"/proc/self/task/{ended.native_id}") and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        monkeypatch.setattr(_threads, "PINNED", {alive.native_id: 1, ended.native_id: 1})
        assert _threads.pinned_now() == {alive.native_id: 1}
        assert _threads.describe().endswith("2 threads, 1 worker on a core of its own")
        monkeypatch.setattr(_threads, "PINNED", {ended.native_id: 1})
        assert _threads.describe().endswith("2 threads, workers not pinned")
    finally:
        hold.set()
        alive.join()
