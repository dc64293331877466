"""DML_MAX_POOLING_OPERATOR_DESC, MAX_POOLING1 and MAX_POOLING2 (docs/SEMANTICS.md §7).

``Y[n,c,o] = max over window taps inside the input of X[n,c,x]`` with ``x = o*Strides +
k*Dilations - StartPadding`` per spatial dimension: the padding never wins (it is not a value:
an all-padding window, possible only in ceil mode, gives -infinity, or the type's least value
for integers [INFERRED]). Every data type: a maximum computes nothing (exact). Output sizes
from the floor size to the ceil-mode size, as for LP pooling. MAX_POOLING1 adds the optional
indices output, MAX_POOLING2 dilations; both canonicalise to MAX_POOLING2.

The optional indices output (``output_indices_tensor``, UINT32 or UINT64, the output's sizes)
holds, for each output element, the position of its maximum in the input as a flat index over
the input's logical sizes in row-major order (batch and channel included; the input tensor's
strides, which describe its buffer, do not enter). The first maximum in window order (the
window's taps in row-major order) wins a tie; a NaN tap wins and the first NaN stays
[INFERRED: the value is NaN either way]; a window wholly in the padding (ceil mode) has no
position: the index type's largest value (-1 read as a signed ONNX index) [INFERRED]. UINT32
indices are refused where the input has more elements than they can number.
"""
from __future__ import annotations

__all__ = ["MaxPoolingOperatorDesc", "MaxPooling1OperatorDesc", "MaxPooling2OperatorDesc"]

from dataclasses import dataclass

import numpy as np

from .._dims import prod
from .._dtypes import ALL_TYPES, DataType
from ..tensor import TensorDesc
from ._base import OperatorDesc, Window, check_tensor
from ._pooling import validate_window

#: the data types of the indices output
INDEX_TYPES = (DataType.UINT32, DataType.UINT64)


def _validate(c, d, dilations):
    validate_window(c, d, dilations, ALL_TYPES, "")
    if not hasattr(d, "output_indices_tensor"):
        return
    indices = check_tensor(c, "output_indices_tensor", d.output_indices_tensor, optional=True)
    if indices is None:
        return
    if indices.data_type not in INDEX_TYPES:
        c.fail("output_indices_tensor.data_type", indices.data_type.name,
               "expected UINT32 or UINT64")
    if indices.sizes != d.output_tensor.sizes:
        c.fail("output_indices_tensor.sizes", indices.sizes,
               f"expected {d.output_tensor.sizes} (the output tensor's sizes)")
    count = d.input_tensor.element_count
    if count > np.iinfo(indices.dtype).max:  # (the largest value means "no position")
        c.fail("output_indices_tensor.data_type", indices.data_type.name,
               f"expected UINT64: the input has {count} elements, more than UINT32 numbers")


def no_position(dtype) -> int:
    """The index of a window wholly in the padding: the index type's largest value."""
    return int(np.iinfo(np.dtype(dtype)).max)


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
    extra_output_fields = ("output_indices_tensor",)

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
    extra_output_fields = ("output_indices_tensor",)

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
