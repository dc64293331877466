"""Tuned choices kept on disk, as FFTW keeps its wisdom: what the tuner measured once for a
kernel key on this machine, so that no later process measures it again.

* where: one JSON file per machine in the disk cache's library folder
  (``wisdom-<machine digest>.json``), under the same trust rules as the kernels: read and
  written only when that folder passed its check, the file itself a regular file owned by the
  user and writable by nobody else (anything else is removed and the key re-tuned), written
  atomically (a temporary file renamed over it). With the disk cache off, wisdom lives in the
  process only.
* keyed by the machine (:func:`machine`): CPU model, float32 vector lanes, Numba's threads, its
  threading layer, and the versions of dml_numba and Numba. Another machine's file is never
  read; an imported file must name this machine.
* an entry: the choice (``{"algorithm", "plan", "parallel"}``), the mode that chose it, the
  seconds the tuning took, the candidates' medians, a label for people. A choice is used only
  if it is one of the candidates the tuner would consider for that key now (a stale or edited
  file cannot make a kernel read out of bounds).
* concurrency: one tuning at a time on the machine (:func:`exclusive`: a lock file beside the
  wisdom), so that two processes do not time their candidates against each other and the
  second to want a key reads it from the first; adding a key re-reads the file before
  writing it.

``python3 -m dml_numba tune --export FILE`` / ``--import FILE`` ship it to identical machines.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import threading
from contextlib import contextmanager
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: one process's threads only
    fcntl = None

from . import _diskcache
from ._machine import cpu_model
from ._trust import private_file
from ._version import __version__ as VERSION

FORMAT = 1
_lock = threading.RLock()
_tuning = threading.Lock()
_memory: dict = {}  # machine digest -> entries, where the disk cache is off
_read: dict = {}  # path -> ((mtime_ns, size), entries): the file as last read


class WisdomError(ValueError):
    """A wisdom file that cannot be imported (another machine's, another format, not JSON)."""


def machine() -> dict:
    """What a tuned choice depends on besides its key (the pinned host's lanes and threads
    where kernels are planned for another: :func:`~dml_numba._host.planned_for`)."""
    import numba

    from ._host import Host

    host = Host.current()
    mach = {"cpu": cpu_model(), "arch": platform.machine(), "lanes": host.lanes,
            "threads": host.threads,
            "threading_layer": numba.config.THREADING_LAYER,
            "dml_numba": VERSION, "numba": numba.__version__}
    forced = os.environ.get("OPENBLAS_CORETYPE")
    if forced:  # OpenBLAS's kernels chosen by hand: the BLAS algorithms measured at another
        # speed than its own choice's (a Zen 5's Haswell kernels at half its rate); named only
        # where set, so the wisdom of every other machine keeps its file
        mach["openblas_coretype"] = forced
    return mach


def digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def _path(mach: dict) -> Path | None:
    st = _diskcache.state()
    return st.dir / f"wisdom-{digest(mach)}.json" if st.usable else None


def _trusted(path: Path) -> bool:
    """A regular file of the user's, writable by nobody else (else removed: re-tuned)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if os.name != "nt" and not private_file(st):
        try:
            os.unlink(path)
        except OSError:
            pass
        return False
    return True


def _load(path: Path, mach: dict) -> dict:
    """The entries of ``path`` (empty when absent, untrusted, unreadable or not this
    machine's), read again only when the file changed."""
    try:
        st = os.stat(path)
    except OSError:
        return {}
    stamp = (st.st_mtime_ns, st.st_size)
    seen = _read.get(str(path))
    if seen is not None and seen[0] == stamp:
        return seen[1]
    entries = {}
    if _trusted(path):
        try:
            data = json.loads(_read_limited(path))
        except (OSError, ValueError, WisdomError):
            data = None
        if isinstance(data, dict) and data.get("format") == FORMAT and \
                data.get("machine") == mach and isinstance(data.get("entries"), dict):
            entries, skipped = _checked(data["entries"])
            if skipped:
                _warn_skipped(path, skipped)
    _read[str(path)] = (stamp, entries)
    return entries


#: the largest wisdom file read (a few hundred bytes an entry: tens of thousands of keys)
MAX_BYTES = 16 * 2 ** 20


def _read_limited(path) -> str:
    """A wisdom file's text: a regular file only (a FIFO would block, a device never end), at
    most MAX_BYTES."""
    import stat

    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise WisdomError(f"{path}: not a regular file")
    if st.st_size > MAX_BYTES:
        raise WisdomError(f"{path}: {st.st_size} bytes is invalid; expected at most {MAX_BYTES}")
    with open(path, "rb") as f:
        raw = f.read(MAX_BYTES + 1)
    if len(raw) > MAX_BYTES:
        raise WisdomError(f"{path}: more than {MAX_BYTES} bytes")
    return raw.decode("utf-8")


def _checked(entries: dict) -> tuple[dict, int]:
    """The entries that follow the schema (:func:`is_choice`, :func:`is_busy_record`), and how
    many did not (skipped)."""
    good = {k: v for k, v in entries.items() if isinstance(k, str) and _valid(v)}
    return good, len(entries) - len(good)


_warned: set = set()


def _warn_skipped(path, skipped: int) -> None:
    """One warning per file and count: malformed entries are skipped, never fatal."""
    import warnings

    if (str(path), skipped) in _warned:
        return
    _warned.add((str(path), skipped))
    warnings.warn(f"dml_numba: {skipped} malformed entr{'y' if skipped == 1 else 'ies'} of the "
                  f"wisdom file {path} skipped (their kernels use the static rule; "
                  "`python3 -m dml_numba tune --forget` clears the file)", RuntimeWarning,
                  stacklevel=3)


#: the fields of an entry besides its choice or busy record, and their types (absent is fine)
_FIELDS = {"label": str, "chosen": str, "mode": str, "static": str, "tuning_s": (int, float),
           "provisional": bool, "left": list, "built": list, "seconds": dict}


def _number(v) -> bool:
    import math

    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) \
        and v >= 0


def _fields_ok(entry: dict) -> bool:
    for name, kind in _FIELDS.items():
        if name in entry:
            v = entry[name]
            if kind == (int, float):
                if not _number(v):
                    return False
            elif not isinstance(v, kind) or (kind is not bool and isinstance(v, bool)):
                return False
    if "seconds" in entry and not all(isinstance(k, str) and _number(v)
                                      for k, v in entry["seconds"].items()):
        return False
    return all(isinstance(x, str) for f in ("left", "built") for x in entry.get(f, ()))


def is_choice(entry) -> bool:
    """A tuned choice (what builds use), as opposed to a record of attempts not kept: the
    choice's algorithm a string, its plan absent or an object of numbers, booleans and lists
    of numbers, its parallel choice absent or a boolean; the other fields of their types. (The
    tuner still uses a choice only where it is one of the candidates it would consider now.)"""
    if not (isinstance(entry, dict) and isinstance(entry.get("choice"), dict)):
        return False
    c = entry["choice"]
    plan = c.get("plan")
    return (isinstance(c.get("algorithm"), str) and c.get("parallel") in (None, True, False)
            and (plan is None or isinstance(plan, dict) and all(
                isinstance(k, str) and (isinstance(v, (int, bool, str)) or
                                        isinstance(v, list) and
                                        all(isinstance(x, int) for x in v))
                for k, v in plan.items()))
            and _fields_ok(entry) and all(check(c) for check in CHOICE_CHECKS))


#: what the tuner adds to the schema of a choice (it knows what a plan is: a choice that makes
#: no candidate is malformed); registered when the tuner is imported, which every reader of
#: choices (builds, ``tune``, ``info``, ``tune --import``) imports first
CHOICE_CHECKS: list = []


def is_busy_record(entry) -> bool:
    """A record of tunings not kept because other programs used the CPU: ``{"busy":
    {"attempts": n, "others": share last seen}, "label": ...}`` (what ``tune`` and ``info``
    report; replaced by the choice once a tuning is kept)."""
    busy = entry.get("busy") if isinstance(entry, dict) else None
    return (isinstance(busy, dict) and isinstance(busy.get("attempts"), int)
            and not isinstance(busy.get("attempts"), bool) and busy["attempts"] >= 1
            and _number(busy.get("others")) and "choice" not in entry and _fields_ok(entry))


def _valid(entry) -> bool:
    return is_choice(entry) or is_busy_record(entry)


def entries(mach: dict | None = None) -> dict:
    """This machine's wisdom: key digest -> entry."""
    mach = mach or machine()
    with _lock:
        path = _path(mach)
        if path is None:
            return dict(_memory.get(digest(mach), {}))
        return dict(_load(path, mach))


@contextmanager
def exclusive():
    """Hold this machine's tuning lock (every thread and process using the same cache folder
    waits here for the one tuning now; with the disk cache off, this process's threads)."""
    with _tuning:
        path = _path(machine())
        if path is None:
            yield
            return
        with _file_lock(path, ".lock"):
            yield


def get(key: str) -> dict | None:
    """The entry of ``key`` on this machine, or None."""
    return entries().get(key)


def put(key: str, entry: dict) -> None:
    """Add ``entry`` for ``key`` (merged into the file as it is now)."""
    update({key: entry})


@contextmanager
def _file_lock(path: Path, suffix: str):
    """An exclusive lock on the file beside ``path`` with ``suffix``, held against other
    processes (released when its descriptor closes); none on Windows."""
    if fcntl is None:  # pragma: no cover - Windows: one process's threads only
        yield
        return
    fd = os.open(path.with_suffix(suffix), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def update(new: dict, mach: dict | None = None) -> None:
    """Merge ``new`` into the machine's wisdom: read, merged and written under a lock held
    against other processes too (two importing at once keep both's keys)."""
    mach = mach or machine()
    with _lock:
        path = _path(mach)
        if path is None:
            _memory.setdefault(digest(mach), {}).update(new)
            return
        # (a lock file of its own: exclusive()'s is held around whole tunings, which update
        # inside it)
        with _file_lock(path, ".update.lock"):
            _write_merged(path, mach, new)


def _write_merged(path: Path, mach: dict, new: dict) -> None:
    """The file as it is now (read again: another process may have written it) with ``new``
    merged in, written atomically."""
    merged = dict(_load(path, mach))
    merged.update(new)
    try:
        _diskcache._write_atomic(path, json.dumps(
            {"format": FORMAT, "machine": mach, "entries": merged}, indent=1, sort_keys=True))
    except OSError as exc:
        _diskcache._disable(f"writing {path} failed ({exc.strerror or exc})")
        _memory.setdefault(digest(mach), {}).update(merged)


def forget() -> int:
    """Delete this machine's wisdom; the number of entries it held."""
    mach = machine()
    with _lock:
        held = len(entries(mach))
        _memory.pop(digest(mach), None)
        path = _path(mach)
        if path is not None:
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            _read.pop(str(path), None)
        return held


def export(file) -> int:
    """Write this machine's tuned choices to ``file``; the number of entries.
    :class:`WisdomError` where the file cannot be written."""
    mach = machine()
    found = {k: v for k, v in entries(mach).items() if is_choice(v)}
    try:
        Path(file).write_text(json.dumps({"format": FORMAT, "machine": mach, "entries": found},
                                         indent=1, sort_keys=True), encoding="utf-8")
    except OSError as exc:
        raise WisdomError(f"{file}: cannot be written ({exc.strerror or exc})") from None
    return len(found)


def import_(file) -> tuple[int, int]:
    """Merge the tuned choices of ``file`` (exported on an identical machine) into this
    machine's: (entries imported, malformed entries skipped). :class:`WisdomError` names what
    is wrong where the file is not this machine's wisdom: not a regular file or too large, not
    JSON, another format, a machine or entries of the wrong type, another machine."""
    try:
        data = json.loads(_read_limited(file))
    except (OSError, ValueError) as exc:
        if isinstance(exc, WisdomError):
            raise
        raise WisdomError(f"{file}: not a wisdom file ({exc})") from None
    found = data.get("format") if isinstance(data, dict) else None
    if found != FORMAT:
        raise WisdomError(f"{file}: format {found!r} is invalid; expected {FORMAT}")
    mach, theirs = machine(), data.get("machine")
    if not isinstance(theirs, dict):
        raise WisdomError(f"{file}: machine {theirs!r} is invalid; expected an object naming "
                          "the machine it was measured on")
    if theirs != mach:
        diff = ", ".join(f"{k}: {theirs.get(k)!r} there, {v!r} here" for k, v in mach.items()
                         if theirs.get(k) != v)
        raise WisdomError(f"{file}: measured on another machine ({diff}); tune here instead")
    if not isinstance(data.get("entries"), dict):
        raise WisdomError(f"{file}: entries {type(data.get('entries')).__name__} is invalid; "
                          "expected an object of key -> entry")
    good, skipped = _checked(data["entries"])
    found = {k: v for k, v in good.items() if is_choice(v)}
    update(found, mach)
    return len(found), skipped + len(good) - len(found)
