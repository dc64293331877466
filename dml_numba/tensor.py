"""TensorDesc (DML_BUFFER_TENSOR_DESC), DMLCalcBufferTensorSize and the exact byte extent.

Each size and stride is below 2**32 (DirectML's UINT32 fields) and the element count and byte
extent below 2**63, so nothing that passes can overflow int64 index arithmetic. How arrays are
bound to a TensorDesc is :mod:`dml_numba._binding`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._dims import packed_strides, prod
from ._dtypes import _TO_NUMPY, DataType
from ._errors import Checker

MAX_RANK = 8
#: element counts and byte extents stay below this: int64 indexing in generated code
INT64_LIMIT = 1 << 63


@dataclass(frozen=True)
class TensorDesc:
    """DML_BUFFER_TENSOR_DESC: data type, sizes (1..8 dims, each >= 1), optional element strides.

    >>> TensorDesc(DataType.FLOAT16, (1, 1, 3, 5)).total_tensor_size_in_bytes
    32
    """

    data_type: DataType
    sizes: tuple
    strides: tuple | None = None

    def __post_init__(self):
        c = Checker("TensorDesc")
        object.__setattr__(self, "data_type", c.enum("data_type", self.data_type, DataType))
        sizes = c.int_tuple("sizes", self.sizes, lo=1)
        if not 1 <= len(sizes) <= MAX_RANK:
            c.fail("sizes", sizes, f"expected 1 to {MAX_RANK} dimensions")
        object.__setattr__(self, "sizes", sizes)
        item = _TO_NUMPY[self.data_type].itemsize
        if prod(sizes) * item >= INT64_LIMIT:
            c.fail("sizes", sizes, f"expected fewer than 2**63 bytes in all ({prod(sizes)} "
                                   f"elements of {item} bytes)")
        if self.strides is not None:
            strides = c.int_tuple("strides", self.strides, length=len(sizes), lo=0)
            object.__setattr__(self, "strides", strides)
            if self.extent_bytes >= INT64_LIMIT:
                c.fail("strides", strides, "expected a byte extent (last element's offset + 1, "
                                           "times the element size) below 2**63")

    @property
    def rank(self) -> int:
        return len(self.sizes)

    @property
    def dtype(self) -> np.dtype:
        return _TO_NUMPY[self.data_type]  # the table itself: this is on every call's path

    @property
    def element_strides(self) -> tuple[int, ...]:
        return self.strides if self.strides is not None else packed_strides(self.sizes)

    @property
    def element_count(self) -> int:
        return prod(self.sizes)

    @property
    def total_tensor_size_in_bytes(self) -> int:
        """DMLCalcBufferTensorSize (docs/SEMANTICS.md §1): bytes up to the last element, rounded
        up to 4."""
        bits = self.data_type.itemsize * 8
        if self.strides is None:
            total_bits = self.element_count * bits
        else:
            last = sum((s - 1) * st for s, st in zip(self.sizes, self.strides)) & 0xFFFFFFFF
            total_bits = (last + 1) * bits
        nbytes = -(-total_bits // 8)
        return (nbytes + 3) & ~3

    @property
    def last_offset(self) -> int:
        """The element offset of the last element through the strides (exact, no wrap-around)."""
        return sum((n - 1) * s for n, s in zip(self.sizes, self.element_strides))

    @property
    def extent_bytes(self) -> int:
        """The bytes a binding may touch: last element's offset + 1, times the element size.
        Unlike DMLCalcBufferTensorSize this never wraps and is not rounded."""
        return (self.last_offset + 1) * self.data_type.itemsize

    def has_overlapping_elements(self) -> bool:
        """True unless the strides provably map distinct coordinates to distinct elements.

        Sufficient test: sorted by stride, each dimension's stride exceeds the span of all
        smaller-stride dimensions. Interleavings that fail it are refused for outputs.
        """
        span = 0
        for size, stride in sorted(((s, st) for s, st in zip(self.sizes, self.element_strides)
                                    if s > 1), key=lambda t: t[1]):
            if stride <= span:
                return True
            span += (size - 1) * stride
        return False

    @classmethod
    def like(cls, array) -> TensorDesc:
        """The packed desc of an array's shape and dtype."""
        return cls(DataType.from_numpy(array.dtype), tuple(array.shape))
