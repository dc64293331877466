"""The disk cache's parts one by one, in this process and without compiling anything: where the
cache lives on each platform, entry names, atomic writes, the entry checks, Numba's locator
for our folder, stale temporaries and housekeeping's accounting. The whole cache (a kernel
written, trusted or refused, read back by a new process) is tested in tests/test_cache*.py."""
import os
import stat
import sys
import time
from pathlib import Path

import pytest

from dml_numba import _diskcache, _housekeeping
from dml_numba._diskcache import PREFIX, SUBDIR

posix = pytest.mark.skipif(os.name == "nt", reason="POSIX modes and owners")


@pytest.fixture
def library(tmp_path, monkeypatch):
    """A private cache root in ``tmp_path``, checked: its library folder."""
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    monkeypatch.setenv("DML_NUMBA_CACHE_DIR", str(root))
    monkeypatch.delenv("DML_NUMBA_DISK_CACHE", raising=False)
    _diskcache.reset()
    st = _diskcache.state()
    assert st.usable, st.reason
    yield st.dir
    _diskcache.reset()


# -- where the cache lives ------------------------------------------------------------------

@pytest.mark.parametrize("platform, env, expected", [
    ("linux", {"XDG_CACHE_HOME": "/xdg"}, "/xdg/dml_numba"),
    ("linux", {}, "~/.cache/dml_numba"),
    ("darwin", {"XDG_CACHE_HOME": "/xdg"}, "~/Library/Caches/dml_numba"),
    ("win32", {"LOCALAPPDATA": "/local"}, "/local/dml_numba"),
    ("win32", {}, "~/AppData/Local/dml_numba"),
])
def test_the_default_root_on_each_platform(monkeypatch, platform, env, expected):
    """Without DML_NUMBA_CACHE_DIR: XDG_CACHE_HOME or ~/.cache (Linux and the rest), the
    Library's Caches (macOS, whatever XDG says), LOCALAPPDATA or its usual place (Windows)."""
    for name in ("DML_NUMBA_CACHE_DIR", "XDG_CACHE_HOME", "LOCALAPPDATA"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "platform", platform)
    assert _diskcache.cache_dir() == Path(expected).expanduser()
    assert _diskcache.library_dir() == Path(expected).expanduser() / SUBDIR


def test_the_configured_root_wins_and_expands_the_home(monkeypatch):
    monkeypatch.setenv("DML_NUMBA_CACHE_DIR", "~/somewhere")
    monkeypatch.setenv("XDG_CACHE_HOME", "/xdg")
    assert _diskcache.cache_dir() == Path.home() / "somewhere"


# -- entry names and writes -----------------------------------------------------------------

def test_module_names_hash_the_source_and_the_versions(monkeypatch):
    """A name of our prefix, the operator's label made lower-case [a-z0-9_], 24 hex digits of
    the source and the library's and Numba's versions: each changes the name; every name is a
    recognised entry."""
    a = _diskcache.module_name("x = 1\n", "CPU-Tile.v2")
    assert a.startswith(PREFIX + "cpu_tile_v2_") and len(a.rsplit("_", 1)[1]) == 24
    assert _diskcache._ENTRY.match(a + ".py")
    assert _diskcache.module_name("x = 1\n", "CPU-Tile.v2") == a
    assert _diskcache.module_name("x = 2\n", "CPU-Tile.v2") != a
    monkeypatch.setattr(_diskcache, "VERSION", "0.0.0-other")
    assert _diskcache.module_name("x = 1\n", "CPU-Tile.v2") != a


def test_atomic_writes_leave_the_text_or_nothing(tmp_path, monkeypatch):
    """The text exactly (newlines as written, UTF-8), replacing the old file, no temporary
    left; a write that fails leaves the old file and no temporary, and raises."""
    path = tmp_path / "entry.py"
    path.write_text("old")
    _diskcache._write_atomic(path, "a = 'é'\nb = 2\n")
    assert path.read_bytes() == "a = 'é'\nb = 2\n".encode()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entry.py"]

    def fail(src, dst):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="No space"):
        _diskcache._write_atomic(path, "new")
    assert path.read_bytes() == "a = 'é'\nb = 2\n".encode()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entry.py"]


def test_scan_lists_every_folder_and_skips_those_it_cannot_read(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "one").write_text("")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "two").write_text("")
    names = [e.name for e in _diskcache._scan(tmp_path / "a", tmp_path / "missing",
                                              tmp_path / "b")]
    assert names == ["one", "two"]


def _entry(sub: Path, name: str, mode: int = 0o600) -> list[Path]:
    """An entry's module and two Numba files of it, and a file of another entry."""
    files = [sub / f"{name}.py", sub / "__pycache__" / f"{name}.kernel-12.py311.nbi",
             sub / "__pycache__" / f"{name}.kernel-12.py311.1.nbc"]
    for p in files:
        p.write_text("data")
        os.chmod(p, mode)
    (sub / "__pycache__" / f"{PREFIX}other_{'0' * 24}.kernel-1.py311.nbi").write_text("keep")
    return files


@posix
def test_entry_files_writable_by_others_purge_the_whole_entry(library):
    """One file of an entry writable by group or others: every file of that entry goes (it is
    rebuilt), the module is forgotten, and no other entry's file is touched; a private entry
    and a missing module file are left as they are."""
    name = _diskcache.module_name("k = 1\n", "cpu_tile")
    files = _entry(library, name)
    _diskcache._check_entry(library, name)
    assert all(p.exists() for p in files)
    os.chmod(files[2], 0o620)
    sys.modules[name] = object()
    _diskcache._check_entry(library, name)
    assert not any(p.exists() for p in files) and name not in sys.modules
    assert len(list((library / "__pycache__").iterdir())) == 1
    _diskcache._check_entry(library, name)  # nothing left: nothing to do


@posix
def test_tighten_makes_an_entry_private(library):
    """Numba writes with the umask's mode: each file of the entry becomes 0600; a private one
    keeps its mode, and another entry's file is not touched."""
    name = _diskcache.module_name("k = 2\n", "cpu_tile")
    files = _entry(library, name, 0o644)
    os.chmod(files[0], 0o400)
    other = next(p for p in (library / "__pycache__").iterdir() if "other" in p.name)
    os.chmod(other, 0o644)
    _diskcache._tighten(library, name)
    assert [stat.S_IMODE(p.stat().st_mode) for p in files] == [0o400, 0o600, 0o600]
    assert stat.S_IMODE(other.stat().st_mode) == 0o644


def test_purge_without_a_usable_cache_does_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("DML_NUMBA_DISK_CACHE", "0")
    _diskcache.reset()
    sys.modules["dml_numba_gen_nothing_here"] = object()
    try:
        _diskcache.purge("dml_numba_gen_nothing_here")  # forgets it, touches no folder
        assert "dml_numba_gen_nothing_here" not in sys.modules
    finally:
        _diskcache.reset()


# -- Numba's locator for our folder ---------------------------------------------------------

def test_our_locator_comes_first_once_and_serves_only_verified_folders(library, tmp_path):
    """Installed first in Numba's list, once however often it is asked for; it serves only our
    generated modules (None for any other file), refuses a folder that did not pass the trust
    check, and keeps Numba's files in __pycache__ beside the module."""
    from numba.core import caching

    _diskcache._install_locators()
    _diskcache._install_locators()
    ours = [c for c in caching.CacheImpl._locator_classes if c.__name__ == "DmlNumbaLocator"]
    assert len(ours) == 1 and caching.CacheImpl._locator_classes[0] is ours[0]
    locator = ours[0]

    def f():
        pass
    assert locator.from_function(f, str(tmp_path / "plain_module.py")) is None
    stray = tmp_path / "elsewhere"
    stray.mkdir()
    with pytest.raises(RuntimeError, match="its folder was not verified"):
        locator.from_function(f, str(stray / f"{PREFIX}x_{'0' * 24}.py"))
    found = locator.from_function(f, str(library / f"{PREFIX}x_{'0' * 24}.py"))
    assert found.get_cache_path() == str(library / "__pycache__")
    assert found._lineno == f.__code__.co_firstlineno


@posix
def test_our_locator_refuses_a_pycache_opened_to_others(library):
    from numba.core import caching

    _diskcache._install_locators()
    locator = caching.CacheImpl._locator_classes[0]

    def f():
        pass
    os.chmod(library / "__pycache__", 0o777)
    try:
        with pytest.raises(OSError, match="untrusted cache folder"):
            locator.from_function(f, str(library / f"{PREFIX}x_{'0' * 24}.py"))
    finally:
        os.chmod(library / "__pycache__", 0o700)


# -- stale temporaries and housekeeping -----------------------------------------------------

def test_only_our_temporaries_older_than_an_hour_are_removed(library):
    """Ours (the prefix, ".tmp") older than TMP_MAX_AGE_S go; a younger one, another program's
    temporary and a module stay."""
    old = time.time() - _diskcache.TMP_MAX_AGE_S - 60
    young = time.time() - _diskcache.TMP_MAX_AGE_S + 60
    files = {"stale": library / f"{PREFIX}a.tmp", "stale-numba":
             library / "__pycache__" / f"{PREFIX}b.kernel-1.py311.nbi.tmp.0123abcd",
             "young": library / f"{PREFIX}c.tmp", "foreign": library / "theirs.tmp",
             "module": library / f"{PREFIX}d_{'0' * 24}.py"}
    for name, p in files.items():
        p.write_text("")
        stamp = young if name == "young" else old
        os.utime(p, (stamp, stamp))
    _housekeeping.remove_stale_tmp(library)
    assert {n for n, p in files.items() if p.exists()} == {"young", "foreign", "module"}


def _sized_entry(sub: Path, tag: str, sizes: tuple, last_use: float) -> str:
    name = f"{PREFIX}{tag}_{'0' * 24}"
    paths = [sub / f"{name}.py"] + [sub / "__pycache__" / f"{name}.kernel-{i}.py311.nbi"
                                    for i in range(len(sizes) - 1)]
    for p, n in zip(paths, sizes):
        p.write_bytes(b"x" * n)
        os.utime(p, (last_use, last_use))
    return name


def test_usage_prune_and_clear_count_entries_by_their_files(library):
    """usage: modules and bytes of recognised entries only (not another program's file, not a
    link named like an entry); prune deletes the least recently used until the total is at
    most the bound (a total equal to it stays); clear deletes every recognised entry."""
    now = time.time()
    a = _sized_entry(library, "a", (100, 50), now - 300)
    b = _sized_entry(library, "b", (10,), now - 200)
    c = _sized_entry(library, "c", (20, 5, 5), now - 100)
    (library / "notes.txt").write_bytes(b"y" * 1000)
    if os.name != "nt":
        os.symlink(library / "notes.txt", library / f"{PREFIX}z_{'0' * 24}.py")
    u = _housekeeping.usage()
    assert (u["modules"], u["bytes"], u["on"]) == (3, 190, True)
    assert _housekeeping.prune(190) == {"modules": 0, "bytes": 0, "remaining": 190, "reason": ""}
    assert _housekeeping.prune(189) == {"modules": 1, "bytes": 150, "remaining": 40,
                                        "reason": ""}
    assert not (library / f"{a}.py").exists() and (library / f"{b}.py").exists()
    assert _housekeeping.prune(30) == {"modules": 1, "bytes": 10, "remaining": 30, "reason": ""}
    assert (library / f"{c}.py").exists()
    sys.modules[c] = object()
    assert _housekeeping.clear() == {"modules": 1, "bytes": 30, "reason": ""}
    assert c not in sys.modules and (library / "notes.txt").exists()
    assert _housekeeping.usage()["modules"] == 0


def test_housekeeping_without_a_usable_cache_reports_why(monkeypatch):
    monkeypatch.setenv("DML_NUMBA_DISK_CACHE", "0")
    _diskcache.reset()
    try:
        why = "switched off by DML_NUMBA_DISK_CACHE"
        assert _housekeeping.usage()["reason"] == why and not _housekeeping.usage()["on"]
        assert _housekeeping.clear() == {"modules": 0, "bytes": 0, "reason": why}
        assert _housekeeping.prune(0) == {"modules": 0, "bytes": 0, "remaining": 0,
                                          "reason": why}
    finally:
        _diskcache.reset()
