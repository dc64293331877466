"""The tuner and its wisdom: which candidate wins is decided by a fake clock (deterministic),
the wisdom's trust, keying and export/import on real files, and one real tuning on a tiny
convolution whose result is checked against brute force and read back in a new process."""
import dataclasses
import json
import os
import stat
import tempfile
import time
import warnings

import numpy as np
import pytest

import dml_numba as dml
from dml_numba import _diskcache, _env, _wisdom
from dml_numba.__main__ import main as cli
from dml_numba.cpu._emit import Host, planned_for
from dml_numba.cpu.convolution import tune, variants
from dml_numba.cpu.convolution.choice import choose_algorithm
from tests.test_cache_trust import private_root, run


def _desc(xs=(2, 8, 12, 12), ws=(8, 8, 3, 3), strides=(1, 1), groups=1):
    strides = strides[:len(xs) - 2]
    x = np.zeros(xs, np.float32)
    w = np.zeros(ws, np.float32)
    pad = tuple(k // 2 for k in ws[2:])
    return dml.functional.convolution_desc(x, w, None, strides=strides, start_padding=pad,
                                           end_padding=pad, group_count=groups).canonical()


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    """A private cache folder of this test's (wisdom written there, and only there)."""
    root = private_root(tmp_path)
    monkeypatch.setenv("DML_NUMBA_CACHE_DIR", str(root))
    _diskcache.reset()
    yield root / _diskcache.SUBDIR
    monkeypatch.undo()
    _diskcache.reset()


class Meter:
    """Other programs' CPU share during a tuning, as given."""

    def __init__(self, share):
        self.share = share

    def __call__(self):
        return self

    def others(self):
        return self.share


IDLE = Meter(0.0)


class FakeClock:
    """A clock that advances only when a fake kernel runs, by that kernel's time."""

    def __init__(self):
        self.now = 0.0
        self.reads = 0

    def __call__(self):
        self.reads += 1
        return self.now


def fake_build(clock, times, built):
    """``build(candidate, timed)`` returning a kernel that takes ``times[label]`` seconds (or
    the next of a list of them, a call each), each build recorded in ``built``."""

    def build(cand, timed=False):
        built.append((cand, timed))

        class Kernel:
            calls = 0

            def __call__(self, inputs, out):
                Kernel.calls += 1
                t = times.get(cand.label(), 1.0)
                clock.now += t.pop(0) if isinstance(t, list) else t

            def compiled_keys(self):
                return ()  # nothing compiled: the tuning is final

        return Kernel()

    return build


@pytest.mark.parametrize("mode", ["quick", "exhaustive"])
def test_the_fastest_candidate_by_the_clock_wins_and_is_kept(own_cache, mode):
    desc, host = _desc(), Host(8, 3)  # not this machine: the host is passed on
    cands = tune.candidates(desc, host, mode)
    assert len(cands) >= (3 if mode == "quick" else 6)
    winner = cands[-1]  # the one the static rule and the cost model rank last
    times = {c.label(): 1e-3 * (i + 2) for i, c in enumerate(cands)}
    times[winner.label()] = 0.5e-3
    clock, built = FakeClock(), []
    kernel = tune.tune(desc, {}, mode, clock=clock, build=fake_build(clock, times, built),
                       host=host, meter=IDLE)
    assert kernel.tuning["source"] == "measured"
    assert tune.Candidate.from_json(kernel.tuning["choice"]) == winner
    blas_last = sorted(cands, key=lambda c: c.algorithm == "gemm")  # its pool spins after
    assert built == [(c, True) for c in blas_last] + [(winner, False)]
    entry = _wisdom.get(tune.key_of(desc, {}))
    assert entry["mode"] == mode and tune.Candidate.from_json(entry["choice"]) == winner
    assert entry["static"] == tune.static(desc, host).label() == cands[0].label()
    assert entry["seconds"][winner.label()] == pytest.approx(0.5e-3)
    # the next build reads the wisdom: the choice alone is built and nothing is timed
    clock2, built2 = FakeClock(), []
    again = tune.tune(desc, {}, mode, clock=clock2, build=fake_build(clock2, times, built2),
                      host=host, meter=IDLE)
    assert again.tuning["source"] == "wisdom" and built2 == [(winner, False)]
    assert clock2.reads == 0


def test_quick_compiles_within_its_budget_and_a_later_process_times_the_rest(own_cache):
    """A build that compiles costs wall time; quick mode builds a candidate only while the
    tuning and the last build's time stay within QUICK_BUDGET_S (the static choice always),
    keeps the result as provisional with the candidates left named, and the next tuning
    (another process: its builds load from the disk cache, fast) times them all."""
    desc, host = _desc(), Host(8, 3)
    cands = tune.candidates(desc, host, "quick")
    assert len(cands) >= 3
    times = {c.label(): 1e-3 for c in cands}
    times[cands[-1].label()] = 0.5e-3  # the best: the last one, which the budget leaves out

    class Wall:  # each build costs ``cost`` seconds of wall time
        def __init__(self, cost):
            self.now, self.cost = 0.0, cost

        def __call__(self):
            return self.now

    def walled(wall, build):
        def b(cand, timed=False):
            wall.now += wall.cost
            return build(cand, timed)
        return b

    wall, clock, built = Wall(0.8 * tune.QUICK_BUDGET_S), FakeClock(), []
    kernel = tune.tune(desc, {}, "quick", clock=clock, host=host, meter=IDLE, wall=wall,
                       build=walled(wall, fake_build(clock, times, built)))
    timed = [c for c, t in built if t]
    assert timed == cands[:1]  # a second compile would overrun the budget
    entry = _wisdom.get(tune.key_of(desc, {}))
    assert entry["provisional"] and entry["left"] == [c.label() for c in cands[1:]]
    assert tune.Candidate.from_json(kernel.tuning["choice"]) == cands[0]
    # the next process: every build a load from the disk cache
    wall2, clock2, built2 = Wall(0.01), FakeClock(), []
    again = tune.tune(desc, {}, "quick", clock=clock2, host=host, meter=IDLE, wall=wall2,
                      build=walled(wall2, fake_build(clock2, times, built2)))
    assert again.tuning["source"] == "measured" and not again.tuning["left"]
    assert tune.Candidate.from_json(again.tuning["choice"]) == cands[-1]


def test_a_later_process_compiles_what_no_process_built_first(own_cache):
    """Where every build compiles (each costing most of the budget), the next process builds a
    candidate no earlier process built before any that one did (its compile comes first, so the
    process stays within the budget whatever loading and timing the others costs), times the
    static choice again (a load from the disk cache: a provisional choice is never one slower
    than it) and leaves the rest for the process after: each process one compile, then one that
    finds every candidate built and times them all."""
    desc, host = _desc(), Host(8, 3)
    cands = tune.candidates(desc, host, "quick")
    times = {c.label(): 1e-3 for c in cands}

    class Wall:
        now = 0.0

        def __call__(self):
            return self.now

    def process(cost):
        wall, clock, built = Wall(), FakeClock(), []

        def b(cand, timed=False):
            wall.now += cost
            return fake_build(clock, times, built)(cand, timed)

        kernel = tune.tune(desc, {}, "quick", clock=clock, host=host, meter=IDLE, wall=wall,
                           build=b)
        return [c for c, t in built if t], kernel.tuning

    timed, tuning = process(0.8 * tune.QUICK_BUDGET_S)
    assert timed == cands[:1] and tuning["left"] == [c.label() for c in cands[1:]]
    for i in range(1, len(cands)):  # the next candidate not built yet, and the static choice
        timed, tuning = process(0.8 * tune.QUICK_BUDGET_S)
        assert timed == [cands[i], cands[0]] and tuning["provisional"]
        assert set(tuning["left"]) == {c.label() for c in cands if c not in (cands[0], cands[i])}
        assert tuning["built"] == sorted(c.label() for c in cands[:i + 1])
    timed, tuning = process(0.001)  # everything cached now: all timed, nothing left
    assert set(timed) == set(cands) and not tuning["left"]


def test_a_provisional_choice_is_never_one_measured_slower_than_the_static_choice(own_cache):
    """A process that compiles one candidate left by an earlier one (the budget allows no
    more) times the static choice again: where the static choice is the fastest, the
    provisional choice stays the static choice, whichever candidate the process compiled
    (a choice among the candidates this process built alone once kept BLAS, 27x slower, for a
    depthwise layer)."""
    desc, host = _desc(), Host(8, 3)
    cands = tune.candidates(desc, host, "quick")
    times = {c.label(): 2e-3 for c in cands}
    times[cands[0].label()] = 1e-3  # the static choice: the fastest

    class Wall:
        now = 0.0

        def __call__(self):
            return self.now

    for _ in range(len(cands)):
        wall, clock, built = Wall(), FakeClock(), []

        def b(cand, timed=False):
            wall.now += 0.8 * tune.QUICK_BUDGET_S
            return fake_build(clock, times, built)(cand, timed)

        kernel = tune.tune(desc, {}, "quick", clock=clock, host=host, meter=IDLE, wall=wall,
                           build=b)
        assert cands[0] in [c for c, t in built if t]
        assert tune.Candidate.from_json(kernel.tuning["choice"]) == cands[0]
        assert tune.Candidate.from_json(_wisdom.get(tune.key_of(desc, {}))["choice"]) == \
            cands[0]


def test_candidates_are_timed_with_frozen_weights_as_a_model_runs_them(monkeypatch):
    """The tuner's filter and bias are frozen, so a blocked kernel packs its filter once, as
    in a model, and not on every timed call (which made the tiles lose to BLAS on small
    layers they run twice as fast in a model)."""
    import dml_numba.cpu.convolution.blocked as blocked
    from dml_numba._frozen import is_frozen
    from dml_numba.cpu.convolution import choice

    desc = dataclasses.replace(_desc(), bias_tensor=dml.TensorDesc(dml.DataType.FLOAT32,
                                                                   (1, 8, 1, 1)))
    inputs, out = tune._inputs(desc, np.random.default_rng(0))
    assert not is_frozen(inputs[0]) and len(inputs) == 3
    assert all(is_frozen(a) for a in inputs[1:])
    packs, real = [], blocked.pack_filter
    monkeypatch.setattr(blocked, "pack_filter", lambda *a: packs.append(1) or real(*a))
    kernel = tune.Candidate("blocked", choice.blocked_plan(desc)).build(desc, {}, timed=True)
    for _ in range(3):
        kernel(inputs, out)
    assert len(packs) == 1


def test_close_finalists_are_timed_again_before_the_choice(own_cache):
    """One lucky pass does not decide between candidates within CLOSE of each other."""
    desc, host = _desc(), Host(8, 3)  # not this machine: the host is passed on
    cands = tune.candidates(desc, host, "quick")
    a, b = cands[0], cands[1]
    calls = 2 + tune.REPEAT["quick"]  # warm-up, calibration, samples
    times = {c.label(): 1.0 for c in cands[2:]}
    times[a.label()] = [0.5] * calls + [0.75] * calls  # lucky first pass
    times[b.label()] = 0.55
    clock, built = FakeClock(), []
    kernel = tune.tune(desc, {}, "quick", clock=clock, build=fake_build(clock, times, built),
                       host=host, meter=IDLE)
    assert tune.Candidate.from_json(kernel.tuning["choice"]) == b
    assert kernel.tuning["seconds"][a.label()] == pytest.approx(0.625)


def test_a_tuning_beside_busy_programs_stops_after_one_candidate_and_says_why(own_cache,
                                                                               capsys):
    """Other programs' load skews the timings, so nothing measured would be kept: the tuning
    stops after its first candidate (a busy process pays for one build, not all), records
    the attempt and the load seen (what ``tune`` and ``info`` print), and counts attempts; a
    later tuning on a quiet machine is kept and replaces the record."""
    from dml_numba.__main__ import _print_wisdom

    desc, host = _desc(), Host(8, 3)  # not this machine: the host is passed on
    key = tune.key_of(desc, {})
    for attempt in (1, 2):
        clock, built = FakeClock(), []
        kernel = tune.tune(desc, {}, "quick", clock=clock, build=fake_build(clock, {}, built),
                           host=host, meter=Meter(tune.BUSY_SHARE + 0.05))
        assert len(built) == 1 and kernel.tuning["kept"] is False
        assert kernel.tuning["source"] == "static"
        assert kernel.tuning["others_busy"] > tune.BUSY_SHARE
        record = _wisdom.get(key)
        assert _wisdom.is_busy_record(record) and record["busy"]["attempts"] == attempt
    _print_wisdom()
    out = capsys.readouterr().out
    assert "0 keys" in out and "1 not kept (the machine was busy)" in out
    assert f"other programs used {tune.BUSY_SHARE + 0.05:.0%} of the CPU" in out
    assert "(2 attempts" in out
    assert tune.wisdom_choice(desc, {}, build=fake_build(FakeClock(), {}, []), host=host) is None
    clock, built = FakeClock(), []
    again = tune.tune(desc, {}, "quick", clock=clock, build=fake_build(clock, {}, built),
                      host=host, meter=Meter(None))  # no /proc/stat: kept
    assert again.tuning["source"] == "measured" and again.tuning["kept"] is True
    assert _wisdom.is_choice(_wisdom.get(key)) and len(built) > 2


def test_the_default_mode_reads_the_wisdom_and_never_measures(own_cache):
    """``estimate``: the choice a measuring process kept, else None (the static rule), and
    nothing is ever timed or built beyond the one kernel."""
    desc, host = _desc(), Host(8, 3)
    clock, built = FakeClock(), []
    assert tune.wisdom_choice(desc, {}, build=fake_build(clock, {}, built), host=host) is None
    assert built == [] and clock.now == 0
    measured = tune.tune(desc, {}, "quick", clock=clock, build=fake_build(clock, {}, built),
                         host=host, meter=IDLE)
    clock2, built2 = FakeClock(), []
    known = tune.wisdom_choice(desc, {}, build=fake_build(clock2, {}, built2), host=host)
    assert known.tuning["source"] == "wisdom" and known.tuning["choice"] == \
        measured.tuning["choice"]
    assert len(built2) == 1 and clock2.now == 0  # built, never timed


def test_a_candidate_much_slower_than_the_best_is_timed_once():
    clock = FakeClock()
    samples = tune.measure(lambda: setattr(clock, "now", clock.now + 3.0), clock, 5, best=1.0)
    assert samples == [3.0]
    assert tune.measure(lambda: setattr(clock, "now", clock.now + 1.5), clock, 5, 1.0) == [1.5] * 5


def test_quick_wisdom_is_retuned_for_exhaustive_and_exhaustive_serves_quick(own_cache):
    desc, host = _desc(), Host(8, 3)  # not this machine: the host is passed on
    clock = FakeClock()
    built = []
    tune.tune(desc, {}, "quick", clock=clock, build=fake_build(clock, {}, built), host=host,
              meter=IDLE)
    ex = tune.tune(desc, {}, "exhaustive", clock=clock, build=fake_build(clock, {}, built),
                   host=host, meter=IDLE)
    assert ex.tuning["source"] == "measured" and ex.tuning["mode"] == "exhaustive"
    q = tune.tune(desc, {}, "quick", clock=clock, build=fake_build(clock, {}, built),
                  host=host, meter=IDLE)
    assert q.tuning["source"] == "wisdom" and q.tuning["mode"] == "exhaustive"


def test_a_choice_that_is_no_candidate_is_not_used(own_cache):
    """An edited or stale file cannot make the library run a plan the desc does not have."""
    desc, host = _desc(), Host(8, 3)  # not this machine: the host is passed on
    key = tune.key_of(desc, {})
    bogus = tune.Candidate("blocked", tune.BlockPlan(16, 4, 64, 64, (1, 1)))
    _wisdom.put(key, {"choice": bogus.to_json(), "mode": "exhaustive"})
    clock, built = FakeClock(), []
    kernel = tune.tune(desc, {}, "quick", clock=clock, build=fake_build(clock, {}, built),
                       host=host, meter=IDLE)
    assert kernel.tuning["source"] == "measured" and bogus not in [c for c, _ in built]


def test_every_candidate_is_valid_and_the_quick_ones_are_a_subset():
    descs = (_desc(), _desc(strides=(2, 2)), _desc(ws=(8, 1, 3, 3), groups=8),
             _desc(ws=(8, 8, 1, 1)), _desc((1, 8, 40), (8, 8, 5)))
    for desc in descs:
        for host in (Host(16, 2), Host(8, 8)):
            ex = tune.candidates(desc, host, "exhaustive")
            quick = tune.candidates(desc, host, "quick")
            assert quick[0] == tune.static(desc, host) and set(quick) <= set(ex)
            assert len(set(ex)) == len(ex)
            for c in ex:
                if c.algorithm == "winograd":  # its plan: the transforms' lanes, the host's
                    assert c.plan == tune.WinogradPlan(host.lanes)
                elif c.plan is not None:
                    assert c.plan.lanes <= host.lanes and c.plan.accumulators <= 24
            # Winograd where it applies (3x3, unit strides, one group, 2-D): the first only (with
            # its serial variant there: small work)
            wino = [c for c in ex if c.algorithm == "winograd"]
            assert [c.parallel for c in wino] == ([None, False] if desc is descs[0] else [])
            # a choice of it goes through the wisdom file and back
            for c in ex:
                assert tune.Candidate.from_json(c.to_json()) == c


def test_a_forced_algorithm_is_not_tuned_and_float64_has_no_tiles(own_cache):
    desc = _desc()
    op = dml.compile_operator(desc, "cpu", algorithm="direct", tune="quick")
    assert not hasattr(op.kernel, "tuning")
    f64 = dml.functional.convolution_desc(np.zeros((1, 2, 5, 5)), np.zeros((2, 2, 3, 3)), None)
    assert tune.candidates(f64.canonical(), Host(16, 2), "quick")[0].plan is None


def test_the_mode_comes_from_the_option_then_the_environment(monkeypatch):
    monkeypatch.setenv("DML_NUMBA_TUNE", "Exhaustive")
    assert tune.mode_of(None) == "exhaustive" and tune.mode_of("off") == "off"
    monkeypatch.delenv("DML_NUMBA_TUNE")
    assert tune.mode_of(None) == "estimate"
    monkeypatch.setenv("DML_NUMBA_TUNE", "fast")
    _env._warned.discard(("DML_NUMBA_TUNE", "fast"))
    with pytest.warns(_env.ConfigWarning, match="DML_NUMBA_TUNE='fast' is invalid"):
        assert tune.mode_of(None) == "estimate"
    with pytest.raises(dml.ValidationError, match="compile_operator.tune: 'fast' is invalid"):
        dml.compile_operator(_desc(), "cpu", tune="fast")


# -- wisdom on disk -------------------------------------------------------------------------

def _entry(label="x"):
    return {"choice": {"algorithm": "direct", "plan": None, "parallel": None}, "chosen": "direct",
            "mode": "quick", "label": label, "tuning_s": 0.5}


def test_wisdom_is_kept_per_machine(own_cache):
    _wisdom.put("k1", _entry())
    with planned_for(Host(8, 64)):  # another machine's lanes and threads
        assert _wisdom.get("k1") is None
        _wisdom.put("k2", _entry())
    assert set(_wisdom.entries()) == {"k1"}
    files = sorted(own_cache.glob("wisdom-*.json"))
    assert len(files) == 2
    for f in files:
        assert stat.S_IMODE(f.stat().st_mode) & 0o077 == 0


def test_wisdom_measured_with_openblas_kernels_chosen_by_hand_is_kept_apart(own_cache,
                                                                            monkeypatch):
    """``OPENBLAS_CORETYPE`` sets the kernels OpenBLAS runs (the BLAS algorithms' speed: a Zen
    5's Haswell kernels run at half its rate), so choices measured under one setting are kept
    apart from the others'; where it is not set the machine record has no such field (the
    wisdom of a machine that never set it keeps its file)."""
    monkeypatch.delenv("OPENBLAS_CORETYPE", raising=False)
    plain = _wisdom.machine()
    assert "openblas_coretype" not in plain
    _wisdom.put("k1", _entry())
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    assert _wisdom.machine() == dict(plain, openblas_coretype="Haswell")
    assert _wisdom.get("k1") is None
    _wisdom.put("k2", _entry())
    monkeypatch.setenv("OPENBLAS_CORETYPE", "SkylakeX")
    assert _wisdom.get("k1") is None and _wisdom.get("k2") is None
    monkeypatch.delenv("OPENBLAS_CORETYPE")
    assert set(_wisdom.entries()) == {"k1"}
    assert len(list(own_cache.glob("wisdom-*.json"))) == 2


@pytest.mark.parametrize("mode", [0o660, 0o620, 0o646])
def test_a_wisdom_file_others_can_write_is_removed_and_not_read(own_cache, mode):
    _wisdom.put("k1", _entry())
    (path,) = own_cache.glob("wisdom-*.json")
    os.chmod(path, mode)
    os.utime(path, ns=(1, 1))  # seen as changed
    assert _wisdom.get("k1") is None and not path.exists()


def test_a_wisdom_file_that_is_a_link_is_removed_and_not_read(own_cache, tmp_path):
    """A link (even to a good file of ours) could be pointed elsewhere by whoever made it."""
    _wisdom.put("k1", _entry())
    (path,) = own_cache.glob("wisdom-*.json")
    target = tmp_path / "elsewhere.json"
    target.write_bytes(path.read_bytes())
    os.chmod(target, 0o600)
    path.unlink()
    path.symlink_to(target)
    assert _wisdom.get("k1") is None and not path.is_symlink() and target.exists()


def test_a_corrupt_or_foreign_wisdom_file_is_ignored(own_cache):
    _wisdom.put("k1", _entry())
    (path,) = own_cache.glob("wisdom-*.json")
    path.write_text("{not json")
    assert _wisdom.get("k1") is None
    data = {"format": _wisdom.FORMAT, "machine": dict(_wisdom.machine(), cpu="another"),
            "entries": {"k1": _entry()}}
    path.write_text(json.dumps(data))
    assert _wisdom.get("k1") is None
    _wisdom.put("k2", _entry())  # rewritten as this machine's
    assert set(_wisdom.entries()) == {"k2"}


def test_without_a_disk_cache_wisdom_lives_in_the_process(monkeypatch, tmp_path):
    monkeypatch.setenv("DML_NUMBA_DISK_CACHE", "0")
    monkeypatch.setenv("DML_NUMBA_CACHE_DIR", str(tmp_path / "c"))
    _diskcache.reset()
    try:
        _wisdom.put("k-memory", _entry())
        assert _wisdom.get("k-memory") is not None
        assert not (tmp_path / "c").exists()
    finally:
        _wisdom._memory.clear()
        monkeypatch.undo()
        _diskcache.reset()


def test_export_import_and_forget_through_the_command_line(own_cache, tmp_path, capsys):
    _wisdom.put("k1", _entry("shape one"))
    out = tmp_path / "wisdom.json"
    assert cli(["tune", "--export", str(out)]) == 0
    assert cli(["tune", "--forget"]) == 0
    assert _wisdom.entries() == {}
    assert cli(["tune", "--import", str(out)]) == 0
    assert set(_wisdom.entries()) == {"k1"}
    assert cli(["tune"]) == 0
    assert "shape one: direct (quick, 0.50 s" in capsys.readouterr().out
    data = json.loads(out.read_text())
    data["machine"]["lanes"] = 4
    other = tmp_path / "other.json"
    other.write_text(json.dumps(data))
    assert cli(["tune", "--import", str(other)]) == 1
    err = capsys.readouterr().err
    assert "another machine (lanes: 4 there" in err and "tune here instead" in err
    (tmp_path / "bad.json").write_text("[1]")
    assert cli(["tune", "--import", str(tmp_path / "bad.json")]) == 1
    assert "bad.json: format None is invalid; expected 1" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("{not json")
    assert cli(["tune", "--import", str(tmp_path / "bad.json")]) == 1
    assert "bad.json: not a wisdom file" in capsys.readouterr().err


# -- one real tuning ------------------------------------------------------------------------

SCRIPT = """
import numpy as np, dml_numba as dml
from dml_numba.cpu.convolution import tune, variants
tune.BUSY_SHARE = 1.0  # kept however busy the test run's other workers keep the machine
tune.QUICK_BUDGET_S = 600.0  # loads from the disk cache: within any budget
x = np.ones((2, 8, 11, 13), np.float32); w = np.ones((8, 8, 3, 3), np.float32)
d = dml.functional.convolution_desc(x, w, None, start_padding=(1, 1), end_padding=(1, 1))
op = dml.compile_operator(d, "cpu")
print("source", op.kernel.tuning["source"], float(op(x, w)[0, 0, 5, 5]))
"""


def test_a_real_tuning_is_right_and_a_new_process_reads_it(own_cache, monkeypatch):
    monkeypatch.setattr(tune, "BUSY_SHARE", 1.0)  # kept however busy the other workers are
    monkeypatch.setattr(tune, "QUICK_BUDGET_S", 600.0)  # every candidate compiled here
    # (a shape no other test builds: its kernels are compiled here, not loaded from a cache)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 8, 11, 13)).astype(np.float32)
    w = rng.standard_normal((8, 8, 3, 3)).astype(np.float32)
    desc = dml.functional.convolution_desc(x, w, None, start_padding=(1, 1),
                                           end_padding=(1, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        op = dml.compile_operator(desc, "cpu", tune="quick")
    assert op.kernel.tuning["source"] == "measured"
    quick = tune.candidates(desc.canonical(), Host.current(), "quick")
    assert set(op.kernel.tuning["seconds"]) == {c.label() for c in quick}
    # small work: the static choice's serial too; a flattened static tile (the 8-lane host's
    # pick here) brings its rows tile
    assert len(quick) == 2 + tune.QUICK_EXTRA + bool(quick[0].plan and quick[0].plan.flat)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros((2, 8, 11, 13), np.float64)
    for i in range(3):
        for j in range(3):
            want += np.einsum("nchw,mc->nmhw", xp[:, :, i:i + 11, j:j + 13], w[:, :, i, j])
    np.testing.assert_allclose(op(x, w), want, rtol=1e-4, atol=1e-4)
    assert choose_algorithm(desc.canonical()) in ("blocked", "direct", "gemm")
    # it compiled its candidates: provisional; the next process times the cached copies (what
    # every later process runs) once more, and the one after reads the wisdom
    assert op.kernel.tuning["provisional"] is True
    env = {"DML_NUMBA_CACHE_DIR": str(own_cache.parent), "DML_NUMBA_TUNE": "quick"}
    assert "source measured 72.0" in run(env, SCRIPT).stdout
    assert _wisdom.get(tune.key_of(desc.canonical(), {}))["provisional"] is False
    assert "source wisdom 72.0" in run(env, SCRIPT).stdout


HOLDER = """
import json, sys, time
from dml_numba import _wisdom
with _wisdom.exclusive():
    print("locked", flush=True)
    time.sleep(1.0)
    _wisdom.put(sys.argv[1], json.loads(sys.argv[2]))
"""


def test_one_tuning_at_a_time_and_the_waiting_process_reads_the_result(own_cache):
    """While another process tunes (holding the machine's tuning lock), a tuning of the same
    key waits, then takes what the other measured instead of timing against it."""
    import subprocess
    import sys

    desc, host = _desc(), Host.current()
    key = tune.key_of(desc, {})
    choice = tune.candidates(desc, host, "quick")[-1]
    entry = {"choice": choice.to_json(), "mode": "quick", "label": "held", "tuning_s": 1.0}
    env = dict(os.environ, DML_NUMBA_CACHE_DIR=str(own_cache.parent))
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, key, json.dumps(entry)], env=env,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        clock, built = FakeClock(), []
        kernel = tune.tune(desc, {}, "quick", clock=clock, build=fake_build(clock, {}, built),
                           host=host, meter=IDLE)
    finally:
        proc.wait(timeout=30)
    assert kernel.tuning["source"] == "wisdom" and kernel.tuning["label"] == "held"
    assert built == [(choice, False)] and clock.reads == 0


# -- the pieces, one by one -----------------------------------------------------------------

def test_the_exhaustive_space_spans_every_tile_dimension():
    host = Host(16, 2)
    dense = _desc((2, 16, 56, 56), (16, 16, 3, 3))
    plans = tune.blocked_plans(dense, host)
    assert plans[0] == tune.block_plan(dense, host)  # the planner's own first
    pixels = [p for p in plans if not p.pixels]
    assert {p.lanes for p in pixels} == {16, 8} and {p.mb for p in pixels} == {4, 8}
    assert {p.staged for p in pixels} == {True, False}
    assert {p.flat for p in pixels} == {True, False}
    # then the channels tiles: 16 channels make one vector (no pair), staged or not
    assert [(p.mb, p.vectors, p.staged) for p in plans if p.pixels] == [(16, 1, False),
                                                                      (16, 1, True)]
    wide = tune.blocked_plans(_desc((2, 16, 56, 56), (64, 16, 3, 3)), host)
    assert {(p.vectors, p.pixels) for p in wide if p.pixels} == {(2, 8), (1, 28)}
    assert len(set(plans)) == len(plans)
    transposed = dml.functional.convolution_desc(
        np.zeros((1, 8, 20, 20), np.float32), np.zeros((8, 8, 4, 4), np.float32), None,
        strides=(2, 2), start_padding=(1, 1), end_padding=(1, 1), direction=1).canonical()
    tplans = tune.blocked_plans(transposed, host)
    assert tplans and not any(p.staged or p.flat for p in tplans)
    depthwise = _desc((2, 16, 30, 30), (16, 1, 3, 3), groups=16)
    dplans = tune.blocked_plans(depthwise, host)
    assert all(p.depthwise and p.mb == 1 for p in dplans) and {p.lanes for p in dplans} == {16, 8}
    assert {p.lanes for p in tune.blocked_plans(dense, Host(4, 2))} == {4}
    # every parallel-automatic candidate has its serial variant in exhaustive mode, BLAS aside
    ex = tune.candidates(dense, host, "exhaustive")
    auto = [c for c in ex if c.parallel is None and c.algorithm != "gemm"]
    assert {dataclasses.replace(c, parallel=False) for c in auto} <= set(ex)
    assert all(c.parallel is None for c in tune.candidates(dense, host, "exhaustive",
                                                           {"parallel": True}))


def test_quick_takes_the_rows_tile_the_staging_flip_then_distinct_tiles_and_the_serial_variant():
    host = Host(16, 2)
    # 6 output channels: no channels tile (4 lanes do not divide them), a flattened pixels tile
    dense = _desc((2, 16, 56, 56), (6, 16, 3, 3))
    quick = tune.candidates(dense, host, "quick")
    first = quick[0]
    assert first == tune.static(dense, host) and first.plan.staged is not None
    assert first.plan.flat  # a flattened static tile: the same tile in rows comes next
    rows = quick[1].plan
    assert not rows.flat and (rows.lanes, rows.mb, rows.staged) == (
        first.plan.lanes, first.plan.mb, first.plan.staged)
    assert quick[2] == dataclasses.replace(first, plan=dataclasses.replace(
        first.plan, staged=not first.plan.staged))
    tiles = [tune._tile(c) for c in quick[1:2 + tune.QUICK_EXTRA]]
    assert tune._tile(first) == tiles[1] and len(set(tiles)) == len(tiles)
    assert quick[-1] == dataclasses.replace(first, parallel=False)  # 5.4 M multiply-adds
    # a static tile in rows already: no extra candidate
    narrow = _desc((2, 16, 14, 14), (16, 16, 3, 3))
    nq = tune.candidates(narrow, host, "quick")
    assert not nq[0].plan.flat and len([c for c in nq if c.parallel is None]) == 3
    big = _desc((8, 64, 56, 56), (64, 64, 3, 3))
    assert all(c.parallel is None for c in tune.candidates(big, host, "quick"))
    assert all(c.parallel is None for c in tune.candidates(dense, host, "quick",
                                                           {"parallel": False}))


def test_the_cost_model_is_the_documented_formula():
    """Each term of :func:`.cost.estimate`, worked out by hand for a host of 16 lanes and two
    threads (every constant distinct, so a term left out or counted twice shows)."""
    from dml_numba.cpu.convolution.cost import Costs
    from dml_numba.cpu.convolution.variants import estimate

    C = Costs(load=0.5, plane=3.0, direct=5.0, scalar=7.0, loop=11.0, row=13.0, gemm=17.0,
              column=19.0, call=23.0, copy=29.0, gather=31.0, store=37.0, transpose=59.0,
              pool=41.0, direct_call=43.0, blocked_call=47.0, gemm_call=53.0)
    host = Host(16, 2)
    d = _desc((2, 16, 56, 56), (16, 16, 3, 3))  # padded by one: 58x58 input planes
    macs = 2 * 16 * 3136 * 16 * 9
    vec = macs / 16

    def est(desc, algorithm, plan=None, parallel=None):
        return estimate(desc, algorithm, plan, host, parallel=parallel, costs=C)

    # direct: 2 x 16 x 56 rows (shared out: 1,792 rows, 896 a thread) x 16 input channels; a
    # 56-pixel row is three vectors and one overlapping tail, its edges in vectors too
    row = 4 * (9 * 5.0 * (1 + 0.5) + 13.0)
    assert est(d, "direct") == pytest.approx(1792 * 16 * row / 2 + 41.0 + 43.0)
    assert est(d, "direct", parallel=False) == pytest.approx(1792 * 16 * row + 43.0)
    # 3 taps padded by 40 (142 outputs): six vectors would have taps outside the input, more
    # than EDGE_VECTORS, so the interior [40, 102) is four vectors and the other 80 pixels are
    # summed one by one
    wide = dml.functional.convolution_desc(
        np.zeros((2, 16, 64), np.float32), np.zeros((16, 16, 3), np.float32), None,
        start_padding=(40,), end_padding=(40,)).canonical()
    row1 = 4 * (3 * 5.0 * 1.5 + 13.0) + 80 * 3 * 7.0
    assert est(wide, "direct") == pytest.approx(2 * 16 * 16 * row1 / 2 + 41.0 + 43.0)
    # a strided last axis: LLVM's loop over the pixels (28 a row), no vectors of ours
    s2 = _desc((2, 16, 56, 56), (16, 16, 3, 3), strides=(2, 2))
    row2 = 28 * (9 * 11.0 + 13.0 / 16)
    assert est(s2, "direct") == pytest.approx(2 * 16 * 28 * 16 * row2 / 2 + 41.0 + 43.0)
    # gemm: 2 products of 16 x 3136 x 144, BLAS in the calling thread (its own pool would
    # fight Numba's), the column matrix of 2 x 144 x 3136 elements by the parallel im2col, a
    # call each
    columns = 2 * 144 * 3136
    assert est(d, "gemm") == pytest.approx(17.0 * vec + 19.0 * columns / 2 + 23.0 * 2
                                           + 41.0 + 53.0)
    pw = _desc((2, 16, 28, 28), (32, 16, 1, 1))  # multiplied in place: no column matrix
    pvec = 2 * 32 * 784 * 16 / 16
    assert est(pw, "gemm") == pytest.approx(17.0 * pvec + 23.0 * 2 + 41.0 + 53.0)
    # blocked, 8 lanes x 4 channels x 4 rows x 2 vectors: rows of 56 in 16-pixel steps (64 a
    # row), 14 row blocks; half-width vectors; (8 + 4) loads a 32 accumulators; the padded copy
    # of 2 x 16 planes of 58 x 58; a store an output vector; 2 x 4 x 14 = 112 tiles over two
    # threads
    plan = tune.BlockPlan(8, 4, 4, 2, (58, 58))
    compute = vec * (14 * 4 * 64 / 3136) * 2 * (1 + 0.5 * 12 / 32)
    copy = 29.0 * 2 * 16 * 58 * 58
    stores = 37.0 * 2 * 16 * 3136 / 16
    assert est(d, "blocked", plan) == pytest.approx((compute + copy + stores) / 2 + 41.0 + 47.0)
    # flattened: 55 rows of 58 and 56 pixels in runs of 64; one block of rows an image
    flat = tune.BlockPlan(16, 4, 1, 4, (58, 58), flat=True)
    positions = -(-(55 * 58 + 56) // 64) * 64
    fcompute = vec * positions / 3136 * (1 + 0.5 * (4 + 4) / 16)
    assert est(d, "blocked", flat) == pytest.approx((fcompute + copy + stores) / 2 + 41 + 47)
    # the channels tile, 16 channels x 12 pixels: rows of 56 in runs of 12 (60 a row), one
    # row a tile (56 x 16 / 16 = 56 tiles an image); a row of 3 taps loads 3 weight vectors and
    # broadcasts the 14 input pixels it reads for 3 x 12 multiply-adds; a scatter an output
    # vector
    ch = tune.BlockPlan(16, 16, 1, 1, (58, 58), pixels=12)
    ccompute = vec * (60 / 56) * (1 + 0.5 * (3 + 14) / (12 * 3))
    scatters = 59.0 * 2 * 16 * 3136 / 16
    assert est(d, "blocked", ch) == pytest.approx((ccompute + copy + scatters) / 2 + 41 + 47)
    # at stride 2 (rows of 28 in runs of 7) a run reads 15 pixels of each row of taps; the
    # split rows gathered into planes of 57 x 58 (the rows the last taps reach)
    chs2 = tune.BlockPlan(16, 16, 1, 1, (57, 58), pixels=7)
    c2vec = 2 * 16 * 28 * 28 * 16 * 9 / 16
    c2 = c2vec * (1 + 0.5 * (3 + 15) / (7 * 3)) + (29.0 + 31.0) * 2 * 16 * 57 * 58 \
        + 59.0 * 2 * 16 * 784 / 16
    assert est(s2, "blocked", chs2) == pytest.approx(c2 / 2 + 41 + 47)
    # 55 rows: 14 blocks of 4 rows still (the last one short), planes of 57 x 58
    d55 = _desc((2, 16, 55, 56), (16, 16, 3, 3))
    vec55 = 2 * 16 * 55 * 56 * 16 * 9 / 16
    compute55 = vec55 * (14 * 4 * 64 / (55 * 56)) * 2 * (1 + 0.5 * 12 / 32)
    rest55 = 29.0 * 2 * 16 * 57 * 58 + 37.0 * 2 * 16 * 55 * 56 / 16
    assert est(d55, "blocked", tune.BlockPlan(8, 4, 4, 2, (57, 58))) == pytest.approx(
        (compute55 + rest55) / 2 + 41.0 + 47.0)
    # the staged kernel shares out (image, group) pairs: 2 over two threads
    staged = dataclasses.replace(plan, staged=True)
    assert est(d, "blocked", staged) == pytest.approx(est(d, "blocked", plan))
    odd = _desc((3, 16, 56, 56), (16, 16, 3, 3))
    assert est(odd, "blocked", staged) == pytest.approx(
        (1.5 * (compute + copy + stores)) * 2 / 3 + 41.0 + 47.0)  # 3 pairs: 2 on one thread
    # depthwise, the plane kernel: 4 rows share each loaded row of 3 taps; a strided last axis
    # gathers its copy
    dw = _desc((2, 16, 56, 56), (16, 1, 3, 3), strides=(1, 2), groups=16)
    dplan = tune.BlockPlan(16, 1, 4, 1, (58, 58), depthwise=True)
    dvec = 2 * 16 * 56 * 28 * 9 / 16
    dcompute = 3.0 * dvec * (14 * 4 * 32 / (56 * 28)) * (1 + 0.5 * (4 + 2) / 12)
    dcopy = (29.0 + 31.0) * 2 * 16 * 58 * 58
    dstores = 37.0 * 2 * 16 * 56 * 28 / 16
    assert est(dw, "blocked", dplan) == pytest.approx((dcompute + dcopy + dstores) / 2
                                                      + 41.0 + 47.0)
    # one thread: nothing shared out, no pool to wake (BLAS on one thread too)
    one = Host(16, 1)
    assert estimate(d, "direct", None, one, costs=C) == pytest.approx(1792 * 16 * row + 43.0)
    assert estimate(d, "gemm", None, one, costs=C) == pytest.approx(
        17.0 * vec + 19.0 * columns + 23.0 * 2 + 53.0)
    # the tuner ranks its candidates by the same estimate
    for cand in (tune.Candidate("direct"), tune.Candidate("gemm"),
                 tune.Candidate("blocked", plan, parallel=False)):
        assert tune.cost(d, cand, host) == estimate(d, cand.algorithm, cand.plan, host,
                                                    parallel=cand.parallel)


def test_a_sample_is_the_mean_of_calls_filling_the_minimum_time():
    clock = FakeClock()
    calls = []

    def run():
        calls.append(1)
        clock.now += 0.5e-3

    samples = tune.measure(run, clock, 3, None)
    number = int(tune.MIN_SAMPLE_S / 0.5e-3)
    assert samples == [pytest.approx(0.5e-3)] * 3 and len(calls) == 2 + 3 * number


def test_a_candidate_builds_its_kernel_with_the_options_it_stands_for(monkeypatch):
    made = []

    def fake(name):
        return lambda desc, opts, *args, **kw: made.append((name, dict(opts), args, kw)) or name

    for v in variants.VARIANTS:
        monkeypatch.setattr(v, "kernel", fake(v.kernel.__name__))
    d = _desc((2, 16, 56, 56), (16, 16, 3, 3))  # parallel by default
    plan = tune.block_plan(d, Host(16, 2))
    opts = {"tune": "quick", "parallel": None}
    tune.Candidate("direct").build(d, opts, timed=True)
    tune.Candidate("gemm").build(d, opts, timed=True)
    tune.Candidate("direct").build(d, opts)
    tune.Candidate("direct", parallel=False).build(d, opts, timed=True)
    tune.Candidate("blocked", plan).build(d, {"parallel": True}, timed=True)
    assert made[0] == ("DirectKernel", {"parallel": True}, (), {"plan": None})
    assert made[1] == ("GemmKernel", {"parallel": None}, (), {"plan": None})  # BLAS's: serial
    assert made[2][:2] == ("DirectKernel", {"parallel": None})  # automatic when it runs
    assert made[3][:2] == ("DirectKernel", {"parallel": False})
    # the tile's variant: its kernel's name in the key and its emitter
    assert made[4] == ("BlockedKernel", {"parallel": True}, (plan, variants.VARIANTS[1]), {})


def test_labels_and_json_round_trip_for_every_candidate():
    for d in (_desc((2, 16, 56, 56), (16, 16, 3, 3)), _desc(ws=(8, 1, 3, 3), groups=8)):
        ex = tune.candidates(d, Host(16, 2), "exhaustive")
        assert len({c.label() for c in ex}) == len(ex)
        for c in ex:
            assert tune.Candidate.from_json(json.loads(json.dumps(c.to_json()))) == c
    assert tune.Candidate("blocked", tune.BlockPlan(16, 4, 1, 4, (9, 9), staged=True,
                                                    flat=True), False).label() == \
        "blocked [16 4 1 4 flat staged] serial"
    assert tune.describe(_desc()) == \
        "conv x(2, 8, 12, 12) w(8, 8, 3, 3) s(1, 1) p(1, 1)(1, 1) g1 float32"
    relu = dataclasses.replace(_desc(), fused_activation=dml.ActivationReluOperatorDesc())
    assert tune.describe(relu, {"input_padding": "WRAP"}) == \
        "conv x(2, 8, 12, 12) w(8, 8, 3, 3) s(1, 1) p(1, 1)(1, 1) wrap g1 +relu float32"
    assert tune.key_of(_desc(), {"tune": "quick"}) == tune.key_of(_desc(), {})
    assert tune.key_of(_desc(), {"parallel": False}) != tune.key_of(_desc(), {})


def test_the_cpu_model_and_the_busy_meter(monkeypatch):
    from dml_numba import _machine

    lines = ["processor\t: 0\n", "model name\t: Example CPU @ 3.0GHz\n"]
    monkeypatch.setattr(_machine, "open", lambda *a, **k: iter_file(lines), raising=False)
    assert _machine.cpu_model() == "Example CPU @ 3.0GHz"

    def missing(*a, **k):
        raise OSError("no such file")

    monkeypatch.setattr(_machine, "open", missing, raising=False)
    monkeypatch.setattr(_machine.sys, "platform", "linux")
    monkeypatch.setattr(_machine.platform, "processor", lambda: "")
    monkeypatch.setattr(_machine.platform, "machine", lambda: "x86_64")
    assert _machine.cpu_model() == "x86_64"
    monkeypatch.undo()
    ticks = iter([(100, 1000), (400, 2000)])
    monkeypatch.setattr(_machine, "_cpu_ticks", lambda: next(ticks))
    own = iter([(1.0, 0.5, 0, 0, 0), (1.5, 1.0, 0, 0, 0)])  # one CPU-second of our own
    monkeypatch.setattr(_machine.os, "times", lambda: next(own))
    clk = os.sysconf("SC_CLK_TCK")
    meter = _machine.CpuShare()
    assert meter.others() == pytest.approx(round(max(0.0, 300 - clk) / 1000, 3))
    stopped = iter([(100, 1000), (100, 1000)])
    monkeypatch.setattr(_machine, "_cpu_ticks", lambda: next(stopped))
    monkeypatch.setattr(_machine.os, "times", lambda: (0.0, 0.0, 0, 0, 0))
    assert _machine.CpuShare().others() is None  # no time passed


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="no /proc/stat here")
def test_the_busy_meter_reads_proc_stat_once_an_interval_through_one_descriptor(monkeypatch):
    """``/proc/stat`` is opened once a process (opening it after an idle spell cost ~0.3 ms of
    CPU, more than the read) and read afresh each time: ticks advance while this thread spins.
    A forked child reads through the inherited descriptor; one closed or reused behind its back
    is opened again. A share reads the ticks once when
    made and once for ``others``; the share after it (``then``) starts from that reading, so a
    load watch reads once an interval, not twice."""
    from dml_numba import _machine
    from dml_numba.cpu import _adaptive

    a = _machine._cpu_ticks()
    fd = _machine._STAT_FD
    t = time.perf_counter()
    while time.perf_counter() - t < 0.15:  # ~15 jiffies of this thread's CPU time
        pass
    b = _machine._cpu_ticks()
    assert _machine._STAT_FD == fd >= 0 and _machine._stat_line().startswith("cpu ")
    assert b[0] > a[0] and b[1] > a[1]
    pid = os.fork()
    if pid == 0:  # the child: the parent's descriptor, read at offset 0
        os._exit(0 if _machine._cpu_ticks() is not None and _machine._STAT_FD == fd else 1)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    os.close(fd)  # closed behind its back: opened again
    assert _machine._cpu_ticks() is not None and _machine._STAT_FD >= 0
    os.close(_machine._STAT_FD)  # and its number reused for another file: opened again
    with tempfile.TemporaryFile() as other:
        other.write(b"not the kernel's statistics\n" * 40)
        other.flush()
        assert _machine._cpu_ticks() is not None
        assert _machine._STAT_FD != other.fileno() and _machine._stat_line().startswith("cpu ")

    reads = []
    ticks = iter([(100 * i, 1000 * i) for i in range(1, 100)])

    def counted():
        reads.append(1)
        return next(ticks)

    monkeypatch.setattr(_machine, "_cpu_ticks", counted)
    share = _machine.CpuShare()
    assert len(reads) == 1
    share.others()
    nxt = share.then()
    assert len(reads) == 2  # then() read nothing
    assert nxt._ticks == (200, 2000)  # it starts where others() read
    watch = _adaptive.LoadWatch(cores=2)
    del reads[:]
    for now in (0.0, 0.05, _adaptive.LOAD_S, 0.15, 2 * _adaptive.LOAD_S, 3 * _adaptive.LOAD_S):
        watch.busy(now)
    assert len(reads) == 4  # the first share, then one read an interval (three of them)


class iter_file(list):
    """A file's lines for ``with open(...) as f: for line in f``."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_wisdom_merges_keys_and_exports_what_it_holds(own_cache, tmp_path):
    _wisdom.put("k1", _entry("one"))
    _wisdom.put("k2", _entry("two"))
    assert set(_wisdom.entries()) == {"k1", "k2"}
    out = tmp_path / "w.json"
    assert _wisdom.export(out) == 2
    data = json.loads(out.read_text())
    assert data["format"] == _wisdom.FORMAT and data["machine"] == _wisdom.machine()
    assert data["entries"]["k2"]["label"] == "two"
    assert _wisdom.forget() == 2 and _wisdom.entries() == {}
    assert _wisdom.import_(out) == (2, 0) and _wisdom.get("k1")["label"] == "one"
    data["entries"]["bad"] = {"choice": "not a dict"}
    out.write_text(json.dumps(data))
    assert _wisdom.import_(out) == (2, 1) and _wisdom.get("bad") is None


def _wisdom_file(tmp_path, entries=None, **top):
    data = {"format": _wisdom.FORMAT, "machine": _wisdom.machine(),
            "entries": entries if entries is not None else {"k": _entry()}}
    data.update(top)
    path = tmp_path / "w.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("top, message", [
    ({"machine": None}, "machine None is invalid; expected an object"),
    ({"machine": [1, 2]}, "machine \\[1, 2\\] is invalid"),
    ({"entries": [1]}, "entries list is invalid; expected an object"),
    ({"entries": "x"}, "entries str is invalid"),
    ({"format": 2}, "format 2 is invalid; expected 1"),
])
def test_an_import_of_the_wrong_shape_is_refused_by_name(own_cache, tmp_path, capsys, top,
                                                          message):
    """{"format": 1} alone, a machine or entries of the wrong type: `tune --import` says what
    is wrong, exit 1, nothing imported (it was an AttributeError traceback)."""
    from dml_numba.__main__ import main

    path = _wisdom_file(tmp_path, **top)
    with pytest.raises(_wisdom.WisdomError, match=message):
        _wisdom.import_(path)
    assert main(["tune", "--import", str(path)]) == 1
    assert "nothing imported: " in capsys.readouterr().err and _wisdom.entries() == {}
    bare = tmp_path / "bare.json"
    bare.write_text('{"format": 1}')
    with pytest.raises(_wisdom.WisdomError, match="machine None is invalid"):
        _wisdom.import_(bare)


def test_import_reads_regular_files_only_and_within_a_size(own_cache, tmp_path, monkeypatch):
    """A FIFO would block the import forever and /dev/zero never end: refused by what they
    are; a file over MAX_BYTES by its size."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (fifo, "/dev/zero", tmp_path):
        with pytest.raises(_wisdom.WisdomError, match="not a regular file"):
            _wisdom.import_(path)
    monkeypatch.setattr(_wisdom, "MAX_BYTES", 100)
    with pytest.raises(_wisdom.WisdomError, match="bytes is invalid; expected at most 100"):
        _wisdom.import_(_wisdom_file(tmp_path))


MALFORMED = {
    "plan bogus field": {"choice": {"algorithm": "blocked", "plan": {"bogus": 1}}},
    "plan a string": {"choice": {"algorithm": "blocked", "plan": "x"}},
    "padded a number": {"choice": {"algorithm": "blocked", "plan": {"lanes": 16, "padded": 5}}},
    "algorithm a number": {"choice": {"algorithm": 3}},
    "parallel a string": {"choice": {"algorithm": "direct", "parallel": "yes"}},
    "tuning_s a string": dict(_entry(), tuning_s="slow"),
    "tuning_s null": dict(_entry(), tuning_s=None),
    "tuning_s infinite": dict(_entry(), tuning_s=float("inf")),
    "label a number": dict(_entry(), label=3),
    "provisional a number": dict(_entry(), provisional=1),
    "left of numbers": dict(_entry(), left=[1]),
    "seconds of strings": dict(_entry(), seconds={"a": "b"}),
    "busy attempts a bool": {"busy": {"attempts": True, "others": 0.5}},
    "not an object": [1, 2],
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_malformed_entry_is_skipped_on_import_and_on_read_never_fatal(own_cache, tmp_path,
                                                                          capsys, name):
    """Each malformed entry (a plan that is no plan, a field of the wrong type): skipped on
    import (counted) and, written into the machine's own file by hand, skipped on read with
    one warning that counts them; builds, `tune` and `info` go on (they used to raise until
    --forget)."""
    from dml_numba.__main__ import _print_wisdom, main

    entries = {"good": _entry("good"), "bad": MALFORMED[name]}
    path = _wisdom_file(tmp_path, entries)
    assert _wisdom.import_(path) == (1, 1) and _wisdom.get("bad") is None
    assert main(["tune", "--import", str(path)]) == 0
    assert "(1 malformed entries skipped)" in capsys.readouterr().out
    own = _wisdom._path(_wisdom.machine())
    data = json.loads(own.read_text())
    data["entries"]["bad"] = MALFORMED[name]
    own.write_text(json.dumps(data))
    with pytest.warns(RuntimeWarning, match="1 malformed entry of the wisdom file .* skipped"):
        assert set(_wisdom.entries()) == {"good"}
    _print_wisdom()  # prints, never raises
    assert "good" in capsys.readouterr().out


def test_a_plan_that_builds_no_candidate_is_never_used(own_cache):
    """A structurally fine plan with fields a BlockPlan lacks: the tuner treats it as no
    choice (it used to raise in every later build of that convolution)."""
    desc, host = _desc(), Host(8, 3)
    _wisdom.put(tune.key_of(desc, {}), {"choice": {"algorithm": "blocked",
                                                    "plan": {"bogus": 1}}})  # as a hand edit
    with pytest.warns(RuntimeWarning, match="1 malformed entry of the wisdom file"):
        assert tune.wisdom_choice(desc, {}, build=fake_build(FakeClock(), {}, []),
                                  host=host) is None
    clock, built = FakeClock(), []
    kernel = tune.tune(desc, {}, "quick", clock=clock, build=fake_build(clock, {}, built),
                       host=host, meter=IDLE)
    assert kernel.tuning["source"] == "measured"


def test_export_to_a_missing_folder_is_a_clear_error(own_cache, tmp_path, capsys):
    from dml_numba.__main__ import main

    _wisdom.put("k", _entry())
    assert main(["tune", "--export", str(tmp_path / "no" / "w.json")]) == 1
    err = capsys.readouterr().err
    assert "nothing exported: " in err and "cannot be written" in err


IMPORTER = """
import sys
from dml_numba import _wisdom
for _ in range(3):
    _wisdom.import_(sys.argv[1])
"""


def test_two_processes_importing_at_once_keep_every_key(own_cache, tmp_path):
    """Read, merge and write under a lock held against other processes: two importers of
    disjoint 60-key files, at once, leave all 120 keys (they kept 92 and 62 before)."""
    import subprocess
    import sys

    files = []
    for side in ("a", "b"):
        (tmp_path / side).mkdir()
        files.append(_wisdom_file(tmp_path / side, {f"{side}{k}": _entry(f"{side}{k}")
                                                    for k in range(60)}))
    procs = [subprocess.Popen([sys.executable, "-c", IMPORTER, str(f)]) for f in files]
    assert all(p.wait(120) == 0 for p in procs)
    assert len(_wisdom.entries()) == 120


def test_kernels_planned_for_another_host_are_never_tuned(monkeypatch):
    """Another machine's kernels cannot be timed here (the golden sources are generated so):
    they keep to the static rule whatever the mode."""
    from dml_numba.cpu import convolution as cc
    from tests import golden

    def refuse(*a, **k):
        raise AssertionError("tuned while planning for another host")

    monkeypatch.setattr(tune, "tune", refuse)
    with golden.emit_only():
        kernel = cc.make_kernel(_desc(), {"algorithm": None, "parallel": None, "tune": "quick"})
    assert kernel.algorithm == choose_algorithm(_desc(), Host(*golden.HOST))
    with pytest.raises(AssertionError, match="tuned while planning"):
        cc.make_kernel(_desc(), {"algorithm": None, "parallel": None, "tune": "quick"})
