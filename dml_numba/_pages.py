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
page-size advice: the system's own policy (ordinary pages where transparent huge pages are
"madvise"; huge ones, without waiting for compaction, where they are "always" and defrag is
"madvise"). ``DML_NUMBA_HUGE_PAGES=1`` leaves such buffers to NumPy (huge pages asked for, the
first call's wait accepted: a long-running process whose steady state is what counts).
"""
from __future__ import annotations

import mmap

import numpy as np

from . import _env

#: bytes from which NumPy asks for huge pages, and :func:`empty` maps the buffer itself
LARGE = 4 << 20


def empty(shape, dtype) -> np.ndarray:
    """``np.empty(shape, dtype)``; of LARGE bytes or more, in memory mapped for it (see the
    module's docstring), page-aligned."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    nbytes = count * dtype.itemsize
    if nbytes < LARGE or _env.flag("DML_NUMBA_HUGE_PAGES", False):
        return np.empty(shape, dtype)
    return np.frombuffer(mmap.mmap(-1, nbytes), dtype, count).reshape(shape)
