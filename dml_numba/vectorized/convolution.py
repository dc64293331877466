"""Convolution, vectorised: one grouped einsum per kernel tap, float64 accumulation.

FORWARD gathers strided input slices; BACKWARD scatters into strided output slices (the adjoint),
over the full transposed extent, then crops ``start_padding`` off the front.
"""
from __future__ import annotations

import itertools

import numpy as np

from ..ops.convolution import (
    ConvolutionDirection,
    ConvolutionMode,
    ConvolutionOperatorDesc,
)
from ._activation import apply_activation
from ._kernel import vectorized


@vectorized(ConvolutionOperatorDesc)
def convolution(desc, x, w, b=None):
    nd = x.ndim - 2
    g = desc.group_count
    x64 = x.astype(np.float64)
    w64 = w.astype(np.float64)
    if desc.mode == ConvolutionMode.CONVOLUTION:
        w64 = w64[(Ellipsis,) + (slice(None, None, -1),) * nd]
    out_spatial = desc.output_tensor.sizes[2:]
    n, c = x.shape[:2]
    k = w.shape[2:]
    taps = list(itertools.product(*(range(kk) for kk in k)))
    if desc.direction == ConvolutionDirection.FORWARD:
        m = w.shape[0]
        pads = [(0, 0), (0, 0)]
        for size, o, s, kk, d, lo in zip(x.shape[2:], out_spatial, desc.strides, k,
                                         desc.dilations, desc.start_padding):
            reach = (o - 1) * s + (kk - 1) * d + 1
            pads.append((lo, max(0, reach - lo - size)))
        xg = np.pad(x64, pads).reshape((n, g, c // g) + tuple(s + a + b_ for s, (a, b_) in
                                                               zip(x.shape[2:], pads[2:])))
        wg = w64.reshape((g, m // g, c // g) + k)
        acc = np.zeros((n, g, m // g) + tuple(out_spatial))
        for t in taps:
            patch = xg[
                (Ellipsis,)
                + tuple(
                    slice(kk * d, kk * d + (o - 1) * s + 1, s)
                    for kk, d, o, s in zip(t, desc.dilations, out_spatial, desc.strides)
                )
            ]
            acc += np.einsum("ngc...,gmc->ngm...", patch, wg[(Ellipsis,) + t])
        y = acc.reshape((n, m) + tuple(out_spatial))
    else:
        cog = w.shape[1]
        full = [(size - 1) * s + (kk - 1) * d + 1 for size, s, kk, d in
                zip(x.shape[2:], desc.strides, k, desc.dilations)]
        extent = [max(f, lo + o) for f, lo, o in zip(full, desc.start_padding, out_spatial)]
        acc = np.zeros((n, g, cog) + tuple(extent))
        xg = x64.reshape((n, g, c // g) + x.shape[2:])
        wg = w64.reshape((g, c // g, cog) + k)
        for t in taps:
            acc[(Ellipsis,) + tuple(slice(kk * d, kk * d + (size - 1) * s + 1, s) for kk, d, size, s
                                    in zip(t, desc.dilations, x.shape[2:], desc.strides))] += \
                np.einsum("ngc...,gcm->ngm...", xg, wg[(Ellipsis,) + t])
        acc = acc[(Ellipsis,) + tuple(slice(lo, lo + o) for lo, o in
                                      zip(desc.start_padding, out_spatial))]
        y = acc.reshape((n, g * cog) + tuple(out_spatial))
    if b is not None:
        y = y + b.astype(np.float64)
    return apply_activation(desc.fused_activation, y).astype(x.dtype)
