"""The one error type for invalid descriptors and bindings, and a small validation toolkit.

Every message names the operator, the field, the value and what was expected, e.g.
``Slice1OperatorDesc.input_window_strides[2]: 0 is invalid; strides must be non-zero``.
"""
from __future__ import annotations

import numbers
import operator
import os
import sys

import numpy as np

#: DirectML's UINT32 fields: sizes, strides, paddings, windows, repeats, counts are below this
UINT32_LIMIT = 1 << 32


class ValidationError(ValueError):
    """An invalid descriptor, binding or argument. Raised before anything is compiled or written."""


class DeviceUnavailableError(RuntimeError):
    """The requested device cannot run here (e.g. "cuda" without numba-cuda or a GPU)."""


def outside_stacklevel() -> int:
    """The ``stacklevel`` that makes a warning raised by the caller name the first frame outside
    this package: the user's line, however deep inside the library the warning starts."""
    root = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(root):
        frame, level = frame.f_back, level + 1
    return level


def fail(owner: str, field: str, value, expected: str):
    raise ValidationError(f"{owner}.{field}: {value!r} is invalid; {expected}")


class Checker:
    """Field checks for one descriptor; every failure raises ValidationError naming owner.field."""

    def __init__(self, owner: str):
        self.owner = owner

    def fail(self, field: str, value, expected: str):
        fail(self.owner, field, value, expected)

    def integer(self, field: str, value, *, lo: int | None = None, hi: int | None = None,
                nonzero: bool = False) -> int:
        """An exact ``int``. Unless ``hi``/``lo`` say otherwise, ``|value| < 2**32`` (what
        DirectML's 32-bit fields hold), so nothing validated can overflow generated code."""
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            self.fail(field, value, "expected an integer")
        value = int(operator.index(value))  # exact int: a subclass's str() never reaches codegen
        if hi is None and value >= UINT32_LIMIT:
            self.fail(field, value, f"expected an integer < 2**32 ({UINT32_LIMIT}), the range "
                                    "of DirectML's 32-bit fields")
        if lo is None and value <= -UINT32_LIMIT:
            self.fail(field, value, f"expected an integer > -2**32 (-{UINT32_LIMIT}), the range "
                                    "of DirectML's 32-bit fields")
        if lo is not None and value < lo:
            self.fail(field, value, f"expected an integer >= {lo}")
        if hi is not None and value > hi:
            self.fail(field, value, f"expected an integer <= {hi}")
        if nonzero and value == 0:
            self.fail(field, value, "strides must be non-zero" if "stride" in field
                      else "expected a non-zero integer")
        return value

    def int_tuple(self, field: str, value, *, length: int | None = None, lo: int | None = None,
                  hi: int | None = None, nonzero: bool = False) -> tuple[int, ...]:
        if (isinstance(value, (str, bytes)) or not hasattr(value, "__len__")
                or getattr(value, "ndim", 1) == 0):  # a 0-d array has __len__ but no length
            self.fail(field, value, "expected a sequence of integers")
        value = tuple(value)
        if length is not None and len(value) != length:
            self.fail(field, value,
                      f"expected {length} entries (one per dimension), got {len(value)}")
        return tuple(self.integer(f"{field}[{i}]", v, lo=lo, hi=hi, nonzero=nonzero)
                     for i, v in enumerate(value))

    def boolean(self, field: str, value) -> bool:
        """A DirectML BOOL: ``True``/``False``, a NumPy bool, or the integers 0 and 1."""
        if not isinstance(value, (bool, int, np.bool_)) or value not in (0, 1):
            self.fail(field, value, "expected a bool")
        return bool(value)

    def real(self, field: str, value, *, finite: bool = True) -> float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            self.fail(field, value, "expected a real number")
        value = float(value)
        if finite and (value != value or value in (float("inf"), float("-inf"))):
            self.fail(field, value, "expected a finite real number")
        return value

    def enum(self, field: str, value, enum_type):
        try:
            if isinstance(value, bool):
                raise ValueError
            return enum_type(value)
        except (ValueError, TypeError):
            names = ", ".join(f"{m.name}={m.value}" for m in enum_type)
            self.fail(field, value, f"expected a {enum_type.__name__} ({names})")

    def instance(self, field: str, value, cls, what: str, *, optional: bool = False):
        if value is None and optional:
            return None
        if not isinstance(value, cls):
            self.fail(field, value, f"expected {'None or ' if optional else ''}{what}")
        return value
