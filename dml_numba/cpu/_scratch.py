"""The calling thread's kernel scratch: one buffer every CPU kernel called from a thread
shares for what it writes and reads within one call (padded copies of the input, im2col
columns, Winograd's transformed tiles), and what a compiled graph reserves of it before binding
its steps."""
from __future__ import annotations

import threading

import numpy as np

from .. import _pages

#: bytes of a cache line (x86 and most ARM cores)
LINE = 64

_scratch = threading.local()


def scratch(shape, dtype) -> np.ndarray:
    """A scratch array of ``shape`` and ``dtype`` starting on a cache line: a view of the one
    buffer every kernel called from this thread shares. A kernel's scratch holds nothing from
    one call to the next (each call writes what it reads there, zero padding included, before
    reading it), and a thread runs one kernel at a time, so the kernels need no scratch of
    their own: a graph's steps, bound once, each keep a view of the same memory. Where the
    buffer is too small a new one twice its size (or the size asked) replaces it; views made
    before keep theirs. U-Net at batch 8 on 256 x 256 (a 2-core VM): its seven convolutions
    that copy their padded input first had 158 MiB of copies of their own (1.1 to 65 MiB
    each), its Winograd layers a scratch besides, every page faulted in by the first call;
    98 MiB in all now. The first call of a new process 0.50-2.27 s (median 0.73 of six) before,
    0.44-0.51 after; the process's peak memory 500 MB before, 436-449 after."""
    dtype = np.dtype(dtype)
    need = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    buf = getattr(_scratch, "buf", None)
    if buf is None or buf.nbytes < need:
        grown = max(need, 2 * (0 if buf is None else buf.nbytes))
        buf = _scratch.buf = line_aligned((grown,), np.uint8)
    return buf[:need].view(dtype).reshape(shape)


def reserve(nbytes: int) -> None:
    """This thread's scratch grown to ``nbytes`` now, where it is smaller: a compiled graph
    reserves its steps' largest before binding them, since a bound step keeps views of the
    buffer it was bound with, and one grown between two bindings would leave the steps bound
    before it on a buffer of their own, each generation kept alive (the U-Net at batch 1, its
    Winograd steps bound as the scratch grew: 1.046x the time of those steps called unbound in
    one process, 0.964x in another; with the scratch reserved first 0.953x and 0.968x)."""
    if nbytes > 0:
        scratch((nbytes,), np.uint8)


def reserve_for(kernels) -> None:
    """:func:`reserve` the most any of ``kernels`` takes (their ``scratch_bytes``; a kernel
    without one takes none)."""
    reserve(max((getattr(k, "scratch_bytes", lambda: 0)() for k in kernels), default=0))


def line_aligned(shape, dtype) -> np.ndarray:
    """``np.empty(shape, dtype)`` starting on a cache line: the slots that parallel iterations
    write (the blocked convolution's slots) then share no line, where a line across two
    slots passes between the cores at every plane (measured: MobileNetV2's depthwise layers at
    batch 8 on 14x14, 0.19 ms on one allocation and 0.27 on another)."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    raw = _pages.empty(count * dtype.itemsize + LINE, np.uint8)
    start = -raw.ctypes.data % LINE
    return raw[start:start + count * dtype.itemsize].view(dtype).reshape(shape)
