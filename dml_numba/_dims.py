"""Named size arithmetic shared by every operator (pure Python over ints)."""
from __future__ import annotations


def dilated_extent(k: int, dilation: int) -> int:
    """Extent covered by a window of ``k`` taps ``dilation`` apart: ``(k - 1) * dilation + 1``."""
    return (k - 1) * dilation + 1


def pooled_size(n: int, start: int, end: int, k: int, stride: int, dilation: int = 1) -> int:
    """Sliding-window output size: ``(n + start + end - dilated_extent(k, d)) // stride + 1``.

    Used by forward convolution and LP pooling (docs/SEMANTICS.md §2, 3). Returns a value <= 0
    when the
    window does not fit the padded input.
    """
    span = n + start + end - dilated_extent(k, dilation)
    return span // stride + 1 if span >= 0 else 0


def pooled_size_ceil(n: int, start: int, end: int, k: int, stride: int, dilation: int = 1) -> int:
    """The ceil-mode size ``ceil((n + start + end - dilated_extent) / stride) + 1``."""
    span = n + start + end - dilated_extent(k, dilation)
    return -(-span // stride) + 1 if span >= 0 else 0


def transposed_size(n: int, start: int, end: int, k: int, stride: int, dilation: int) -> int:
    """Natural transposed-convolution size ``(n - 1) * stride + dilated_extent - start - end``."""
    return (n - 1) * stride + dilated_extent(k, dilation) - start - end


def strided_count(window: int, stride: int) -> int:
    """Elements reachable in a window of ``window`` with step ``|stride|``:
    ``1 + (window-1)//|s|``."""
    return 1 + (window - 1) // abs(stride)


def packed_strides(sizes) -> tuple[int, ...]:
    """Row-major element strides, last dimension fastest."""
    strides = [1] * len(sizes)
    for d in range(len(sizes) - 2, -1, -1):
        strides[d] = strides[d + 1] * sizes[d + 1]
    return tuple(strides)


def prod(values) -> int:
    out = 1
    for v in values:
        out *= v
    return out
