"""A depthwise convolution of a pointwise convolution's result on the CPU (a graph's pair rule:
MobileNet's expansion and the depthwise layer after it,
:class:`~dml_numba.ops.pointwise_depthwise.PointwiseDepthwiseDesc`).

Where the depthwise convolution is strided and the depthwise lanes kernel applies (its
channels in the vector lanes, each item's padded rows pixel-major in a slot of its own, a band
of output rows at a time: ``blocked/depthwise_lanes.py``), one kernel computes the pair
(:func:`~.convolution.blocked.depthwise_lanes.emit_pointwise`): each band's padded rows of the
pointwise result are computed straight into the slot (a vector of the block's channels a
pixel: the bias, each input channel's weight vector times the pixel's value, the activation)
instead of being copied there, transposed, from a result stored whole; the result never
leaves the second-level cache. Measured inside MobileNetV2 at batch 1 on an AMD EPYC (Zen 4,
AVX-512): the 16 -> 96 expansion on 112 x 112 and the stride-2 depthwise layer after it 0.66
ms one by one (0.29 and 0.37), 0.30 fused alone; the model 1.03x with that pair fused, 1.06x
with the four strided pairs.

Elsewhere (unit strides, float16, a forced ``algorithm``) the two convolutions run
one by one, each its own kernel as it would alone, the pointwise result in a buffer made for
the call.
"""
from __future__ import annotations

import functools

import numpy as np

from .._cache import KernelKey
from .._frozen import Derived, is_frozen
from .._registry import lowering_for, lowering_options, register
from ..ops.convolution import ConvolutionOperatorDesc
from ..ops.pointwise_depthwise import PointwiseDepthwiseDesc
from ..tensor import DataType
from . import convolution  # noqa: F401 - its lowering first: its options are this one's
from ._emit import Host, make_key
from .convolution.base import ConvolutionKernel, conv_work
from .convolution.blocked.depthwise_lanes import emit_pointwise, units
from .convolution.blocked.plan import depthwise_lanes, depthwise_lanes_plan, pack_filter
from .convolution.blocked.tile import slot_elements, vector_activation

#: the key's kernel name
KIND = "blocked-pointwise-depthwise-lanes"


def fuses(desc: PointwiseDepthwiseDesc, host: Host) -> bool:
    """Whether one kernel computes ``desc`` on ``host``: float32 2-D convolutions, the
    depthwise one strided and within the depthwise lanes kernel's reach
    (:func:`depthwise_lanes`: its channels a whole number of vectors, every tap's weight
    vector held), the pointwise activation one with a vector form.

    Strided only: there the pointwise result is four times the output and more than a core's
    second-level cache. At unit strides it is no larger than the output, and the layers were
    faster apart: MobileNetV2 at batch 1 on an AMD EPYC (Zen 4, 16 lanes), its four strided
    pairs fused 1.069x, all thirteen pairs whose depthwise layer takes the lanes kernel 1.055x.
    Wherever the lanes kernel applies, not only where the planner takes it for the depthwise
    layer alone (:func:`takes_depthwise_lanes`: with 8 lanes, rows narrower than a vector):
    with 8-lane plans on the same machine, the three strided pairs on wider rows fused too
    1.002x and 1.027x at batch 1, 1.078x at batch 8, against their plane-by-plane kernels."""
    pw, dw = desc.pointwise, desc.depthwise
    return (pw.input_tensor.data_type == DataType.FLOAT32 and pw.input_tensor.rank == 4
            and vector_activation(pw) is not None and any(s > 1 for s in dw.strides)
            and depthwise_lanes(dw, host) > 0)


class PointwiseDepthwiseKernel(ConvolutionKernel):
    """The pair as one kernel (:func:`fuses`)."""

    algorithm = "blocked"

    def __init__(self, desc, options, host: Host):
        self.desc = desc
        pw, dw = desc.pointwise, desc.depthwise
        self.plan = plan = depthwise_lanes_plan(dw, host)
        parallel = make_key(desc, options, work=conv_work(pw) + conv_work(dw)).parallel
        key = KernelKey("cpu", desc, KIND, parallel, plan=plan)
        arrays = 5 + (pw.bias_tensor is not None) + (dw.bias_tensor is not None)  # y, xp too
        super().__init__(key, emit_pointwise, [(self.acc, 1)] * arrays +
                         [(np.dtype(np.int64), 0)], options)
        self.items = units(dw, plan, pointwise=True)
        self.copy_size = slot_elements(int(np.prod(plan.padded)) * plan.lanes)
        self._packed = (Derived(), Derived())  # the packed filters of frozen (a model's) ones

    def scratch_bytes(self) -> int:
        """A padded block of planes a slot (a thread)."""
        return self.slots() * self.copy_size * self.acc.itemsize

    def _pack_pointwise(self, w):
        """[block][input channel][lanes]: each input channel's weight vector of a block."""
        c, cin, lanes = w.shape[0], w.shape[1], self.plan.lanes
        return np.ascontiguousarray(w.reshape(c // lanes, lanes, cin).transpose(0, 2, 1),
                                    dtype=np.float32).reshape(-1)

    def bound(self, inputs, y):
        if not (inputs[0].flags.c_contiguous and all(map(is_frozen, inputs[1:]))):
            return functools.partial(self.run, inputs, y)
        return self._call_on(inputs, y)

    def _call_on(self, inputs, y):
        pw, dw = self.desc.pointwise, self.desc.depthwise
        flat = [np.ascontiguousarray(a).reshape(-1) for a in inputs]
        first = 2 + (pw.bias_tensor is not None)
        w1 = self._packed[0].get(inputs[1], self._pack_pointwise)
        wp = self._packed[1].get(inputs[first], lambda w: pack_filter(dw, w, self.plan))
        args = [flat[0], w1, *flat[2:first], wp, *flat[first + 1:]]
        return functools.partial(self._in_slots, args, y.reshape(-1))

    def run(self, inputs, y):
        self._call_on(inputs, y)()


class OneByOne:
    """The pair as the two convolutions one by one, each its own kernel, the pointwise result
    in a buffer made for the call."""

    def __init__(self, desc, options):
        self.desc = desc
        conv = lowering_for(ConvolutionOperatorDesc, "cpu")
        self.first, self.second = conv(desc.pointwise, options), conv(desc.depthwise, options)
        self.key = None
        self.source = "\n".join(s for s in (getattr(self.first, "source", None),
                                            getattr(self.second, "source", None)) if s)
        self._split = 2 + (desc.pointwise.bias_tensor is not None)

    def __call__(self, inputs, out):
        mid = np.empty(self.desc.pointwise.output.sizes, out.dtype)
        self.first(list(inputs[:self._split]), mid)
        self.second([mid, *inputs[self._split:]], out)

    def bind(self, inputs, out):
        return functools.partial(self, inputs, out)


def make_kernel(desc, options):
    """One kernel where it :func:`fuses` the pair (no ``algorithm`` forced: the tuner's choice
    is not asked, the one kernel runs), else the two one by one."""
    host = Host.current()
    if options.get("algorithm") is None and fuses(desc, host):
        return PointwiseDepthwiseKernel(desc, options, host)
    return OneByOne(desc, options)


def runs_as_one(desc) -> bool:
    """What the graph's pair rule asks: whether this machine's kernel computes ``desc`` as one
    (else the rule leaves the two nodes apart, their result in the graph's own buffers)."""
    return fuses(desc, Host.current())


make_kernel.runs_as_one = runs_as_one
#: the convolution's options but ``input_padding`` (whose window would read through the mode:
#: the pair reads zeros, and the graph's pair rule takes no folded padding)
register(PointwiseDepthwiseDesc, "cpu",
         options={k: v for k, v in lowering_options(ConvolutionOperatorDesc, "cpu").items()
                  if k != "input_padding"})(make_kernel)
