"""The functional layer: each function builds its operator's descriptor from arrays and
parameters (output sizes from the operator's one shape rule), compiles it through the same cache
as :func:`dml_numba.compile_operator`, and runs it.

Inputs are anything ``numpy.asarray`` accepts (lists, scalars, objects with ``__array__``), or
CUDA device arrays for ``device="cuda"``; masked arrays and object arrays are refused; a
non-native byte order is converted. A repeated call with the same shapes, dtypes and parameters
skips building the descriptor (a memo keyed by the inputs' shapes and dtypes and by the
parameters' values).
"""
from __future__ import annotations

import numbers

import numpy as np

from . import _interop
from ._api import compile_operator
from ._binding import as_array
from ._cache import cache, freeze
from ._errors import Checker, ValidationError
from .ops import _pooling as _pool
from .ops import convolution as _conv
from .ops import gemm as _gemm
from .ops import padding as _pad
from .ops import slice as _slice
from .ops import tile as _tile
from .ops.average_pooling import AveragePooling1OperatorDesc
from .ops.batch_normalization import BatchNormalizationOperatorDesc
from .ops.convolution import (
    ConvolutionDirection,
    ConvolutionMode,
    ConvolutionOperatorDesc,
)
from .ops.element_wise import ElementWiseAdd1OperatorDesc, ElementWiseMultiplyOperatorDesc
from .ops.gemm import GemmOperatorDesc, MatrixTransform
from .ops.join import JoinOperatorDesc
from .ops.lp_pooling import LpPooling1OperatorDesc
from .ops.max_pooling import MaxPooling2OperatorDesc
from .ops.padding import Padding1OperatorDesc, PaddingMode
from .ops.slice import Slice1OperatorDesc
from .ops.tile import TileOperatorDesc
from .tensor import TensorDesc

__all__ = ["padding", "lp_pooling", "convolution", "tile", "slice1", "max_pooling",
           "average_pooling", "element_wise_add", "element_wise_multiply",
           "batch_normalization", "gemm", "join"]


def _tensor_key(a):
    """A tensor input in the memo's key: its type, shape and dtype (a compiled operator binds
    any memory layout of that shape)."""
    if a is None:
        return None
    shape = a.shape
    return type(a), shape if type(shape) is tuple else tuple(shape), a.dtype


def _param_key(value):
    """A parameter in the memo's key, by value: arrays (any rank, 0-d included) by dtype, shape
    and bytes, sequences element by element, everything else through :func:`freeze` (floats by
    bits, bools apart from ints, NumPy scalars by their bits in their own type). Two calls
    whose parameters differ in value never share a key."""
    t = type(value)
    if t is int or t is str or value is None:
        return value
    if t is tuple:
        for v in value:
            if type(v) is not int:
                break
        else:
            return value  # the common case: a tuple of Python integers keys as itself
    if isinstance(value, (list, tuple)):
        return (t.__name__,) + tuple(_param_key(v) for v in value)
    if not isinstance(value, np.ndarray) and (hasattr(value, "__array__") or
                                              hasattr(value, "__dlpack__")):
        try:  # another library's array (a PyTorch tensor...): by its values
            value = np.asarray(value)
        except Exception:  # noqa: BLE001 - not readable here: no memo
            return _UNKEYED
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.shape, value.tobytes())
    frozen = freeze(value)
    # freeze() passes unknown objects through: they may be mutable and hash by identity
    return _UNKEYED if frozen is value else frozen


def _named(exc: ValidationError, name: str) -> ValidationError:
    """A descriptor's or binding's error as the functional call's: ``padding.start_padding``
    where the descriptor says ``Padding1OperatorDesc.start_padding`` (one prefix, the name the
    user called, whichever check found it)."""
    message = str(exc)
    owner, dot, rest = message.partition(".")
    if dot and owner.endswith("OperatorDesc"):
        return ValidationError(f"{name}.{rest}")
    if message.startswith("DataType: "):  # an array's type no DataType has
        return ValidationError(f"{name}.dtype: {message[len('DataType: '):]}")
    return exc


#: a key part that makes the memo key unhashable: the call runs without the memo
_UNKEYED = []


def _simple(params) -> bool:
    """Whether every parameter is a Python integer, a name, None or a tuple of Python integers:
    then the parameters key the memo as they are (hashable, and equal only when equal in
    value and type)."""
    for p in params:
        t = type(p)
        if t is int or t is str or p is None:
            continue
        if t is not tuple:
            return False
        for v in p:
            if type(v) is not int:
                return False
    return True


#: the operators of the latest distinct calls, in front of the cache (one dictionary lookup
#: instead of the cache's ordered bookkeeping), for the cache's generation ``_recent_of[0]``
_recent: dict = {}
_recent_of = [0]
RECENT = 64


def _remember(key, op) -> None:
    if _recent_of[0] != cache.generation or len(_recent) >= RECENT:
        _recent.clear()  # the cache was cleared, or too many distinct calls: start again
        _recent_of[0] = cache.generation
    _recent[key] = op


def run(name, tensors, params, make_desc, inputs, device, out, like=None, originals=None):
    """Run a call. The compiled operator of ``make_desc(*tensors, *params)`` is memoised on the
    call's tensor inputs (type, shape, dtype), its parameters (by value) and the device, so a
    repeated call skips building the descriptor; a parameter that cannot be keyed (unhashable)
    skips the memo. The result is of ``like``'s kind (a PyTorch tensor for a tensor input:
    :mod:`._interop`). ``originals``: the inputs as the caller gave them (default ``(like,)``
    for one input): PyTorch tensors among them that require grad make the call a node of
    PyTorch's autograd graph."""
    simple = _simple(params) and type(device) is str
    key = ("functional", name, tuple([_tensor_key(a) for a in tensors]),
           params if simple else tuple([_param_key(p) for p in params]), device)
    if not simple:
        try:
            hash(key)
        except TypeError:  # an unhashable parameter: no memo, same result
            key = None
    try:
        if key is None:
            op = compile_operator(make_desc(*tensors, *params), device)
        else:
            op = _recent.get(key) if _recent_of[0] == cache.generation else None
            if op is None:
                op = cache.get_or_build(
                    key, lambda: compile_operator(make_desc(*tensors, *params), device))
                _remember(key, op)
        originals = originals or ((like,) if len(inputs) == 1 else ())
        if like is not None and _interop.needs_grad(originals):  # PyTorch autograd
            if out is not None:
                _interop.check_out(out, "out")
            return _interop.with_grad(op, originals, out)
        result = op(*inputs, out=out)
    except ValidationError as exc:
        raise _named(exc, name) from None
    if type(like) is np.ndarray or out is not None:
        return result
    k = _interop.kind(like)
    return result if k is None else _interop.as_kind(result, k)


def _scalar(value):
    """A 0-d array as the Python scalar it holds (what the descriptors' checks take), another
    library's array (a PyTorch tensor) as a NumPy one; anything else as is."""
    if _interop.kind(value) is not None:
        value = np.asarray(_interop.host_view(value))
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value.item()
    return value


#: NumPy's names for DirectML's modes, where they mean the same (``numpy.pad``'s "reflect" is
#: DirectML's REFLECTION; "symmetric", "edge", "wrap" and "constant" are spelled alike)
ALIASES = {PaddingMode: {"REFLECT": "REFLECTION"}}


def _enum(owner, field, value, enum_type):
    """An enum member from a member, its value or its name (any case, NumPy's names too)."""
    value = _scalar(value)
    if isinstance(value, str):
        name = value.upper()
        try:
            return enum_type[ALIASES.get(enum_type, {}).get(name, name)]
        except KeyError:
            aliases = ", ".join(f"{a.lower()} (= {m.lower()})"
                                for a, m in ALIASES.get(enum_type, {}).items())
            Checker(owner).fail(field, value, "expected one of " +
                                ", ".join(m.name.lower() for m in enum_type) +
                                (f", or NumPy's {aliases}" if aliases else ""))
    return Checker(owner).enum(field, value, enum_type)


def _tuple(value, default=None):
    """A sequence (a tuple, a list, a 1-D array...) as a tuple (the default for None); anything
    else as is, for the checks to name."""
    if value is None:
        return default
    value = _scalar(value)
    if hasattr(value, "__iter__") and not isinstance(value, (str, bytes)):
        return tuple(_scalar(v) for v in value)
    return value


def _per_axis(value, count: int, default=None):
    """A parameter with one entry per axis: a single integer (a Python or NumPy integer, a 0-d
    array) stands for the same value on each of ``count`` axes; otherwise :func:`_tuple`."""
    value = _scalar(value)
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return (value,) * count
    return _tuple(value, default)


def _like(x, value, owner: str, field: str):
    """A filter or bias in ``x``'s data type: given without a type of its own (a list, a
    number), it takes ``x``'s; an array of another type is cast where every value is exact in
    ``x``'s type, and refused with what to cast otherwise. Host arrays only (device arrays are
    left to the descriptor's checks)."""
    a = as_array(value, owner, field)
    if not hasattr(value, "dtype") and isinstance(a, np.ndarray) and hasattr(x, "dtype") and \
            not isinstance(x, np.ndarray):  # a list or number beside a device array: its type
        return _like(np.empty(0, np.dtype(str(x.dtype))), value, owner, field)
    if not (isinstance(x, np.ndarray) and isinstance(a, np.ndarray)) or a.dtype == x.dtype:
        return a
    typed = hasattr(value, "dtype")
    with np.errstate(all="ignore"):
        b = a.astype(x.dtype)
        back = b.astype(a.dtype)
        exact = a.dtype.kind in "biuf" and (
            np.array_equal(back, a, equal_nan=True) or not typed and
            np.array_equal(np.isfinite(back), np.isfinite(a)))  # a list: rounding is fine
    if exact:
        return b
    Checker(owner).fail(f"{field}.dtype", a.dtype.name, f"expected {x.dtype.name}, the data type "
                        f"of x, or values exact in it: cast one of them, e.g. "
                        f"{field}.astype(np.{x.dtype.name}) or x.astype(np.{a.dtype.name})")


def _batch_axis(x, expected: int, by: str, owner: str) -> None:
    """Name a missing batch axis: an (C, spatial...) input where (N, C, spatial...) is read."""
    ndim = getattr(x, "ndim", None)
    if ndim is not None and ndim == expected - 1 and ndim >= 2:
        Checker(owner).fail("x.shape", tuple(x.shape), f"expected {expected} dimensions "
                            f"(N, C, spatial...) for this {by}: is the batch axis missing? "
                            f"x[None] adds it")


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


def lp_pooling(x, window_size, strides=None, start_padding=None, end_padding=None,
               dilations=None, p=2, *, device="cpu", out=None):
    """LP pooling over the spatial axes of ``x`` (N, C, spatial...): ``(sum |x|**p) ** (1/p)``
    per window. Defaults: stride 1, no padding, dilation 1, p = 2.

    >>> import numpy as np
    >>> lp_pooling(np.array([[[-1., -2.]]], np.float32), (2,), p=1, device="numpy")
    array([[[3.]]], dtype=float32)
    """
    params = (window_size, strides, start_padding, end_padding, dilations, p)
    return _pooling_call("lp_pooling", lp_pooling_desc, x, params, device, out)


def lp_pooling_desc(x, window_size, strides=None, start_padding=None, end_padding=None,
                    dilations=None, p=2):
    """The descriptor :func:`lp_pooling` runs, from anything with ``shape`` and ``dtype``."""
    inp, args, outp = _pooled("lp_pooling", x, window_size, strides, start_padding, end_padding,
                              dilations)
    return LpPooling1OperatorDesc(inp, outp, *args, _scalar(p))


def convolution(x, filter, bias=None, strides=None, dilations=None, start_padding=None,
                end_padding=None, output_padding=None, group_count=1,
                mode=ConvolutionMode.CROSS_CORRELATION, direction=ConvolutionDirection.FORWARD,
                fused_activation=None, *, device="cpu", out=None):
    """Convolution of ``x`` (N, C, spatial...) with ``filter`` (FORWARD: {C_out, C_in/G, k...};
    BACKWARD: {C_in, C_out/G, k...}); ``bias`` is (C_out,) or (1, C_out, 1...). Defaults:
    stride 1, dilation 1, no padding, cross-correlation, forward. ``mode`` and ``direction``
    take members, values or names.

    >>> import numpy as np
    >>> x = np.array([[[1, 2, 3, 4, 5]]], np.float32); w = np.array([[[1, 10, 100]]], np.float32)
    >>> convolution(x, w, strides=(2,), start_padding=(1,), end_padding=(1,), device="numpy")
    array([[[210., 432.,  54.]]], dtype=float32)
    """
    x0, x = x, as_array(x, "convolution", "x")
    originals = (x0, filter) + ((bias,) if bias is not None else ())
    filter = _like(x, filter, "convolution", "filter")
    nd = getattr(x, "ndim", 0) - 2
    inputs = [x, filter]
    if bias is not None:
        bias = _like(x, bias, "convolution", "bias")
        if getattr(bias, "ndim", None) == 1:
            bias = bias.reshape(bias_sizes(bias.shape, nd + 2))
        inputs.append(bias)

    params = (strides, dilations, start_padding, end_padding, output_padding, group_count, mode,
              direction, fused_activation)
    return run("convolution", (x, filter, bias), params, convolution_desc, tuple(inputs), device,
               out, x0, originals)


def bias_sizes(sizes, rank: int) -> tuple:
    """A (C_out,) bias as the operator binds it, (1, C_out, 1...) for an input of ``rank``
    dimensions; a bias of any other rank as it is."""
    sizes = tuple(sizes)
    return (1, sizes[0]) + (1,) * max(rank - 2, 0) if len(sizes) == 1 else sizes


def convolution_desc(x, filter, bias=None, strides=None, dilations=None, start_padding=None,
                     end_padding=None, output_padding=None, group_count=1,
                     mode=ConvolutionMode.CROSS_CORRELATION,
                     direction=ConvolutionDirection.FORWARD, fused_activation=None):
    """The descriptor :func:`convolution` runs, from anything with ``shape`` and ``dtype``
    (``bias`` (C_out,) or (1, C_out, 1...))."""
    c = Checker("convolution")
    m = _enum("convolution", "mode", mode, ConvolutionMode)
    direc = _enum("convolution", "direction", direction, ConvolutionDirection)
    inp, flt = TensorDesc.like(x), TensorDesc.like(filter)
    bdesc = None
    if bias is not None:
        bdesc = TensorDesc.like(bias)
        bdesc = TensorDesc(bdesc.data_type, bias_sizes(bdesc.sizes, inp.rank))
    nd = max(inp.rank - 2, 0)
    ones, zeros = (1,) * nd, (0,) * nd
    args = tuple(_per_axis(v, nd, default) for v, default in (
        (strides, ones), (dilations, ones), (start_padding, zeros), (end_padding, zeros),
        (output_padding, zeros)))
    group_count = _scalar(group_count)
    if inp.rank < 3:  # the descriptor names the rank rule
        sizes = inp.sizes
    else:
        sizes, _ = _conv.output_sizes(c, inp.sizes, flt.sizes, direc, *args, group_count)
    return ConvolutionOperatorDesc(inp, flt, bdesc, TensorDesc(inp.data_type, sizes), m, direc,
                                   *args, group_count, fused_activation)


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


def _pooling_call(name, make, x, params, device, out):
    """A pooling's call: ``x`` as an array (a missing batch axis named), its ``params``
    (``window_size`` first), its descriptor from ``make``."""
    x0, x = x, as_array(x, name, "x")
    window = _tuple(params[0])
    if isinstance(window, tuple):
        _batch_axis(x, len(window) + 2, "window_size", name)
    return run(name, (x,), params, make, (x,), device, out, x0)


def _pooled(owner, x, window_size, strides, start_padding, end_padding, dilations):
    """A pooling's input desc, its window fields per axis (defaults: stride 1, no padding,
    dilation 1) and its output desc through the shape rule (floor mode)."""
    inp = TensorDesc.like(x)
    nd = max(inp.rank - 2, 0)
    ones, zeros = (1,) * nd, (0,) * nd
    args = tuple(_per_axis(v, nd, default) for v, default in (
        (strides, ones), (window_size, None), (start_padding, zeros), (end_padding, zeros),
        (dilations, ones)))
    if inp.rank < 3:  # the descriptor names the rank rule
        return inp, args, inp
    return inp, args, _pool.pooled_output(inp, *args, owner)


def max_pooling(x, window_size, strides=None, start_padding=None, end_padding=None,
                dilations=None, *, device="cpu", out=None):
    """Max pooling over the spatial axes of ``x`` (N, C, spatial...): each window's largest
    element (the padding never wins). Defaults: stride 1, no padding, dilation 1.

    >>> import numpy as np
    >>> max_pooling(np.array([[[1., 3., 2., 0.]]], np.float32), (2,), strides=2, device="numpy")
    array([[[3., 2.]]], dtype=float32)
    """
    params = (window_size, strides, start_padding, end_padding, dilations)
    return _pooling_call("max_pooling", max_pooling_desc, x, params, device, out)


def max_pooling_desc(x, window_size, strides=None, start_padding=None, end_padding=None,
                     dilations=None):
    """The descriptor :func:`max_pooling` runs, from anything with ``shape`` and ``dtype``."""
    inp, args, outp = _pooled("max_pooling", x, window_size, strides, start_padding,
                              end_padding, dilations)
    return MaxPooling2OperatorDesc(inp, outp, None, *args)


def average_pooling(x, window_size, strides=None, start_padding=None, end_padding=None,
                    dilations=None, include_padding=False, *, device="cpu", out=None):
    """Average pooling over the spatial axes of ``x`` (N, C, spatial...): each window's sum
    over its count of taps (``include_padding``: the taps in the padding count too). Defaults:
    stride 1, no padding, dilation 1, the padding not counted.

    >>> import numpy as np
    >>> average_pooling(np.array([[[1., 3.]]], np.float32), (2,), start_padding=(1,),
    ...                 device="numpy")
    array([[[1., 2.]]], dtype=float32)
    """
    params = (window_size, strides, start_padding, end_padding, dilations, include_padding)
    return _pooling_call("average_pooling", average_pooling_desc, x, params, device, out)


def average_pooling_desc(x, window_size, strides=None, start_padding=None, end_padding=None,
                         dilations=None, include_padding=False):
    """The descriptor :func:`average_pooling` runs, from anything with ``shape`` and
    ``dtype``."""
    inp, args, outp = _pooled("average_pooling", x, window_size, strides, start_padding,
                              end_padding, dilations)
    return AveragePooling1OperatorDesc(inp, outp, *args, _scalar(include_padding))


def _broadcast(owner, arrays, fields):
    """Arrays broadcast NumPy's way to one shape (views with strides of 0: DirectML's
    broadcasting), the first one's data type given to the others where exact."""
    first = as_array(arrays[0], owner, fields[0])
    xs = [first] + [_like(first, a, owner, f) for a, f in zip(arrays[1:], fields[1:])]
    if not all(isinstance(a, np.ndarray) for a in xs):
        return xs  # device arrays: as they are (the descriptor's checks name a mismatch)
    try:
        shape = np.broadcast_shapes(*(a.shape for a in xs))
    except ValueError:
        Checker(owner).fail(f"{fields[1]}.shape", tuple(xs[1].shape),
                            f"expected a shape that broadcasts with {fields[0]}'s "
                            f"{tuple(xs[0].shape)} (NumPy's rule)")
    return [a if a.shape == shape else np.broadcast_to(a, shape) for a in xs]


def element_wise_add(a, b, fused_activation=None, *, device="cpu", out=None):
    """``a + b`` (broadcast NumPy's way), then ``fused_activation`` (a fusable activation
    descriptor, or None).

    >>> import numpy as np
    >>> element_wise_add(np.array([1., -3.], np.float32), 1.0, device="numpy")
    array([ 2., -2.], dtype=float32)
    """
    x0, b0 = a, b
    a, b = _broadcast("element_wise_add", [a, b], ["a", "b"])
    return run("element_wise_add", (a, b), (fused_activation,), element_wise_add_desc, (a, b),
               device, out, x0, (x0, b0))


def element_wise_add_desc(a, b, fused_activation=None):
    """The descriptor :func:`element_wise_add` runs (``a`` and ``b`` of one shape)."""
    ta, tb = TensorDesc.like(a), TensorDesc.like(b)
    return ElementWiseAdd1OperatorDesc(ta, tb, TensorDesc(ta.data_type, ta.sizes),
                                       fused_activation)


def element_wise_multiply(a, b, *, device="cpu", out=None):
    """``a * b`` (broadcast NumPy's way).

    >>> import numpy as np
    >>> element_wise_multiply(np.array([1, -3], np.int32), 2, device="numpy")
    array([ 2, -6], dtype=int32)
    """
    x0, b0 = a, b
    a, b = _broadcast("element_wise_multiply", [a, b], ["a", "b"])
    return run("element_wise_multiply", (a, b), (), element_wise_multiply_desc, (a, b), device,
               out, x0, (x0, b0))


def element_wise_multiply_desc(a, b):
    """The descriptor :func:`element_wise_multiply` runs (``a`` and ``b`` of one shape)."""
    ta, tb = TensorDesc.like(a), TensorDesc.like(b)
    return ElementWiseMultiplyOperatorDesc(ta, tb, TensorDesc(ta.data_type, ta.sizes))


def batch_normalization(x, mean, variance, scale, bias, epsilon=1e-5, fused_activation=None,
                        *, device="cpu", out=None):
    """Inference batch normalization of ``x`` (N, C, spatial...): ``scale * (x - mean) /
    sqrt(variance + epsilon) + bias``, then ``fused_activation``. Each parameter is per channel,
    (C,) or (1, C, 1...), or per channel and position, (1, C, spatial...).

    >>> import numpy as np
    >>> batch_normalization(np.array([[[2.], [4.]]], np.float32), [1, 2], [4, 4], [1, 1],
    ...                     [0, 1], epsilon=0.0, device="numpy")
    array([[[0.5],
            [2. ]]], dtype=float32)
    """
    x0, x = x, as_array(x, "batch_normalization", "x")
    nd = getattr(x, "ndim", 0)
    params = []
    for name, v in zip(("mean", "variance", "scale", "bias"), (mean, variance, scale, bias)):
        p = _like(x, v, "batch_normalization", name)
        if getattr(p, "ndim", None) == 1:
            p = p.reshape(bias_sizes(p.shape, nd))
        params.append(p)
    return run("batch_normalization", (x, *params), (epsilon, fused_activation),
               batch_normalization_desc, (x, *params), device, out, x0,
               (x0, mean, variance, scale, bias))


def batch_normalization_desc(x, mean, variance, scale, bias, epsilon=1e-5,
                             fused_activation=None):
    """The descriptor :func:`batch_normalization` runs (parameters of the input's rank)."""
    inp = TensorDesc.like(x)
    ts = [TensorDesc.like(p) for p in (mean, variance, scale, bias)]
    spatial = all(t.sizes[2:] == (1,) * (t.rank - 2) for t in ts)
    return BatchNormalizationOperatorDesc(inp, *ts, TensorDesc(inp.data_type, inp.sizes),
                                          spatial, _scalar(epsilon), fused_activation)


def gemm(a, b, c=None, trans_a=False, trans_b=False, alpha=1.0, beta=1.0,
         fused_activation=None, *, device="cpu", out=None):
    """``alpha * op(a) @ op(b) + beta * c`` over the last two axes (``op``: transposed where
    asked), then ``fused_activation``; ``c`` broadcasts NumPy's way to the product's shape.

    >>> import numpy as np
    >>> gemm(np.eye(2, dtype=np.float32), [[1, 2], [3, 4]], [10, 20], trans_b=True,
    ...      device="numpy")
    array([[11., 23.],
           [12., 24.]], dtype=float32)
    """
    a0, b0, c0 = a, b, c
    a = as_array(a, "gemm", "a")
    b = _like(a, b, "gemm", "b")
    inputs = [a, b]
    if c is not None:
        c = _like(a, c, "gemm", "c")
        if isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and \
                isinstance(c, np.ndarray) and a.ndim == b.ndim >= 2:  # else the desc says why
            sizes = _gemm.output_sizes(a.shape, b.shape, _scalar(trans_a), _scalar(trans_b))
            try:
                c = np.broadcast_to(c, sizes)
            except ValueError:
                Checker("gemm").fail("c.shape", tuple(c.shape), "expected a shape that "
                                     f"broadcasts to the product's {sizes}")
        inputs.append(c)
    return run("gemm", (a, b, c), (trans_a, trans_b, alpha, beta, fused_activation), gemm_desc,
               tuple(inputs), device, out, a0, (a0, b0) + ((c0,) if c0 is not None else ()))


def gemm_desc(a, b, c=None, trans_a=False, trans_b=False, alpha=1.0, beta=1.0,
              fused_activation=None):
    """The descriptor :func:`gemm` runs (``c``, if any, of the output's shape)."""
    ta, tb = TensorDesc.like(a), TensorDesc.like(b)
    owner = Checker("gemm")
    t_a = MatrixTransform.TRANSPOSE if _scalar(trans_a) else MatrixTransform.NONE
    t_b = MatrixTransform.TRANSPOSE if _scalar(trans_b) else MatrixTransform.NONE
    sizes = _gemm.output_sizes(ta.sizes, tb.sizes, t_a, t_b, owner) if ta.rank >= 2 and \
        tb.rank >= 2 else ta.sizes
    tc = TensorDesc.like(c) if c is not None else None
    return GemmOperatorDesc(ta, tb, tc, TensorDesc(ta.data_type, sizes), t_a, t_b,
                            _scalar(alpha), _scalar(beta), fused_activation)


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


#: ``slice`` is the operator's everyday name (the DML_SLICE1 version is the one implemented)
slice = slice1  # shadows the builtin in this module only, where it is not used
#: the functional layer's other names for its operators (in ``dml_numba`` too)
OTHER_NAMES = {"slice": slice1}
