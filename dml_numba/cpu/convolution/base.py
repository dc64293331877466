"""What the convolution kernels share: the key's parallel choice from the work, the accumulator
type, per-thread scratch buffers, and the call through the accumulator."""
from __future__ import annotations

import functools
import threading

import numpy as np

from ... import _pages
from ...ops.convolution import geometry
from .._emit import CpuKernel, make_key, run_in_accumulator


def conv_work(desc) -> int:
    """A convolution's multiply-adds: outputs x input channels per group x taps."""
    geo = geometry(desc)
    return desc.output_tensor.element_count * geo.in_channels * geo.taps


def conv_key(desc, options):
    """The key of a convolution's main kernel: serial or parallel from its multiply-adds
    (:func:`conv_work`), unless ``options`` says."""
    return make_key(desc, options, work=conv_work(desc))


class ConvolutionKernel(CpuKernel):
    """A convolution kernel on the CPU: ``algorithm`` ("direct", "gemm" or "blocked"),
    ``acc`` (the type it computes in), ``run(inputs, y)`` on inputs and output in that type."""

    algorithm = ""
    acc = np.dtype(np.float32)

    def variant(self) -> str:
        """The algorithm and, where the kernel has both, the variant the next call runs."""
        return f"{self.algorithm}, {super().variant()}"

    def compiled_keys(self) -> tuple:
        """The keys of the generated kernels this one runs (the tuner asks which of them this
        process compiled)."""
        return (self.key,)

    def with_addend(self, desc):
        """This kernel's computation for ``desc`` (the operator with its activation) taking an
        addend in its own epilogue (inputs: the operator's, then the addend; the activation
        after the sum), or None where it takes none (:mod:`dml_numba.cpu.fused_add`)."""
        return None

    def buffer(self, shape) -> np.ndarray:
        """A scratch array of ``shape`` in the accumulator type: :func:`scratch`."""
        return scratch(shape, self.acc)

    def _in_slots(self, args, y, unpadded=None):
        """``self.fn(*args, y, xp, slots)`` with as many slots as threads now (up to the
        kernel's ``items``), each with its own ``copy_size`` elements of the scratch ``xp``
        (``unpadded``, the input read in place, where the kernel copies nothing)."""
        fn, full = self.slots_call(args, y, unpadded)
        fn(*full)

    def slots_call(self, args, y, unpadded=None):
        """:meth:`_in_slots` as ``(fn, arguments)``, the slots and scratch settled now (a
        native run's steps, :mod:`dml_numba.cpu._native`)."""
        import numba

        slots = min(numba.get_num_threads(), self.items)
        xp = self.buffer((slots * self.copy_size,)) if self.copy_size else unpadded
        return self.fn, (*args, y, xp, slots)

    def __call__(self, inputs, out):
        run_in_accumulator(self.acc, self.run, inputs, out)

    def bound(self, inputs, y):
        return functools.partial(self.run, inputs, y)

    def run(self, inputs, y):  # pragma: no cover - every kernel overrides it
        raise NotImplementedError


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
    before it on a buffer of their own (the U-Net at batch 1, its Winograd layers bound one
    after another as the scratch grew: 4.6% slower than on one buffer)."""
    if nbytes > 0:
        scratch((nbytes,), np.uint8)


def line_aligned(shape, dtype) -> np.ndarray:
    """``np.empty(shape, dtype)`` starting on a cache line: the slots that parallel iterations
    write (:func:`~.blocked.tile.slot_elements`) then share no line, where a line across two
    slots passes between the cores at every plane (measured: MobileNetV2's depthwise layers at
    batch 8 on 14x14, 0.19 ms on one allocation and 0.27 on another)."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    raw = _pages.empty(count * dtype.itemsize + LINE, np.uint8)
    start = -raw.ctypes.data % LINE
    return raw[start:start + count * dtype.itemsize].view(dtype).reshape(shape)
