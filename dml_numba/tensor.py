"""TensorDesc (DML_BUFFER_TENSOR_DESC), DMLCalcBufferTensorSize, and binding host arrays.

Binding rule (DESIGN "Binding arrays"): an array whose shape equals the desc's sizes and whose
dtype matches is that tensor, whatever its own memory layout. A one-dimensional buffer of that
dtype holding at least ``extent_bytes`` (the last element's offset + 1, in elements of the type,
computed exactly) is read (or written) the way DirectML reads
a bound buffer: coordinate ``c`` lives at element ``sum(c[d] * strides[d])``; packed strides when
the desc has none; stride 0 broadcasts. Shape equality is tested first, so a rank-1 desc bound to
an array of exactly its size is that tensor.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._dims import packed_strides, prod
from ._dtypes import _TO_NUMPY, DataType
from ._errors import Checker, ValidationError

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
        """DMLCalcBufferTensorSize (SEMANTICS 1.3): bytes up to the last element, rounded up to 4."""
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
    def like(cls, array) -> "TensorDesc":
        """The packed desc of an array's shape and dtype."""
        return cls(DataType.from_numpy(array.dtype), tuple(array.shape))


def _where(owner: str, field: str) -> str:
    return f"{owner}.{field}"


def view_host(array, tdesc: TensorDesc, owner: str, field: str, *, writable: bool = False):
    """The N-d view of ``array`` through which the kernel reads or writes tensor ``tdesc``."""
    if (type(array) is np.ndarray and array.shape == tdesc.sizes and array.dtype == tdesc.dtype
            and (not writable or array.flags.writeable)):
        return array  # the common case, decided before building any message
    where = _where(owner, field)
    if isinstance(array, np.ma.MaskedArray):
        raise ValidationError(f"{where}: a masked array is invalid; expected a plain "
                              "numpy.ndarray (the mask would be ignored: use .filled() or .data)")
    if not isinstance(array, np.ndarray):
        if hasattr(array, "__cuda_array_interface__"):
            raise ValidationError(f"{where}: a CUDA device array is invalid on a host device; "
                                  "expected a numpy.ndarray (use device='cuda')")
        raise ValidationError(f"{where}: {type(array).__name__} is invalid; expected a numpy.ndarray")
    if array.dtype != tdesc.dtype:
        native = "" if array.dtype.isnative else (
            " (non-native byte order: convert with .astype(a.dtype.newbyteorder('=')))")
        shown = array.dtype if array.dtype.isnative else array.dtype.str
        raise ValidationError(f"{where}: dtype {shown} is invalid{native}; expected "
                              f"{tdesc.dtype} ({tdesc.data_type.name})")
    if writable and not array.flags.writeable:
        raise ValidationError(f"{where}: a read-only array is invalid; expected a writable array")
    if array.shape == tdesc.sizes:
        return array
    if array.ndim == 1:
        need = tdesc.extent_bytes  # exact, in Python integers: never DMLCalcBufferTensorSize
        if array.nbytes < need:
            raise ValidationError(
                f"{where}: a buffer of {array.nbytes} bytes is invalid; expected at least "
                f"{need} bytes (the last element's offset + 1, times {tdesc.dtype.itemsize}, for "
                f"sizes {tdesc.sizes}, strides {tdesc.strides})")
        if writable and tdesc.has_overlapping_elements():
            raise ValidationError(f"{where}: strides {tdesc.strides} are invalid for an output; "
                                  "expected strides that give every element its own address")
        item = array.strides[0]
        return np.lib.stride_tricks.as_strided(
            array, shape=tdesc.sizes, strides=tuple(s * item for s in tdesc.element_strides),
            writeable=writable)
    raise ValidationError(f"{where}: shape {array.shape} is invalid; expected {tdesc.sizes} or a "
                          f"1-D buffer of at least {tdesc.extent_bytes} bytes")


def as_array(value, owner: str, field: str):
    """What the functional layer takes: anything ``np.asarray`` accepts (lists, scalars, objects
    with ``__array__``); CUDA device arrays pass through. Masked arrays and object dtype are
    refused; a non-native byte order is converted to native."""
    if type(value) is np.ndarray and value.dtype.isnative and value.dtype.kind != "O":
        return value
    where = _where(owner, field)
    if isinstance(value, np.ma.MaskedArray):
        raise ValidationError(f"{where}: a masked array is invalid; expected a plain array (the "
                              "mask would be ignored: use .filled() or .data)")
    if hasattr(value, "__cuda_array_interface__") and not isinstance(value, np.ndarray):
        return value
    try:
        array = np.asarray(value)
    except Exception as exc:  # noqa: BLE001 - whatever NumPy refuses, said as ours
        raise ValidationError(f"{where}: {type(value).__name__} is invalid; expected an array or "
                              f"something numpy.asarray accepts ({exc})") from None
    if array.dtype.kind in "OUSV":
        raise ValidationError(f"{where}: dtype {array.dtype} is invalid; expected a numeric "
                              "array (one of float32, float16, float64, int8..int64, uint8..uint64)")
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    return array


def check_no_overlap(out, inputs, owner: str) -> None:
    """Refuse an ``out`` that shares memory with any input (exact test when it is cheap)."""
    for i, a in enumerate(inputs):
        if a is not out and a.base is None and out.base is None:
            continue  # two separate allocations cannot overlap
        if isinstance(a, np.ndarray) and np.may_share_memory(out, a):
            try:
                overlap = np.shares_memory(out, a, max_work=100_000)
            except np.exceptions.TooHardError:
                overlap = True
            if overlap:
                raise ValidationError(f"{owner}.out: an array overlapping input {i} is invalid; "
                                      "expected an output that shares no memory with the inputs")


class HostDevice:
    """Binding for devices that run on NumPy arrays in host memory ("numpy", "cpu")."""

    def __init__(self, name: str):
        self.name = name

    def call(self, kernel, owner, input_specs, inputs, out, out_desc, stream):
        if stream is not None:
            raise ValidationError(f"{owner}.stream: {stream!r} is invalid; expected None on the "
                                  f"{self.name!r} device (streams are CUDA's)")
        views = [view_host(a, t, owner, f) for a, (f, t) in zip(inputs, input_specs)]
        if out is None:
            result = target = np.empty(out_desc.sizes, out_desc.dtype)
        else:
            target = view_host(out, out_desc, owner, "out", writable=True)
            check_no_overlap(target, views, owner)
            result = out
        kernel(views, target)
        return result
