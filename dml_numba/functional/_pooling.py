"""The functional layer's poolings: LP, max and average pooling."""
from __future__ import annotations

from .._binding import as_array
from .._dtypes import DataType
from .._errors import Checker
from ..ops import _pooling as _pool
from ..ops.average_pooling import AveragePooling1OperatorDesc
from ..ops.lp_pooling import LpPooling1OperatorDesc
from ..ops.max_pooling import MaxPooling2OperatorDesc
from ..tensor import TensorDesc
from ._call import _batch_axis, _per_axis, _scalar, _tuple, run


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
                dilations=None, return_indices=False, *, device="cpu", out=None):
    """Max pooling over the spatial axes of ``x`` (N, C, spatial...): each window's largest
    element (the padding never wins). Defaults: stride 1, no padding, dilation 1.
    ``return_indices``: also each maximum's position, the flat index into ``x`` (uint64; the
    first maximum in window order wins a tie): returns ``(values, indices)``, and ``out`` is
    then None or a pair.

    >>> import numpy as np
    >>> max_pooling(np.array([[[1., 3., 2., 0.]]], np.float32), (2,), strides=2, device="numpy")
    array([[[3., 2.]]], dtype=float32)
    >>> max_pooling(np.array([[[1., 3., 2., 0.]]], np.float32), (2,), strides=2,
    ...             return_indices=True, device="numpy")[1]
    array([[[1, 2]]], dtype=uint64)
    """
    params = (window_size, strides, start_padding, end_padding, dilations, return_indices)
    return _pooling_call("max_pooling", max_pooling_desc, x, params, device, out)


def max_pooling_desc(x, window_size, strides=None, start_padding=None, end_padding=None,
                     dilations=None, return_indices=False):
    """The descriptor :func:`max_pooling` runs, from anything with ``shape`` and ``dtype``."""
    inp, args, outp = _pooled("max_pooling", x, window_size, strides, start_padding,
                              end_padding, dilations)
    flag = Checker("max_pooling").boolean("return_indices", _scalar(return_indices))
    indices = TensorDesc(DataType.UINT64, outp.sizes) if flag and inp.rank >= 3 else None
    return MaxPooling2OperatorDesc(inp, outp, indices, *args)


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
