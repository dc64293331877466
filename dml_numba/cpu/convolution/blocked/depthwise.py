"""FORWARD convolution with one input channel per group (depthwise, and channel multipliers
below the dense tile's channel block), plane by plane.

``kernel(x, wp, [b,] y, xp, slots)``: ``slots`` (p)range iterations share the planes ``(n, g)``
(:mod:`dml_numba.cpu._share`: each its own share first, then what the others left); each copies
its plane with the zero padding into its own slot of ``xp`` (one plane:
it stays in the first-level cache; skipped when nothing is padded), then for each of the group's
output channels holds every tap's weight as a broadcast vector and walks the output in tiles of
``rows x vectors`` accumulators. A tile loads each input row its windows touch once per tap of
the last axis and feeds it to every tile row whose window holds that row (3x3 on 4 rows: 18
loads for 36 fused multiply-adds); every tap is unrolled. A depthwise layer is light enough for
the whole-input copy the other blocked kernels make first to cost as much as the arithmetic, so
this one pads plane by plane instead.
"""
from __future__ import annotations

import itertools
from contextlib import ExitStack

from ...._codegen import SourceWriter, affine, decompose
from ...._dims import prod
from ....ops.convolution import geometry
from ..._emit import header, helper_header
from ..._share import IMPORT as SHARE_IMPORT
from ..._share import shares
from .padding import emit_pad_phase
from .plan import Layout, fold_of, needs_copy
from .tile import (
    SIMD_IMPORT,
    Vec,
    activation_import,
    emit_activation_pass,
    row_block_terms,
    slot_elements,
    vector_activation,
)


def emit(key) -> str:
    """The depthwise blocked kernel of ``key``."""
    d, lay = key.desc, Layout.of(key)
    copy = needs_copy(d)
    split = d.strides[-1]
    args = f"wp, {'b, ' if d.bias_tensor is not None else ''}y"
    planes = lay.batch * lay.groups
    slot = slot_elements(lay.plane_in)
    w = SourceWriter()
    loop = header(w, key, imports=(SIMD_IMPORT + (", vload_stride, vstore_raw" if split > 1
                                                  else "") + activation_import(d), SHARE_IMPORT))
    with w.block(f"def kernel(x, {args}, xp, slots):"):
        w(f"# each slot takes a share of the {planes} planes (n, g)"
          + (f" and pads them in xp[slot * {slot}:]" if copy else ""))
        with shares(w, loop, planes, "slots"):  # slot s: its own part of xp
            if copy:
                w(f"xo = s * {slot}")
                emit_pad_phase(w, "range", 1, lay.size_in, lay.front, lay.padded, split,
                               geometry(d).padded_sizes()[-1], plane="f", base="xo",
                               lanes=lay.lanes, fold=fold_of(lay, d))
                w(f"plane(xp, {args}, f, xo)")
            else:
                w(f"plane(x, {args}, f, f * {lay.plane_in})  # nothing to pad: read in place")
    helper_header(w)
    with w.block(f"def plane(xp, {args}, f, xo):"):
        _emit_plane(w, d, lay)
    return w.text()


def _emit_plane(w, d, lay: Layout) -> None:
    """One plane: per output channel of the group, the weights as broadcast vectors, then the
    tiles over the plane's rows and the row's runs."""
    vec, nd, out = Vec(lay.lanes), lay.rank, lay.out
    taps = prod(lay.kernel)
    decompose(w, "f", ["n", "g"], [lay.batch, lay.groups])
    outer = [f"o{i}" for i in range(nd - 2)]
    rows = out[-2] if nd >= 2 else 1
    span = lay.lanes * lay.vectors
    with w.block(f"for mi in range({lay.mg}):"):
        w(f"m = g * {lay.mg} + mi")
        for t in range(taps):
            w(f"w{t} = {vec.splat(f'wp[m * {taps} + {t}]')}")
        w(f"bs = {vec.splat('b[m]')}" if d.bias_tensor is not None else f"bs = {vec.zero()}")
        with ExitStack() as stack:
            for i, o_ in enumerate(outer):
                stack.enter_context(w.block(f"for {o_} in range({out[i]}):"))
            with w.block(f"for rt in range({-(-rows // lay.rows)}):"):
                w(f"r0 = min(rt * {lay.rows}, {rows - lay.rows})")
                xt, yt = row_block_terms(d, outer + ["r0"][:nd - 1], lay.pstride, lay.ostride)
                w(f"xb = {affine([('xo', 1)] + xt)}")
                w(f"yb = {affine([(f'(n * {lay.cout} + m)', lay.plane_out)] + yt)}")
                with w.block(f"for jt in range({-(-out[-1] // span)}):"):
                    w(f"j = min(jt * {span}, {out[-1] - span})")
                    _emit_tile(w, d, lay)


def _feeds(d, lay: Layout) -> dict:
    """Input row ``ir`` (relative to the tile's first) -> the tile rows ``r`` it feeds and the
    row tap ``kr`` through which it does."""
    nd = lay.rank
    row_s, row_d = (d.strides[-2], d.dilations[-2]) if nd >= 2 else (1, 1)
    k_rows = lay.kernel[-2] if nd >= 2 else 1
    feeds: dict = {}
    for r in range(lay.rows):
        for kr in range(k_rows):
            feeds.setdefault(r * row_s + kr * row_d, []).append((r, kr))
    return feeds


def _emit_tile(w, d, lay: Layout) -> None:
    """One tile: ``rows x vectors`` accumulators from ``bs``; every input vector a tap of the
    last axis reads loaded once and multiplied into each tile row whose window holds it; the
    stores; the fused activation over the stored tile."""
    vec, nd, ksz, J = Vec(lay.lanes), lay.rank, lay.kernel, lay.vectors
    split, P = d.strides[-1], lay.padded
    acc = [[f"a{r}_{v}" for v in range(J)] for r in range(lay.rows)]
    for r in range(lay.rows):
        for v in range(J):
            w(f"{acc[r][v]} = bs")
    feeds = _feeds(d, lay)
    for lead in itertools.product(*(range(k) for k in ksz[:-2])):
        lead_off = sum(k * d.dilations[i] * lay.pstride[i] for i, k in enumerate(lead))
        for ir in sorted(feeds):
            for kc in range(ksz[-1]):
                t_c = kc * d.dilations[-1]
                off = (lead_off + (ir * lay.pstride[-2] if nd >= 2 else 0)
                       + t_c % split * (P[-1] // split) + t_c // split)
                for v in range(J):
                    at = affine([("xb", 1), ("j", 1)], off + v * lay.lanes)
                    w(f"x{v} = {vec.load('xp', at)}")
                for r, kr in feeds[ir]:
                    t = ((sum(k * prod(ksz[i + 1:]) for i, k in enumerate(lead))
                          + kr * ksz[-1] + kc) if nd >= 2 else kc)
                    for v in range(J):
                        w(f"{acc[r][v]} = {vec.fma(f'w{t}', f'x{v}', acc[r][v])}")
    row_y = lay.ostride[-2] if nd >= 2 else 0
    act = vector_activation(d)
    for r in range(lay.rows):
        for v in range(J):
            w(vec.store("y", affine([("yb", 1), ("j", 1)], r * row_y + v * lay.lanes),
                        (act or "{}").format(acc[r][v])))
    if act is None:
        emit_activation_pass(w, d, [("r", lay.rows), ("q", lay.lanes * J)],
                             affine([("yb", 1), ("r", row_y), ("j", 1), ("q", 1)]))
