"""Arrays the library itself made read-only and owns (an ONNX model's weights, copied at load):
work derived from one of them alone (a convolution's packed filter) may be kept for its next
call, since nothing can write it. An array the caller passes is never taken for one: a read-only
view of the caller's writable memory is not frozen."""
from __future__ import annotations

import weakref

import numpy as np

_FROZEN: dict[int, weakref.ref] = {}


def freeze(a: np.ndarray) -> np.ndarray:
    """``a`` (an array the library owns: no one else holds a writable view of its memory), made
    read-only and remembered as frozen while it lives."""
    a.flags.writeable = False
    key = id(a)
    _FROZEN[key] = weakref.ref(a, lambda _r, key=key: _FROZEN.pop(key, None))
    return a


def is_frozen(a) -> bool:
    ref = _FROZEN.get(id(a))
    return ref is not None and ref() is a


class Derived:
    """What a kernel derives from a frozen array, kept per array while it lives (a small
    number a kernel: one per model bound to it)."""

    def __init__(self):
        self._kept: dict[int, tuple] = {}

    def get(self, a, make):
        """``make(a)``, computed once for a frozen ``a`` (every time for any other)."""
        if not is_frozen(a):
            return make(a)
        hit = self._kept.get(id(a))
        if hit is not None and hit[0]() is a:
            return hit[1]
        value = make(a)
        key = id(a)
        self._kept[key] = (weakref.ref(a, lambda _r, key=key: self._kept.pop(key, None)), value)
        return value
