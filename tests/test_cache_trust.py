"""Running where other people, other processes and careless callers are: a disk cache trusted
only when it is the user's own, a fall-back to memory that works, deletion of our own files
only, exact buffer bounds, keys by bits, sizes DirectML can express, what the functional layer
takes, and generated code that field values cannot break out of.

Each test reproduces one way the library was shown to fail, in a real subprocess where the
process matters (umask, another user id, a file-size limit standing in for a full disk)."""
import os
import pickle
import resource
import stat
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import dml_numba as dml
from dml_numba import _diskcache, _housekeeping
from dml_numba._cache import KernelCache, freeze

F16, F32, I32 = dml.DataType.FLOAT16, dml.DataType.FLOAT32, dml.DataType.INT32
SUB = _diskcache.SUBDIR
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
OTHER_UID = 65534  # "nobody"

# one tile operator, in a fresh process; prints the library's view of the cache
SCRIPT = textwrap.dedent("""
    import os, sys, warnings
    warnings.simplefilter("always")
    import numpy as np, dml_numba as dml
    from dml_numba import _diskcache
    F32 = dml.DataType.FLOAT32
    d = dml.TileOperatorDesc(dml.TensorDesc(F32, (2, 3)), dml.TensorDesc(F32, (4, 3)), (2, 1))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = dml.compile_operator(d, "cpu")(x)
    assert np.array_equal(y, np.tile(x, (2, 1))), y
    fn = dml.compile_operator(d, "cpu").kernel.fn
    print("hits", len(fn.stats.cache_hits), "misses", len(fn.stats.cache_misses))
    st = _diskcache.state()
    print("usable", st.usable, "|", st.reason)
    print("module", fn.py_func.__module__, fn.py_func.__code__.co_filename)
""")


def run(env_extra, script=SCRIPT, preexec=None, check=True):
    env = dict(os.environ, **env_extra)
    env.pop("DML_NUMBA_DEBUG", None)
    if "MUTANT_UNDER_TEST" in env:  # mutation testing: the mutated package, not the installed one
        import dml_numba

        env["PYTHONPATH"] = str(Path(dml_numba.__file__).resolve().parents[1])
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                         preexec_fn=preexec, cwd="/")
    if check:
        assert out.returncode == 0, out.stderr
    return out


def entry_name(out) -> str:
    return out.stdout.split("module ")[1].split()[0]


def private_root(tmp_path) -> Path:
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    return root


# -- 1. a cache folder trusted the way pip and OpenSSH trust theirs ---------------------------

def test_folders_are_created_0700_even_under_umask_000(tmp_path):
    root = tmp_path / "new" / "cache"
    out = run({"DML_NUMBA_CACHE_DIR": str(root)}, preexec=lambda: os.umask(0))
    assert "usable True" in out.stdout
    for folder in (root, root / SUB, root / SUB / "__pycache__"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    assert (root / SUB / _diskcache.MARKER).is_file()
    assert "hits 1 misses 0" in run({"DML_NUMBA_CACHE_DIR": str(root)}).stdout


def test_world_writable_folder_is_neither_read_nor_written(tmp_path):
    root = tmp_path / "shared"
    root.mkdir()
    os.chmod(root, 0o777)
    out = run({"DML_NUMBA_CACHE_DIR": str(root)})
    assert "usable False" in out.stdout and "writable by group or others" in out.stdout
    assert "CacheWarning" in out.stderr and str(root) in out.stderr  # one warning names it
    assert out.stderr.count("CacheWarning") == 1
    assert list(root.iterdir()) == []  # nothing written
    assert "hits 0 misses 1" in out.stdout  # compiled in memory, and right (asserted)


def _plant(root: Path, name: str, marker: Path) -> None:
    """Files an attacker would plant for entry ``name``: an index whose pickle runs code, the
    data file, and a .pyc of the module that does the same."""

    class Boom:
        def __reduce__(self):
            return (exec, (f"open({str(marker)!r}, 'w').write('pwned')",))

    pyc = root / SUB / "__pycache__"
    pyc.mkdir(parents=True, exist_ok=True)
    payload = pickle.dumps(Boom())
    import numba

    (pyc / f"{name}.kernel-20.py{sys.version_info[0]}{sys.version_info[1]}.nbi").write_bytes(
        pickle.dumps(numba.__version__) + payload)
    (pyc / f"{name}.kernel-20.py{sys.version_info[0]}{sys.version_info[1]}.1.nbc").write_bytes(
        payload)
    import importlib.util

    code = compile(f"open({str(marker)!r}, 'w').write('pwned')\n", "x.py", "exec")
    import marshal

    (pyc / f"{name}.cpython-{sys.version_info[0]}{sys.version_info[1]}.pyc").write_bytes(
        importlib.util.MAGIC_NUMBER + b"\0" * 12 + marshal.dumps(code))


def test_planted_pickles_in_a_shared_folder_never_run(tmp_path):
    name = entry_name(run({"DML_NUMBA_CACHE_DIR": str(private_root(tmp_path))}))
    shared = tmp_path / "shared"
    shared.mkdir()
    _plant(shared, name, tmp_path / "pwned")
    for p in shared.rglob("*"):
        os.chmod(p, 0o777 if p.is_dir() else 0o666)
    os.chmod(shared, 0o777)
    out = run({"DML_NUMBA_CACHE_DIR": str(shared)})
    assert "usable False" in out.stdout
    assert not (tmp_path / "pwned").exists()


@pytest.mark.skipif(not IS_ROOT, reason="needs a second user id (run as root)")
def test_folder_owned_by_another_user_is_not_used(tmp_path):
    root = tmp_path / "theirs"
    root.mkdir(mode=0o755)
    os.chown(root, OTHER_UID, OTHER_UID)
    out = run({"DML_NUMBA_CACHE_DIR": str(root)})
    assert "usable False" in out.stdout and f"owned by uid {OTHER_UID}" in out.stdout
    assert list(root.iterdir()) == []


def test_entry_files_writable_by_others_are_purged_not_loaded(tmp_path):
    root = private_root(tmp_path)
    name = entry_name(run({"DML_NUMBA_CACHE_DIR": str(root)}))
    os.chmod(root / SUB, 0o755)  # someone opened the folder: it is tightened back to 0700
    pyc = root / SUB / "__pycache__"
    index, data = next(pyc.glob(f"{name}*.nbi")), next(pyc.glob(f"{name}*.nbc"))
    _plant(root, name, tmp_path / "pwned")  # then over Numba's real files, names and all:
    (pyc / index.name).write_bytes(next(pyc.glob(f"{name}*-20.*.nbi")).read_bytes())
    (pyc / data.name).write_bytes(next(pyc.glob(f"{name}*-20.*.nbc")).read_bytes())
    for p in pyc.glob(f"{name}*"):
        os.chmod(p, 0o666)
    out = run({"DML_NUMBA_CACHE_DIR": str(root)})
    assert not (tmp_path / "pwned").exists()
    assert "hits 0 misses 1" in out.stdout  # rebuilt from the verified source
    assert stat.S_IMODE((root / SUB).stat().st_mode) == 0o700
    assert "hits 1 misses 0" in run({"DML_NUMBA_CACHE_DIR": str(root)}).stdout


def _aged(folder: Path, seconds: float = 10.0) -> int:
    """Set ``folder``'s modification time ``seconds`` back (out of the racy window)."""
    t = time.time_ns() - int(seconds * 1e9)
    os.utime(folder, ns=(t, t))
    return t


def test_a_cache_folder_is_listed_once_while_unchanged_and_again_after_any_change(
        tmp_path, monkeypatch):
    # the entries' files by module name: one listing serves every entry while the folder's
    # modification time stays and is older than the racy window; a file added (the time
    # changes) is listed again, and a folder changed within the window at every use
    pyc = tmp_path / "__pycache__"
    pyc.mkdir()
    for name in ("a.kernel-3.py311.nbi", "b.kernel-3.py311.nbi"):
        (pyc / name).write_bytes(b"")
    scans = []
    real = _diskcache.scan
    monkeypatch.setattr(_diskcache, "scan", lambda *f: scans.append(f) or real(*f))
    monkeypatch.setattr(_diskcache, "_listings", {})
    old = _aged(pyc)
    files = _diskcache._cache_files(pyc)
    assert {k: [p.name for p in v] for k, v in files.items()} == {
        "a": ["a.kernel-3.py311.nbi"], "b": ["b.kernel-3.py311.nbi"]}
    assert _diskcache._cache_files(pyc) is files and len(scans) == 1
    (pyc / "a.kernel-3.py311.1.nbc").write_bytes(b"")  # now: inside the window
    for k in range(2):
        assert len(_diskcache._cache_files(pyc)["a"]) == 2 and len(scans) == 2 + k
    os.utime(pyc, ns=(old + 1, old + 1))  # changed, then out of the window: kept again
    assert len(_diskcache._cache_files(pyc)["a"]) == 2 and len(scans) == 4
    assert len(_diskcache._cache_files(pyc)["a"]) == 2 and len(scans) == 4
    assert _diskcache._cache_files(tmp_path / "missing") == {}


def test_an_entry_made_writable_by_others_after_its_folder_was_listed_is_purged(tmp_path,
                                                                               monkeypatch):
    # a mode change leaves the folder's time as it was: the kept listing names the file, whose
    # owner and mode are read at each use
    monkeypatch.setattr(_diskcache, "_listings", {})
    pyc = tmp_path / "__pycache__"
    pyc.mkdir()
    name = "dml_numba_gen_cpu_tile_0123"
    source, index = tmp_path / f"{name}.py", pyc / f"{name}.kernel-3.py311.nbi"
    for p in (source, index):
        p.write_bytes(b"")
        os.chmod(p, 0o600)
    _aged(pyc)
    _diskcache._check_entry(tmp_path, name)  # the user's own: kept
    assert source.exists() and index.exists() and pyc in _diskcache._listings
    os.chmod(index, 0o666)
    _diskcache._check_entry(tmp_path, name)
    assert not source.exists() and not index.exists()


def test_a_planted_pyc_is_never_imported(tmp_path):
    root = private_root(tmp_path)
    name = entry_name(run({"DML_NUMBA_CACHE_DIR": str(root)}))
    import importlib.util
    import marshal

    tag = f"cpython-{sys.version_info[0]}{sys.version_info[1]}"
    pyc = root / SUB / "__pycache__" / f"{name}.{tag}.pyc"
    src = root / SUB / f"{name}.py"
    code = compile(f"open({str(tmp_path / 'pwned')!r}, 'w').write('x')\n", str(src), "exec")
    st = src.stat()  # a .pyc whose header matches the source exactly, as an importer checks
    header = importlib.util.MAGIC_NUMBER + (0).to_bytes(4, "little") + \
        int(st.st_mtime).to_bytes(4, "little") + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    pyc.write_bytes(header + marshal.dumps(code))
    out = run({"DML_NUMBA_CACHE_DIR": str(root)})
    assert not (tmp_path / "pwned").exists() and "hits 1 misses 0" in out.stdout


# -- 2. a fall-back that works --------------------------------------------------------------

def _memory_fallback(out, why):
    assert "usable False" in out.stdout and why in out.stdout, out.stdout
    assert "hits 0 misses 1" in out.stdout and "CacheWarning" in out.stderr


def test_cache_folder_under_a_regular_file_falls_back_to_memory(tmp_path):
    f = tmp_path / "file"
    f.write_text("not a folder")
    _memory_fallback(run({"DML_NUMBA_CACHE_DIR": str(f / "cache")}), "cannot be created")


def _immutable(path: Path, on: bool) -> bool:
    """chattr +i: a folder even root cannot write into (a read-only folder for root)."""
    return subprocess.run(["chattr", "+i" if on else "-i", str(path)],
                          capture_output=True).returncode == 0


def test_read_only_folder_falls_back_to_memory(tmp_path):
    root = tmp_path / "ro"
    root.mkdir(mode=0o755)
    if IS_ROOT:
        if not _immutable(root, True):
            pytest.skip("root ignores modes and chattr +i is unavailable on this file system")
    else:
        os.chmod(root, 0o555)
    try:
        out = run({"DML_NUMBA_CACHE_DIR": str(root)})
        _memory_fallback(out, "cannot be created")
        assert list(root.iterdir()) == []
    finally:
        if IS_ROOT:
            _immutable(root, False)
        os.chmod(root, 0o755)


def test_full_disk_falls_back_to_memory(tmp_path):
    # a file-size limit makes every write of a generated module fail with EFBIG, as a full
    # disk fails with ENOSPC; the folder itself checks out, so the failure comes at the write
    root = private_root(tmp_path)
    run({"DML_NUMBA_CACHE_DIR": str(root)}, script="import dml_numba, dml_numba._diskcache as d;"
        "assert d.state().usable")

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (512, 512))

    out = run({"DML_NUMBA_CACHE_DIR": str(root)}, preexec=limit)
    _memory_fallback(out, "failed")
    assert "switched off for this process" in out.stderr


def test_disk_cache_off_is_reported_by_info(tmp_path):
    from dml_numba.__main__ import main

    out = subprocess.run([sys.executable, "-m", "dml_numba", "info"], capture_output=True,
                         text=True, env=dict(os.environ, DML_NUMBA_CACHE_DIR=str(
                             tmp_path / "f" / "x"), DML_NUMBA_DISK_CACHE="0"))
    assert "disk cache off: switched off by DML_NUMBA_DISK_CACHE" in out.stdout
    assert callable(main)


@pytest.mark.parametrize("damage", ["non_utf8_py", "pyc_bad_marshal", "pyc_header_only",
                                    "nbi_garbage", "nbc_truncated"])
def test_corrupt_entries_are_purged_and_rebuilt(tmp_path, damage):
    root = private_root(tmp_path)
    name = entry_name(run({"DML_NUMBA_CACHE_DIR": str(root)}))
    sub, pyc = root / SUB, root / SUB / "__pycache__"
    tag = f"{sys.version_info[0]}{sys.version_info[1]}"
    import importlib.util

    if damage == "non_utf8_py":
        (sub / f"{name}.py").write_bytes(b"\xff\xfe\x00 not utf-8 \xc3\x28")
    elif damage == "pyc_bad_marshal":
        (pyc / f"{name}.cpython-{tag}.pyc").write_bytes(importlib.util.MAGIC_NUMBER + b"\0" * 12 +
                                                          b"\xff garbage")
    elif damage == "pyc_header_only":
        (pyc / f"{name}.cpython-{tag}.pyc").write_bytes(importlib.util.MAGIC_NUMBER + b"\0" * 12)
    elif damage == "nbi_garbage":
        next(pyc.glob(f"{name}*.nbi")).write_bytes(b"\x00garbage")
    else:
        f = next(pyc.glob(f"{name}*.nbc"))
        f.write_bytes(f.read_bytes()[:20])
    first = run({"DML_NUMBA_CACHE_DIR": str(root)})  # right result (asserted in the script)
    assert "usable True" in first.stdout
    assert "hits 1 misses 0" in run({"DML_NUMBA_CACHE_DIR": str(root)}).stdout


def test_an_entry_failing_twice_runs_from_memory_with_a_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("DML_NUMBA_CACHE_DIR", str(private_root(tmp_path)))
    _diskcache.reset()
    monkeypatch.setattr(_diskcache, "_warned", set())  # each warning is given once a process
    calls = []

    def finish(mod):
        calls.append(mod.__dict__["__dml_disk_cache__"])
        if mod.__dict__["__dml_disk_cache__"]:
            raise RuntimeError("unloadable")
        return mod

    try:
        with pytest.warns(_diskcache.CacheWarning, match="failed twice"):
            mod = _diskcache.compile_source("kernel = 41 + 1\n", "trust_test", finish)
    finally:
        _diskcache.reset()
    assert mod.kernel == 42 and calls == [True, True, False]
    assert not list((tmp_path / "cache" / SUB).glob("dml_numba_gen_trust_test_*"))  # purged


# -- 3. clear and prune touch only our files; stale temporaries; LRU; per-key locks ----------

def _home_like(tmp_path) -> Path:
    home = tmp_path / "home"
    (home / "Documents").mkdir(parents=True)
    (home / "Documents" / "thesis.txt").write_text("years of work")
    (home / ".bashrc").write_text("export PS1=...")
    (home / "dml_numba_gen_looks_like_ours.py").write_text("# but is not in our folder")
    os.chmod(home, 0o755)
    return home


@pytest.mark.parametrize("command", [["clear"], ["prune", "--max-bytes", "0"]])
def test_cache_clear_and_prune_delete_only_our_entries(tmp_path, command):
    home = _home_like(tmp_path)
    env = {"DML_NUMBA_CACHE_DIR": str(home)}
    run(env)
    (home / SUB / "notes.txt").write_text("a user's file inside our folder")
    assert list((home / SUB).glob("dml_numba_gen_*.py"))
    out = subprocess.run([sys.executable, "-m", "dml_numba", "cache", *command],
                         capture_output=True, text=True, env=dict(os.environ, **env))
    assert out.returncode == 0, out.stderr
    assert "deleted 1 cached modules" in out.stdout
    assert (home / "Documents" / "thesis.txt").read_text() == "years of work"
    assert (home / ".bashrc").exists() and (home / "dml_numba_gen_looks_like_ours.py").exists()
    assert (home / SUB / "notes.txt").exists() and (home / SUB / _diskcache.MARKER).exists()
    assert not list((home / SUB).rglob("dml_numba_gen_*"))


def test_prune_keeps_the_most_recently_used(tmp_path, monkeypatch):
    root = private_root(tmp_path)
    monkeypatch.setenv("DML_NUMBA_CACHE_DIR", str(root))
    _diskcache.reset()
    try:
        old = _diskcache.load_module("kernel = 1\n", "prune_old")
        new = _diskcache.load_module("kernel = 2\n", "prune_new")
        old_py = root / SUB / f"{old.__name__}.py"
        os.utime(old_py, (time.time() - 7200, time.time() - 7200))
        size_new = (root / SUB / f"{new.__name__}.py").stat().st_size
        done = _housekeeping.prune(size_new)
        assert done["modules"] == 1 and not old_py.exists()
        assert (root / SUB / f"{new.__name__}.py").exists()
    finally:
        _diskcache.reset()


def test_stale_temporaries_go_when_the_folder_is_next_used(tmp_path, monkeypatch):
    root = private_root(tmp_path)
    monkeypatch.setenv("DML_NUMBA_CACHE_DIR", str(root))
    _diskcache.reset()
    try:
        _diskcache.state()
        pyc = root / SUB / "__pycache__"
        stale = pyc / ("dml_numba_gen_tile_" + "a" * 24 + ".kernel-9.py311.nbi.tmp.0123abcd")
        fresh = root / SUB / ("dml_numba_gen_tile_" + "b" * 24 + ".x1y2z3.tmp")
        foreign = root / SUB / "someone_elses.tmp"
        for p in (stale, fresh, foreign):
            p.write_text("partial")
        os.utime(stale, (time.time() - 7200, time.time() - 7200))
        os.utime(foreign, (time.time() - 7200, time.time() - 7200))
        _diskcache.reset()
        _diskcache.state()
        assert not stale.exists() and fresh.exists() and foreign.exists()
    finally:
        _diskcache.reset()


def test_memory_cache_is_a_bounded_lru():
    c = KernelCache(max_entries=3)
    for k in "abcd":
        c.get_or_build(k, lambda k=k: k.upper())
    c.get_or_build("b", lambda: "never")  # a hit refreshes b
    c.get_or_build("e", lambda: "E")
    assert len(c) == 3 and c.evictions == 2
    assert set(c._table) == {"d", "b", "e"}


def test_memory_cache_bound_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("DML_NUMBA_MEMORY_CACHE_SIZE", "7")
    assert KernelCache().max_entries == 7


@pytest.mark.parametrize("raw", ["\u00b2", "\u0661\u0662", "\uff17", "7.0", "-3", "0", "1e3",
                                 "9" * 40, "seven"])
def test_a_count_in_the_environment_is_ascii_digits_or_the_default_with_a_warning(
        monkeypatch, raw):
    """'²' passes str.isdigit and fails int(); Arabic-Indic and full-width digits pass both:
    none is a decimal count, nor a sign, a fraction, an exponent or 40 digits. Each is one
    ConfigWarning and the default (at import of the library too, in a new process)."""
    from dml_numba import _env

    monkeypatch.setenv("DML_NUMBA_MEMORY_CACHE_SIZE", raw)
    _env._warned.discard(("DML_NUMBA_MEMORY_CACHE_SIZE", raw))
    with pytest.warns(_env.ConfigWarning, match="DML_NUMBA_MEMORY_CACHE_SIZE=.* is invalid; "
                                                "expected a whole number >= 1"):
        assert _env.count("DML_NUMBA_MEMORY_CACHE_SIZE", 5) == 5
    if raw == "\u00b2":  # the value that made the import raise, in a new process
        import subprocess
        import sys

        out = subprocess.run([sys.executable, "-c", "import dml_numba; print('ok')"],
                             capture_output=True, text=True)
        assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
        assert "ConfigWarning" in out.stderr


def test_a_cuda_device_number_is_ascii_digits():
    for name in ("cuda:\u00b2", "cuda:\u0661", "cuda:-1", "cuda:"):
        with pytest.raises(dml.ValidationError, match="compile_operator.device"):
            dml.compile_operator(dml.TileOperatorDesc(dml.TensorDesc(1, (2,)),
                                                      dml.TensorDesc(1, (2,)), (1,)), name)


def test_unrelated_keys_build_in_parallel_one_build_per_key():
    c = KernelCache()
    both_inside = threading.Barrier(2, timeout=10)
    builds = []

    def build(k):
        builds.append(k)
        both_inside.wait()  # with one global build lock this times out
        return k

    threads = [threading.Thread(target=c.get_or_build, args=(k, lambda k=k: build(k)))
               for k in ("x", "y")]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert sorted(builds) == ["x", "y"] and not both_inside.broken

    same, gate = [], threading.Event()

    def slow():
        same.append(1)
        gate.wait(5)
        return "v"

    threads = [threading.Thread(target=c.get_or_build, args=("z", slow)) for _ in range(8)]
    [t.start() for t in threads]
    time.sleep(0.2)
    gate.set()
    [t.join() for t in threads]
    assert same == [1]


# -- 4. exact bounds; sizes DirectML can express --------------------------------------------

def test_huge_strides_are_refused_not_wrapped():
    with pytest.raises(dml.ValidationError, match=r"TensorDesc.strides\[0\]: 4294967297"):
        dml.TensorDesc(F32, (3,), (2**32 + 1,))


@pytest.mark.parametrize("device", ["numpy", "cpu"])
def test_binding_that_would_reach_past_its_buffer_is_refused(device):
    big = dml.TensorDesc(F32, (2,), (2**31,))  # the last element is 8 GiB in
    d = dml.TileOperatorDesc(big, dml.TensorDesc(F32, (4,)), (2,))
    op = dml.compile_operator(d, device)
    with pytest.raises(dml.ValidationError, match=r"input_tensor: a buffer of 12 bytes .* at "
                                                  r"least 8589934596 bytes"):
        op(np.zeros(3, np.float32))
    out_d = dml.TileOperatorDesc(dml.TensorDesc(F32, (2,)), dml.TensorDesc(F32, (2,), (2**31,)),
                                 (1,))
    buf = np.zeros(3, np.float32)
    with pytest.raises(dml.ValidationError, match="out: a buffer of 12 bytes"):
        dml.compile_operator(out_d, device)(np.ones(2, np.float32), out=buf)
    assert (buf == 0).all()
    exact = dml.TensorDesc(F32, (2, 2), (3, 1))  # needs elements 0..4: 5, not 8
    assert exact.extent_bytes == 20 and exact.total_tensor_size_in_bytes == 20
    ok = dml.compile_operator(dml.TileOperatorDesc(exact, dml.TensorDesc(F32, (2, 2)), (1, 1)),
                              device)(np.arange(5, dtype=np.float32))
    np.testing.assert_array_equal(ok, [[0, 1], [3, 4]])


@pytest.mark.parametrize("make", [
    lambda: dml.TensorDesc(F32, (2**32, 2**32)),
    lambda: dml.TensorDesc(F32, (2**31, 2**31, 4)),
    lambda: dml.padding(np.zeros((2, 2), np.float32), (10**30, 0), (0, 0)),
    lambda: dml.tile(np.zeros((2, 2, 2, 2), np.float32), (2**31,) * 3 + (1,)),
    lambda: dml.slice1(np.zeros(4, np.float32), (0,), (4,), (2**40,)),
], ids=["size_2**32", "bytes_2**64", "padding_10**30", "tile_2**93", "slice_stride_2**40"])
def test_sizes_beyond_the_tensor_model_are_refused_before_compiling(make, tmp_path, monkeypatch):
    misses = dml.cache.misses
    with pytest.raises(dml.ValidationError, match=r"2\*\*(32|63)"):
        make()
    assert dml.cache.misses == misses


def test_output_too_large_to_allocate_is_refused_before_compiling():
    d = dml.TileOperatorDesc(dml.TensorDesc(F32, (1000, 1000)),
                             dml.TensorDesc(F32, (10**6, 10**6)), (1000, 1000))
    misses, t0 = dml.cache.misses, time.perf_counter()
    with pytest.raises(dml.ValidationError, match="output_tensor.sizes.*this machine's memory"):
        dml.compile_operator(d, "cpu")
    assert dml.cache.misses == misses and time.perf_counter() - t0 < 1.0


# -- 5. keys by bits ------------------------------------------------------------------------

@pytest.mark.parametrize("device", ["numpy", "cpu"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_negative_zero_padding_is_not_served_from_the_positive_zero_entry(device, dtype):
    x = np.ones(3, dtype)
    bits = f"u{np.dtype(dtype).itemsize}"
    for value in (0.0, -0.0, 0.0):
        y = dml.padding(x, (1,), (1,), "constant", value, device=device)
        assert y[0].view(bits) == np.array(value, dtype).view(bits)
    t = dml.TensorDesc(dml.DataType.from_numpy(dtype), (3,))
    o = dml.TensorDesc(t.data_type, (5,))
    for value in (0.0, -0.0):
        d = dml.PaddingOperatorDesc(t, o, dml.PaddingMode.CONSTANT, value, (1,), (1,))
        y = dml.compile_operator(d, device)(x)
        assert y[-1].view(bits) == np.array(value, dtype).view(bits)


@pytest.mark.parametrize("device", ["numpy", "cpu"])
def test_true_is_refused_even_after_one(device):
    x = np.arange(3, dtype=np.int32)
    assert dml.padding(x, (1,), (0,), "constant", 1, device=device)[0] == 1
    with pytest.raises(dml.ValidationError, match="padding_value: True"):
        dml.padding(x, (1,), (0,), "constant", True, device=device)


def test_every_nan_hits_one_memo_entry():
    x = np.ones((4, 4), np.float32)
    dml.padding(x, (1, 1), (1, 1), "constant", float("nan"), device="cpu")
    entries = len(dml.cache)
    for _ in range(200):
        y = dml.padding(x, (1, 1), (1, 1), "constant", float("nan"), device="cpu")
    assert len(dml.cache) == entries and np.isnan(y[0, 0])


def test_freeze_keeps_bits_and_bools_apart():
    assert freeze(0.0) != freeze(-0.0) and freeze(float("nan")) == freeze(float("nan"))
    assert freeze(True) != freeze(1) and freeze((1, 2.0)) != freeze((1, 2))
    assert hash(freeze((float("nan"), -0.0))) == hash(freeze((float("nan"), -0.0)))


# -- 6. the functional layer takes what NumPy takes -----------------------------------------

class ArrayLike:
    def __array__(self, dtype=None, copy=None):
        return np.arange(4, dtype=np.float32).reshape(2, 2)


@pytest.mark.parametrize("device", ["numpy", "cpu"])
def test_functional_layer_takes_lists_and_array_likes(device):
    np.testing.assert_array_equal(dml.tile([[1, 2]], (2, 1), device=device), [[1, 2], [1, 2]])
    np.testing.assert_array_equal(dml.padding(ArrayLike(), (0, 1), (0, 0), device=device),
                                  np.pad(np.arange(4, dtype=np.float32).reshape(2, 2),
                                         [(0, 0), (1, 0)]))
    y = dml.convolution([[[1.0, 2.0, 3.0]]], [[[1.0, 1.0]]], [0.5], device=device)
    np.testing.assert_allclose(y, [[[3.5, 5.5]]])
    with pytest.raises(dml.ValidationError, match="expected 1 to 8 dimensions"):
        dml.tile(3.0, (), device=device)


@pytest.mark.parametrize("device", ["numpy", "cpu"])
def test_masked_object_and_byte_swapped_arrays(device):
    m = np.ma.masked_array(np.ones(3, np.float32), mask=[0, 1, 0])
    with pytest.raises(dml.ValidationError, match="padding.x: a masked array is invalid"):
        dml.padding(m, (1,), (1,), device=device)
    with pytest.raises(dml.ValidationError, match="tile.x: dtype object is invalid"):
        dml.tile(np.array([1, "a"], object), (2,), device=device)
    swapped = np.arange(4, dtype=">f4")
    np.testing.assert_array_equal(dml.tile(swapped, (2,), device=device),
                                  np.tile(np.arange(4, dtype=np.float32), 2))
    op = dml.compile_operator(dml.TileOperatorDesc(dml.TensorDesc(F32, (4,)),
                                                   dml.TensorDesc(F32, (8,)), (2,)), device)
    with pytest.raises(dml.ValidationError, match="non-native byte order"):
        op(swapped)
    with pytest.raises(dml.ValidationError, match="masked array"):
        op(np.ma.masked_array(np.ones(4, np.float32)))


# -- 7. generated code is built from field values -------------------------------------------

class EvilInt(int):
    def __str__(self):
        return "1\nimport os; os.system('touch /tmp/dml_numba_pwned')\n"

    __repr__ = __str__


def test_field_values_cannot_inject_code():
    d = dml.TileOperatorDesc(dml.TensorDesc(F32, (EvilInt(2), 3)), dml.TensorDesc(F32, (4, 3)),
                             (EvilInt(2), 1))
    op = dml.compile_operator(d, "cpu")
    assert "os.system" not in op.source and type(d.repeats[0]) is int
    np.testing.assert_array_equal(op(np.ones((2, 3), np.float32)), np.ones((4, 3)))


def test_descriptor_and_activation_subclasses_are_refused():
    class Relu(dml.ActivationReluOperatorDesc):
        def expression(self, x):
            return "__import__('os').system('touch /tmp/dml_numba_pwned')"

        def __repr__(self):
            return "Relu()\nimport os"

    t = dml.TensorDesc(F32, (1, 1, 3))
    with pytest.raises(dml.ValidationError, match="fused_activation: 'Relu' is invalid.*subclass"):
        dml.ConvolutionOperatorDesc(t, dml.TensorDesc(F32, (1, 1, 1)), None, t,
                                    dml.ConvolutionMode.CROSS_CORRELATION,
                                    dml.ConvolutionDirection.FORWARD, (1,), (1,), (0,), (0,), (0,),
                                    1, Relu())

    class MyTile(dml.TileOperatorDesc):
        pass

    d = MyTile(dml.TensorDesc(F32, (2,)), dml.TensorDesc(F32, (4,)), (2,))
    with pytest.raises(dml.ValidationError, match="compile_operator.desc: MyTile is invalid.*not "
                                                  "a subclass of TileOperatorDesc"):
        dml.compile_operator(d, "cpu")


def test_generated_comment_lines_hold_no_line_breaks():
    from dml_numba._codegen import describe

    act = dml.ElementWiseClipOperatorDesc(-1.0, 1.0, (2.0, 0.5))
    t = dml.TensorDesc(F32, (1, 1, 3))
    d = dml.ConvolutionOperatorDesc(t, dml.TensorDesc(F32, (1, 1, 1)), None, t,
                                    dml.ConvolutionMode.CROSS_CORRELATION,
                                    dml.ConvolutionDirection.FORWARD, (1,), (1,), (0,), (0,), (0,),
                                    1, act)
    lines = describe(d)
    assert all("\n" not in line for line in lines)
    assert "  fused_activation = ElementWiseClipOperatorDesc(min=-1.0, max=1.0, " \
           "scale_bias=(2.0, 0.5))" in lines


def test_no_warning_for_a_good_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DML_NUMBA_CACHE_DIR", str(private_root(tmp_path)))
    _diskcache.reset()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert _diskcache.state().usable
    finally:
        _diskcache.reset()


def test_functional_layer_messages_in_full():
    class Refuses:
        def __array__(self, dtype=None, copy=None):
            raise RuntimeError("no array here")

    with pytest.raises(dml.ValidationError) as info:
        dml.tile(Refuses(), (2,), device="numpy")
    assert str(info.value) == ("tile.x: Refuses is invalid; expected an array or something "
                               "numpy.asarray accepts (no array here)")
    with pytest.raises(dml.ValidationError) as info:
        dml.padding(np.ma.masked_array(np.ones(2, np.float32)), (1,), (1,), device="numpy")
    assert str(info.value) == ("padding.x: a masked array is invalid; expected a plain array "
                               "(the mask would be ignored: use .filled() or .data)")
