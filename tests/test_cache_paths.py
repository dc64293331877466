"""The disk cache's path from ``/`` to its files: every folder on the way must be one that no
other user can rewrite (as OpenSSH's ``safe_path`` requires), folders open to a group are not
trusted, and housekeeping (``usage``, ``prune``, ``clear``) beside processes that are writing
and deleting entries says what it did instead of failing.

Where another user matters, a real second uid races the library (CI runs as root: the attacker
runs as ``nobody`` through ``setpriv``)."""
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import warnings
from pathlib import Path

import pytest

from dml_numba import _diskcache, _housekeeping, _trust
from tests.test_cache_trust import IS_ROOT, OTHER_UID, SUB, _plant, entry_name, private_root, run

# -- every folder on the way --------------------------------------------------------------------


def _state_for(monkeypatch, root):
    """The library's verdict on ``root``, checked afresh in this process."""
    monkeypatch.setenv("DML_NUMBA_CACHE_DIR", str(root))
    _diskcache.reset()
    try:
        return _diskcache.state()
    finally:
        _diskcache.reset()


@pytest.fixture
def checked(monkeypatch):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", _diskcache.CacheWarning)
        yield lambda root: _state_for(monkeypatch, root)
    monkeypatch.undo()
    _diskcache.reset()


def test_a_cache_root_inside_a_shared_folder_is_not_used_in_a_new_process(tmp_path):
    """The whole path in a fresh process: the root itself is private (0700, ours), its parent
    is writable by everyone; nothing is written, one warning says why."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    root = shared / "cache"
    root.mkdir(mode=0o700)
    out = run({"DML_NUMBA_CACHE_DIR": str(root)})
    assert "usable False" in out.stdout, out.stdout
    assert (f"the folder {shared} on the way to the cache is writable by group or others"
            in out.stdout)
    assert out.stderr.count("CacheWarning") == 1
    assert list(root.iterdir()) == []


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o775, 0o730, 0o757, 0o720])
def test_a_cache_root_inside_a_folder_others_can_write_is_not_used(tmp_path, checked, mode):
    """Whoever can write the parent could swap the root for a link to their own files."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, mode)
    (shared / "cache").mkdir(mode=0o700)
    st = checked(shared / "cache")
    assert not st.usable
    assert st.reason == (f"the folder {shared} on the way to the cache is writable by group or "
                         f"others (mode {mode:04o}), so another user could replace "
                         f"{shared / 'cache'}")


def test_a_deeper_ancestor_counts_too(tmp_path, checked):
    top = tmp_path / "team"
    (top / "a" / "b").mkdir(parents=True)
    os.chmod(top, 0o775)
    st = checked(top / "a" / "b" / "cache")
    assert not st.usable and st.reason.startswith(f"the folder {top} on the way")
    assert not (top / "a" / "b" / "cache").exists()


def test_a_link_on_the_way_is_judged_by_every_folder_it_leads_through(tmp_path, checked):
    """A root reached through a symbolic link: the folders on the way to the link's target
    count, so a private-looking link into a shared folder is refused, and a link into a private
    folder is fine (also with ``..`` after the link, resolved physically)."""
    shared = tmp_path / "shared"
    (shared / "real").mkdir(parents=True)
    os.chmod(shared, 0o777)
    os.symlink(shared / "real", tmp_path / "link")
    st = checked(tmp_path / "link" / "cache")
    assert not st.usable and st.reason.startswith(f"the folder {shared} on the way")
    st = checked(tmp_path / "link" / ".." / "elsewhere")  # /shared/elsewhere, physically
    assert not st.usable and st.reason.startswith(f"the folder {shared} on the way")
    private = private_root(tmp_path)
    os.symlink(private, tmp_path / "good")
    assert checked(tmp_path / "good").usable


def test_missing_parents_are_created_private_whatever_the_umask(tmp_path):
    root = tmp_path / "a" / "b" / "cache"
    out = run({"DML_NUMBA_CACHE_DIR": str(root)}, preexec=lambda: os.umask(0))
    assert "usable True" in out.stdout
    for folder in (tmp_path / "a", tmp_path / "a" / "b", root):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder


def test_a_sticky_shared_folder_is_fine_when_the_entry_in_it_is_ours(tmp_path, checked):
    """/tmp's rule: in a sticky folder only an entry's owner can rename or remove it."""
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    assert checked(sticky / "cache").usable
    assert _trust.unsafe_path(sticky / "cache") is None


@pytest.mark.skipif(not IS_ROOT, reason="needs a second user id (run as root)")
def test_a_sticky_folder_entry_owned_by_another_user_is_refused(tmp_path):
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    theirs = sticky / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, OTHER_UID, OTHER_UID)
    why = _trust.unsafe_path(theirs / "cache")
    assert why == (f"the folder {sticky} on the way to the cache is writable by group or others "
                   "(mode 1777) (sticky, but the entry in it is another user's), so another "
                   f"user could replace {theirs}")


@pytest.mark.skipif(not IS_ROOT, reason="needs a second user id (run as root)")
def test_an_ancestor_owned_by_another_user_is_refused(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, OTHER_UID, OTHER_UID)
    why = _trust.unsafe_path(theirs / "cache")
    assert why == (f"the folder {theirs} on the way to the cache is owned by uid {OTHER_UID}, "
                   f"not by root or the current user ({os.getuid()})")


# -- folders open to a group ---------------------------------------------------------------------


@pytest.mark.parametrize("mode", [0o770, 0o775, 0o730, 0o720])
@pytest.mark.parametrize("where", ["root", "subfolder", "pycache"])
def test_group_writable_cache_folders_are_not_trusted(tmp_path, checked, mode, where):
    """Writable by the group but not by others is still another user's way in: a root or a
    library subfolder opened to a group is neither read nor written (what is in it may have
    been planted), where a subfolder opened only for reading (0755) is tightened back."""
    root = private_root(tmp_path)
    assert checked(root).usable  # creates the subfolders
    folder = {"root": root, "subfolder": root / SUB, "pycache": root / SUB / "__pycache__"}[where]
    os.chmod(folder, mode)
    st = checked(root)
    assert not st.usable and f"{folder} is writable by group or others (mode {mode:04o}" in \
        st.reason
    assert stat.S_IMODE(folder.stat().st_mode) == mode  # left as it is: not ours to repair
    os.chmod(folder, 0o755)
    assert checked(root).usable and stat.S_IMODE(folder.stat().st_mode) == (
        0o755 if where == "root" else 0o700)


def test_a_group_writable_subfolder_is_refused_in_a_new_process(tmp_path):
    root = private_root(tmp_path)
    name = entry_name(run({"DML_NUMBA_CACHE_DIR": str(root)}))
    os.chmod(root / SUB, 0o770)
    out = run({"DML_NUMBA_CACHE_DIR": str(root)})
    assert "usable False" in out.stdout and "hits 0 misses 1" in out.stdout
    assert len(list((root / SUB).glob(f"{name}*"))) == 1  # nothing more written


# -- a real second user racing the library ----------------------------------------------------

RACER = textwrap.dedent("""
    import ctypes, os, shutil, sys, time
    libc = ctypes.CDLL(None, use_errno=True)
    ours, victim, template, rel, seconds = sys.argv[1:5] + [float(sys.argv[5])]
    swapped, end, n = False, time.time() + seconds, 0
    while time.time() < end:
        mine = os.path.join(victim if swapped else ours, rel)  # where our files are now
        for f in os.listdir(template):  # put back what the victim purged
            dst = os.path.join(mine, f)
            if not os.path.exists(dst):
                try:
                    shutil.copyfile(os.path.join(template, f), dst)
                except OSError:
                    pass
        if libc.renameat2(-100, ours.encode(), -100, victim.encode(), 2) == 0:  # EXCHANGE
            swapped, n = not swapped, n + 1
    print("swaps", n)
""")

VICTIM = textwrap.dedent("""
    import sys, time, numpy as np, dml_numba as dml
    F32 = dml.DataType.FLOAT32
    d = dml.TileOperatorDesc(dml.TensorDesc(F32, (2, 3)), dml.TensorDesc(F32, (4, 3)), (2, 1))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    dml.compile_operator(d, "cpu")(x)  # the cache checked and in use: the attacker starts now
    print("ready", flush=True)
    end, n = time.time() + float(sys.argv[1]), 0
    while time.time() < end:  # a long-running program meeting new and evicted kernels
        dml.cache.clear()
        for m in [m for m in sys.modules if m.startswith("dml_numba_gen_")]:
            del sys.modules[m]
        try:
            dml.compile_operator(d, "cpu")(x)
        except Exception:
            pass
        n += 1
    print("loads", n)
""")


def private_root_of(tmp_path) -> Path:
    return tmp_path / "cache"


def _runs_as_nobody() -> bool:
    if not IS_ROOT or not shutil.which("setpriv"):
        return False
    probe = subprocess.run(["setpriv", f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}",
                            "--clear-groups", sys.executable, "-c", "import ctypes"],
                           capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(not _runs_as_nobody(), reason="needs root and setpriv to run a second uid")
def test_another_user_swapping_the_root_never_gets_code_run(tmp_path):
    """The attack: a folder others can write holds the victim's cache root; once the victim
    uses it, the attacker exchanges it with a folder of their own (renameat2 RENAME_EXCHANGE,
    in a loop, putting back whatever the victim purges) holding the generated module and index
    files whose pickles write a marker. For a bounded time the victim loads kernels as a
    long-running program does. Nothing of theirs may ever run, and the victim says why it
    keeps kernels in memory. (The deterministic tests above pin the rule that closes this.)"""
    name = entry_name(run({"DML_NUMBA_CACHE_DIR": str(private_root(tmp_path))}))
    source = (private_root_of(tmp_path) / SUB / f"{name}.py").read_bytes()  # deterministic
    base = Path(tempfile.mkdtemp(prefix="dml_race_"))  # outside tmp_path: nobody must reach it
    try:
        os.chmod(base, 0o777)
        marker = base / "pwned"
        template = base / "template"
        _plant(template, name, marker)  # the attacker's files, made once
        pyc = template / SUB / "__pycache__"
        flat = base / "flat"
        flat.mkdir()
        for f in pyc.iterdir():
            shutil.copyfile(f, flat / f.name)
        theirs = base / "theirs"
        (theirs / SUB / "__pycache__").mkdir(parents=True)
        (theirs / SUB / f"{name}.py").write_bytes(source)  # so the victim rewrites nothing
        (base / "racer.py").write_text(RACER)
        for p in [theirs, *theirs.rglob("*"), flat, *flat.iterdir(), base / "racer.py"]:
            os.chown(p, OTHER_UID, OTHER_UID)
            os.chmod(p, 0o777 if p.is_dir() else 0o644)
        root = base / "cache"
        root.mkdir(mode=0o700)
        seconds = 5
        env = dict(os.environ, DML_NUMBA_CACHE_DIR=str(root))
        victim = subprocess.Popen([sys.executable, "-c", VICTIM, str(seconds)], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  cwd="/")
        assert victim.stdout.readline() == "ready\n"
        racer = subprocess.Popen(
            ["setpriv", f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}", "--clear-groups",
             sys.executable, str(base / "racer.py"), str(theirs), str(root), str(flat),
             f"{SUB}/__pycache__", str(seconds)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/")
        out, err = racer.communicate(timeout=120)
        loads, warned = victim.communicate(timeout=120)
        assert victim.returncode == 0, warned
        assert not marker.exists(), "the attacker's pickle ran as the victim"
        assert "writable by group or others" in warned  # the one warning says why
        assert int(loads.split()[1]) > 10 and out.startswith("swaps"), (out, err)
    finally:
        shutil.rmtree(base, ignore_errors=True)


# -- housekeeping beside busy processes -----------------------------------------------------------


def _fake_entries(sub: Path, count: int, tag: str) -> list[Path]:
    files = []
    for i in range(count):
        name = f"{_diskcache.PREFIX}tile_{(tag + format(i, 'x')).rjust(24, '0')[-24:]}"
        p = sub / f"{name}.py"
        p.write_text("# entry\n")
        q = sub / "__pycache__" / f"{name}.kernel-20.py311.nbi"
        q.write_bytes(b"x" * 100)
        files += [p, q]
    return files


@pytest.mark.parametrize("vanish", ["scan", "delete"])
def test_housekeeping_tolerates_entries_vanishing_underneath(tmp_path, monkeypatch, vanish):
    """Another process deletes entries between our listing and our stat or unlink: usage,
    prune and clear count what they saw and what they removed, and raise nothing."""
    monkeypatch.setenv("DML_NUMBA_CACHE_DIR", str(private_root(tmp_path)))
    _diskcache.reset()
    sub = _diskcache.state().dir
    files = _fake_entries(sub, 6, "a")
    real_scan = os.scandir

    def scan_then_vanish(path):
        entries = list(real_scan(path))
        for f in files[::3]:  # listed, then gone before anything else looks at it
            f.unlink(missing_ok=True)
        return iter(entries)

    if vanish == "scan":
        monkeypatch.setattr(_diskcache.os, "scandir", scan_then_vanish)
    else:
        real_unlink = os.unlink

        def unlink_raced(path, *a, **k):
            real_unlink(path)  # the other process got there first
            return real_unlink(path, *a, **k)

        monkeypatch.setattr(_diskcache.os, "unlink", unlink_raced)
    try:
        usage = _housekeeping.usage()
        assert usage["modules"] <= 6 and usage["bytes"] >= 0
        pruned = _housekeeping.prune(0)
        assert pruned["remaining"] == 0 and pruned["reason"] == ""
        _fake_entries(sub, 3, "b")
        cleared = _housekeeping.clear()
        assert cleared["reason"] == "" and cleared["modules"] <= 3
    finally:
        monkeypatch.undo()
        _diskcache.reset()


def test_housekeeping_beside_real_writers_and_pruners(tmp_path, monkeypatch):
    """Threads writing and deleting entries (as compiling processes and other pruners do) while
    usage, prune and clear run in a loop: none of them raises."""
    monkeypatch.setenv("DML_NUMBA_CACHE_DIR", str(private_root(tmp_path)))
    _diskcache.reset()
    sub = _diskcache.state().dir
    stop, errors = threading.Event(), []

    def churn(tag):
        i = 0
        while not stop.is_set():
            for f in _fake_entries(sub, 4, f"{tag}{i % 7}"):
                f.unlink(missing_ok=True)
            i += 1

    def housekeeping():
        try:
            while not stop.is_set():
                _housekeeping.usage()
                _housekeeping.prune(150)
                _housekeeping.clear()
        except Exception as exc:  # pragma: no cover  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=churn, args=(t,)) for t in "cd"] + [
        threading.Thread(target=housekeeping) for _ in range(2)]
    [t.start() for t in threads]
    time.sleep(1.5)
    stop.set()
    [t.join() for t in threads]
    _diskcache.reset()
    assert not errors, errors


def test_cli_prune_and_info_beside_a_compiling_process(tmp_path):
    """The commands themselves, in their own processes, while another process compiles."""
    root = private_root(tmp_path)
    env = {"DML_NUMBA_CACHE_DIR": str(root)}
    busy = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import numpy as np, dml_numba as dml
        for n in range(2, 12):
            dml.tile(np.ones((n, 3), np.float32), (2, 1))
    """)], env=dict(os.environ, **env))
    try:
        for _ in range(3):
            for cmd in (["info"], ["cache", "prune", "--max-bytes", "1k"]):
                out = subprocess.run([sys.executable, "-m", "dml_numba", *cmd], capture_output=True,
                                     text=True, env=dict(os.environ, **env))
                assert out.returncode == 0, out.stderr
    finally:
        busy.wait(timeout=120)
    assert busy.returncode == 0
