"""``algorithm="direct"``: one generated loop nest, parallel over (n, output channel, outer
spatial). FORWARD gathers input taps, BACKWARD is the adjoint in gather form (no scatter, no
races); bias and the fused activation in each row's epilogue. Best for 3x3-sized depthwise
windows on strided rows, and the fallback for float64 and rows under 4 pixels."""
from __future__ import annotations

import dataclasses
import itertools
from contextlib import ExitStack

from ..._codegen import SourceWriter, affine, decompose, index
from ..._dims import prod
from ..._gather import AxisMap, emit_map
from ...elements import open_window_loops
from ...elements.convolution import conv_epilogue
from ...ops._base import FOLDS, Fold
from ...ops.convolution import ConvolutionMode, geometry
from .._emit import header
from .base import ConvolutionKernel, conv_key

#: the fused row loop sums every tap in one expression; beyond this many taps it stops paying
FUSED_MAX_TAPS = 32
#: edge runs of at most this many pixels are written out with only their valid taps (no loop,
#: no bounds tests: less code for Numba's passes, which dominate the compile)
EDGE_UNROLL = 4


def yrow(j) -> str:
    """Element ``j`` of the output row the iteration owns."""
    return f"yr[{j}]"


def emit(key) -> str:
    """Row-wise direct convolution: each (p)range iteration owns one output row (n, m, outer
    spatial...), accumulates every tap into it, then applies bias and activation in place.

    Along the last axis each tap's valid range is a constant worked out here, so the innermost
    loop has no bounds test and, for stride 1, is contiguous (LLVM vectorises it). FORWARD
    gathers ``y[j] += x[j*s + k*d - p] * w``; BACKWARD scatters each input row into the private
    output row, ``y[j*s + k*d - p] += x[j] * w`` (no races: one row, one iteration).

    A key whose plan is a :class:`~dml_numba.ops._base.Fold` (FORWARD): the padding is the input
    read through that map (a graph's padding operator in front, folded): the interior reads as
    before, taps in the padding read the mapped input instead of being skipped.
    """
    d, geo = key.desc, geometry(key.desc)
    fold = (key.plan.kind, geo.padded_sizes()) if isinstance(key.plan, Fold) else None
    n_, cout = d.input_tensor.sizes[0], d.output_tensor.sizes[1]
    out = d.output_tensor.sizes[2:]
    o = [f"o{i}" for i in range(len(out) - 1)]
    w = SourceWriter()
    loop = header(w, key)
    args = "x, w, b, y" if d.bias_tensor is not None else "x, w, y"
    with w.block(f"def kernel({args}):"):
        with w.block(f"for f in {loop}({n_ * cout * prod(out[:-1])}):"):
            decompose(w, "f", ["n", "m"] + o, [n_, cout] + list(out[:-1]))
            w(f"g = m // {geo.out_channels}")
            if not geo.forward:
                w(f"col = m - g * {geo.out_channels}")
            w(f"yr = y[{index('n', 'm', *o)}]")  # 1-D row views keep LLVM's work small
            with w.block(f"for j in range({out[-1]}):"):
                w(f"{yrow('j')} = 0")
            if geo.forward and geo.taps <= FUSED_MAX_TAPS:
                _emit_fused_rows(w, d, o, per_tap=lambda: _emit_per_tap(w, d, o, fold), fold=fold)
            else:
                _emit_per_tap(w, d, o, fold)
            if d.bias_tensor is not None or d.fused_activation is not None:
                with w.block(f"for j in range({out[-1]}):"):
                    conv_epilogue(w, d, yrow("j"), yrow("j"))
    return w.text()


def _emit_per_tap(w, d, o, fold=None) -> None:
    """Every tap its own pass over the row, with the bounds of each (any row); with ``fold``
    (kind, padded extent), the taps in the padding read the input through the map."""
    geo = geometry(d)
    nd = len(geo.kernel)
    ksz, sizes_in, out = geo.kernel, d.input_tensor.sizes[2:], d.output_tensor.sizes[2:]
    flip = d.mode == ConvolutionMode.CONVOLUTION
    a = [f"a{i}" for i in range(nd - 1)]
    s_l, d_l, p_l = d.strides[-1], d.dilations[-1], d.start_padding[-1]
    with ExitStack() as stack:
        stack.enter_context(w.block(f"for c in range({geo.in_channels}):"))
        w(f"ci = g * {geo.in_channels} + c")
        fo = open_window_loops(  # outer spatial taps, with their bounds tests
            w, stack, [f"k{i}" for i in range(nd - 1)], a, sizes_in[:-1],
            starts={"o": o, "k": ksz[:-1], "pad": d.start_padding[:-1]},
            steps=d.strides[:-1], dilations=d.dilations[:-1], transposed=not geo.forward,
            flip=flip, fold=fold and (fold[0], fold[1][:-1]))
        w(f"xr = x[{index('n', 'ci', *a)}]")
        for kk in range(ksz[-1]):  # the last axis' taps, unrolled with constant ranges
            fk = ksz[-1] - 1 - kk if flip else kk
            off = kk * d_l - p_l
            widx = (index("m", "c", *fo, fk) if geo.forward else index("ci", "col", *fo, fk))
            # j runs over ``span`` elements; j*s + off must land inside [0, limit)
            span, limit = ((out[-1], sizes_in[-1]) if geo.forward else (sizes_in[-1], out[-1]))
            lo = max(0, -(off // s_l))
            hi = min(span, (limit - 1 - off) // s_l + 1) if limit - 1 - off >= 0 else 0
            strided = f"j * {s_l} + {off}" if s_l != 1 else f"j + {off}"
            xi, yi = (strided, "j") if geo.forward else ("j", strided)
            if fold is not None:  # the padding's taps read through the map, up to the extent
                reach = min(span, (fold[1][-1] - 1 - off - p_l) // s_l + 1)
                edges = [(0, min(lo, reach)), (max(hi, 0), reach)]
                if hi <= lo:
                    edges = [(0, reach)]
                w(f"wv = w[{widx}]")
                for e0, e1 in edges:
                    if e1 > e0:
                        with w.block(f"for j in range({e0}, {e1}):"):
                            w(f"pj = {affine([('j', s_l)], off + p_l)}")
                            emit_map(w, AxisMap(fold[0], limit, fold[1][-1], p_l), "pj", "xj")
                            w(f"{yrow('j')} += xr[xj] * wv")
                if hi <= lo:
                    continue
            elif hi <= lo:
                continue
            else:
                w(f"wv = w[{widx}]")
            with w.block(f"for j in range({lo}, {hi}):"):
                w(f"{yrow(yi)} += xr[{xi}] * wv")


class _Row:
    """The FORWARD row's last-axis arithmetic for :func:`_emit_fused_rows`: each tap's
    offset, the run ``[j_lo, j_hi)`` where every tap lies inside the input, the leading axes'
    tap combinations, and the terms of the sums."""

    def __init__(self, d):
        self.d, geo = d, geometry(d)
        self.ksz, self.flip = geo.kernel, d.mode == ConvolutionMode.CONVOLUTION
        self.s, self.n, self.o = (d.strides[-1], d.input_tensor.sizes[-1],
                                  d.output_tensor.sizes[-1])
        self.offs = [kk * d.dilations[-1] - d.start_padding[-1] for kk in range(self.ksz[-1])]
        lo = [max(0, -(off // self.s)) for off in self.offs]
        hi = [min(self.o, (self.n - 1 - off) // self.s + 1) if self.n - 1 - off >= 0 else 0
              for off in self.offs]
        self.j_lo = min(max(lo), self.o)
        self.j_hi = max(self.j_lo, min(hi))
        self.combos = list(itertools.product(*(range(k) for k in self.ksz[:-1])))

    def xcol(self, off) -> str:
        return affine([("j", self.s)], off)

    @staticmethod
    def xrow(combo) -> str:
        return "xr_" + "_".join(map(str, combo)) if combo else "xr"

    def weight(self, combo, kk) -> tuple:
        """The filter index of tap ``(combo, kk)`` (flipped for CONVOLUTION mode)."""
        fidx = [self.ksz[i] - 1 - t if self.flip else t for i, t in enumerate(combo)]
        return tuple(fidx + [self.ksz[-1] - 1 - kk if self.flip else kk])

    def term(self, combo, kk, col) -> str:
        return f"{self.xrow(combo)}[{col}] * w_{'_'.join(map(str, self.weight(combo, kk)))}"


def _emit_fused_rows(w, d, o, per_tap, fold=None) -> None:
    """FORWARD rows whose every outer tap lies inside the input: per input channel, one pass
    over the row sums all taps at once (``y[j] += x[..., j*s + off_0]*w_0 + ...``), the
    weights held in scalars; the row's edges, where some last-axis taps fall outside, take
    the same sum with a bounds test per tap. Other rows use ``per_tap`` (the general code).
    One read-modify-write of the output row per channel instead of one per tap."""
    row, geo = _Row(d), geometry(d)
    ksz, sizes_in = geo.kernel, d.input_tensor.sizes[2:]
    conds = []
    for i in range(len(ksz) - 1):
        s, dil, p = d.strides[i], d.dilations[i], d.start_padding[i]
        conds.append(f"{affine([(o[i], s)])} >= {p} and "
                     f"{affine([(o[i], s)], (ksz[i] - 1) * dil - p)} < {sizes_in[i]}")
    with w.block(f"if {' and '.join(conds)}:" if conds else "if True:"):
        with w.block(f"for c in range({geo.in_channels}):"):
            w(f"ci = g * {geo.in_channels} + c")
            for combo in row.combos:
                rows = [affine([(o[i], d.strides[i])], combo[i] * d.dilations[i]
                               - d.start_padding[i]) for i in range(len(ksz) - 1)]
                w(f"{row.xrow(combo)} = x[{index('n', 'ci', *rows)}]")
                for kk in range(ksz[-1]):
                    fidx = row.weight(combo, kk)
                    w(f"w_{'_'.join(map(str, fidx))} = w[{index('m', 'c', *fidx)}]")
            if row.j_hi > row.j_lo:
                with w.block(f"for j in range({row.j_lo}, {row.j_hi}):"):
                    terms = [row.term(cb, kk, row.xcol(row.offs[kk])) for cb in row.combos
                             for kk in range(ksz[-1])]
                    w(f"{yrow('j')} += " + " + ".join(terms))
            for edge in (range(0, row.j_lo), range(row.j_hi, row.o)):
                if len(edge):
                    _emit_row_edge(w, row, edge, fold)
    with w.block("else:"):
        per_tap()


def _emit_row_edge(w, row: _Row, edge: range, fold=None) -> None:
    """The pixels of ``edge`` where some last-axis taps fall outside the input: a few written
    out with only the taps inside, more in a loop with a bounds test per tap. With ``fold``
    (kind, padded extent) the taps outside read the input through the map instead."""
    k_l = row.ksz[-1]
    pad = row.d.start_padding[-1]
    if fold is not None:  # padded coordinate -> input column, worked out here
        m = AxisMap(fold[0], row.n, fold[1][-1], pad)

        def col(x):
            return int(m.at(x + pad)[0]) if 0 <= x + pad < fold[1][-1] else None
    else:
        def col(x):
            return x if 0 <= x < row.n else None
    if len(edge) <= EDGE_UNROLL:
        for j in edge:
            terms = [row.term(cb, kk, str(col(j * row.s + row.offs[kk]))) for kk in range(k_l)
                     if col(j * row.s + row.offs[kk]) is not None for cb in row.combos]
            if terms:
                w(f"{yrow(j)} += " + " + ".join(terms))
        return
    with w.block(f"for j in range({edge.start}, {edge.stop}):"):
        w(f"acc = {yrow('j')}")
        for kk in range(k_l):
            w(f"xj = {row.xcol(row.offs[kk])}")  # (not ``b``: that is the bias argument)
            if fold is not None:
                w(f"pj = xj + {pad}")
                with w.block(f"if pj < {fold[1][-1]}:"):
                    emit_map(w, m, "pj", "xj")
                    w("acc += " + " + ".join(row.term(cb, kk, "xj") for cb in row.combos))
                continue
            with w.block(f"if xj >= 0 and xj < {row.n}:"):
                w("acc += " + " + ".join(row.term(cb, kk, "xj") for cb in row.combos))
        w(f"{yrow('j')} = acc")


class DirectKernel(ConvolutionKernel):
    """The direct loop nest of ``desc``."""

    algorithm = "direct"

    def __init__(self, desc, options):
        from ..._dtypes import accumulator

        self.desc = desc
        self.acc = accumulator(desc.input_tensor.data_type)
        rank = desc.input_tensor.rank
        key = conv_key(desc, options)
        mode = options.get("input_padding")
        if mode is not None:  # a padding in front, read through its map (FORWARD)
            key = dataclasses.replace(key, plan=Fold(FOLDS[mode]))
        super().__init__(key, emit,
                         [(self.acc, rank)] * (4 if desc.bias_tensor is not None else 3), options)

    def run(self, inputs, y):
        self.fn(*inputs, y)
