"""Max pooling, vectorised: the input padded with -infinity (what never wins), one strided
slice per window tap, ``numpy.maximum`` over them (NaN propagates). The indices output: the
input's flat indices padded with -1 (no position), sliced by the same taps; a tap takes the
position where it is inside and the first to win in window order."""
from __future__ import annotations

import itertools

import numpy as np

from ..ops.max_pooling import MaxPooling2OperatorDesc, no_position
from ._kernel import vectorized


def window_taps(desc, a, fill, start=None):
    """``a`` padded with ``fill`` (``start`` in front, default the descriptor's start padding)
    as far as the last window reads; yields each window tap's strided view."""
    out_spatial = desc.output_tensor.sizes[2:]
    start = desc.start_padding if start is None else start
    pads = [(0, 0), (0, 0)]
    for n, o, s, k, d, lo in zip(a.shape[2:], out_spatial, desc.strides, desc.window_size,
                                 desc.dilations, start):
        reach = (o - 1) * s + (k - 1) * d + 1
        pads.append((lo, max(0, reach - lo - n)))
    a = np.pad(a, pads, constant_values=fill)
    for taps in itertools.product(*(range(k) for k in desc.window_size)):
        yield a[(Ellipsis,) + tuple(slice(t * d, t * d + (o - 1) * s + 1, s) for t, d, o, s in
                                    zip(taps, desc.dilations, out_spatial, desc.strides))]


@vectorized(MaxPooling2OperatorDesc)
def max_pooling(desc, x):
    acc = None
    if x.dtype.kind == "f":
        a, least = x.astype(np.float64), -np.inf
    else:
        a, least = x, np.iinfo(x.dtype).min
    for tap in window_taps(desc, a, least):
        acc = tap.copy() if acc is None else np.maximum(acc, tap)
    if desc.output_indices_tensor is None:
        return acc.astype(x.dtype)
    return acc.astype(x.dtype), _positions(desc, a, least)


def _positions(desc, a, least):
    """The indices output: per output element the flat input index of the first tap that is
    inside and beats the taps before it (a NaN beats a number, not another NaN)."""
    flat = np.arange(a.size, dtype=np.int64).reshape(a.shape)
    best = at = None
    for tap, pos in zip(window_taps(desc, a, least), window_taps(desc, flat, -1)):
        if best is None:
            best, at = np.full(tap.shape, least, a.dtype), np.full(tap.shape, -1, np.int64)
        take = (pos >= 0) & ((at < 0) | (tap > best))
        if a.dtype.kind == "f":
            take |= (pos >= 0) & np.isnan(tap) & ~np.isnan(best)
        best, at = np.where(take, tap, best), np.where(take, pos, at)
    dt = desc.output_indices_tensor.dtype
    out = at.astype(dt)
    out[at < 0] = no_position(dt)
    return out
