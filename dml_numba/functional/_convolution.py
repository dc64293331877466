"""The functional layer's convolution."""
from __future__ import annotations

from .._binding import as_array
from .._errors import Checker
from ..ops import convolution as _conv
from ..ops.convolution import (
    ConvolutionDirection,
    ConvolutionMode,
    ConvolutionOperatorDesc,
)
from ..tensor import TensorDesc
from ._call import _enum, _like, _per_axis, _scalar, run


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
