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
from tests.helpers import assert_warned_at

posix = pytest.mark.skipif(os.name == "nt", reason="POSIX modes and owners")


@pytest.fixture
def library(tmp_path, monkeypatch):
    """A private cache root in ``tmp_path``, checked: its library folder."""
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    monkeypatch.setenv("DML_NUMBA_CACHE_DIR", str(root))
    monkeypatch.delenv("DML_NUMBA_DISK_CACHE", raising=False)
    monkeypatch.setattr(_diskcache, "_warned", set())  # each test sees its own warnings
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


def test_the_state_per_configuration_switched_off_and_refused(tmp_path, monkeypatch):
    """One state a configuration (another root is checked on its own, without a reset); a
    cache switched off at run time or by the environment, and a refused root, each a state
    with no folder and the reason, the refusal warned once in full."""
    import warnings

    roots = [tmp_path / "a", tmp_path / "b"]
    for r in roots:
        r.mkdir(mode=0o700)
    monkeypatch.delenv("DML_NUMBA_DISK_CACHE", raising=False)
    monkeypatch.setattr(_diskcache, "_warned", set())
    _diskcache.reset()
    try:
        for r in roots:
            monkeypatch.setenv("DML_NUMBA_CACHE_DIR", str(r))
            st = _diskcache.state()
            assert st == _diskcache.State(r, (r / SUBDIR).resolve(), True, "")
            assert str(st.dir) in _diskcache._verified and _diskcache.state() is st
            assert (st.dir / _diskcache.MARKER).read_text() == _diskcache.MARKER_TEXT
        with pytest.warns(_diskcache.CacheWarning) as got:
            _diskcache._disable("writing x failed (No space left on device)")
        assert str(got[0].message) == (
            "dml_numba: disk cache switched off for this process: writing x failed (No space "
            "left on device); operators are compiled in memory")
        assert_warned_at(got[0], __file__)  # the warning names the caller's line
        assert _diskcache.state() == _diskcache.State(
            roots[1], None, False, "writing x failed (No space left on device)")
        monkeypatch.setenv("DML_NUMBA_CACHE_DIR", str(roots[0]))  # another configuration
        assert _diskcache.state().usable
        monkeypatch.setenv("DML_NUMBA_DISK_CACHE", "0")
        assert _diskcache.state() == _diskcache.State(roots[0], None, False,
                                                      "switched off by DML_NUMBA_DISK_CACHE")
        monkeypatch.delenv("DML_NUMBA_DISK_CACHE")
        if os.name != "nt":
            shared = tmp_path / "shared"
            shared.mkdir()
            os.chmod(shared, 0o777)
            monkeypatch.setenv("DML_NUMBA_CACHE_DIR", str(shared))
            _diskcache._warned.clear()
            with pytest.warns(_diskcache.CacheWarning) as got:
                st = _diskcache.state()
            why = (f"cache folder {shared} is writable by group or others (mode 0777; expected "
                   "0700 or 0755)")
            assert st == _diskcache.State(shared, None, False, why)
            assert [str(w.message) for w in got] == [
                f"dml_numba: not using the disk cache: {why}; operators are compiled in memory "
                "(set DML_NUMBA_CACHE_DIR to a private folder, or DML_NUMBA_DISK_CACHE=0 to "
                "silence this)"]
            _diskcache.reset()
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                assert not _diskcache.state().usable  # checked again, warned only once
    finally:
        _diskcache.reset()


# -- entry names and writes -----------------------------------------------------------------

def test_module_names_hash_the_source_and_the_versions(monkeypatch):
    """A name of our prefix, the operator's label made lower-case [a-z0-9_], 24 hex digits of
    the source and the library's and Numba's versions: each changes the name; every name is a
    recognised entry."""
    a = _diskcache.module_name("x = 1\n", "CPU-Tile.v2")
    assert a.startswith(PREFIX + "cpu_tile_v2_") and len(a.rsplit("_", 1)[1]) == 24
    assert _diskcache.ENTRY.match(a + ".py")
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

    seen = []

    def fail(src, dst):
        seen.append(Path(src))
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="No space"):
        _diskcache._write_atomic(path, "new")
    assert path.read_bytes() == "a = 'é'\nb = 2\n".encode()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entry.py"]
    # the temporary lived beside the file (one file system: the replace is atomic), named
    # after it and ending in .tmp (housekeeping finds one a crash left behind)
    (tmp,) = seen
    assert tmp.parent == tmp_path and tmp.name.startswith("entry.") and tmp.suffix == ".tmp"


def test_scan_lists_every_folder_and_skips_those_it_cannot_read(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "one").write_text("")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "two").write_text("")
    names = [e.name for e in _diskcache.scan(tmp_path / "a", tmp_path / "missing",
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
    # the module file missing, a later file opened up; in a folder other than the state's
    other = library.parent / "other"
    (other / "__pycache__").mkdir(parents=True)
    files = _entry(other, name)
    files[0].unlink()
    os.chmod(files[2], 0o602)
    _diskcache._check_entry(other, name)
    assert not any(p.exists() for p in files)


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


def test_purge_finds_the_state_folder_and_forgets_a_module_not_loaded(library):
    name = _diskcache.module_name("k = 3\n", "cpu_tile")
    files = _entry(library, name)
    assert name not in sys.modules
    _diskcache.purge(name)
    assert not any(p.exists() for p in files)


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

@pytest.fixture
def fresh_locators(monkeypatch):
    """Numba's (and numba-cuda's) locator lists as if ours had never been installed."""
    import importlib

    import numba.cuda  # noqa: F401 - numba-cuda's caching module, where installed

    lists = {}
    for modname in ("numba.core.caching", "numba.cuda.core.caching"):
        try:
            impl = importlib.import_module(modname).CacheImpl
        except ImportError:  # pragma: no cover - numba-cuda absent
            continue
        lists[modname] = impl
        monkeypatch.setattr(impl, "_locator_classes", [
            c for c in impl._locator_classes if c.__name__ != "DmlNumbaLocator"])
    monkeypatch.setattr(_diskcache, "_installed", set())
    return lists


def test_our_locator_comes_first_once_and_serves_only_verified_folders(library, tmp_path,
                                                                       fresh_locators):
    """Installed first in Numba's list and numba-cuda's, once however often it is asked for,
    before Numba's own; it serves only our generated modules (None for any other file), refuses
    a folder that did not pass the trust check, and keeps Numba's files in __pycache__ beside
    the module."""
    numba_own = {m: list(impl._locator_classes) for m, impl in fresh_locators.items()}
    _diskcache._install_locators()
    _diskcache._install_locators()
    assert "numba.core.caching" in fresh_locators
    for modname, impl in fresh_locators.items():
        assert impl._locator_classes[0].__name__ == "DmlNumbaLocator", modname
        assert impl._locator_classes[1:] == numba_own[modname]  # Numba's, after ours, once
        assert _diskcache._installed == set(fresh_locators)
    locator = fresh_locators["numba.core.caching"]._locator_classes[0]
    assert issubclass(locator, __import__("numba").core.caching._CacheLocator)

    def f():
        pass
    assert locator.from_function(f, str(tmp_path / "plain_module.py")) is None
    stray = tmp_path / "elsewhere"
    stray.mkdir()
    with pytest.raises(RuntimeError, match="its folder was not verified"):
        locator.from_function(f, str(stray / f"{PREFIX}x_{'0' * 24}.py"))
    module = str(library / f"{PREFIX}x_{'0' * 24}.py")
    found = locator.from_function(f, module)
    assert found.get_cache_path() == str(library / "__pycache__")
    assert found._py_file == module and found._lineno == f.__code__.co_firstlineno
    found.ensure_cache_path()  # a private __pycache__: nothing to say


@posix
def test_our_locator_refuses_a_pycache_opened_to_others(library, fresh_locators):
    _diskcache._install_locators()
    locator = fresh_locators["numba.core.caching"]._locator_classes[0]

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
    if os.name != "nt":  # a stale link to a young file: the link's own age counts
        files["stale-link"] = library / f"{PREFIX}e.tmp"
        files["stale-link"].symlink_to(files["young"])
        os.utime(files["stale-link"], (old, old), follow_symlinks=False)
    _diskcache.remove_stale_tmp(library)
    assert {n for n, p in files.items() if os.path.lexists(p)} == {"young", "foreign", "module"}


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
    assert _housekeeping.usage() == {
        "dir": str(library.parent), "library_dir": str(library), "on": True, "reason": "",
        "modules": 3, "bytes": 190}
    assert _housekeeping.prune(190) == {"modules": 0, "bytes": 0, "remaining": 190, "reason": ""}
    sys.modules[a] = sys.modules[b] = object()
    assert _housekeeping.prune(30) == {"modules": 2, "bytes": 160, "remaining": 30,
                                       "reason": ""}
    assert not (library / f"{a}.py").exists() and not (library / f"{b}.py").exists()
    assert a not in sys.modules and b not in sys.modules
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
        assert _housekeeping.usage() == {"dir": str(_diskcache.cache_dir()), "library_dir": None,
                                         "on": False, "reason": why, "modules": 0, "bytes": 0}
        assert _housekeeping.clear() == {"modules": 0, "bytes": 0, "reason": why}
        assert _housekeeping.prune(0) == {"modules": 0, "bytes": 0, "remaining": 0,
                                          "reason": why}
    finally:
        _diskcache.reset()


# -- the trust rules' own corners -----------------------------------------------------------

@posix
def test_private_dir_creates_tightens_and_refuses(tmp_path):
    """A missing folder is made 0700; an existing one of ours that group or others can read
    (0750) is tightened to 0700, one that nobody else can reach (0500) keeps its mode, one
    that others can write is refused with its mode; a folder that cannot be made says why."""
    from dml_numba._trust import private_dir

    made = tmp_path / "made"
    old = os.umask(0)  # a folder made 0700 whatever the umask (else refused as open to others)
    try:
        assert private_dir(made, "f") is None and stat.S_IMODE(made.stat().st_mode) == 0o700
    finally:
        os.umask(old)
    for mode, after in ((0o750, 0o700), (0o500, 0o500)):
        p = tmp_path / f"m{mode:o}"
        p.mkdir()
        os.chmod(p, mode)
        assert private_dir(p, "f") is None and stat.S_IMODE(p.stat().st_mode) == after
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o770)
    assert private_dir(shared, "the thing") == (
        f"the thing {shared} is writable by group or others (mode 0770; expected 0700 or "
        "0755)")
    (tmp_path / "file").write_text("")
    assert private_dir(tmp_path / "file" / "sub", "the thing") == (
        f"the thing {tmp_path / 'file' / 'sub'} cannot be created (Not a directory)")


@posix
def test_makedirs_private_makes_every_missing_parent_0700_whatever_the_umask(tmp_path):
    from dml_numba._trust import makedirs_private

    os.chmod(tmp_path, 0o755)
    old = os.umask(0)
    try:
        makedirs_private(tmp_path / "a" / "b" / "c")
        makedirs_private(tmp_path / "a" / "b" / "c")  # there already: nothing to do
    finally:
        os.umask(old)
    old = os.umask(0o277)  # a umask that takes the owner's own bits: still 0700
    try:
        makedirs_private(tmp_path / "d" / "e")
    finally:
        os.umask(old)
    for p in (tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "b" / "c", tmp_path / "d",
              tmp_path / "d" / "e"):
        assert stat.S_IMODE(p.stat().st_mode) == 0o700, p
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o755  # an existing parent is not touched


@posix
def test_unsafe_path_walks_relative_paths_dots_and_links(tmp_path, monkeypatch):
    """A relative path is judged from the current folder; "." and ".." parts are walked as
    written (".." physically, after the links before it); a link's target is walked too,
    relative or absolute; 40 links on one path are followed, the 41st is refused."""
    from dml_numba._trust import unsafe_path

    safe = tmp_path / "safe"
    (safe / "inner").mkdir(parents=True)
    open_ = tmp_path / "open"
    (open_ / "inner").mkdir(parents=True)
    os.chmod(open_, 0o777)
    monkeypatch.chdir(open_)
    assert "on the way to the cache is writable by group or others" in unsafe_path(
        Path("inner"))
    monkeypatch.chdir(safe)
    assert unsafe_path(Path("inner")) is None
    assert unsafe_path(Path("./inner/.")) is None
    assert "writable by group or others" in unsafe_path(Path("../open/inner"))
    assert unsafe_path(safe / "inner" / ".." / "inner") is None
    # ".." goes back to the parent without looking into the folder it leaves (only the names
    # looked up count): an open folder left by ".." is not on the way
    (safe / "opened").mkdir()
    os.chmod(safe / "opened", 0o777)
    assert unsafe_path(safe / "opened" / ".." / "inner") is None
    long = safe / ("n" * 300)
    assert unsafe_path(long / "x") == f"the folder {safe} cannot be inspected (File name too long)"
    (safe / "to-open").symlink_to("../open")  # relative target, through the open folder
    assert "writable by group or others" in unsafe_path(safe / "to-open" / "inner")
    (safe / "to-inner").symlink_to(safe / "inner")  # absolute target
    assert unsafe_path(safe / "to-inner" / "x") is None
    chain = safe / "inner"
    for k in range(40):
        (safe / f"l{k}").symlink_to(chain)
        chain = safe / f"l{k}"
    assert unsafe_path(chain / "x") is None
    (safe / "l40").symlink_to(chain)
    assert unsafe_path(safe / "l40" / "x") == f"too many symbolic links on the way to " \
                                              f"{safe / 'l40' / 'x'}"


@posix
def test_the_tree_check_keeps_the_marker_and_says_why_it_cannot_write(tmp_path, monkeypatch):
    """A root that cannot be created, and a library folder that cannot be written, each
    refused with the reason; an existing CACHEDIR.TAG is left as it is, and the write probe
    leaves nothing behind."""
    (tmp_path / "file").write_text("")
    root = tmp_path / "file" / "cache"
    assert _diskcache._check_tree(root) == (
        None, f"the cache folder {root} cannot be created (Not a directory)")
    root = tmp_path / "root"
    root.mkdir(mode=0o700)
    (root / SUBDIR).mkdir(mode=0o700)
    (root / SUBDIR / _diskcache.MARKER).write_text("Signature: 8a477f597d28d172789f06886806bc55\n")
    sub, why = _diskcache._check_tree(root)
    assert (sub, why) == ((root / SUBDIR).resolve(), "")
    assert (root / SUBDIR / _diskcache.MARKER).read_text() == \
        "Signature: 8a477f597d28d172789f06886806bc55\n"
    assert sorted(p.name for p in sub.iterdir()) == ["CACHEDIR.TAG", "__pycache__"]

    for path, what in ((root / SUBDIR / "__pycache__", "the cache's __pycache__"),
                       (root / SUBDIR, "the library's cache subfolder")):
        os.chmod(path, 0o777)
        assert _diskcache._check_tree(root) == (
            None, f"{what} {path} is writable by group or others (mode 0777; expected 0700 or "
                  "0755)")
        os.chmod(path, 0o700)

    def read_only(self, data):
        raise OSError(30, "Read-only file system")
    monkeypatch.setattr(Path, "write_bytes", read_only)
    assert _diskcache._check_tree(root) == (
        None, f"the cache folder {root / SUBDIR} is not writable (Read-only file system)")


# -- generated modules from the disk (plain Python sources: nothing for Numba to compile) -----

def test_a_module_is_executed_from_our_source_and_its_file_kept_identical(library):
    """From the disk cache: the module runs the source we generated, its file holds exactly
    those bytes (a different file is rewritten, an identical one is left alone), the module
    is registered under its name with the file as its ``__file__``; without the disk, from
    memory, writing nothing."""
    source = "value = 40 + 2  # é\n"
    name = _diskcache.module_name(source, "unit")
    path = library / f"{name}.py"
    path.write_bytes(b"value = 666\n")  # stale or planted: never executed
    mod = _diskcache.load_module(source, "unit")
    assert mod.value == 42 and mod.__file__ == str(path) and sys.modules[name] is mod
    assert mod.__dict__["__dml_disk_cache__"] is True
    assert path.read_bytes() == source.encode("utf-8")
    before = os.stat(path)
    _diskcache.load_module(source, "unit")
    after = os.stat(path)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    memory = _diskcache.load_module("value = 7\n", "unit", disk=False)
    assert memory.value == 7 and memory.__file__.startswith("<dml_numba generated ")
    assert memory.__dict__["__dml_disk_cache__"] is False
    assert not (library / f"{_diskcache.module_name('value = 7', 'unit')}.py").exists()
    assert sorted(p.name for p in library.glob("*.py")) == [path.name]


def test_a_failing_entry_is_rebuilt_once_then_runs_from_memory(library):
    """A module whose source raises is not left registered; a step after loading that fails
    once purges the entry and builds it again from the disk; failing twice, the operator runs
    from memory with one warning naming the entry and the error."""
    with pytest.raises(ZeroDivisionError), pytest.warns(_diskcache.CacheWarning):
        _diskcache.load_module("value = 1 / 0\n", "unit")
    assert _diskcache.module_name("value = 1 / 0\n", "unit") not in sys.modules
    calls = []

    def flaky(mod):
        calls.append(mod.__file__)
        if len(calls) == 1:
            raise ValueError("boom")
        return mod.value
    source = "value = 5\n"
    name = _diskcache.module_name(source, "unit")
    assert _diskcache.compile_source(source, "unit", flaky) == 5
    assert calls == [str(library / f"{name}.py")] * 2

    def broken(mod):
        calls.append(mod.__file__)
        raise ValueError("boom")
    calls.clear()
    source = "value = 6\n"
    name = _diskcache.module_name(source, "unit")
    with pytest.raises(ValueError, match="boom"), pytest.warns(_diskcache.CacheWarning) as got:
        _diskcache.compile_source(source, "unit", broken)
    assert calls == [str(library / f"{name}.py")] * 2 + [f"<dml_numba generated {name}>"]
    assert [str(w.message) for w in got] == [
        f"dml_numba: cache entry {name} failed twice (ValueError: boom); this operator runs "
        "from memory"]
    assert not (library / f"{name}.py").exists()  # purged after each failure


def test_a_write_that_fails_switches_the_disk_cache_off(library, monkeypatch):
    def full(path, text):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(_diskcache, "_write_atomic", full)
    source = "value = 9\n"
    name = _diskcache.module_name(source, "unit")
    with pytest.warns(_diskcache.CacheWarning, match="disk cache switched off"):
        mod = _diskcache.load_module(source, "unit")
    assert mod.value == 9 and mod.__file__ == f"<dml_numba generated {name}>"
    assert _diskcache.state() == _diskcache.State(
        library.parent, None, False,
        f"writing {library / (name + '.py')} failed (No space left on device)")


def test_compile_kernel_keeps_its_source_and_outlives_eviction(library, monkeypatch):
    """The one build path: built once per key, its source kept for inspection, and kept by
    the memory cache through eviction (an evicted kernel comes back without a build)."""
    from dml_numba._cache import KernelCache, KernelKey

    cache = KernelCache(max_entries=1)
    monkeypatch.setattr(_diskcache, "cache", cache)
    built = []

    def finish(mod):
        built.append(mod.__name__)
        return mod.value
    import dml_numba as dml

    def tile(n):
        t = dml.TensorDesc(dml.DataType.FLOAT32, (n,))
        return dml.TileOperatorDesc(t, dml.TensorDesc(dml.DataType.FLOAT32, (2 * n,)), (2,))
    keys = [KernelKey("cpu", tile(k + 1)) for k in range(3)]
    assert _diskcache.compile_kernel(keys[0], "value = 11\n", finish) == 11
    assert cache.sources()[keys[0]] == "value = 11\n"
    assert _diskcache.compile_kernel(keys[1], "value = 12\n", finish) == 12  # evicts the first
    assert _diskcache.compile_kernel(keys[0], "value = 11\n", finish) == 11
    assert len(built) == 2 and cache.stats()["returns"] == 1
    assert built[0].startswith(PREFIX + "cpu_tile_") and (library / f"{built[0]}.py").exists()
    assert _diskcache.compile_kernel(keys[2], "value = 13\n", finish, disk=False) == 13
    assert not (library / f"{built[-1]}.py").exists()


@posix
def test_untrusted_says_what_it_could_not_inspect(tmp_path):
    """A missing folder, and a link (the configured root may be one) to nothing, each named
    with the system's reason; a link anywhere else is refused as a link."""
    from dml_numba._trust import untrusted

    assert untrusted(tmp_path / "missing", "the thing") == (
        f"the thing {tmp_path / 'missing'} cannot be inspected (No such file or directory)")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    assert untrusted(tmp_path / "dangling", "cache folder") == (
        f"cache folder {tmp_path / 'dangling'} cannot be inspected (No such file or directory)")
    assert untrusted(tmp_path / "dangling", "the thing") == (
        f"the thing {tmp_path / 'dangling'} is a symbolic link")
