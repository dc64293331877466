"""`dml-numba profile` end to end on a tiny suite: the table, the JSON schema, the chart."""
import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest

import dml_numba as dml
from dml_numba import profile
from dml_numba.__main__ import main
from dml_numba.workloads import convolution, padding, workload
from dml_numba.workloads import slice as slicing


def tiny_suite():
    M = dml.PaddingMode
    return [
        workload("padding", "tiny reflection pad",
                 padding.spec((2, 3, 8, 9), (0, 0, 2, 1), (0, 0, 1, 3), M.REFLECTION), "bytes"),
        workload("convolution", "tiny conv",
                 convolution.spec((1, 2, 6, 5), (4, 2, 3, 3), (1, 1), (1, 1), 1), "flops", True),
        workload("slice1", "tiny slice", slicing.spec((3, 8), (0, 1), (3, 7), (-1, 2)), "bytes"),
    ]


def test_rows_cover_every_device_and_measure_throughput():
    rows = profile.run(devices=["numpy", "cpu"], quick=True, progress=False, workloads=tiny_suite())
    impls = {(r.workload, r.impl) for r in rows}
    for w in ("tiny reflection pad", "tiny conv", "tiny slice"):
        assert (w, "numpy") in impls and (w, "cpu") in impls
    assert ("tiny reflection pad", "numpy.pad") in impls  # NumPy's own function as a peer
    for r in rows:
        assert r.steady_s > 0 and r.throughput > 0
        assert r.throughput_unit == ("GFLOP/s" if r.workload == "tiny conv" else "GB/s")
        assert r.speedup_vs_numpy == pytest.approx(
            next(x.steady_s for x in rows if x.workload == r.workload and x.impl == "numpy")
            / r.steady_s)
        if r.kind == "device":
            assert r.first_call_s is not None and r.first_call_s > 0
    assert "tiny conv" in profile.table(rows)


def test_integer_dtype_skips_float_only_operators():
    rows = profile.run(devices=["cpu"], dtype="int16", quick=True, peers=False, progress=False,
                       workloads=tiny_suite())
    assert {r.workload for r in rows} == {"tiny reflection pad", "tiny slice"}
    assert all(r.dtype == "int16" for r in rows)


ROW_KEYS = {"op", "workload", "impl", "kind", "shape", "dtype", "first_call_s", "first_call",
            "steady_s", "q1_s", "q3_s", "min_s", "n", "loops", "samples", "cpu_share",
            "throughput", "throughput_unit", "speedup_vs_numpy", "variant", "of_limit", "flags"}
META_KEYS = {"timestamp", "cpu", "machine", "system", "vector_lanes_float32", "logical_cores",
             "usable_cores", "numba_threads", "threading_layer", "versions", "load_before",
             "load_after", "others_busy_before", "others_busy_after", "settings", "not_run"}


def test_cli_writes_json_csv_markdown_and_plot(tmp_path, capsys):
    """The JSON schema of docs/PROFILE.md: every row with its samples and statistics, the
    machine, the warnings."""
    js, png, cs, md = (tmp_path / f for f in ("p.json", "p.png", "p.csv", "p.md"))
    code = main(["profile", "--quick", "--ops", "tile", "slice1", "--devices", "numpy", "cpu",
                 "--no-peers", "--json", str(js), "--plot", str(png), "--csv", str(cs),
                 "--markdown", str(md), "--min-time", "0.001", "--repeat", "4",
                 "--processes", "1"])
    assert code == 0
    out = capsys.readouterr().out
    assert "vs numpy device" in out and "tile (1,1,2,2)" in out and "samples x loops" in out
    data = json.loads(js.read_text())
    assert data["schema"] == 2 and isinstance(data["warnings"], list)
    assert set(data["meta"]) == META_KEYS
    meta = data["meta"]
    assert meta["versions"]["numba"] and meta["versions"]["numpy"] and meta["versions"]["python"]
    assert meta["cpu"] and meta["usable_cores"] >= 1 and meta["vector_lanes_float32"] >= 1
    assert meta["settings"] == {"min_time_s": 0.001, "repeat": 4, "budget_s": 0.5,
                                "quick": True, "processes": 1}
    assert data["rows"] and all(set(r) == ROW_KEYS for r in data["rows"])
    for r in data["rows"]:
        assert 3 <= r["n"] == len(r["samples"]) <= 4 and r["loops"] >= 1
        assert r["min_s"] <= r["q1_s"] <= r["steady_s"] <= r["q3_s"] <= max(r["samples"])
        assert r["first_call"] in (("none",) if r["impl"] == "numpy" else
                                   ("compile", "disk cache", "memory cache"))
    assert {r["op"] for r in data["rows"]} == {"tile", "slice1"}
    assert {r["impl"] for r in data["rows"]} == {"numpy", "cpu"}
    assert {r["variant"] for r in data["rows"] if r["impl"] == "cpu"} <= {"serial", "parallel"}
    assert all(r["variant"] is None for r in data["rows"] if r["impl"] == "numpy")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    lines = cs.read_text().splitlines()
    assert lines[0].startswith("op,workload,impl,variant,") and len(lines) == len(data["rows"]) + 1
    table = md.read_text().splitlines()
    assert table[0].startswith("| workload | impl | first call | median ms | IQR % |")
    assert len([t for t in table if t.startswith("| ")]) == len(data["rows"]) + 1
    assert meta["cpu"] in md.read_text()  # the machine under the table


def test_samples_from_several_processes_are_pooled(tmp_path, capsys):
    """--processes 2: two worker processes take their share of the samples each (at least
    three), the parent pools them per row and reports once."""
    js = tmp_path / "p.json"
    code = main(["profile", "--quick", "--ops", "slice1", "--devices", "numpy", "cpu",
                 "--no-peers", "--json", str(js), "--min-time", "0.001", "--repeat", "4",
                 "--processes", "2"])
    assert code == 0
    captured = capsys.readouterr()
    assert captured.out.count("vs numpy device") == 1  # the workers print no table
    data = json.loads(js.read_text())
    assert data["meta"]["settings"]["processes"] == 2 and data["meta"]["settings"]["repeat"] == 6
    for r in data["rows"]:
        assert r["n"] == len(r["samples"]) == 6  # 3 from each process
        assert r["min_s"] <= r["q1_s"] <= r["steady_s"] <= r["q3_s"]
        assert r["speedup_vs_numpy"] == pytest.approx(next(
            x["steady_s"] for x in data["rows"]
            if x["workload"] == r["workload"] and x["impl"] == "numpy") / r["steady_s"])


def test_first_call_says_compile_memory_cache_or_disk_cache():
    """A new kernel is compiled; the same operator again is a memory-cache hit; with the memory
    cache emptied, the kernel comes from the disk cache without compiling."""
    from dml_numba import _housekeeping

    if not _housekeeping.usage()["on"]:
        pytest.skip(f"the disk cache is off here: {_housekeeping.usage()['reason']}")
    d = dml.TileOperatorDesc(dml.TensorDesc(dml.DataType.FLOAT32, (3, 5)),
                             dml.TensorDesc(dml.DataType.FLOAT32, (6, 35)), (2, 7))
    x = np.arange(15, dtype=np.float32).reshape(3, 5)

    def build():
        return dml.compile_operator(d, "cpu", parallel=False)(x)

    kinds = []
    for _ in range(2):
        kinds.append(profile.first_call(build, "cpu")[1])
    dml.cache.clear()
    kinds.append(profile.first_call(build, "cpu")[1])
    assert kinds == ["compile", "memory cache", "disk cache"]
    assert profile.first_call(lambda: np.tile(x, (2, 7)), "numpy")[1] == "none"


def test_progress_names_only_installed_peers(capsys):
    profile.run(devices=["numpy"], quick=True, workloads=tiny_suite()[:1],
                settings=profile.Settings(0.0005, 3, 0.05))
    steps = [line for line in capsys.readouterr().err.splitlines() if " with " in line]
    assert steps and all(profile.installed(s.rsplit(" with ", 1)[1]) for s in steps)
    assert profile.installed("numpy.pad")
    assert profile.installed("cupy.pad") == (importlib.util.find_spec("cupy") is not None)


def test_every_cpu_peer_has_its_gpu_form():
    """torch -> torch-cuda (cuDNN for convolution), numpy.* -> cupy.* (NumPy dispatches to CuPy)."""
    from dml_numba.workloads import gpu_peers, suite

    for w in suite(quick=True):
        gpu = gpu_peers(w.peers)
        expected = ({"torch-cuda"} if "torch" in w.peers else set()) | {
            "cupy" + n[len("numpy"):] for n in w.peers if n.startswith("numpy")}
        assert set(gpu) == expected, w.name
    assert set(gpu_peers(tiny_suite()[0].peers)) >= {"torch-cuda", "cupy.pad"}


def test_gpu_peers_are_unavailable_without_a_gpu():
    from dml_numba.workloads import PeerUnavailable, gpu_peers

    w = tiny_suite()[0]
    desc, inputs = w.make(np.dtype(np.float32), np.random.default_rng(0))
    for name, factory in gpu_peers(w.peers).items():
        try:
            factory(desc, inputs)
        except PeerUnavailable:
            continue
        pytest.skip(f"{name} has a GPU here")  # pragma: no cover - a machine with a GPU
    # the torch peer itself still runs on the CPU afterwards (the device is restored)
    pytest.importorskip("torch", reason="PyTorch is optional (the profiler's peer): not installed")
    y = w.peers["torch"](desc, inputs)()
    assert y.device.type == "cpu"


@pytest.mark.cuda
def test_cuda_rows_carry_the_device_copy_limit():
    """On the simulator (no timings worth reading, but the same code path as on a GPU): a
    data-movement workload gains a "cuda copy (limit)" row and the cuda row its fraction of it;
    the GPU peers are skipped as unavailable."""
    rows = profile.run(devices=["numpy", "cuda"], quick=True, progress=False,
                       workloads=tiny_suite()[:1])
    by_impl = {r.impl: r for r in rows}
    limit, cuda = by_impl["cuda copy (limit)"], by_impl["cuda"]
    assert limit.kind == "limit" and limit.first_call_s is None
    assert cuda.of_limit == pytest.approx(limit.steady_s / cuda.steady_s)
    assert "of copy" in profile.table(rows)
    assert not {"torch-cuda", "cupy.pad"} & set(by_impl)


@pytest.mark.cuda
def test_cli_refuses_to_time_the_simulator(capsys):
    assert main(["profile", "--quick", "--devices", "cuda"]) == 2
    assert "simulator" in capsys.readouterr().err


@pytest.mark.parametrize("args,message", [
    (["--ops", "softmax"], "unknown --ops"),
    (["--dtype", "complex64"], "--dtype 'complex64' is invalid"),
    (["--devices", "tpu"], "device 'tpu' is not usable"),
])
def test_cli_refuses_bad_options(args, message, capsys):
    assert main(["profile", "--quick"] + args) == 2
    assert message in capsys.readouterr().err


def test_console_entry_point_runs():
    out = subprocess.run([sys.executable, "-m", "dml_numba", "info"], capture_output=True,
                         text=True)
    assert out.returncode == 0 and "device cpu" in out.stdout and "disk cache" in out.stdout


def test_peers_that_did_not_run_are_named_with_the_reason(monkeypatch, tmp_path):
    """A peer whose library is missing is neither run nor listed in the progress; one that
    refuses the workload is recorded with its error; both appear in the JSON, under the table
    and as "n/a" in the chart."""
    import dataclasses

    from dml_numba.profile import report

    def refuses(desc, inputs):
        raise ValueError("no such mode")

    w = tiny_suite()[0]
    w = dataclasses.replace(w, peers={"numpy.pad": w.peers["numpy.pad"], "torch": refuses,
                                      "cupy.pad": refuses})
    monkeypatch.setattr(profile, "installed", lambda peer: not peer.startswith("cupy"))
    meta: dict = {}
    rows = profile.run(devices=["numpy"], quick=True, progress=False, workloads=[w], meta=meta,
                       settings=profile.Settings(0.0005, 3, 0.05))
    assert {r.impl for r in rows} == {"numpy", "numpy.pad"}
    assert meta["not_run"] == [("tiny reflection pad", "cupy.pad", "not installed"),
                               ("tiny reflection pad", "torch", "ValueError: no such mode")]
    assert report.not_run(meta) == ("cupy.pad on 1 workloads: not installed; torch on 1 "
                                    "workloads: ValueError: no such mode")
    png = tmp_path / "p.png"
    report.plot(rows, png, meta)
    assert png.stat().st_size > 10_000


def test_compare_with_one_file_profiles_now_and_compares(tmp_path, capsys):
    """--compare BASE.json alone: a new profile (the other options as given) against BASE."""
    base = tmp_path / "base.json"
    args = ["profile", "--quick", "--ops", "tile", "--devices", "numpy", "--no-peers",
            "--processes", "1", "--repeat", "3", "--min-time", "0.0005"]
    assert main(args + ["--json", str(base)]) == 0
    capsys.readouterr()
    code = main(args + ["--compare", str(base), "--threshold", "100"])
    out = capsys.readouterr().out
    assert code == 0  # nothing 100x slower
    assert "new/base" in out and "tile (1,1,2,2)" in out
    assert "1 row compared: " in out  # the numpy device's one row


TINY = ["profile", "--quick", "--ops", "tile", "--devices", "numpy", "--no-peers",
        "--processes", "1", "--repeat", "3", "--min-time", "0.0005"]


@pytest.mark.parametrize("flag", ["--json", "--csv", "--markdown", "--plot"])
@pytest.mark.parametrize("where", ["missing folder", "a folder"])
def test_an_output_path_that_cannot_be_written_is_refused_before_any_work(
        tmp_path, capsys, monkeypatch, flag, where):
    from dml_numba.profile import cli

    monkeypatch.setattr(cli, "run", lambda *a, **k: pytest.fail("profiled anyway"))
    path = tmp_path / "missing" / "out.file" if where == "missing folder" else tmp_path
    good = tmp_path / "good.json"
    assert main(TINY + [flag, str(path)] + (["--json", str(good)] if flag != "--json" else [])
                ) == 2
    err = capsys.readouterr().err
    assert f"profile: {flag} {path}: " in err
    assert ("does not exist" if where == "missing folder" else "is a folder") in err
    assert not good.exists()


def test_every_output_that_can_be_written_is_written(tmp_path, capsys, monkeypatch):
    """A folder that disappears while the profile runs: that output fails with a message,
    the others are written, exit status 1."""
    from dml_numba.profile import cli

    gone = tmp_path / "gone"
    gone.mkdir()
    real = cli.run

    def run_then_remove(*a, **k):
        rows = real(*a, **k)
        gone.rmdir()
        return rows

    monkeypatch.setattr(cli, "run", run_then_remove)
    paths = {"json": tmp_path / "p.json", "csv": gone / "p.csv",
             "markdown": tmp_path / "p.md"}
    code = main(TINY + [a for k, v in paths.items() for a in (f"--{k}", str(v))])
    err = capsys.readouterr().err
    assert code == 1 and f"--csv {paths['csv']}: not written" in err
    assert paths["json"].exists() and paths["markdown"].exists()


def test_the_help_states_the_defaults_the_run_uses(capsys):
    """--help, docs/PROFILE.md and the JSON's settings say one thing: Settings.default."""
    from pathlib import Path

    from dml_numba.profile import Settings

    with pytest.raises(SystemExit):
        main(["profile", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    quick, full = Settings.default(True), Settings.default(False)
    assert f"default {quick.repeat} with --quick, else {full.repeat}" in out
    assert f"default {quick.min_time:g} with --quick, else {full.min_time:g}" in out
    doc = " ".join((Path(__file__).parents[1] / "docs" / "PROFILE.md").read_text().split())
    assert f"({quick.repeat} with `--quick`, else {full.repeat})" in doc
