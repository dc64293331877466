"""A depthwise convolution of a pointwise convolution's result: not a DirectML struct, but what
:func:`dml_numba.graph.compile_graph` compiles such a pair to where the pointwise result is read
by the depthwise convolution alone (the graph's pair rule: MobileNet's expansion and the
depthwise layer after it).

``Y = depthwise(pointwise(X))``, each with its own fused activation: the same arithmetic as
the two nodes one by one (the pointwise result rounded to its type, then read by the
depthwise windows, its padding zeros), without storing the pointwise result whole: a kernel
may compute it a band of rows at a time, where the depthwise windows read it.
"""
from __future__ import annotations

__all__ = ["PointwiseDepthwiseDesc"]

from dataclasses import dataclass

from ..tensor import TensorDesc
from ._base import OperatorDesc, check_same_tensor

#: the binding order: the pointwise convolution's inputs, then the depthwise filter and bias
_FIELDS = ("input_tensor", "filter_tensor", "bias_tensor", "depthwise_filter_tensor",
           "depthwise_bias_tensor")


@dataclass(frozen=True)
class PointwiseDepthwiseDesc(OperatorDesc):
    """``pointwise``: a convolution whose every output element is a weighted sum over the
    channels of the input pixel at its own coordinates (its ``is_pointwise()``: a 1 x 1
    FORWARD convolution of one group, unit strides, no padding); ``depthwise``: a convolution
    whose every output channel is a window over its own input channel alone (its
    ``is_depthwise()``), reading the pointwise output (its sizes and type). Inputs: the
    pointwise convolution's, then the depthwise filter and bias.

    >>> import numpy as np
    >>> from dml_numba import functional as F
    >>> pw = F.convolution_desc(np.zeros((1, 2, 4, 4), np.float32),
    ...                         np.zeros((8, 2, 1, 1), np.float32))
    >>> dw = F.convolution_desc(np.zeros((1, 8, 4, 4), np.float32),
    ...                         np.zeros((8, 1, 3, 3), np.float32), strides=(2, 2),
    ...                         start_padding=(1, 1), end_padding=(1, 1), group_count=8)
    >>> PointwiseDepthwiseDesc(pw, dw).output.sizes
    (1, 8, 2, 2)
    """

    pointwise: OperatorDesc
    depthwise: OperatorDesc

    input_fields = _FIELDS
    exact = False  # the convolutions' own arithmetic, within their tolerance

    def _validate(self, c):
        pw, dw = self.pointwise, self.depthwise
        if not (isinstance(pw, OperatorDesc) and pw.is_pointwise()):
            c.fail("pointwise", type(pw).__name__,
                   "expected a pointwise convolution (1 x 1, FORWARD, one group, unit strides "
                   "and dilations, no padding)")
        if not (isinstance(dw, OperatorDesc) and dw.is_depthwise()):
            c.fail("depthwise", type(dw).__name__,
                   "expected a depthwise convolution (FORWARD, one input and one output "
                   "channel a group)")
        check_same_tensor(c, "depthwise.input_tensor", dw.input_tensor, pw.output,
                          "pointwise.output_tensor")

    # -- the pointwise convolution's inputs, then the depthwise filter and bias --------------
    @property
    def input_tensor(self) -> TensorDesc:
        return self.pointwise.input_tensor

    @property
    def filter_tensor(self) -> TensorDesc:
        return self.pointwise.filter_tensor

    @property
    def bias_tensor(self) -> TensorDesc | None:
        return self.pointwise.bias_tensor

    @property
    def depthwise_filter_tensor(self) -> TensorDesc:
        return self.depthwise.filter_tensor

    @property
    def depthwise_bias_tensor(self) -> TensorDesc | None:
        return self.depthwise.bias_tensor

    @property
    def output_tensor(self) -> TensorDesc:
        return self.depthwise.output

    def flops(self) -> int:
        return self.pointwise.flops() + self.depthwise.flops()

    def canonical(self):
        pw, dw = self.pointwise.canonical(), self.depthwise.canonical()
        return self if (pw, dw) == (self.pointwise, self.depthwise) else \
            PointwiseDepthwiseDesc(pw, dw)

    def replace_tensors(self, **tensors):
        first = {f: tensors.pop(f) for f in _FIELDS[:3] if f in tensors}
        second = {f.replace("depthwise_", ""): tensors.pop(f) for f in _FIELDS[3:]
                  if f in tensors}
        if "output_tensor" in tensors:
            second["output_tensor"] = tensors.pop("output_tensor")
        if tensors:
            raise TypeError(f"replace_tensors: no tensor fields {sorted(tensors)}")
        return PointwiseDepthwiseDesc(
            self.pointwise.replace_tensors(**first) if first else self.pointwise,
            self.depthwise.replace_tensors(**second) if second else self.depthwise)
