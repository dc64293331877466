"""DML_MAX_POOLING_OPERATOR_DESC, MAX_POOLING1 and MAX_POOLING2 (docs/SEMANTICS.md §7).

``Y[n,c,o] = max over window taps inside the input of X[n,c,x]`` with ``x = o*Strides +
k*Dilations - StartPadding`` per spatial dimension: the padding never wins (it is not a value:
an all-padding window, possible only in ceil mode, gives -infinity, or the type's least value
for integers [INFERRED]). Every data type: a maximum computes nothing (exact). Output sizes
from the floor size to the ceil-mode size, as for LP pooling. MAX_POOLING1 adds the optional
indices output, MAX_POOLING2 dilations; both canonicalise to MAX_POOLING2.

The indices output (``output_indices_tensor``) is refused for now: every kernel here writes one
output, and a descriptor that asks for the indices would otherwise be computed without them.
"""
from __future__ import annotations

__all__ = ["MaxPoolingOperatorDesc", "MaxPooling1OperatorDesc", "MaxPooling2OperatorDesc"]

from dataclasses import dataclass

from .._dims import prod
from .._dtypes import ALL_TYPES
from ..tensor import TensorDesc
from ._base import OperatorDesc, Window
from ._pooling import validate_window


def _validate(c, d, dilations):
    validate_window(c, d, dilations, ALL_TYPES, "")
    indices = getattr(d, "output_indices_tensor", None)
    if indices is not None:
        c.fail("output_indices_tensor", indices, "expected None (dml_numba computes the "
                                                 "pooled values only: the indices output is "
                                                 "not implemented)")


def _spatial(d) -> int:
    return d.input_tensor.rank - 2 if isinstance(d.input_tensor, TensorDesc) else 0


@dataclass(frozen=True)
class MaxPooling2OperatorDesc(OperatorDesc):
    """DML_MAX_POOLING2_OPERATOR_DESC (FL4.1): max pooling with dilations.

    >>> x = TensorDesc(1, (1, 2, 4, 4))
    >>> d = MaxPooling2OperatorDesc(x, TensorDesc(1, (1, 2, 2, 2)), None, (2, 2), (2, 2),
    ...                             (0, 0), (0, 0), (1, 1))
    """

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    output_indices_tensor: TensorDesc | None
    strides: tuple
    window_size: tuple
    start_padding: tuple
    end_padding: tuple
    dilations: tuple

    batch_separable = True

    def _validate(self, c):
        _validate(c, self, self.dilations)

    def window(self) -> Window:
        """Channel by channel; the padding is not a value (never the maximum), so a padding
        operator in front is never absorbed as this window's padding."""
        return Window(self.window_size, self.strides, self.dilations, self.start_padding,
                      self.end_padding, "same", False)

    def flops(self) -> int:
        """One comparison per window tap per output element."""
        return self.output_tensor.element_count * prod(self.window_size)


@dataclass(frozen=True)
class MaxPooling1OperatorDesc(OperatorDesc):
    """DML_MAX_POOLING1_OPERATOR_DESC (FL2.1): the indices output, no dilations."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    output_indices_tensor: TensorDesc | None
    strides: tuple
    window_size: tuple
    start_padding: tuple
    end_padding: tuple

    batch_separable = True

    def _validate(self, c):
        _validate(c, self, (1,) * max(_spatial(self), 0))

    def window(self) -> Window:
        return self.canonical().window()

    def canonical(self):
        return MaxPooling2OperatorDesc(self.input_tensor, self.output_tensor,
                                       self.output_indices_tensor, self.strides,
                                       self.window_size, self.start_padding, self.end_padding,
                                       (1,) * len(self.strides))


@dataclass(frozen=True)
class MaxPoolingOperatorDesc(OperatorDesc):
    """DML_MAX_POOLING_OPERATOR_DESC (FL1.0)."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    strides: tuple
    window_size: tuple
    start_padding: tuple
    end_padding: tuple

    batch_separable = True

    def _validate(self, c):
        _validate(c, self, (1,) * max(_spatial(self), 0))

    def window(self) -> Window:
        return self.canonical().window()

    def canonical(self):
        return MaxPooling2OperatorDesc(self.input_tensor, self.output_tensor, None, self.strides,
                                       self.window_size, self.start_padding, self.end_padding,
                                       (1,) * len(self.strides))
