"""Housekeeping of the disk cache's library folder: stale temporaries, what it holds
(:func:`usage`), :func:`clear` and :func:`prune`. Beside other processes that compile, prune or
clear at the same time: every file is stat'ed once when listed, and a file that vanishes
meanwhile counts for nothing (never an error)."""
from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import NamedTuple

from ._diskcache import ENTRY, scan, state


class _File(NamedTuple):
    """A recognised file of the library folder as it was when listed."""

    path: str
    size: int
    last_use: float  # the later of its modification and access times


def _entries(sub: Path) -> dict[str, list[_File]]:
    """Recognised files of the library folder, grouped by module name, each stat'ed once when
    listed; a file that vanishes meanwhile (another process pruning or replacing it) is left
    out."""
    groups: dict[str, list] = {}
    for e in scan(sub, sub / "__pycache__"):
        m = ENTRY.match(e.name)
        if not m:
            continue
        try:
            st = e.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            groups.setdefault(m.group(1), []).append(
                _File(e.path, st.st_size, max(st.st_mtime, st.st_atime)))
    return groups


def usage() -> dict:
    """Root, library folder, state, number of generated modules and their bytes on disk."""
    st = state()
    groups = _entries(st.dir) if st.usable else {}
    return {"dir": str(st.root), "library_dir": str(st.dir) if st.dir else None,
            "on": st.usable, "reason": st.reason, "modules": len(groups),
            "bytes": sum(f.size for g in groups.values() for f in g)}


def _delete(files) -> int:
    """Delete ``files``; the bytes this call freed (a file another process deleted first
    counts for nothing)."""
    freed = 0
    for f in files:
        try:
            os.unlink(f.path)
            freed += f.size
        except OSError:
            pass
    return freed


def clear() -> dict:
    """Delete every recognised entry of the library folder (nothing else); returns counts."""
    st = state()
    if not st.usable:
        return {"modules": 0, "bytes": 0, "reason": st.reason}
    groups = _entries(st.dir)
    freed = sum(_delete(files) for files in groups.values())
    for name in groups:
        sys.modules.pop(name, None)
    return {"modules": len(groups), "bytes": freed, "reason": ""}


def prune(max_bytes: int) -> dict:
    """Delete least recently used entries until the folder holds at most ``max_bytes``."""
    st = state()
    if not st.usable:
        return {"modules": 0, "bytes": 0, "remaining": 0, "reason": st.reason}
    groups = _entries(st.dir)

    sized = sorted(((max(f.last_use for f in files), n, files, sum(f.size for f in files))
                    for n, files in groups.items()), key=lambda t: t[0])
    total = sum(t[3] for t in sized)
    removed = freed = 0
    for _, name, files, size in sized:
        if total <= max_bytes:
            break
        got = _delete(files)
        freed += got
        total -= size
        removed += 1
        sys.modules.pop(name, None)
    return {"modules": removed, "bytes": freed, "remaining": total, "reason": ""}
