"""``algorithm="blocked"``: register-blocked SIMD tiles (float32 and float16).

FORWARD (``forward.py``), a strided last axis stored by stride phase; BACKWARD per stride phase,
both phases of a stride-2 row in one tile (``transposed.py``); one input channel per group plane
by plane (``depthwise.py``), or, on output rows narrower than a vector, with the
channels in the lanes, the planes transposed pixel-major (``depthwise_lanes.py``). The input
is zero-padded (``padding.py``: per image and group just
before its tiles where the pairs are many and small, else the whole input first), the filter
packed once per call, and for each tile of output channels x rows x vectors of pixels (or x
vectors of the padded plane flattened, where rows would waste lanes) the accumulators are held in
LLVM vector registers (``cpu/_simd.py``), every multiply-add a fused vector FMA (``tile.py``);
all inside Numba's own thread pool. FORWARD has a second tile, the channels tile
(``blocked-channels``): output channels in the lanes and each input pixel broadcast from memory
(as oneDNN's kernels do), for a run of pixels along a row, transposed in registers and stored
a plane's row at a time; it wastes no lanes on rows that are not a multiple of the vector, and
a pixel read by several taps is broadcast once. The plan (``plan.py``) is chosen for the host
(the cost model picks among the tiles: ``choice.blocked_plan``) and goes into the kernel's
key; each tile is a
variant (``variants.py``: ``Pixels``, ``Transposed``, ``Depthwise``, ``DepthwiseLanes``,
``Channels``) that names
its kernel and its emitter.
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from ...._cache import KernelKey
from ...._dims import prod
from ...._frozen import Derived, is_frozen
from ..base import ConvolutionKernel, conv_key
from . import depthwise_lanes
from .plan import BlockPlan, needs_copy, pack_filter, pointwise_as_1d
from .tile import slot_elements


class BlockedKernel(ConvolutionKernel):
    """The blocked kernel of ``desc`` with the tile ``plan``, made by ``variant`` (the tile's
    class in :mod:`..variants`: its kernel's name in the key and its emitter)."""

    algorithm = "blocked"

    def __init__(self, desc, options, plan: BlockPlan, variant):
        self.desc, self.options, self.tile = desc, options, variant
        self.kdesc = pointwise_as_1d(desc) or desc  # what the kernel is generated for
        self.plan = plan
        p = self.plan
        key = KernelKey("cpu", self.kdesc, variant.kind(self.kdesc, p),
                        conv_key(desc, options).parallel, plan=p)
        n_args = 4 + (desc.bias_tensor is not None) + plan.addend
        slots = [(np.dtype(np.int64), 0)] if p.depthwise or p.staged else []
        super().__init__(key, variant.emit, [(self.acc, 1)] * n_args + slots, options)
        # elements of the padded copy of the input (0: the kernel reads the input in place);
        # per slot, the depthwise kernel pads one plane, the staged one a group's planes
        sizes = self.kdesc.input_tensor.sizes
        # the parallel items: a depthwise kernel's planes (blocks of planes with the channels
        # in the lanes), a staged kernel's (image, group) pairs
        self.items = (depthwise_lanes.units(self.kdesc, p) if p.depthwise and p.pixels
                      else sizes[0] * desc.group_count)
        planes = (1 if p.depthwise else sizes[1] // desc.group_count if p.staged
                  else sizes[1] if p.woven and not p.fold else prod(sizes[:2]))
        self.copy_size = planes * prod(p.padded) if needs_copy(self.kdesc) else 0
        if p.depthwise and p.pixels:  # a block's planes transposed, padded, always
            self.copy_size = prod(p.padded) * p.lanes
        if (p.depthwise or p.staged) and self.copy_size:  # a slot each: whole cache lines
            self.copy_size = slot_elements(self.copy_size)
        self._packed = Derived()  # the packed filter of a frozen (a model's own) filter

    def with_addend(self, desc):
        """The same tile adding the addend in its epilogue (float32, the pixels and channels
        tiles: :attr:`BlockPlan.addend`); float16 would round the sum once where the nodes
        one by one round the convolution's result first."""
        if not (self.tile.takes_addend and self.acc == desc.output.data_type.numpy):
            return None
        return BlockedKernel(desc, self.options, dataclasses.replace(self.plan, addend=True),
                             self.tile)

    def scratch_bytes(self) -> int:
        """The padded copy of the input: one, or one a slot (a thread) where the copies are
        per plane or group (:meth:`slots_call`)."""
        slots = self.slots() if self.plan.depthwise or self.plan.staged else 1
        return slots * self.copy_size * self.acc.itemsize

    def run(self, inputs, y):
        self._call_on(inputs, y)()

    def bound(self, inputs, y):
        """The kernel's call on these arrays: the flat views and a model's packed filter
        settled now where the input is C-contiguous and the filter frozen (else each call
        makes them, as :meth:`run` does)."""
        if not (inputs[0].flags.c_contiguous and is_frozen(inputs[1])):
            return functools.partial(self.run, inputs, y)
        return self._call_on(inputs, y)

    def _call_on(self, inputs, y):
        """The kernel's call on these arrays flattened (the input made C-contiguous, the
        filter packed), as a call of no arguments."""
        x = np.ascontiguousarray(inputs[0]).reshape(-1)
        wp = self._packed.get(inputs[1], lambda w: pack_filter(self.kdesc, w, self.plan))
        # the bias and the addend, flat (read only: views, or copies where they are strided)
        bias = [np.ascontiguousarray(inputs[2]).reshape(-1)] if (
            self.desc.bias_tensor is not None) else []
        if self.plan.addend:
            bias.append(np.ascontiguousarray(inputs[-1]).reshape(-1))
        if self.plan.depthwise or self.plan.staged:  # a padded plane / group per slot
            return functools.partial(self._in_slots, (x, wp, *bias), y.reshape(-1), x)
        xp = self.buffer((self.copy_size,)) if self.copy_size else x
        return functools.partial(self.fn, x, wp, *bias, y.reshape(-1), xp)
