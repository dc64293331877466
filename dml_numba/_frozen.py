"""Arrays the library itself made read-only and owns (an ONNX model's weights, copied at load):
work derived from one of them alone (a convolution's packed filter) may be kept for its next
call, since nothing can write it. An array the caller passes is never taken for one: a read-only
view of the caller's writable memory is not frozen.

A frozen array is a read-only view of memory the library keeps writable for one use: the
kernels' arguments (:func:`as_argument`). A generated kernel is loaded for writable arrays; a
read-only one is another Numba type, and a call with it loaded the kernel a second time (from
the disk cache, 3 to 10 ms a kernel: 31 of MobileNetV2's at batch 1, 0.12 s of its first call).
No kernel writes its inputs."""
from __future__ import annotations

import weakref

import numpy as np

_FROZEN: dict[int, weakref.ref] = {}
#: a frozen array's id -> the writable array over the same memory (frozen too) that kernels take
_ARGUMENT: dict[int, np.ndarray] = {}


def _remember(a: np.ndarray) -> None:
    key = id(a)

    def forget(_r, key=key):
        _FROZEN.pop(key, None)
        _ARGUMENT.pop(key, None)

    _FROZEN[key] = weakref.ref(a, forget)


def freeze(a: np.ndarray) -> np.ndarray:
    """A read-only view of ``a`` (an array the library owns: no one else holds a writable view
    of its memory), remembered as frozen while it lives; ``a`` itself is kept, writable, for
    the kernels' arguments only (:func:`as_argument`)."""
    if not a.flags.writeable:  # already read-only: no writable view to keep for the kernels
        _remember(a)
        return a
    ro = a.view()
    ro.flags.writeable = False
    _remember(ro)
    _remember(a)  # frozen too: what is derived from it is kept as from the read-only view
    _ARGUMENT[id(ro)] = a
    return ro


def is_frozen(a) -> bool:
    ref = _FROZEN.get(id(a))
    return ref is not None and ref() is a


def as_argument(a):
    """``a`` as a kernel's argument: a frozen array as the writable array over its memory
    (the type the kernels were loaded for; frozen too); any other as it is."""
    return _ARGUMENT.get(id(a), a) if is_frozen(a) else a


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
