"""Generated modules as real files, so Numba's ``cache=True`` reuses machine code across processes.

Numba cannot disk-cache functions created by ``exec`` (no source file to key on), so each
generated module is written to a file whose name holds a hash of its source and of the library
and Numba versions. The folder is trusted the way pip and OpenSSH trust theirs:

* layout: ``<root>/dml-numba-cache-v1/`` holds every file the library writes, marked by a
  ``CACHEDIR.TAG``; ``<root>`` is ``DML_NUMBA_CACHE_DIR`` or the user cache folder. Nothing
  outside that subfolder is ever written, executed or deleted.
* trust: the root, the subfolder and its ``__pycache__`` must be real folders owned by the
  current user and not writable by group or others (folders the library creates are 0700).
  Otherwise nothing is read from or written to the folder: one warning names the folder and
  the reason, and every operator is compiled in memory (``cache=False``).
* execution: a generated module is always executed from the source text the library just
  generated (compiled here; no ``.pyc`` is ever imported). Its file on disk only gives Numba's
  cache a path; a file whose bytes differ is rewritten. Numba's own index and data files
  (``.nbi``/``.nbc``, pickles) are found through a locator of ours that serves only files inside
  a folder that passed the check; each entry's files are also checked (owner, mode) before use.
* failures: any exception while loading or compiling an entry purges it and rebuilds it once;
  a second failure runs that operator from memory with a warning. When a write fails (full
  disk, read-only folder) the disk cache is switched off for the process, with a warning.
* housekeeping: ``*.tmp`` files older than an hour are removed when the folder is first used
  in a process; :func:`clear` and :func:`prune` delete recognised entries only.

``DML_NUMBA_DISK_CACHE=0`` turns the disk cache off.
"""
from __future__ import annotations

import contextvars
import hashlib
import os
import re
import stat
import sys
import threading
import time
import types
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from . import _env
from ._cache import cache
from ._errors import outside_stacklevel
from ._trust import makedirs_private, private_dir, private_file, unsafe_path, untrusted
from ._version import __version__ as VERSION

SUBDIR = "dml-numba-cache-v1"
MARKER = "CACHEDIR.TAG"
MARKER_TEXT = ("Signature: 8a477f597d28d172789f06886806bc55\n"
               "# This folder holds dml_numba's cache of generated kernels "
               "(python -m dml_numba cache clear).\n")
PREFIX = "dml_numba_gen_"
#: a recognised entry file: the module, Numba's index/data/temporary files, our temporaries, a
#: loaded ONNX model (``_onnx/stored.py``)
ENTRY = re.compile(r"^(dml_numba_gen_[a-z0-9_]+_[0-9a-f]{24})(\.py|[.-].*\.(nbi|nbc)|"
                    r"[.-].*\.tmp\.[0-9a-f]+|\.[a-z0-9_]+\.tmp|\.cpython-.*\.pyc|\.pkl)$")
TMP_MAX_AGE_S = 3600.0


class CacheWarning(UserWarning):
    """The disk cache cannot be used (or an entry of it failed); operators run from memory."""


@dataclass(frozen=True)
class State:
    """Whether the disk cache is usable in this process, where, and if not, why."""

    root: Path
    dir: Path | None
    usable: bool
    reason: str


_lock = threading.RLock()
_states: dict = {}
_disabled: dict = {}  # config -> reason the cache was switched off at run time
_verified: set = set()  # folders that passed the trust check in this process
_warned: set = set()


def enabled() -> bool:
    """Whether the disk cache is asked for (``DML_NUMBA_DISK_CACHE``); see :func:`state`."""
    return _env.flag("DML_NUMBA_DISK_CACHE", True)


def cache_dir() -> Path:
    """The configured root: ``DML_NUMBA_CACHE_DIR`` or the user cache folder."""
    env = os.environ.get("DML_NUMBA_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local"))
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "dml_numba"


def library_dir() -> Path:
    """The one subfolder the library writes to, executes from and deletes in."""
    return cache_dir() / SUBDIR


def _config() -> tuple:
    return (os.environ.get("DML_NUMBA_DISK_CACHE", ""), str(cache_dir()))


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, CacheWarning, stacklevel=outside_stacklevel())


def _check_tree(root: Path) -> tuple[Path | None, str]:
    """Create and check root -> subfolder -> __pycache__; (library folder, '') or (None, why)."""
    why = unsafe_path(root)  # before creating anything under a folder others can swap
    if why:
        return None, why
    if not root.exists():
        try:
            makedirs_private(root)
        except OSError as exc:
            return None, f"the cache folder {root} cannot be created ({exc.strerror or exc})"
    why = untrusted(root, "cache folder") or unsafe_path(root)
    if why:
        return None, why
    sub = root / SUBDIR
    for path, what in ((sub, "the library's cache subfolder"), (sub / "__pycache__",
                                                                  "the cache's __pycache__")):
        why = private_dir(path, what)
        if why:
            return None, why
    marker = sub / MARKER
    try:
        if not marker.is_file():
            _write_atomic(marker, MARKER_TEXT)
        probe = sub / f"{PREFIX}probe_{os.getpid()}.{threading.get_ident()}.tmp"
        probe.write_bytes(b"")  # writable? (a read-only or full file system says so here)
        probe.unlink()
    except OSError as exc:
        return None, f"the cache folder {sub} is not writable ({exc.strerror or exc})"
    return sub.resolve(), ""


def state() -> State:
    """The disk cache's state for the current configuration, checked once per process."""
    config = _config()
    st = _states.get(config)
    if st is not None and config not in _disabled:
        return st
    with _lock:
        root = cache_dir()
        if config in _disabled:
            st = State(root, None, False, _disabled[config])
        elif not enabled():
            st = State(root, None, False, "switched off by DML_NUMBA_DISK_CACHE")
        else:
            sub, why = _check_tree(root)
            st = State(root, sub, sub is not None, why)
            if sub is not None:
                _verified.add(str(sub))
                remove_stale_tmp(sub)
            else:
                _warn_once(f"dml_numba: not using the disk cache: {why}; operators are compiled "
                           "in memory (set DML_NUMBA_CACHE_DIR to a private folder, or "
                           "DML_NUMBA_DISK_CACHE=0 to silence this)")
        _states[config] = st
        return st


def _disable(reason: str) -> None:
    with _lock:
        _disabled[_config()] = reason
    _warn_once(f"dml_numba: disk cache switched off for this process: {reason}; operators are "
               "compiled in memory")


def reset() -> None:
    """Forget the checked states (the next use re-checks the folder)."""
    with _lock:
        _states.clear()
        _disabled.clear()


# -- entries ---------------------------------------------------------------------------------

def module_name(source: str, prefix: str) -> str:
    import numba

    digest = hashlib.sha256(f"{VERSION}\0{numba.__version__}\0{source}".encode()).hexdigest()[:24]
    return f"{PREFIX}{re.sub('[^a-z0-9_]', '_', prefix.lower())}_{digest}"


def _write_atomic(path: Path, text: str | bytes) -> None:
    """``path`` holding ``text`` (UTF-8) or bytes, or as it was: written to a private temporary
    beside it and renamed over it."""
    import tempfile

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.stem + ".", suffix=".tmp")
    try:
        with (os.fdopen(fd, "wb") if isinstance(text, bytes) else
              os.fdopen(fd, "w", encoding="utf-8", newline="\n")) as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def scan(*folders: Path) -> list[os.DirEntry]:
    """The entries of ``folders`` (a folder that cannot be read has none)."""
    entries = []
    for folder in folders:
        try:
            entries += list(os.scandir(folder))
        except OSError:
            pass
    return entries


#: the files of a ``__pycache__`` folder by module name, with the folder's modification time
#: when it was listed: ``{folder: (mtime_ns, {name: [paths]})}``
_listings: dict = {}

#: a folder modified less than this long ago is listed again at every use: a file system's
#: timestamps are coarser than the changes they would have to tell apart (racy timestamps)
RACY_NS = 2_000_000_000


def _cache_files(folder: Path) -> dict:
    """The files of ``folder`` (a ``__pycache__``) by the module they belong to (the name
    before the first dot). One listing serves every entry while the folder is unchanged: a
    first run of a process loads dozens of entries from a folder of thousands of files, and
    listing it for each cost ~9 ms an entry (9,000 files). Any change to the folder (a file
    added, removed or renamed) changes its modification time, which is read at each use; a
    listing is only kept when that time is older than :data:`RACY_NS`."""
    try:
        mtime = os.stat(folder).st_mtime_ns
    except OSError:
        return {}
    hit = _listings.get(folder)
    if hit is not None and hit[0] == mtime:
        return hit[1]
    by_name: dict = {}
    for e in scan(folder):
        by_name.setdefault(e.name.partition(".")[0], []).append(Path(e.path))
    if time.time_ns() - mtime > RACY_NS:
        _listings[folder] = (mtime, by_name)
    return by_name


def _entry_files(sub: Path, name: str) -> list[Path]:
    return [sub / f"{name}.py"] + _cache_files(sub / "__pycache__").get(name, [])


def _check_entry(sub: Path, name: str) -> None:
    """Refuse an entry whose files are not the user's own or are writable by others: purge
    them (they are rebuilt)."""
    if os.name == "nt":  # pragma: no cover
        return
    bad = False
    for p in _entry_files(sub, name):
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            continue
        if not private_file(st):
            bad = True
    if bad:
        purge(name, sub)


def _tighten(sub: Path, name: str) -> None:
    """Numba writes its index and data files with the umask's mode: make the entry's files
    private (0600), so a folder opened up later exposes nothing writable."""
    if os.name == "nt":  # pragma: no cover
        return
    for p in _entry_files(sub, name):
        try:
            if stat.S_IMODE(os.lstat(p).st_mode) & 0o077:
                os.chmod(p, 0o600)
        except OSError:
            pass


def purge(name: str, sub: Path | None = None) -> None:
    """Remove a module's file and every Numba cache file of it; forget the module."""
    sys.modules.pop(name, None)
    if sub is None:
        st = state()
        if not st.usable:
            return
        sub = st.dir
    for p in _entry_files(sub, name):
        try:
            p.unlink()
        except OSError:
            pass


def _new_module(name: str, file: str, source: str, disk: bool) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__file__ = file
    mod.__dict__["__dml_disk_cache__"] = disk  # read by the generated decorators (cache=...)
    sys.modules[name] = mod  # before executing: Numba's cache re-imports the module by name
    try:
        exec(compile(source, file, "exec"), mod.__dict__)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return mod


def _disk_module(source: str, name: str, sub: Path) -> types.ModuleType:
    _install_locators()
    _check_entry(sub, name)
    path = sub / f"{name}.py"
    data = source.encode("utf-8")
    try:
        same = path.read_bytes() == data
    except OSError:
        same = False
    if not same:  # missing, stale or corrupt: rewrite from the source we generated
        try:
            _write_atomic(path, source)
        except OSError as exc:
            _disable(f"writing {path} failed ({exc.strerror or exc})")
            raise
    return _new_module(name, str(path), source, True)


def compile_source(source: str, prefix: str, finish, *, disk: bool = True):
    """Execute generated ``source`` as a module and return ``finish(module)`` (which compiles
    or fetches the kernel). From the disk cache when it is usable (and ``disk``): a failure
    purges the entry and rebuilds it once, a second failure falls back to memory with a
    warning."""
    name = module_name(source, prefix)
    st = state() if disk else None
    if st is not None and st.usable:
        last = None
        for _ in range(2):
            try:
                result = finish(_disk_module(source, name, st.dir))
                _tighten(st.dir, name)
                return result
            except Exception as exc:  # noqa: BLE001 - any failure: purge, rebuild, then memory
                last = exc
                purge(name, st.dir)
                if not state().usable:
                    break
        else:
            _warn_once(f"dml_numba: cache entry {name} failed twice ({type(last).__name__}: "
                       f"{last}); this operator runs from memory")
    return finish(_new_module(name, f"<dml_numba generated {name}>", source, False))


def load_module(source: str, prefix: str, *, disk: bool = True) -> types.ModuleType:
    """The generated module (compile_source with no further step)."""
    return compile_source(source, prefix, lambda mod: mod, disk=disk)


#: set while kernels are only chosen (:func:`choosing`): their keys and sources made, nothing
#: compiled, loaded or cached
_CHOOSING: contextvars.ContextVar = contextvars.ContextVar("dml_numba_choosing", default=False)


@contextmanager
def choosing():
    """Within: kernels are chosen and their sources generated, and :func:`compile_kernel`
    returns None instead of building (what :func:`dml_numba.choose_operator` and the golden
    sources run under)."""
    token = _CHOOSING.set(True)
    try:
        yield
    finally:
        _CHOOSING.reset(token)


def only_choosing() -> bool:
    """Whether kernels are only being chosen now (:func:`choosing`): nothing is built."""
    return _CHOOSING.get()


def compile_kernel(key, source: str, finish, *, disk: bool = True):
    """The one build path of every backend: ``finish(module)`` of the generated ``source``,
    built once per ``key`` (a :class:`~dml_numba._cache.KernelKey`) and process in the kernel
    cache (kept through eviction), its source kept for inspection, from the disk cache when it
    is usable and ``disk``. None while :func:`choosing`."""
    if _CHOOSING.get():
        return None

    def build():
        cache.record_source(key, source)
        return compile_source(source, f"{key.backend}_{key.op}", finish, disk=disk)

    return cache.get_or_build(key, build, keep=True)


# -- Numba's cache locator for our folder ------------------------------------------------------

_installed: set = set()


def _locator_for(base, mixin):
    class DmlNumbaLocator(mixin, base):
        """Numba's index and data files of our generated modules, in ``__pycache__`` beside
        them, only inside a folder that passed the trust check (else Numba refuses to cache)."""

        def __init__(self, py_func, py_file):
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno
            self._cache_path = os.path.join(os.path.dirname(py_file), "__pycache__")

        def get_cache_path(self):
            return self._cache_path

        def ensure_cache_path(self):
            if untrusted(Path(self._cache_path), "the cache's __pycache__"):
                raise OSError(f"untrusted cache folder {self._cache_path}")

        @classmethod
        def from_function(cls, py_func, py_file):
            if not os.path.basename(py_file).startswith(PREFIX):
                return None
            folder = os.path.dirname(os.path.abspath(py_file))
            if folder not in _verified:
                raise RuntimeError(f"dml_numba: refusing to cache {py_file}: its folder was not "
                                   "verified")
            self = cls(py_func, py_file)
            self.ensure_cache_path()
            return self

    return DmlNumbaLocator


def _install_locators() -> None:
    """Put our locator first in Numba's (and, once imported, numba-cuda's) locator lists."""
    targets = [("numba.core.caching", "CacheImpl", "_CacheLocator",
                "_SourceFileBackedLocatorMixin")]
    if "numba.cuda" in sys.modules:
        targets.append(("numba.cuda.core.caching", "CacheImpl", "_CacheLocator",
                        "_SourceFileBackedLocatorMixin"))
    for modname, impl, base, mixin in targets:
        if modname in _installed:
            continue
        try:
            import importlib

            m = importlib.import_module(modname)
            cls = _locator_for(getattr(m, base), getattr(m, mixin))
            getattr(m, impl)._locator_classes.insert(0, cls)
        except (ImportError, AttributeError):  # pragma: no cover - another Numba layout
            continue
        _installed.add(modname)


def remove_stale_tmp(sub: Path) -> None:
    """Our temporaries older than TMP_MAX_AGE_S in the library folder (a writer that died):
    removed when the folder is first verified in a process."""
    now = time.time()
    for e in scan(sub, sub / "__pycache__"):
        if e.name.startswith(PREFIX) and ".tmp" in e.name:
            try:
                if now - e.stat(follow_symlinks=False).st_mtime > TMP_MAX_AGE_S:
                    os.unlink(e.path)
            except OSError:
                pass
