"""Host memory for the large working buffers (a compiled graph's arena, the kernels' scratch)
in pages the operating system hands out at once.

NumPy asks Linux for transparent huge pages (``madvise(MADV_HUGEPAGE)``) for every array of
4 MiB and more. Where the kernel's huge-page defrag policy is "madvise" (the default of many
distributions), the first write to each 2 MiB of such an array, if no huge page is free, waits
while the kernel compacts memory in the writing thread. On a shared host whose memory is
fragmented that is most of a first call: a U-Net at batch 8 on 256 x 256 (a 160 MiB arena,
98 MiB of scratch) took 1.72-1.85 s in four of eight new processes on a 2-core VM and
0.44-0.71 s in the other four, its joins writing their 16-67 MiB outputs in 61-363 ms instead
of 2-8.

:func:`empty` gives a buffer of LARGE bytes or more an anonymous mapping of its own with no
huge-page advice where asking for huge pages can make a write wait for compaction (the defrag
policy "madvise" or "defer+madvise"; under "always", where any write can, the mapping asks for
none): ordinary pages where transparent huge pages are "madvise", huge ones found without
waiting where they are "always". Where the policy never waits ("defer", "never") or is not
Linux's, NumPy's array (its advice, where it gives one). ``DML_NUMBA_HUGE_PAGES=1`` asks for
huge pages whatever the policy, the first call's wait accepted (a long-running process: the
U-Net at batch 8 ran 1-3% faster with them, its first call 1.8-2.4 s against 0.5-0.6 s on the
host above); ``=0`` never does.
"""
from __future__ import annotations

import mmap
import os

import numpy as np

from . import _env

#: bytes from which NumPy asks for huge pages, and :func:`empty` maps the buffer itself
LARGE = 4 << 20
#: Linux's policy for finding huge pages (the chosen one in brackets)
DEFRAG = "/sys/kernel/mm/transparent_hugepage/defrag"
#: the policies under which a write to memory advised for huge pages can wait for compaction
STALLING = ("always", "madvise", "defer+madvise")


def policy() -> str | None:
    """Linux's defrag policy for transparent huge pages, or None (not Linux, none there)."""
    try:
        with open(DEFRAG) as f:
            text = f.read()
    except OSError:
        return None
    return text[text.index("[") + 1:text.index("]")] if text.count("[") == 1 else None


def huge_pages() -> bool:
    """Whether the large buffers are NumPy's arrays, huge pages asked for:
    ``DML_NUMBA_HUGE_PAGES`` where set, else where the asking never waits (:data:`STALLING`)."""
    return _asks(policy())


def _asks(chosen: str | None) -> bool:
    """:func:`huge_pages` under the defrag policy ``chosen``."""
    if (os.environ.get("DML_NUMBA_HUGE_PAGES") or "").strip():
        return _env.flag("DML_NUMBA_HUGE_PAGES", False)
    return chosen not in STALLING


def empty(shape, dtype) -> np.ndarray:
    """``np.empty(shape, dtype)``; of LARGE bytes or more, where :func:`huge_pages` is False,
    in memory mapped for it (see the module's docstring), page-aligned."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    nbytes = count * dtype.itemsize
    if nbytes < LARGE:
        return np.empty(shape, dtype)
    chosen = policy()  # read once
    if _asks(chosen):
        return np.empty(shape, dtype)
    mapped = mmap.mmap(-1, nbytes)
    if chosen == "always" and hasattr(mmap, "MADV_NOHUGEPAGE"):
        mapped.madvise(mmap.MADV_NOHUGEPAGE)
    return np.frombuffer(mapped, dtype, count).reshape(shape)


def contiguous(a, dtype) -> np.ndarray:
    """``np.ascontiguousarray(a, dtype)`` as a new array from :func:`empty` (a packed or
    transformed filter made on a model's first call: ResNet-18's 512-channel layers at 9.4-38
    MiB each took 73-306 ms of a first call instead of 17-38 in NumPy's arrays on a host with
    no free huge page)."""
    out = empty(np.shape(a), dtype)
    np.copyto(out, a, casting="same_kind")
    return out
