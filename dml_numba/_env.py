"""The library's environment variables, read through one parser per kind of value.

* booleans (``DML_NUMBA_DISK_CACHE``, ``DML_NUMBA_FAST_LOAD``, ``DML_NUMBA_DEBUG``,
  ``DML_NUMBA_LOAD_WATCH``, ``DML_NUMBA_MODEL_CACHE``): ``1``,
  ``true``, ``yes``, ``on`` and ``0``, ``false``, ``no``, ``off``, in any case, with spaces
  around; unset or empty is the default;
* counts (``DML_NUMBA_MEMORY_CACHE_SIZE``): a decimal integer in ASCII digits (not ``²`` or
  other scripts' digits, which ``str.isdigit`` accepts), at most 18 of them;
* choices (``DML_NUMBA_THREADING``, ``DML_NUMBA_TUNE``): one of the listed words, any case.

Anything else is not guessed at: one :class:`ConfigWarning` per variable and value names it and
says what is used instead (the default).
"""
from __future__ import annotations

import os
import re
import warnings

from ._errors import outside_stacklevel

TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")

_warned: set = set()


class ConfigWarning(UserWarning):
    """An environment variable of the library holds a value it does not understand."""


def _warn(name: str, raw: str, expected: str, used) -> None:
    if (name, raw) in _warned:
        return
    _warned.add((name, raw))
    warnings.warn(f"dml_numba: {name}={raw!r} is invalid; expected {expected}; using {used!r}",
                  ConfigWarning, stacklevel=outside_stacklevel())


def flag(name: str, default: bool) -> bool:
    """A boolean variable."""
    raw = os.environ.get(name)
    value = (raw or "").strip().lower()
    if not value:
        return default
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    _warn(name, raw, f"one of {', '.join(TRUE + FALSE)}", default)
    return default


def count(name: str, default: int, *, lo: int = 1) -> int:
    """A whole-number variable of at least ``lo``."""
    raw = os.environ.get(name)
    value = (raw or "").strip()
    if not value:
        return default
    if re.fullmatch(r"[0-9]{1,18}", value) and int(value) >= lo:
        return int(value)
    _warn(name, raw, f"a whole number >= {lo}", default)
    return default


def choice(name: str, choices: tuple[str, ...], default: str) -> str:
    """One of ``choices`` (lower case)."""
    raw = os.environ.get(name)
    value = (raw or "").strip().lower()
    if not value:
        return default
    if value in choices:
        return value
    _warn(name, raw, f"one of {', '.join(choices)}", default)
    return default
