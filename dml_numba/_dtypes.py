"""DirectML data types <-> NumPy dtypes, and accumulator types."""
from __future__ import annotations

import enum

import numpy as np


class DataType(enum.IntEnum):
    """DML_TENSOR_DATA_TYPE, with DirectML's numeric values (0 = UNKNOWN is never valid)."""

    FLOAT32 = 1
    FLOAT16 = 2
    UINT32 = 3
    UINT16 = 4
    UINT8 = 5
    INT32 = 6
    INT16 = 7
    INT8 = 8
    FLOAT64 = 9
    UINT64 = 10
    INT64 = 11

    @property
    def numpy(self) -> np.dtype:
        return _TO_NUMPY[self]

    @property
    def itemsize(self) -> int:
        return _TO_NUMPY[self].itemsize

    @property
    def is_float(self) -> bool:
        return self in FLOAT_TYPES

    @classmethod
    def from_numpy(cls, dtype) -> DataType:
        dtype = np.dtype(dtype)
        try:
            return _FROM_NUMPY[dtype]
        except KeyError:
            names = ", ".join(str(d) for d in _FROM_NUMPY)
            from ._errors import ValidationError

            raise ValidationError(
                f"DataType: numpy dtype {dtype} is invalid; expected one of {names}") from None


_TO_NUMPY = {
    DataType.FLOAT32: np.dtype(np.float32),
    DataType.FLOAT16: np.dtype(np.float16),
    DataType.UINT32: np.dtype(np.uint32),
    DataType.UINT16: np.dtype(np.uint16),
    DataType.UINT8: np.dtype(np.uint8),
    DataType.INT32: np.dtype(np.int32),
    DataType.INT16: np.dtype(np.int16),
    DataType.INT8: np.dtype(np.int8),
    DataType.FLOAT64: np.dtype(np.float64),
    DataType.UINT64: np.dtype(np.uint64),
    DataType.INT64: np.dtype(np.int64),
}
_FROM_NUMPY = {v: k for k, v in _TO_NUMPY.items()}

ALL_TYPES = tuple(DataType)
FLOAT_TYPES = (DataType.FLOAT32, DataType.FLOAT16, DataType.FLOAT64)
#: DirectML's conv/pooling types, plus FLOAT64 (a deliberate extension of dml_numba).
COMPUTE_TYPES = FLOAT_TYPES


def accumulator(data_type: DataType) -> np.dtype:
    """float32 for FLOAT16/FLOAT32 (DirectML computes half in float), float64 for FLOAT64."""
    return np.dtype(np.float64) if data_type == DataType.FLOAT64 else np.dtype(np.float32)
