"""DML_AVERAGE_POOLING_OPERATOR_DESC and AVERAGE_POOLING1 (docs/SEMANTICS.md §8).

``Y[n,c,o] = (sum over window taps inside the input of X[n,c,x]) / count`` with ``x = o*Strides
+ k*Dilations - StartPadding`` per spatial dimension; ``count`` is the number of taps inside the
padded input when IncludePadding, else the number inside the input itself. Taps past the padded
end (a ceil-mode window's overhang) are never counted [INFERRED: ONNX Runtime's rule]; a window
with nothing to count gives NaN (0/0) [INFERRED]. Sums are taken in float64. AVERAGE_POOLING1
adds dilations; AVERAGE_POOLING canonicalises to it.
"""
from __future__ import annotations

__all__ = ["AveragePoolingOperatorDesc", "AveragePooling1OperatorDesc"]

from dataclasses import dataclass

from .._dims import prod
from ..tensor import TensorDesc
from ._base import OperatorDesc, Window
from ._pooling import validate_window


def _validate(c, d, dilations):
    validate_window(c, d, dilations)
    d._set("include_padding", c.boolean("include_padding", d.include_padding))


@dataclass(frozen=True)
class AveragePooling1OperatorDesc(OperatorDesc):
    """DML_AVERAGE_POOLING1_OPERATOR_DESC (FL6.2): average pooling with dilations.

    >>> x = TensorDesc(1, (1, 1, 3, 3))
    >>> d = AveragePooling1OperatorDesc(x, TensorDesc(1, (1, 1, 2, 2)), (2, 2), (2, 2), (0, 0),
    ...                                 (1, 1), (1, 1), False)
    """

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    strides: tuple
    window_size: tuple
    start_padding: tuple
    end_padding: tuple
    dilations: tuple
    include_padding: bool

    exact = False
    batch_separable = True

    def _validate(self, c):
        _validate(c, self, self.dilations)

    def window(self) -> Window:
        """Channel by channel. The padding reads as zeros only when it is counted
        (IncludePadding): otherwise absorbing a zero padding in front would change the
        divisor."""
        return Window(self.window_size, self.strides, self.dilations, self.start_padding,
                      self.end_padding, "same", self.include_padding)

    def flops(self) -> int:
        """One addition per window tap per output element."""
        return self.output_tensor.element_count * prod(self.window_size)


@dataclass(frozen=True)
class AveragePoolingOperatorDesc(OperatorDesc):
    """DML_AVERAGE_POOLING_OPERATOR_DESC (FL1.0): no dilations."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    strides: tuple
    window_size: tuple
    start_padding: tuple
    end_padding: tuple
    include_padding: bool

    exact = False
    batch_separable = True

    def _validate(self, c):
        nd = self.input_tensor.rank - 2 if isinstance(self.input_tensor, TensorDesc) else 0
        _validate(c, self, (1,) * max(nd, 0))

    def window(self) -> Window:
        return self.canonical().window()

    def canonical(self):
        return AveragePooling1OperatorDesc(self.input_tensor, self.output_tensor, self.strides,
                                           self.window_size, self.start_padding,
                                           self.end_padding, (1,) * len(self.strides),
                                           self.include_padding)
