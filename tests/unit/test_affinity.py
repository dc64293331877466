"""GNU OpenMP's workers each on a core of their own (``dml_numba/cpu/_affinity.py``): which
threads are pinned, to which CPUs, and which are not (the calling thread, threads it starts
later, every thread where the pool does not match the CPUs, another threading layer, the
variable set to 0). Each case runs in a new process (the pool and its masks are per process),
reading every thread's CPU set back from Linux."""
import json
import os
import subprocess
import sys
import threading

import pytest

from dml_numba import _threads
from dml_numba.cpu import _affinity

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_getaffinity"),
                                reason="CPU sets are Linux's")

CHILD = r"""
import json, os, threading, time
import numpy as np
import numba
import dml_numba as dml
from dml_numba import _threads
from dml_numba.cpu import _affinity

x = np.arange(2 * 3 * 40 * 50, dtype=np.float32).reshape(2, 3, 40, 50)
d = dml.functional.padding_desc(x, (0, 0, 2, 1), (0, 0, 1, 3), "reflection")
op = dml.compile_operator(d, "cpu", parallel=True)
y = op(x)
right = bool(np.array_equal(y, np.pad(x, ((0, 0), (0, 0), (2, 1), (1, 3)), mode="reflect")))
later = {}
t = threading.Thread(target=lambda: later.update(cpus=sorted(os.sched_getaffinity(0))))
t.start(); t.join()
team = [int(i) for i in _affinity.team_ids(numba.config.NUMBA_NUM_THREADS)]
served = {}


def serve():  # a thread calling the operator it did not build: a pool of its own
    served["right"] = bool(np.array_equal(op(x), y))
    served["team"] = [int(i) for i in _affinity.team_ids(numba.config.NUMBA_NUM_THREADS)]
    served["masks"] = [sorted(os.sched_getaffinity(i)) for i in served["team"]]
    served["describe"] = _threads.describe()  # while this thread and its pool run


t = threading.Thread(target=serve)
t.start(); t.join()
# the served thread's pool (GNU OpenMP's: a pool a calling thread) ends with it: wait (10 s
# at most) for its workers to go
deadline = time.monotonic() + 10
while (numba.threading_layer() == "omp" and time.monotonic() < deadline
       and any(os.path.exists(f"/proc/self/task/{i}") for i in served["team"][1:])):
    time.sleep(0.01)


def mask(tid):  # None for a thread that ended meanwhile
    try:
        return sorted(os.sched_getaffinity(int(tid)))
    except ProcessLookupError:
        return None


masks = {t: mask(t) for t in os.listdir("/proc/self/task")}
print(json.dumps({
    "main": threading.get_native_id(),
    "cpus": sorted(os.sched_getaffinity(0)),
    "masks": {t: m for t, m in masks.items() if m is not None},
    "pinned": {str(k): v for k, v in _threads.PINNED.items()},
    "team": team, "later": later["cpus"], "right": right and served["right"],
    "served": served["team"], "served masks": served["masks"],
    "serving describe": served["describe"],
    "layer": numba.threading_layer(), "describe": _threads.describe(),
}))
"""


def _child(**env):
    e = {k: v for k, v in os.environ.items() if k not in ("DML_NUMBA_PIN_WORKERS",
                                                           "NUMBA_THREADING_LAYER")}
    e.update(env)
    out = subprocess.run([sys.executable, "-c", CHILD], env=e, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


CPUS = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
many = pytest.mark.skipif(len(CPUS) < 2, reason="one CPU: no worker to pin")


@many
def test_each_worker_gets_a_core_of_its_own_and_nothing_else_is_narrowed():
    r = _child(NUMBA_NUM_THREADS=str(len(CPUS)))
    assert r["right"] and r["layer"] == "omp"
    cpus = r["cpus"]
    # the workers (team 1..n-1) on CPUs 1..n-1 of the set, one each, for the building thread
    # and for a thread that only calls what it built (its pool its own, pinned at its call)
    assert {int(k): v for k, v in r["pinned"].items()} == {
        tid: cpus[k] for team in (r["team"], r["served"]) for k, tid in enumerate(team) if k}
    assert not set(r["served"]) & set(r["team"])
    assert r["served masks"] == [cpus] + [[c] for c in cpus[1:]]
    for k, tid in enumerate(r["team"][1:], 1):
        assert r["masks"][str(tid)] == [cpus[k]]
    # the calling thread (team 0), a thread it starts afterwards and every other thread keep
    # the whole set
    assert r["team"][0] == r["main"]
    assert r["later"] == cpus
    for tid, mask in r["masks"].items():
        if str(tid) not in r["pinned"]:
            assert mask == cpus, tid
    # counted while both pools run; after the serving thread ended, only the building one's
    assert r["serving describe"].endswith(
        f"{2 * (len(cpus) - 1)} workers each on a core of its own")
    assert r["describe"].endswith(f"{len(cpus) - 1} workers each on a core of its own"
                                  if len(cpus) > 2 else "1 worker on a core of its own")


@many
@pytest.mark.parametrize("env", [
    {"DML_NUMBA_PIN_WORKERS": "0"},  # turned off
    {"NUMBA_NUM_THREADS": str(len(CPUS) + 1)},  # more threads than CPUs: shared anyway
    {"NUMBA_NUM_THREADS": "1"},  # no worker
    {"NUMBA_THREADING_LAYER": "workqueue"},  # not GNU OpenMP's wait
], ids=["variable-0", "more-threads-than-cpus", "one-thread", "workqueue"])
def test_no_thread_is_narrowed(env):
    env = {"NUMBA_NUM_THREADS": str(len(CPUS)), **env}
    r = _child(**env)
    assert r["right"]
    assert r["pinned"] == {}
    assert all(mask == r["cpus"] for mask in r["masks"].values())
    assert all(mask == r["cpus"] for mask in r["served masks"])
    assert r["describe"].endswith("workers not pinned")
    assert r["serving describe"].endswith("workers not pinned")


@pytest.mark.parametrize("threads, cpus, expected", [
    (2, {0, 1}, {1: 1}),
    (4, {7, 3, 5, 1}, {1: 3, 2: 5, 3: 7}),  # the set in order, whatever its numbers
    (2, {0, 1, 2, 3}, {}),  # fewer threads than CPUs: a woken worker finds an idle core
    (3, {0, 1}, {}),  # more threads than CPUs
    (1, {0}, {}),
])
def test_plan(threads, cpus, expected):
    assert _affinity.plan(threads, cpus) == expected


def _in_new_thread(fn):
    """``fn()`` in a thread of its own (the once-per-thread flag fresh)."""
    out = {}
    t = threading.Thread(target=lambda: out.update(r=fn()))
    t.start()
    t.join()
    return out["r"]


def test_a_forked_child_or_the_variable_pins_nothing(monkeypatch):
    """In a child forked after GNU OpenMP started the kernels run serially: no region is
    started to find the workers (it would terminate the child)."""
    started = []
    monkeypatch.setattr(_affinity, "team_ids", lambda n: started.append(n) or [0] * n)
    monkeypatch.setattr(_affinity, "plan", lambda n, cpus: {1: 0})
    monkeypatch.setattr(_threads, "FORKED_AFTER_GOMP", True)
    assert _in_new_thread(_affinity.pin_workers) == {}
    monkeypatch.setattr(_threads, "FORKED_AFTER_GOMP", False)
    monkeypatch.setenv(_affinity.VARIABLE, "0")
    assert _in_new_thread(_affinity.pin_workers) == {}
    assert started == []


def test_once_per_thread(monkeypatch):
    calls = []
    monkeypatch.setattr(_affinity, "enabled", lambda: calls.append(1) or False)

    def twice():
        return _affinity.pin_workers(), _affinity.pin_workers()

    assert _in_new_thread(twice) == ({}, {})
    assert calls == [1]
    assert _in_new_thread(twice) == ({}, {})  # another thread: its own pool, looked at once
    assert calls == [1, 1]


def test_a_failure_to_find_the_workers_leaves_the_call_alone(monkeypatch):
    """Pinning is a matter of speed: whatever goes wrong finding the workers, the caller's
    kernel call goes on and nothing is pinned."""

    def broken(n):
        raise RuntimeError("no region here")

    monkeypatch.setattr(_affinity, "team_ids", broken)
    monkeypatch.setattr(_affinity, "plan", lambda n, cpus: {1: 0})
    monkeypatch.setattr(_affinity, "enabled", lambda: True)
    monkeypatch.setattr(_threads, "FORKED_AFTER_GOMP", False)
    assert _in_new_thread(_affinity.pin_workers) == {}
