"""What the pooling operators share (LP, max and average pooling): the window fields' checks and
the one shape rule of a pooled axis."""
from __future__ import annotations

from .._dims import dilated_extent, pooled_size, pooled_size_ceil
from .._dtypes import COMPUTE_TYPES
from .._errors import Checker
from ._base import check_unary_tensors

_EXT = " (FLOAT64 is a dml_numba extension)"

#: the window fields every pooling descriptor has (dilations: the newer versions)
WINDOW_FIELDS = ("strides", "window_size", "start_padding", "end_padding", "dilations")


def output_ranges(c: Checker, input_sizes, strides, window_size, start_padding, end_padding,
                  dilations) -> list[tuple[int, int]]:
    """The shape rule: per spatial axis, the output sizes accepted, from the floor size
    ``(in + start + end - ((w-1)*d + 1)) // stride + 1`` to the ceil-mode size. Checks every
    parameter (one per spatial axis; the dilated window must fit the padded input)."""
    nd = len(input_sizes) - 2
    strides = c.int_tuple("strides", strides, length=nd, lo=1)
    window = c.int_tuple("window_size", window_size, length=nd, lo=1)
    start = c.int_tuple("start_padding", start_padding, length=nd, lo=0)
    end = c.int_tuple("end_padding", end_padding, length=nd, lo=0)
    dil = c.int_tuple("dilations", dilations, length=nd, lo=1)
    ranges = []
    for i in range(nd):
        n = input_sizes[i + 2]
        if dilated_extent(window[i], dil[i]) > n + start[i] + end[i]:
            c.fail(f"window_size[{i}]", window[i],
                   f"the dilated window ({dilated_extent(window[i], dil[i])}) must fit the padded "
                   f"input ({n} + {start[i]} + {end[i]})")
        ranges.append((pooled_size(n, start[i], end[i], window[i], strides[i], dil[i]),
                       pooled_size_ceil(n, start[i], end[i], window[i], strides[i], dil[i])))
    return ranges


def validate_window(c: Checker, d, dilations, types=COMPUTE_TYPES, note: str = _EXT):
    """Check the tensors and window fields of a pooling descriptor ``d`` (its output sizes
    between the floor and the ceil-mode sizes); store the canonical tuples on ``d``
    (dilations only if it has them)."""
    inp, out = check_unary_tensors(c, d, types, 3, 5, note)
    ranges = output_ranges(c, inp.sizes, d.strides, d.window_size, d.start_padding,
                           d.end_padding, dilations)
    if out.sizes[:2] != inp.sizes[:2]:
        c.fail("output_tensor.sizes", out.sizes,
               f"expected batch and channel sizes {inp.sizes[:2]} equal to the input's")
    for i, (lo, hi) in enumerate(ranges):
        o = out.sizes[i + 2]
        if not lo <= o <= hi:
            c.fail(f"output_tensor.sizes[{i + 2}]", o,
                   f"expected {lo}" + (f" to {hi} (floor to ceil mode)" if hi != lo else "") +
                   " = (in + start + end - ((window-1)*dilation+1)) // stride + 1")
    for name in WINDOW_FIELDS:
        if hasattr(d, name):
            d._set(name, tuple(int(v) for v in getattr(d, name)))


def pooled_output(inp, strides, window_size, start_padding, end_padding, dilations, owner: str):
    """The output desc of a pooling of ``inp`` (floor mode), through the shape rule."""
    from ..tensor import TensorDesc

    ranges = output_ranges(Checker(owner), inp.sizes, strides, window_size, start_padding,
                           end_padding, dilations)
    return TensorDesc(inp.data_type, inp.sizes[:2] + tuple(lo for lo, _ in ranges))
