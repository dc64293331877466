"""What the convolution kernels share: the key's parallel choice from the work, the accumulator
type, per-thread scratch buffers (:mod:`dml_numba.cpu._scratch`, under the names the kernels
import them by here), and the call through the accumulator."""
from __future__ import annotations

import functools

import numpy as np

from ...ops.convolution import geometry
from .._emit import CpuKernel, make_key, run_in_accumulator
from .._scratch import LINE, _scratch, line_aligned, reserve, reserve_for, scratch  # noqa: F401


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

    def slots(self) -> int:
        """The slots a call in slots (:meth:`slots_call`) takes now: a thread each, up to the
        kernel's ``items``."""
        import numba

        return min(numba.get_num_threads(), self.items)

    def slots_call(self, args, y, unpadded=None):
        """:meth:`_in_slots` as ``(fn, arguments)``, the slots and scratch settled now (a
        native run's steps, :mod:`dml_numba.cpu._native`)."""
        slots = self.slots()
        xp = self.buffer((slots * self.copy_size,)) if self.copy_size else unpadded
        return self.fn, (*args, y, xp, slots)

    def __call__(self, inputs, out):
        run_in_accumulator(self.acc, self.run, inputs, out)

    def bound(self, inputs, y):
        return functools.partial(self.run, inputs, y)

    def run(self, inputs, y):  # pragma: no cover - every kernel overrides it
        raise NotImplementedError


