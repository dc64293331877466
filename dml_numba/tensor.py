"""TensorDesc (DML_BUFFER_TENSOR_DESC), DMLCalcBufferTensorSize, and binding host arrays.

Binding rule (DESIGN "Binding arrays"): an array whose shape equals the desc's sizes and whose
dtype matches is that tensor, whatever its own memory layout. A one-dimensional buffer of that
dtype holding at least ``total_tensor_size_in_bytes`` is read (or written) the way DirectML reads
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
        if self.strides is not None:
            object.__setattr__(self, "strides",
                               c.int_tuple("strides", self.strides, length=len(sizes), lo=0))

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
    def is_packed(self) -> bool:
        return self.strides is None or self.strides == packed_strides(self.sizes)

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
    if not isinstance(array, np.ndarray):
        if hasattr(array, "__cuda_array_interface__"):
            raise ValidationError(f"{where}: a CUDA device array is invalid on a host device; "
                                  "expected a numpy.ndarray (use device='cuda')")
        raise ValidationError(f"{where}: {type(array).__name__} is invalid; expected a numpy.ndarray")
    if array.dtype != tdesc.dtype:
        raise ValidationError(f"{where}: dtype {array.dtype} is invalid; expected {tdesc.dtype} "
                              f"({tdesc.data_type.name})")
    if writable and not array.flags.writeable:
        raise ValidationError(f"{where}: a read-only array is invalid; expected a writable array")
    if array.shape == tdesc.sizes:
        return array
    if array.ndim == 1:
        need = tdesc.total_tensor_size_in_bytes
        if array.nbytes < need:
            raise ValidationError(
                f"{where}: a buffer of {array.nbytes} bytes is invalid; expected at least "
                f"{need} bytes (total_tensor_size_in_bytes for sizes {tdesc.sizes}, "
                f"strides {tdesc.strides})")
        if writable and tdesc.has_overlapping_elements():
            raise ValidationError(f"{where}: strides {tdesc.strides} are invalid for an output; "
                                  "expected strides that give every element its own address")
        item = array.strides[0]
        return np.lib.stride_tricks.as_strided(
            array, shape=tdesc.sizes, strides=tuple(s * item for s in tdesc.element_strides),
            writeable=writable)
    raise ValidationError(f"{where}: shape {array.shape} is invalid; expected {tdesc.sizes} or a "
                          f"1-D buffer of at least {tdesc.total_tensor_size_in_bytes} bytes")


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
