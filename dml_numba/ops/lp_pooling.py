"""DML_LP_POOLING_OPERATOR_DESC and DML_LP_POOLING1_OPERATOR_DESC (docs/SEMANTICS.md §3).

``Y[n,c,o] = (sum over window taps inside the input of |X[n,c,x]|**P) ** (1/P)`` with
``x = o*Strides + k*Dilations - StartPadding`` per spatial dimension; taps in the padding
contribute 0. The absolute value is DirectML's behaviour although its page omits it
(ORT issue #6302). Output size: ``(S + start + end - ((w-1)*d + 1)) // stride + 1``; the
LP_POOLING1 page forgets the dilation, real callers do not [INFERRED].

Output sizes up to the ceil-mode size are accepted (ORT's ceil_mode shapes); the taps past the
padded end read as padding [INFERRED].

dml_numba goes beyond DirectML deliberately: FLOAT64 tensors, and 3-D tensors (one spatial
dimension) besides DirectML's 4-D and 5-D.
"""
from __future__ import annotations

__all__ = ["LpPoolingOperatorDesc", "LpPooling1OperatorDesc"]

from dataclasses import dataclass

from .._dims import prod
from ..tensor import TensorDesc
from ._base import OperatorDesc, Window
from ._pooling import validate_window


@dataclass(frozen=True)
class LpPooling1OperatorDesc(OperatorDesc):
    """DML_LP_POOLING1_OPERATOR_DESC (FL6.2): LP pooling with dilations.

    >>> x = TensorDesc(1, (2, 3, 5, 4))
    >>> d = LpPooling1OperatorDesc(x, TensorDesc(1, (2, 3, 2, 3)), (2, 1), (2, 2), (0, 0),
    ...                            (0, 0), (1, 1), 2)
    """

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    strides: tuple
    window_size: tuple
    start_padding: tuple
    end_padding: tuple
    dilations: tuple
    p: int

    exact = False
    batch_separable = True

    def _validate(self, c):
        validate_window(c, self, self.dilations)
        self._set("p", c.integer("p", self.p, lo=1))

    def window(self) -> Window:
        """Channel by channel; taps in the padding contribute 0 (they read as zeros)."""
        return Window(self.window_size, self.strides, self.dilations, self.start_padding,
                      self.end_padding, "same", True)

    def flops(self) -> int:
        """|x|**p, the sum and the root: counted as 2 per window tap per output element."""
        return 2 * self.output_tensor.element_count * prod(self.window_size)


@dataclass(frozen=True)
class LpPoolingOperatorDesc(OperatorDesc):
    """DML_LP_POOLING_OPERATOR_DESC (FL1.0): LP pooling; canonicalises to LP_POOLING1."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    strides: tuple
    window_size: tuple
    start_padding: tuple
    end_padding: tuple
    p: int

    exact = False
    batch_separable = True

    def window(self) -> Window:
        return self.canonical().window()

    def _validate(self, c):
        nd = self.input_tensor.rank - 2 if isinstance(self.input_tensor, TensorDesc) else 0
        validate_window(c, self, (1,) * max(nd, 0))
        self._set("p", c.integer("p", self.p, lo=1))

    def canonical(self):
        return LpPooling1OperatorDesc(self.input_tensor, self.output_tensor, self.strides,
                                      self.window_size, self.start_padding, self.end_padding,
                                      (1,) * len(self.strides), self.p)
