"""Generated modules as real files, so Numba's ``cache=True`` reuses machine code across processes.

Numba cannot disk-cache functions created by ``exec`` (no source file to key on). Each generated
module is written to ``<cache dir>/<version>/<name>.py``, where the name holds a hash of the
source and of the library and Numba versions; it is imported under that name, registered in
``sys.modules`` before execution (Numba's cache re-imports the module by name), and Numba keeps
its own index beside it in ``__pycache__``. An entry whose text differs from the source it should
hold is rewritten; an entry Numba cannot load is purged and rebuilt (never trusted).

``DML_NUMBA_CACHE_DIR`` chooses the folder (default: the user cache folder);
``DML_NUMBA_DISK_CACHE=0`` turns the disk cache off (modules are exec'd in memory).
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import sys
import tempfile
import types
from pathlib import Path

from ._version import __version__ as VERSION


def enabled() -> bool:
    return os.environ.get("DML_NUMBA_DISK_CACHE", "1").strip().lower() not in ("0", "false", "no",
                                                                                 "off")


def cache_dir() -> Path:
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


def version_dir() -> Path:
    import numba

    return cache_dir() / f"v{VERSION}-numba{numba.__version__}"


def module_name(source: str, prefix: str) -> str:
    import numba

    digest = hashlib.sha256(f"{VERSION}\0{numba.__version__}\0{source}".encode()).hexdigest()[:24]
    return f"dml_numba_gen_{prefix}_{digest}"


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.stem, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def purge(name: str) -> None:
    """Remove a module's file and every Numba cache file of it; forget the module."""
    sys.modules.pop(name, None)
    d = version_dir()
    for p in [d / f"{name}.py", *(d / "__pycache__").glob(f"{name}.*")]:
        try:
            p.unlink()
        except OSError:
            pass


def load_module(source: str, prefix: str, *, disk: bool) -> types.ModuleType:
    """Import generated ``source`` as a module (from a cache file when ``disk``)."""
    name = module_name(source, prefix)
    mod = sys.modules.get(name)
    if mod is not None:
        return mod
    if disk:
        path = version_dir() / f"{name}.py"
        try:
            if not path.is_file() or path.read_text(encoding="utf-8") != source:
                _write_atomic(path, source)  # missing, stale or corrupt: rewrite
            spec = importlib.util.spec_from_file_location(name, path)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[name] = mod
            spec.loader.exec_module(mod)
            return mod
        except OSError:
            sys.modules.pop(name, None)  # unwritable cache folder: fall back to memory
    mod = types.ModuleType(name)
    mod.__file__ = f"<dml_numba generated {name}>"
    sys.modules[name] = mod
    exec(compile(source, mod.__file__, "exec"), mod.__dict__)
    return mod


def usage() -> dict:
    """Folder, number of generated modules and total bytes on disk."""
    d = version_dir()
    files = [p for p in cache_dir().rglob("*") if p.is_file()] if cache_dir().exists() else []
    return {"dir": str(cache_dir()), "modules": len(list(d.glob("dml_numba_gen_*.py")))
            if d.exists() else 0, "bytes": sum(p.stat().st_size for p in files)}


def clear_disk() -> None:
    shutil.rmtree(cache_dir(), ignore_errors=True)

