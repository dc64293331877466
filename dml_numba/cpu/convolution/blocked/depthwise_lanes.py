"""FORWARD depthwise convolution with the channels in the lanes (``blocked-depthwise-lanes``):
for output rows narrower than a vector, where the plane-by-plane kernel (``depthwise.py``)
narrows its vectors and overlaps its tiles.

``kernel(x, wp, [b,] y, xp, slots)``: ``slots`` (p)range iterations share the items (image,
block of ``lanes`` channels, band of output rows: :func:`units`) as :mod:`dml_numba.cpu._share`
says. Each copies its block's planes, transposed, into its own slot of ``xp``, a band of rows
at a time (the padded rows a band of output rows reads, within ``BAND_BYTES``, the bands
evened out, then that band's output: the band stays
in the first-level cache; a whole 112 x 112 plane of 16 channels is 0.8 MB, which went
through the second level: MobileNetV2's 96 channels on 112 x 112 at stride 2, in the network
at batch 1, 0.213 -> 0.175 ms): the padded plane pixel-major, one vector of ``lanes``
channels a pixel (``lanes`` rows of pixels loaded per channel, transposed in
registers by
``vstore_transposed``, their zero padding stored around them), so a strided or dilated window
reads whole vectors at any offset with no stride phases. Then, per output row, tiles of
``pixels`` output pixels: every tap's weight vector held (``lanes`` channels a vector), each
tap of each pixel one vector load and one fused multiply-add, the bias, the vector
activation, and the tile's pixels transposed back into the block's output planes, a row of
``pixels`` a plane (``vstore_transposed``). The last tile of a row overlaps the one before.

Measured on AVX2 (8 lanes, one image): MobileNetV2's 960 channels on 7 x 7 0.025 ms against
0.083 plane by plane, 576 on 14 x 14 at stride 2 (7 x 7 out) 0.022 against 0.060. On wider
rows the plane-by-plane kernel keeps them (:func:`.plan.takes_depthwise_lanes`): at stride 1
it is the faster (384 on 14 x 14: 0.035 ms against 0.052), and at stride 2, though this one
was faster alone (96 on 112 x 112: 0.156 against 0.173; 192 on 28 x 28: 0.034 against 0.050),
inside the network it was not (0.214 against 0.173 at 112 x 112, and the pointwise layer
reading its output slower too: 0.135 against 0.096 ms; 0.050 against 0.048 at 28 x 28): it
writes each plane a few pixels at a time. With AVX-512 (16 lanes, an Intel Xeon) it takes the
strided layers too: inside MobileNetV2 at batch 1, 96 on 112 x 112 at stride 2 0.206 ms
against 0.277 plane by plane, 144 on 56 x 56 0.083 against 0.096 (batch 8: 1.53 against 2.39,
0.49 against 0.60), the pointwise layers after them level.
"""
from __future__ import annotations

import itertools

from ...._codegen import SourceWriter, affine
from ....ops.convolution import geometry
from ..._emit import header, helper_header
from ..._share import IMPORT as SHARE_IMPORT
from ..._share import shares
from .padding import emit_lane_row
from .tile import (
    SIMD_IMPORT,
    Vec,
    activation_import,
    emit_activation_pass,
    slot_elements,
    vector_activation,
)


def emit(key) -> str:
    """The depthwise lanes kernel of ``key`` (2-D; ``key.plan``: ``lanes`` channels a vector,
    ``pixels`` output pixels a tile, ``padded`` the padded plane)."""
    d = key.desc
    return _emit_module(key, d, "", "transposes their planes, padded,", "pad(x, xp, f, xo, r0)",
                        lambda w, band: _emit_pad(w, d, key.plan, band))


def emit_pointwise(key) -> str:
    """The kernel of ``key.desc``, a :class:`~dml_numba.ops.pointwise_depthwise.
    PointwiseDepthwiseDesc` whose depthwise convolution this kernel runs (``key.plan``, as
    :func:`emit`'s): each band's padded rows of the pointwise result computed in the slot,
    pixel-major (``expand``), instead of copied from a stored one."""
    pw, d = key.desc.pointwise, key.desc.depthwise
    first = "w1, " + ("b1, " if pw.bias_tensor is not None else "")
    return _emit_module(key, d, first, "computes their pointwise result, padded,",
                        f"expand(x, {first}xp, f, xo, r0)",
                        lambda w, band: _emit_expand(w, pw, d, key.plan, band))


def _emit_module(key, d, first: str, what: str, fill: str, emit_fill) -> str:
    """The module: the kernel over the items and bands, ``fill`` (the function
    ``emit_fill(w, band)`` writes the body of) filling each band's padded rows, then ``block``
    computing them; ``first``: the arrays the kernel takes before the depthwise filter."""
    plan = key.plan
    items = d.input_tensor.sizes[0] * d.input_tensor.sizes[1] // plan.lanes
    args = f"wp, {'b, ' if d.bias_tensor is not None else ''}y"
    w = SourceWriter()
    loop = header(w, key, imports=(SIMD_IMPORT + ", vstore_transposed" + activation_import(d)
                                   + _pointwise_import(key, d), SHARE_IMPORT))
    ph, pw = plan.padded
    slot = slot_elements(ph * pw * plan.lanes)
    oh = d.output_tensor.sizes[2]
    band = band_rows(d, plan, POINTWISE_BAND_BYTES if first else None)
    bands = -(-oh // band)
    with w.block(f"def kernel(x, {first}{args}, xp, slots):"):
        w(f"# each slot takes a share of the {items * bands} (band of {band} output rows, "
          f"image, block of {plan.lanes} channels) and {what} into xp[slot * {slot}:], "
          + ("whole" if band == oh else "the rows of its band"))
        with shares(w, loop, items * bands, "slots", var="u"):  # slot s: its part of xp
            # bands outside the blocks: a thread's consecutive items are one band's blocks,
            # which read the same input rows while its core holds them (the pointwise kernel
            # reads every input channel's rows for each block: MobileNetV2's 16 -> 96
            # expansion on 112 x 112 and its stride-2 depthwise layer 0.885x the time with
            # the blocks outside, the model 0.989x), and each thread reads its share of the
            # rows once
            w(f"bi = u // {items}  # the band")
            w(f"f = u - bi * {items}  # the (image, block of channels)")
            w(f"r0 = min(bi * {band}, {oh - band})  # the band's first output row")
            w(f"xo = s * {slot}")
            w(fill)
            w(f"block(xp, {args}, f, xo, r0)")
    helper_header(w)
    with w.block(f"def {fill}:"):
        emit_fill(w, band)
    helper_header(w)
    with w.block(f"def block(xp, {args}, f, xo, r0):"):
        _emit_block(w, d, plan, geometry(d), band)
    return w.text()


def _pointwise_import(key, d) -> str:
    """The pointwise activation's vector import where the depthwise one does not bring it."""
    pw = getattr(key.desc, "pointwise", None)
    if pw is None:
        return ""
    extra = activation_import(pw)
    return extra if extra and extra not in activation_import(d) else ""


#: the bytes of a block's transposed rows a band holds at most: within the first-level cache
#: beside the output and the weights (a whole 112 x 112 plane of 16 channels is 0.8 MB)
BAND_BYTES = 32 * 1024


def band_reach(d, band: int) -> int:
    """The padded input rows a band of ``band`` output rows reads."""
    (kh, _), (sh, _), (dh, _) = geometry(d).kernel, d.strides, d.dilations
    return (band - 1) * sh + (kh - 1) * dh + 1


#: the same for the pointwise kernel (:func:`emit_pointwise`): its rows are computed, not copied,
#: and every band computes the rows its windows share with the band before again (one row at
#: a 3 x 3 window of stride 2): bands in the second-level cache, of several rows (MobileNetV2's
#: 16 -> 96 expansion and 96 channels on 112 x 112 at stride 2, alone: 0.33 ms in bands of 4
#: output rows, 0.30 of 8, 0.36 of 16, against 0.45 for the two kernels one by one)
POINTWISE_BAND_BYTES = 128 * 1024


def band_rows(d, plan, budget: int | None = None) -> int:
    """Output rows a band computes: as many as keep the padded input rows they read
    (:func:`band_reach`, with 4-byte ``lanes``-channel pixels) within ``budget`` bytes
    (:data:`BAND_BYTES` by default), at least one, evened out over the bands that takes (the
    last band overlaps the one before: 28 rows in bands of at most 17 are two of 14, not 17
    and 17 computing six rows twice); all of them where the whole padded plane fits."""
    oh = d.output_tensor.sizes[2]
    (kh, _), (sh, _), (dh, _) = geometry(d).kernel, d.strides, d.dilations
    row = plan.padded[-1] * plan.lanes * 4
    budget = BAND_BYTES if budget is None else budget  # (read now: tests set it)
    fit = min(oh, max(1, (budget // row - (kh - 1) * dh - 1) // sh + 1))
    return -(-oh // -(-oh // fit))


def units(d, plan, pointwise: bool = False) -> int:
    """The kernel's parallel items: (band of output rows, image, block of ``lanes`` channels),
    the bands outside (:func:`band_rows`; ``pointwise``: :func:`emit_pointwise`'s bands).
    Bands are items of their own so that a few blocks still share out evenly (MobileNetV2's
    144 channels on 56 x 56 at stride 2 and batch 1: nine blocks over two threads ran 1.55x
    faster than on one)."""
    band = band_rows(d, plan, POINTWISE_BAND_BYTES if pointwise else None)
    blocks = d.input_tensor.sizes[0] * d.input_tensor.sizes[1] // plan.lanes
    return blocks * -(-d.output_tensor.sizes[2] // band)


def _runs(size: int, step: int) -> list:
    """Starts of runs of ``step`` covering ``size`` (the last overlapping the one before)."""
    starts = list(range(0, size - step + 1, step))
    return starts + ([size - step] if size % step else [])


def _emit_rows(w, d, plan, band: int, sizes, what: str, fill) -> None:
    """The loop over the padded rows the band of ``band`` output rows from ``r0`` reads, into
    ``xp[xo:]`` pixel-major (the band's first padded row first), of a ``sizes`` (height, width)
    plane (``what``: its row, in a comment): a row outside it zeros; else the zero columns
    around it (only those the windows read), then ``fill(w, left, cols)`` writes the code
    storing the row's ``cols`` pixels the windows read from padded column ``left`` (``r``: the
    plane's row, ``dst``: the padded row's first element)."""
    L, (ph, pw) = plan.lanes, plan.padded
    h, wd = sizes
    top, left = d.start_padding
    sh = d.strides[0]
    rows, cols = max(0, min(h, ph - top)), max(0, min(wd, pw - left))  # the plane the windows read
    with w.block(f"for i in range({band_reach(d, band)}):"):
        w(f"r = r0 * {sh} + i - {top}  # {what} (padded row r0 * {sh} + i)")
        w(f"dst = xo + i * {pw * L}")
        emit_lane_row(w, f"r < 0 or r >= {rows}" if rows else None, pw, L, left, cols, fill)


def _emit_pad(w, d, plan, band: int) -> None:
    """The padded input rows the band reads (:func:`_emit_rows`), of the item's ``lanes``
    planes: the input row's runs of ``q`` pixels from each of the ``lanes`` planes, transposed
    (``q`` the widest power of two, at most the lanes, the row holds: the last run
    overlaps)."""
    L = plan.lanes
    h, wd = d.input_tensor.sizes[2:]
    w(f"c0 = f * {L}  # the block's first plane (image and channel)")

    def fill(w, left, cols):
        q = min(L, 1 << (cols.bit_length() - 1))
        w(f"src = c0 * {h * wd} + r * {wd}")
        for c in _runs(cols, q):
            for g0 in range(0, L, q):
                vecs = ", ".join(f"vload(x, src + {(g0 + i) * h * wd + c}, {q})"
                                 for i in range(q)) + ("," if q == 1 else "")
                w(f"vstore_transposed(xp, dst + {(left + c) * L + g0}, {L}, ({vecs}))")

    _emit_rows(w, d, plan, band, (h, wd), "the input row", fill)


def _emit_expand(w, pw, d, plan, band: int) -> None:
    """The padded rows the band reads (:func:`_emit_rows`) of the pointwise result's ``lanes``
    channels of the item, computed, not copied: for runs of ``q`` pixels (the last overlapping
    the one before), each pixel's ``lanes`` channels a vector: the bias, then per input channel
    its weight vector times the pixel's value broadcast, then the pointwise activation."""
    L = plan.lanes
    cin, h, wd = pw.input_tensor.sizes[1:]
    vec = Vec(L)
    act = vector_activation(pw)
    blocks = d.input_tensor.sizes[1] // L
    w(f"n = f // {blocks}  # the image")
    w(f"cb = f % {blocks}  # the block of channels within it: its weights")
    w(f"bs = {vec.load('b1', f'cb * {L}')}" if pw.bias_tensor is not None else
      f"bs = {vec.zero()}")

    def fill(w, left, cols):
        q = min(PIXELS, cols)
        w(f"src = n * {cin * h * wd} + r * {wd}")
        with w.block(f"for ct in range({-(-cols // q)}):"):
            w(f"c = min(ct * {q}, {cols - q})  # the run's first pixel")
            for p in range(q):
                w(f"a{p} = bs")
            with w.block(f"for ci in range({cin}):"):
                w(f"wv = {vec.load('w1', f'(cb * {cin} + ci) * {L}')}")
                w(f"at = src + ci * {h * wd} + c")
                for p in range(q):
                    w(f"a{p} = {vec.fma('wv', vec.broadcast('x', f'at + {p}'), f'a{p}')}")
            for p in range(q):
                w(vec.store("xp", f"dst + (c + {left + p}) * {L}", act.format(f"a{p}")))

    _emit_rows(w, d, plan, band, (h, wd), "the result's row", fill)


#: the pixels a run of the pointwise kernel computes at once (a chain of multiply-adds each)
PIXELS = 8


def _emit_block(w, d, plan, geo, band: int) -> None:
    """The band's output (``band`` rows from ``r0``): per output row, tiles of ``pixels``
    pixels (every tap's weight vector held), each stored transposed into the block's planes."""
    L, T, pw = plan.lanes, plan.pixels, plan.padded[-1]
    vec = Vec(L)
    oh, ow = d.output_tensor.sizes[2:]
    kh, kw = geo.kernel
    taps = kh * kw
    w(f"c0 = f * {L}")
    w(f"cb = f % {d.input_tensor.sizes[1] // L}  # the block within the image: its weights")
    for t in range(taps):
        w(f"w{t} = {vec.load('wp', f'(cb * {taps} + {t}) * {L}')}")
    w(f"bs = {vec.load('b', f'cb * {L}')}" if d.bias_tensor is not None else f"bs = {vec.zero()}")
    act = vector_activation(d)
    plane = oh * ow
    with w.block(f"for i in range({band}):"):
        w("r = r0 + i")
        with w.block(f"for jt in range({-(-ow // T)}):"):
            w(f"j = min(jt * {T}, {ow - T})")
            for p in range(T):
                w(f"a{p} = bs")
            (sh, sw), (dh, dw) = d.strides, d.dilations
            for (i, k), p in itertools.product(itertools.product(range(kh), range(kw)), range(T)):
                at = affine([("xo", 1), ("i", sh * pw * L), ("j", sw * L)],
                            ((i * dh) * pw + p * sw + k * dw) * L)
                w(f"a{p} = {vec.fma(f'w{i * kw + k}', vec.load('xp', at), f'a{p}')}")
            vals = ", ".join((act or "{}").format(f"a{p}") for p in range(T))
            w(f"vstore_transposed(y, c0 * {plane} + r * {ow} + j, {plane}, "
              f"({vals}{',' if T == 1 else ''}))")
            if act is None:
                emit_activation_pass(w, d, [("m", L), ("q", T)],
                                     f"(c0 + m) * {plane} + r * {ow} + j + q")

