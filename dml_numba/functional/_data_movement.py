"""The functional layer's data movement: padding, tile, slice, join."""
from __future__ import annotations

import numbers

import numpy as np

from .._binding import as_array
from .._errors import Checker
from ..ops import padding as _pad
from ..ops import slice as _slice
from ..ops import tile as _tile
from ..ops.join import JoinOperatorDesc
from ..ops.padding import Padding1OperatorDesc, PaddingMode
from ..ops.slice import Slice1OperatorDesc
from ..ops.tile import TileOperatorDesc
from ..tensor import TensorDesc
from ._call import _enum, _like, _per_axis, _scalar, _tuple, run


def padding(x, start_padding=None, end_padding=None, mode=PaddingMode.CONSTANT, value=0, *,
            pad_width=None, device="cpu", out=None):
    """Pad ``x`` per axis (DML_PADDING1): ``mode`` is a PaddingMode, its value or its name
    ("constant", "edge", "reflection", "symmetric", "wrap", or NumPy's "reflect" for
    "reflection"); ``value`` is the constant for CONSTANT, in ``x``'s type. The amounts are
    ``start_padding`` and ``end_padding`` (a sequence per axis, or one integer for every axis),
    or ``numpy.pad``'s ``pad_width`` instead: one integer, one (before, after) pair, or a pair
    per axis.

    >>> import numpy as np
    >>> padding(np.array([1., 2.], np.float32), (5,), (5,), "reflection", device="numpy")
    array([2., 1., 2., 1., 2., 1., 2., 1., 2., 1., 2., 1.], dtype=float32)
    >>> padding(np.array([[1, 2]], np.int8), pad_width=((0, 0), (1, 2)), mode="reflect",
    ...         device="numpy")
    array([[2, 1, 2, 1, 2]], dtype=int8)
    """
    x0, x = x, as_array(x, "padding", "x")
    if pad_width is not None or start_padding is None or end_padding is None:
        start_padding, end_padding = _pad_width(pad_width, start_padding, end_padding,
                                                getattr(x, "ndim", 0))
    return run("padding", (x,), (start_padding, end_padding, mode, value), padding_desc, (x,),
               device, out, x0)


def _pad_width(pad_width, start_padding, end_padding, rank: int):
    """(start, end) per axis from ``numpy.pad``'s ``pad_width``: ``n``, ``(before, after)`` or
    ``((before, after), ...)`` with a pair per axis (any array-like)."""
    if start_padding is None and end_padding is None and type(pad_width) is tuple and len(
            pad_width) == rank and all(type(p) is tuple and len(p) == 2 and type(p[0]) is int
                                       and type(p[1]) is int for p in pad_width):
        return tuple(p[0] for p in pad_width), tuple(p[1] for p in pad_width)  # the usual form
    c = Checker("padding")
    if pad_width is None:
        missing = "start_padding" if start_padding is None else "end_padding"
        c.fail(missing, None, "expected the padding before each axis and after it "
               "(start_padding and end_padding), or numpy.pad's pad_width")
    if start_padding is not None or end_padding is not None:
        c.fail("pad_width", _tuple(pad_width), "expected either pad_width or start_padding "
               "and end_padding, not both")
    try:
        w = np.asarray(pad_width)
    except (TypeError, ValueError):
        w = None
    if w is None or w.dtype.kind not in "iu" or w.ndim > 2 or w.size == 0 or (
            w.ndim >= 1 and w.shape[-1] != 2 and not (w.ndim == 1 and w.size == 1)):
        c.fail("pad_width", _tuple(pad_width), "expected numpy.pad's form: an integer, "
               "(before, after), or one (before, after) pair per axis")
    if w.ndim == 2 and w.shape[0] not in (1, rank):
        c.fail("pad_width", _tuple(pad_width), f"expected {rank} (before, after) pairs, one "
               f"per axis of x ({rank} axes), or one pair for every axis")
    w = np.broadcast_to(w.reshape(-1, 2) if w.size == 2 or w.ndim == 2 else w.reshape(1, 1),
                        (rank, 2))
    return tuple(int(v) for v in w[:, 0]), tuple(int(v) for v in w[:, 1])


def padding_desc(x, start_padding, end_padding, mode=PaddingMode.CONSTANT, value=0):
    """The descriptor :func:`padding` runs, from anything with ``shape`` and ``dtype``."""
    c = Checker("padding")
    m = _enum("padding", "mode", mode, PaddingMode)
    inp = TensorDesc.like(x)
    start, end = _per_axis(start_padding, inp.rank), _per_axis(end_padding, inp.rank)
    sizes = _pad.output_sizes(c, inp.sizes, start, end)
    v = _scalar(value)
    if not inp.data_type.is_float and isinstance(v, float) and v.is_integer():
        v = int(v)
    return Padding1OperatorDesc(inp, TensorDesc(inp.data_type, sizes), m, inp.data_type, v,
                                start, end)


def tile(x, repeats, *, device="cpu", out=None):
    """Repeat ``x`` ``repeats[i]`` times along each axis. As ``numpy.tile``, one integer or
    fewer repeats than axes repeat the last axes (the others once); the output has ``x``'s
    rank.

    >>> import numpy as np
    >>> tile(np.array([[1, 2]], np.int8), (2, 2), device="numpy")
    array([[1, 2, 1, 2],
           [1, 2, 1, 2]], dtype=int8)
    >>> tile(np.array([[1, 2]], np.int8), 2, device="numpy")
    array([[1, 2, 1, 2]], dtype=int8)
    """
    x0, x = x, as_array(x, "tile", "x")
    return run("tile", (x,), (last_axes(repeats, getattr(x, "ndim", 0)),), tile_desc, (x,),
               device, out, x0)


def last_axes(repeats, rank: int):
    """``numpy.tile``'s repeats: one integer, or a sequence of fewer integers than ``rank``,
    preceded by ones up to ``rank``; anything else as it is (the descriptor's checks name
    it)."""
    if type(repeats) is tuple and len(repeats) == rank:
        return repeats  # the usual form, decided first
    r = _scalar(repeats)
    if isinstance(r, numbers.Integral) and not isinstance(r, bool):
        r = (r,)
    r = _tuple(r)
    if isinstance(r, tuple) and 0 < len(r) < rank and all(
            isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in r):
        return (1,) * (rank - len(r)) + r
    return repeats


def tile_desc(x, repeats):
    """The descriptor :func:`tile` runs, from anything with ``shape`` and ``dtype``."""
    inp = TensorDesc.like(x)
    repeats = _tuple(repeats)
    sizes = _tile.output_sizes(Checker("tile"), inp.sizes, repeats)
    return TileOperatorDesc(inp, TensorDesc(inp.data_type, sizes), repeats)


def slice1(x, offsets, sizes, strides=None, *, device="cpu", out=None):
    """Slice ``x`` through an input window (offsets, sizes, signed strides); the output holds
    every element the window reaches (DML_SLICE1; negative strides read backwards).

    >>> import numpy as np
    >>> slice1(np.arange(10, dtype=np.int32), (1,), (3,), (-2,), device="numpy")
    array([3, 1], dtype=int32)
    """
    x0, x = x, as_array(x, "slice1", "x")
    return run("slice1", (x,), (offsets, sizes, strides), slice1_desc, (x,), device, out, x0)


def slice1_desc(x, offsets, sizes, strides=None):
    """The descriptor :func:`slice1` runs, from anything with ``shape`` and ``dtype``."""
    inp = TensorDesc.like(x)
    offsets, window = _tuple(offsets), _tuple(sizes)
    steps = _tuple(strides, (1,) * len(window) if isinstance(window, tuple) else None)
    out_sizes = _slice.output_sizes(Checker("slice1"), inp.sizes, offsets, window, steps)
    return Slice1OperatorDesc(inp, TensorDesc(inp.data_type, out_sizes), offsets, window, steps)


def join(inputs, axis, *, device="cpu", out=None):
    """The ``inputs`` (a sequence of arrays) concatenated along ``axis`` (negative counts from
    the end), as ``numpy.concatenate``.

    >>> import numpy as np
    >>> join([np.zeros((1, 2), np.int8), np.ones((1, 1), np.int8)], 1, device="numpy")
    array([[0, 0, 1]], dtype=int8)
    """
    if isinstance(inputs, (str, bytes)) or not hasattr(inputs, "__len__") or not len(inputs):
        Checker("join").fail("inputs", inputs, "expected a non-empty sequence of arrays")
    first = as_array(inputs[0], "join", "inputs[0]")
    xs = (first,) + tuple(_like(first, a, "join", f"inputs[{k}]")
                          for k, a in enumerate(inputs[1:], 1))
    return run("join", xs, (axis,), lambda *a: join_desc(a[:-1], a[-1]), xs, device, out,
               inputs[0], tuple(inputs))


def join_desc(inputs, axis):
    """The descriptor :func:`join` runs."""
    ts = tuple(TensorDesc.like(a) for a in inputs)
    ax = _scalar(axis)
    rank = ts[0].rank
    if isinstance(ax, numbers.Integral) and not isinstance(ax, bool) and -rank <= ax < 0:
        ax += rank
    c = Checker("join")
    ax = c.integer("axis", ax, lo=0, hi=rank - 1) if isinstance(ax, numbers.Integral) and \
        not isinstance(ax, bool) else c.integer("axis", ax)
    sizes = list(ts[0].sizes)
    sizes[ax] = sum(t.sizes[ax] for t in ts) if all(t.rank == rank for t in ts) else sizes[ax]
    return JoinOperatorDesc(ts, TensorDesc(ts[0].data_type, tuple(sizes)), ax)
