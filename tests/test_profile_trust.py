"""Whether a profile can be trusted: calibrated samples (a fake clock), the warnings (made-up
samples), the comparison of two runs (made-up JSON), and one real run beside busy processes."""
import json
import subprocess
import sys
import time

import pytest

from dml_numba import profile
from dml_numba.__main__ import main
from dml_numba.profile import checks, compare
from dml_numba.profile.timing import measure


class FakeClock:
    """Wall and thread-CPU clocks; each call of the timed function advances them."""

    def __init__(self, per_call, cpu_fraction=1.0):
        self.per_call, self.cpu_fraction = list(per_call), cpu_fraction
        self.wall = self.cpu = 0.0
        self.calls = 0

    def fn(self):
        dt = self.per_call[min(self.calls, len(self.per_call) - 1)]
        self.calls += 1
        self.wall += dt
        self.cpu += dt * self.cpu_fraction

    def clock(self):
        return self.wall

    def cpu_clock(self):
        return self.cpu


def test_a_fast_call_is_timed_many_calls_a_sample():
    c = FakeClock([50e-6])
    t = measure(c.fn, min_time=0.005, repeat=7, budget=10, clock=c.clock, cpu_clock=c.cpu_clock)
    assert t.loops >= 100 and t.n == 7
    assert t.median == pytest.approx(50e-6) and t.iqr == pytest.approx(0, abs=1e-12)
    assert t.cpu_share == pytest.approx(1.0)
    assert all(s * t.loops >= 0.005 for s in t.sample_totals()[:1])


def test_a_slow_call_is_one_call_a_sample_and_the_budget_stops_the_samples():
    c = FakeClock([0.2])
    t = measure(c.fn, min_time=0.005, repeat=15, budget=1.0, clock=c.clock,
                cpu_clock=c.cpu_clock)
    assert t.loops == 1 and 3 <= t.n <= 7  # 0.2 s a sample, about 1 s of samples
    c = FakeClock([0.2])
    assert measure(c.fn, min_time=0.005, repeat=15, budget=0.0, clock=c.clock,
                   cpu_clock=c.cpu_clock).n == 3  # never fewer than three


def test_the_cpu_share_is_measured_on_the_calling_thread():
    c = FakeClock([1e-3], cpu_fraction=0.4)
    t = measure(c.fn, min_time=0.005, repeat=5, budget=10, clock=c.clock, cpu_clock=c.cpu_clock)
    assert t.cpu_share == pytest.approx(0.4)


@pytest.mark.parametrize("totals,expected", [
    ([0.008, 0.016, 0.008, 0.024, 0.00799], True),  # the scheduler's quanta
    ([0.03199, 0.04797, 0.032, 0.032], True),
    ([0.00791, 0.00813, 0.00805, 0.00787, 0.00821], False),  # an 8 ms kernel with jitter
    ([0.0002, 0.0002, 0.0002], False),  # under one tick
    ([0.008, 0.008], False),  # too few to tell
    ([0.0061, 0.0083, 0.0121, 0.0057, 0.0064], False),
])
def test_times_on_the_scheduler_tick(totals, expected):
    assert checks.on_ticks(totals) is expected


def row(workload="w", impl="cpu", samples=(1e-3,) * 5, loops=10, cpu_share=1.0):
    """A profile row from made-up samples."""
    from dml_numba.profile.timing import Timing

    t = Timing(list(samples), loops, cpu_share)
    q1, q3 = t.q1_q3()
    return profile.Row("op", workload, impl, "device", [1], "float32", 0.1, "compile", t.median,
                       q1, q3, t.minimum, t.n, loops, list(samples), cpu_share, 1.0, "GB/s",
                       flags=checks.row_flags(impl, t.sample_totals(), t.spread, cpu_share))


QUIET = {"usable_cores": 2, "load_before": [0.1, 0.1, 0.1]}


def test_a_quiet_stable_run_has_no_warning():
    rows = [row(f"w{i}", impl) for i in range(4) for impl in ("numpy", "cpu")]
    assert all(r.flags == [] for r in rows)
    assert checks.warnings(QUIET, rows) == []


def test_a_busy_machine_is_named_with_what_to_do():
    measured = checks.warnings({"usable_cores": 2, "load_before": [1.9, 1.0, 0.5],
                                "others_busy_before": 0.04, "others_busy_after": 0.55}, [row()])
    assert len(measured) == 1 and "busy after the run: other programs used 55%" in measured[0]
    # the load average lags (a previous run still counts): measured CPU time decides
    assert checks.warnings({"usable_cores": 2, "load_before": [1.9, 1.0, 0.5],
                            "others_busy_before": 0.04, "others_busy_after": 0.1}, [row()]) == []
    busy = checks.warnings({"usable_cores": 2, "load_before": [2.4, 1.0, 0.5]}, [row()])
    assert len(busy) == 1 and "busy before the run: load average 2.40 on 2" in busy[0]
    assert "--min-time" in busy[0] and "--repeat" in busy[0]
    rows = [row("a", cpu_share=0.35), row("b"), row("c", cpu_share=0.5), row("d")]
    assert rows[0].flags == ["busy"] and rows[1].flags == []
    (w,) = checks.warnings(QUIET, rows)
    assert "2 of 4 rows ran with the CPU taken away" in w and "35% of the time in 'a'" in w


def test_gpu_rows_are_not_called_busy_for_waiting_on_the_device():
    for impl in ("cuda", "cuda copy (limit)", "torch-cuda", "cupy.pad"):
        assert row(impl=impl, cpu_share=0.05).flags == []


def test_unstable_and_tick_rows_are_flagged_and_named():
    unstable = row("u", samples=(1e-3, 1e-3, 2e-3, 3e-3, 1e-3))
    assert unstable.flags == ["unstable"]
    ticks = [row(f"t{i}", samples=(0.008, 0.008, 0.016, 0.008), loops=1) for i in range(3)]
    assert all(t.flags == ["tick"] for t in ticks)
    warnings = checks.warnings(QUIET, [unstable] + ticks)
    assert any("1 row is unstable: 'u' on cpu (spread" in w for w in warnings)
    assert any("3 rows sit at multiples of the scheduler's 4 ms tick" in w for w in warnings)
    # one row on a multiple of the tick is chance, not the scheduler
    assert not any("tick" in w for w in checks.warnings(QUIET, ticks[:1]))


# -- comparing two runs ---------------------------------------------------------------------------

def saved(rows, schema=2) -> dict:
    """A profile as the JSON holds it (schema 1: no samples nor quartiles)."""
    out = []
    for r in rows:
        d = {"workload": r.workload, "impl": r.impl, "dtype": r.dtype, "steady_s": r.steady_s}
        if schema == 2:
            d.update(q1_s=r.q1_s, q3_s=r.q3_s, n=r.n)
        out.append(d)
    return {"schema": schema, "meta": {}, "rows": out}


def jitter(median, n=7, rel=0.02):
    return [median * (1 + rel * ((i % 3) - 1)) for i in range(n)]


def test_the_same_code_twice_marks_nothing():
    base = saved([row(f"w{i}", samples=jitter(1e-3 * (i + 1))) for i in range(5)])
    new = saved([row(f"w{i}", samples=jitter(1.01e-3 * (i + 1), rel=0.03)) for i in range(5)])
    changes = compare.compare(base, new)
    assert len(changes) == 5 and not any(c.marked for c in changes)
    assert compare.regressions(changes, 0.05) == []
    assert "5 rows compared: 0 changed beyond the spread" in compare.summary(changes)


def test_a_slowed_row_is_marked_and_fails_the_comparison(tmp_path, capsys):
    base = saved([row("steady", samples=jitter(1e-3)), row("slowed", samples=jitter(2e-3)),
                  row("sped up", samples=jitter(4e-3)), row("gone", samples=jitter(1e-3))])
    new = saved([row("steady", samples=jitter(1e-3)), row("slowed", samples=jitter(3e-3)),
                 row("sped up", samples=jitter(2e-3)), row("new", samples=jitter(1e-3))])
    changes = {c.workload: c for c in compare.compare(base, new)}
    assert set(changes) == {"steady", "slowed", "sped up"}  # rows in both runs only
    assert changes["slowed"].marked and changes["slowed"].verdict == "1.50x slower"
    assert changes["sped up"].marked and changes["sped up"].verdict == "2.00x faster"
    assert not changes["steady"].marked
    text = compare.table(list(changes.values()))
    assert "* 1.50x slower" in text and "within the spread" in text
    assert "**1.50x slower**" in compare.table(list(changes.values()), markdown=True)
    a, b = tmp_path / "base.json", tmp_path / "new.json"
    a.write_text(json.dumps(base))
    b.write_text(json.dumps(new))
    assert main(["profile", "--compare", str(a), str(b)]) == 1  # a regression: CI fails
    assert "1 row slower by more than 5% beyond the spread" in capsys.readouterr().out
    assert main(["profile", "--compare", str(a), str(b), "--threshold", "0.6"]) == 0


def test_a_change_of_variant_is_named():
    base, new = saved([row("w", samples=jitter(1e-3))]), saved([row("w", samples=jitter(2e-3))])
    base["rows"][0]["variant"], new["rows"][0]["variant"] = "parallel", "serial"
    (c,) = compare.compare(base, new)
    assert c.verdict == "2.00x slower (ran parallel, now serial)"


def test_a_change_inside_either_runs_spread_is_not_marked():
    base = saved([row("w", samples=jitter(1e-3, rel=0.3))])  # a noisy base run
    new = saved([row("w", samples=jitter(1.2e-3))])
    (c,) = compare.compare(base, new)
    assert not c.marked and c.verdict == "within the spread"


def test_a_profile_without_samples_is_compared_but_never_marked(tmp_path, capsys):
    base = saved([row("w", samples=jitter(1e-3))], schema=1)
    new = saved([row("w", samples=jitter(3e-3))])
    (c,) = compare.compare(base, new)
    assert c.ratio == pytest.approx(3.0) and not c.marked and c.verdict == "no spread recorded"
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"meta": {}, "rows": base["rows"]}))  # as schema 1 wrote it
    b.write_text(json.dumps(new))
    assert main(["profile", "--compare", str(a), str(b)]) == 0


def _slowed_pair(base_warnings=(), new_warnings=(), base_flags=(), new_flags=()):
    base = saved([row("steady", samples=jitter(1e-3)), row("slowed", samples=jitter(2e-3)),
                  row("gone", samples=jitter(1e-3))])
    new = saved([row("steady", samples=jitter(1e-3)), row("slowed", samples=jitter(3e-3)),
                 row("new", samples=jitter(1e-3))])
    base["warnings"], new["warnings"] = list(base_warnings), list(new_warnings)
    for saved_run, flags in ((base, base_flags), (new, new_flags)):
        for r in saved_run["rows"]:
            r["flags"] = list(flags)
    return base, new


BUSY_WARNING = ("the machine was busy before the run: other programs used 62% of its CPU "
                "time; close other programs ...")


@pytest.mark.parametrize("busy_side, how", [
    ("base", "warning"), ("new", "warning"), ("new", "flags"), ("base", "flags")])
def test_a_regression_between_runs_on_a_busy_machine_is_reported_untrusted_and_passes(
        tmp_path, capsys, busy_side, how):
    """Either run busy (its warning, or, in a file without warnings, rows flagged busy): the
    comparison says which file was busy and that the verdict cannot be trusted, and exits 0
    unless --fail-when-busy; rows in one file only are listed, by file."""
    kw = {f"{busy_side}_{'warnings' if how == 'warning' else 'flags'}":
          [BUSY_WARNING] if how == "warning" else ["busy"]}
    base, new = _slowed_pair(**kw)
    a, b = tmp_path / "base.json", tmp_path / "new.json"
    a.write_text(json.dumps(base))
    b.write_text(json.dumps(new))
    assert main(["profile", "--compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    name = str(a if busy_side == "base" else b)
    assert f"note: {name} was measured on a busy machine: " + (
        "the machine was busy before the run" if how == "warning" else "3 rows flagged busy") in out
    assert "cannot be trusted" in out and "not failing: --fail-when-busy fails on it" in out
    assert f"1 row only in {a}: 'gone' on cpu" in out
    assert f"1 row only in {b}: 'new' on cpu" in out
    assert main(["profile", "--compare", str(a), str(b), "--fail-when-busy"]) == 1


def test_a_regression_between_quiet_runs_fails_and_says_nothing_of_load(tmp_path, capsys):
    base, new = _slowed_pair()
    a, b = tmp_path / "base.json", tmp_path / "new.json"
    a.write_text(json.dumps(base))
    b.write_text(json.dumps(new))
    assert main(["profile", "--compare", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert "busy machine" not in out and "cannot be trusted" not in out


def test_the_chart_marks_what_the_table_marks():
    """Flagged rows hatched with their flags after the value, the warnings in the figure, the
    title counting flagged rows; a quiet profile's chart has none of it."""
    from dml_numba.profile import report

    flagged = [row("a", cpu_share=0.35), row("b", samples=(1e-3, 1e-3, 2e-3, 3e-3, 1e-3))]
    for r in flagged:
        r.speedup_vs_numpy = 2.0
    warnings = checks.warnings(QUIET, flagged)
    fig = report.figure(flagged, {}, warnings)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.texts]
    assert any("[busy]" in t for t in labels) and any("[unstable]" in t for t in labels)
    assert all(p.get_hatch() for p in ax.patches)
    texts = " ".join(t.get_text() for t in fig.texts)
    assert "warning:" in texts and "unstable" in texts
    assert "2 rows flagged (hatched)" in ax.get_title()
    quiet = [row("c")]
    quiet[0].speedup_vs_numpy = 2.0
    fig = report.figure(quiet, {}, [])
    assert not any(p.get_hatch() for p in fig.axes[0].patches)
    assert "warning" not in " ".join(t.get_text() for t in fig.texts)
    assert "flagged" not in fig.axes[0].get_title()


@pytest.mark.parametrize("change, message", [
    (lambda rows: rows[0].pop("workload"), "row 0: no 'workload'"),
    (lambda rows: rows[0].__setitem__("impl", 3), "row 0: impl is 3; expected a string"),
    (lambda rows: rows[1].__setitem__("steady_s", "slow"),
     "row 1: steady_s is 'slow'; expected a finite number"),
    (lambda rows: rows[1].__setitem__("q1_s", float("inf")),
     "row 1: q1_s is inf; expected a finite number"),
    (lambda rows: rows[0].__setitem__("n", -1), "row 0: n is -1; expected a finite number"),
    (lambda rows: rows.__setitem__(1, ["w", "cpu"]), "row 1: a list; expected an object"),
    (lambda rows: rows[0].__setitem__("flags", "busy"), "row 0: flags or dtype"),
])
@pytest.mark.parametrize("side", ["base", "new"])
def test_compare_names_the_file_and_row_it_cannot_read(tmp_path, capsys, change, message,
                                                       side):
    """A hand-edited or truncated file: "profile: --compare: FILE: row K: ..." and exit 2,
    never a traceback (Infinity is what Python's JSON reader makes of 'Infinity')."""
    files = {}
    for name in ("base", "new"):
        data = saved([row("w", samples=jitter(1e-3)), row("v", samples=jitter(2e-3))])
        if name == side:
            change(data["rows"])
        files[name] = tmp_path / f"{name}.json"
        files[name].write_text(json.dumps(data))
    assert main(["profile", "--compare", str(files["base"]), str(files["new"])]) == 2
    err = capsys.readouterr().err
    assert f"profile: --compare: {files[side]}: {message}" in err and "Traceback" not in err


@pytest.mark.parametrize("content,message", [
    ("[]", "not a dml-numba profile"),
    ("{", "Expecting"),
    (None, "No such file"),
])
def test_compare_refuses_what_is_not_a_profile(tmp_path, capsys, content, message):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    if content is not None:
        a.write_text(content)
    b.write_text(json.dumps(saved([row()])))
    assert main(["profile", "--compare", str(a), str(b)]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("args,message", [
    (["--min-time", "0"], "--min-time 0.0 must be a positive"),
    (["--repeat", "2"], "--repeat 2 must be at least 3"),
    (["--compare", "a", "b", "c"], "--compare takes BASE.json and at most one"),
])
def test_bad_timing_options_are_refused(args, message, capsys):
    assert main(["profile", "--quick"] + args) == 2
    assert message in capsys.readouterr().err


# -- a real run beside two busy processes ---------------------------------------------------------

BUSY = "import time\nend = time.time() + 60\nwhile time.time() < end:\n    pass\n"


def test_a_run_beside_two_busy_processes_warns(tmp_path):
    """Two processes spinning on this machine's cores: the profile says it cannot be trusted
    (the calling thread is off the CPU for much of the time, or the load was high)."""
    hogs = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(2)]
    try:
        time.sleep(1.0)
        js = tmp_path / "p.json"
        out = subprocess.run(
            [sys.executable, "-m", "dml_numba", "profile", "--quick", "--ops", "slice1",
             "--devices", "numpy", "cpu", "--no-peers", "--json", str(js), "--min-time",
             "0.002", "--processes", "1"], capture_output=True, text=True, timeout=240)
    finally:
        for h in hogs:
            h.kill()
    assert out.returncode == 0, out.stderr
    data = json.loads(js.read_text())
    assert data["warnings"] and "warning: " in out.stdout
    assert any("busy" in r["flags"] for r in data["rows"]) or "busy before" in out.stdout
