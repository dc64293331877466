"""Loaded models kept in the disk cache: what the loader made of a model file (the graph, the
input names, the weights, the output shapes), so a new process compiling the same file for the
same shapes reads it back instead of importing ``onnx`` and parsing the file again. Importing
``onnx`` alone takes 0.6-0.9 s of a first run on a 2-core machine (most of it in the
``ml_dtypes`` it imports registering its NumPy loops); the whole first run of a process with a
warm cache is 1.6-1.9 s with it.

An entry is keyed by the SHA-256 of: the file's bytes (or the serialised model's), the input
shapes and constants given, the library's version and its own source files (any change to the
loader, the graph or a descriptor is a new key), NumPy's and Python's versions. It is written
only after a load that succeeded and read nothing from outside the file (a model whose tensors
lie in external data files is loaded every time). A model given as a ``ModelProto`` is not
kept (its bytes are not at hand, and ``onnx`` is imported anyway).

Entries lie in the disk cache's library folder (``dml_numba_gen_onnx_model_<key>.pkl``; the
folder's trust checks, ``DML_NUMBA_DISK_CACHE=0``, ``cache clear`` and ``prune`` apply;
``DML_NUMBA_MODEL_CACHE=0`` keeps no model and reads none); a file
is unpickled only when it is a regular file of the current user's that no one else can write,
and one that cannot be read back is deleted and the model loaded from its file.
"""
from __future__ import annotations

import functools
import hashlib
import operator
import os
import pickle
import sys
from pathlib import Path

import numpy as np

from .. import _diskcache, _env
from .._trust import private_file
from .._version import __version__ as VERSION

PREFIX = f"{_diskcache.PREFIX}onnx_model_"
SUFFIX = ".pkl"


@functools.cache
def source_digest() -> str:
    """SHA-256 of the library's own source files (their paths and bytes)."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")):
        h.update(str(p.relative_to(root)).encode() + b"\0")
        h.update(p.read_bytes() + b"\0")
    return h.hexdigest()


def key(model, input_shapes, constants) -> str | None:
    """The entry's key for these arguments of ``compile_model``, or None where the load is not
    kept (a ``ModelProto``, a file that cannot be read, arguments the loader would refuse:
    those go to the loader, which says why; or nothing is kept: the file is not read)."""
    if not enabled() or not _diskcache.state().usable:
        return None
    try:
        if isinstance(model, (bytes, bytearray, memoryview)):
            data = bytes(model)
        elif isinstance(model, str) or hasattr(model, "__fspath__"):
            with open(model, "rb") as f:
                data = f.read()
        else:
            return None
        shapes = sorted((str(n), tuple(operator.index(v) for v in s))
                        for n, s in dict(input_shapes or {}).items())
        consts = []
        for n, v in sorted(dict(constants or {}).items()):
            a = np.ascontiguousarray(np.asarray(v))
            if a.dtype.hasobject:
                return None
            consts.append((str(n), a.dtype.str, a.shape, hashlib.sha256(a.tobytes()).hexdigest()))
    except (OSError, TypeError, ValueError):
        return None
    h = hashlib.sha256(repr((VERSION, source_digest(), np.__version__, sys.version_info[:3],
                             shapes, consts)).encode())
    h.update(data)
    return h.hexdigest()[:24]


def enabled() -> bool:
    """Whether loaded models are kept (``DML_NUMBA_MODEL_CACHE``, on by default; the disk
    cache must be usable too)."""
    return _env.flag("DML_NUMBA_MODEL_CACHE", True)


def _path(k: str) -> Path | None:
    if not enabled():
        return None
    st = _diskcache.state()
    return st.dir / f"{PREFIX}{k}{SUFFIX}" if st.usable else None


def read(k: str | None):
    """The loader's result kept under ``k``, or None (no entry, or one not to be trusted or
    that cannot be read back: deleted)."""
    path = _path(k) if k else None
    if path is None:
        return None
    try:
        if os.name != "nt" and not private_file(os.lstat(path)):
            path.unlink()
            return None
        with open(path, "rb") as f:
            value = pickle.load(f)
        if not (isinstance(value, tuple) and len(value) == 4):
            raise ValueError("not a loaded model")
        return value
    except FileNotFoundError:
        return None
    except Exception:  # noqa: BLE001 - truncated, another version's classes: load the file
        try:
            path.unlink()
        except OSError:
            pass
        return None


def write(k: str | None, value) -> None:
    """Keep the loader's result under ``k`` (atomically; a write that fails keeps nothing)."""
    path = _path(k) if k else None
    if path is None:
        return
    try:
        _diskcache._write_atomic(path, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception:  # noqa: BLE001 - a full disk, a value that does not pickle: not kept
        pass
