"""Whether a folder may be trusted with files the library will execute or unpickle: the
checks of the disk cache (:mod:`dml_numba._diskcache`), the way pip and OpenSSH trust theirs.

* a folder of ours must be a real folder, owned by the current user and not writable by group
  or others (:func:`untrusted`); folders the library creates are 0700 (:func:`private_dir`,
  :func:`makedirs_private`);
* every folder on the way to it must be one no other user can rewrite (:func:`unsafe_path`).
"""
from __future__ import annotations

import os
import stat
from pathlib import Path


def untrusted(path: Path, what: str) -> str | None:
    """Why ``path`` (a folder) must not be trusted, or None. POSIX: a real folder, owned by the
    current user, not writable by group or others. Windows has no uid/mode: the folder is under
    the user's profile by default and only its existence is checked."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"{what} {path} cannot be inspected ({exc.strerror or exc})"
    if stat.S_ISLNK(st.st_mode) and what != "cache folder":
        return f"{what} {path} is a symbolic link"
    if stat.S_ISLNK(st.st_mode):  # the configured root may be a link: judge what it points to
        try:
            st = os.stat(path)
        except OSError as exc:
            return f"{what} {path} cannot be inspected ({exc.strerror or exc})"
    if not stat.S_ISDIR(st.st_mode):
        return f"{what} {path} is not a folder"
    if os.name == "nt":  # pragma: no cover - no POSIX ownership on Windows
        return None
    if st.st_uid != os.getuid():
        return f"{what} {path} is owned by uid {st.st_uid}, not by the current user ({os.getuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return (
            f"{what} {path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o}; "
            "expected 0700 or 0755)"
        )
    return None


def private_file(st) -> bool:
    """Whether ``st`` (an ``lstat`` result, POSIX) is a regular file owned by the current user
    and writable by nobody else: what a cache entry's files and the tuner's wisdom must be."""
    return (stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid()
            and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


_TRUSTED_OWNERS = (0,)  # root, besides the current user
_MAX_LINKS = 40  # symbolic links followed on one path (Linux's own limit)


def unsafe_path(path: Path) -> str | None:
    """Why another user could swap ``path`` or a folder on the way to it, or None.

    Every folder in which a name is looked up to reach ``path`` (each ancestor, and those on
    the way to a symbolic link's target) must be owned by root or the current user and not
    writable by group or others, as OpenSSH's ``safe_path`` requires; a sticky folder (such as
    ``/tmp``) writable by others is allowed where the entry looked up in it is owned by root or
    the current user (only they can rename or remove it there). Otherwise a user who can write
    that folder could replace what follows it by a link to files of theirs between our checks
    and Numba's opening of its index, and their pickle would run as the current user.
    """
    if os.name == "nt":  # pragma: no cover - no POSIX ownership on Windows
        return None
    owners = (os.getuid(),) + _TRUSTED_OWNERS
    links = 0
    # not os.path.abspath: ".." is resolved physically below, after the links before it
    pending = list(Path(os.getcwd(), path).parts[1:])
    current = Path("/")
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            current = current.parent
            continue
        entry = current / part
        try:
            folder = os.stat(current)
            st = os.lstat(entry)
        except FileNotFoundError:
            st = None  # to be created by us (so ours), in a folder that must still pass
        except NotADirectoryError:
            return None  # no folder to create it in: creating it fails, and says so
        except OSError as exc:
            return f"the folder {current} cannot be inspected ({exc.strerror or exc})"
        if folder.st_uid not in owners:
            return (f"the folder {current} on the way to the cache is owned by uid "
                    f"{folder.st_uid}, not by root or the current user ({os.getuid()})")
        if folder.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not (
                folder.st_mode & stat.S_ISVTX and (st is None or st.st_uid in owners)):
            sticky = " (sticky, but the entry in it is another user's)" if (
                folder.st_mode & stat.S_ISVTX) else ""
            return (f"the folder {current} on the way to the cache is writable by group or "
                    f"others (mode {stat.S_IMODE(folder.st_mode):04o}){sticky}, so another user "
                    f"could replace {entry}")
        if st is None:
            return None
        if stat.S_ISLNK(st.st_mode):
            links += 1
            if links > _MAX_LINKS:
                return f"too many symbolic links on the way to {path}"
            target = Path(os.readlink(entry))
            pending = list(target.parts[1:] if target.is_absolute() else target.parts) + pending
            if target.is_absolute():
                current = Path("/")
        else:
            current = entry
    return None


def private_dir(path: Path, what: str) -> str | None:
    """Create ``path`` 0700 if missing (folders of ours are tightened to 0700); why not, or None."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        return f"{what} {path} cannot be created ({exc.strerror or exc})"
    why = untrusted(path, what)
    if why is None and os.name != "nt":
        mode = stat.S_IMODE(os.lstat(path).st_mode)
        if mode & 0o077:
            try:
                os.chmod(path, 0o700)
            except OSError as exc:  # pragma: no cover - we own it
                return f"{what} {path} cannot be made private ({exc.strerror or exc})"
    return why


def makedirs_private(path: Path) -> None:
    """Create ``path`` and its missing parents 0700, whatever the umask (a parent created
    writable by others would make the path one that others could swap)."""
    missing = []
    while not os.path.lexists(path):
        missing.append(path)
        path = path.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            continue
        if os.name != "nt":
            os.chmod(folder, 0o700)
