"""``algorithm="direct"``: one generated loop nest, parallel over (n, output channel, outer
spatial). FORWARD gathers input taps, BACKWARD is the adjoint in gather form (no scatter, no
races); bias and the fused activation in each row's epilogue. Best for 3x3-sized depthwise
windows on strided rows, and the fallback for float64 and rows under 4 pixels."""
from __future__ import annotations

import dataclasses
import itertools
from contextlib import ExitStack

import numpy as np

from ..._codegen import SourceWriter, affine, decompose, index
from ..._dims import prod
from ..._dtypes import accumulator
from ..._gather import AxisMap, emit_map
from ...elements import open_window_loops
from ...elements.convolution import bias_element, conv_epilogue
from ...ops._base import FOLDS
from ...ops.convolution import ConvolutionMode, geometry
from .._emit import Host, header
from .base import ConvolutionKernel, conv_key
from .blocked.tile import SIMD_IMPORT, vector_activation

#: the fused row loop sums every tap in one expression; beyond this many taps it stops paying
FUSED_MAX_TAPS = 32
#: edge runs of at most this many pixels are written out with only their valid taps (no loop,
#: no bounds tests: less code for Numba's passes, which dominate the compile)
EDGE_UNROLL = 4


@dataclasses.dataclass(frozen=True)
class RowPlan:
    """The direct kernel's plan (in its key): ``lanes``, the float32 lanes of the explicit
    vectors a unit-stride FORWARD row's interior is summed in (0: scalar code, left to LLVM,
    whose remainder loop runs scalar: a 54-pixel interior took half again as long as a
    56-pixel one); ``fold``, the AxisMap kind of a padding folded in ("": zeros)."""

    lanes: int = 0
    fold: str = ""

    @property
    def label(self) -> str:
        return " ".join(filter(None, (f"{self.lanes} lanes" if self.lanes else "",
                                      f"fold {self.fold}" if self.fold else "")))


def row_plan(desc, options, host: Host | None = None) -> RowPlan | None:
    """The plan of ``desc``'s direct kernel on ``host`` (None: plain scalar rows, zero
    padding): vectors of the host's lanes where the rows are summed as fused rows in float32
    with a unit last-axis stride."""
    geo = geometry(desc)
    mode = options.get("input_padding")
    vector = (geo.forward and geo.taps <= FUSED_MAX_TAPS and desc.strides[-1] == 1
              and accumulator(desc.input_tensor.data_type) == np.float32)
    lanes = (host or Host.current()).lanes if vector else 0
    plan = RowPlan(lanes, FOLDS[mode] if mode is not None else "")
    return plan if plan != RowPlan() else None


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

    The key's plan is a :class:`RowPlan`: with ``lanes``, unit-stride FORWARD row interiors are
    summed in explicit vectors; with ``fold`` (FORWARD), the padding is the input read through
    that map (a graph's padding operator in front, folded): the interior reads as before, taps
    in the padding read the mapped input instead of being skipped.
    """
    d, geo = key.desc, geometry(key.desc)
    plan = key.plan or RowPlan()
    fold = (plan.fold, geo.padded_sizes()) if plan.fold else None
    n_, cout = d.input_tensor.sizes[0], d.output_tensor.sizes[1]
    out = d.output_tensor.sizes[2:]
    o = [f"o{i}" for i in range(len(out) - 1)]
    fused = geo.forward and geo.taps <= FUSED_MAX_TAPS
    branches, complete = _outer_branches(d, o, fold) if fused else ([], False)
    # one input channel a group and a fused branch for every row: each row is written once,
    # by assignment (no zeros first, no read of the row back), the bias and a fused
    # activation with a vector form applied as it is written (no pass over the row after)
    assign = bool(branches) and complete and geo.in_channels == 1
    write = _Write(d, assign, assign and vector_activation(d) is not None)
    w = SourceWriter()
    loop = header(w, key, imports=(SIMD_IMPORT,) if plan.lanes else ())
    args = "x, w, b, y" if d.bias_tensor is not None else "x, w, y"
    with w.block(f"def kernel({args}):"):
        with w.block(f"for f in {loop}({n_ * cout * prod(out[:-1])}):"):
            decompose(w, "f", ["n", "m"] + o, [n_, cout] + list(out[:-1]))
            w(f"g = m // {geo.out_channels}")
            if not geo.forward:
                w(f"col = m - g * {geo.out_channels}")
            w(f"yr = y[{index('n', 'm', *o)}]")  # 1-D row views keep LLVM's work small
            if not assign:
                with w.block(f"for j in range({out[-1]}):"):
                    w(f"{yrow('j')} = 0")
            if branches:
                _emit_fused_rows(w, d, o, lambda: _emit_per_tap(w, d, o, fold), fold, branches,
                                 complete, write, plan.lanes)
            else:
                _emit_per_tap(w, d, o, fold)
            if not write.epilogue and (d.bias_tensor is not None
                                       or d.fused_activation is not None):
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
            # counted from 0, every index a non-negative offset of the counter: a negative one
            # (j - 1) would be wrapped by Numba's indexing, which keeps LLVM from vectorising
            with w.block(f"for t in range({hi - lo}):"):
                at, strided_at = affine([("t", 1)], lo), affine([("t", s_l)], lo * s_l + off)
                xi, yi = (strided_at, at) if geo.forward else (at, strided_at)
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

    def fold_map(self, fold) -> AxisMap:
        """The last axis' map of ``fold`` (kind, padded extent): padded coordinate -> input
        column."""
        return AxisMap(fold[0], self.n, fold[1][-1], self.d.start_padding[-1])

    def column(self, fold):
        """Input column -> the column read there (None: a zero), worked out here: itself
        inside the input; outside, the map of ``fold`` (kind, padded extent) or a zero."""
        if fold is None:
            return lambda c: c if 0 <= c < self.n else None
        pad, m = self.d.start_padding[-1], self.fold_map(fold)
        return lambda c: int(m.at(c + pad)[0]) if 0 <= c + pad < fold[1][-1] else None


#: outer-axis edge rows (a tap in the padding) get fused rows of their own, with the taps in
#: the padding dropped or mapped, while each axis has at most EDGE_ROWS and the branches
#: (products of an axis' interior and its edge rows) number at most EDGE_BRANCHES; others take
#: the general per-tap path. Each branch is a copy of the fused rows, and the compile time
#: grows with them (a 3-D 3x3x3 layer's nine branches: 6.6 s against 1.5 s; a 5x5's five with
#: a folded reflection: 6.4 s against 2.0 s): three cover the common 3x3 layer padded by one
#: (1.25 s against 1.0 s)
EDGE_ROWS, EDGE_BRANCHES = 2, 3


def _outer_branches(d, o, fold) -> tuple[list, bool]:
    """The fused rows' branches: ``(condition, rows)`` where ``rows`` gives, per outer tap
    combination, the input row coordinates (expressions) it reads, or None where it reads
    zero padding; and whether every output row has a branch. Per outer axis: the interior
    (every tap inside), then each edge row on its own (constant taps: those in the padding
    dropped, or, with ``fold``, read from the row the map names)."""
    geo = geometry(d)
    ksz, sizes_in, out = geo.kernel, d.input_tensor.sizes[2:], d.output_tensor.sizes[2:]
    axes = []  # per outer axis: [(condition, value or None for the interior)]
    complete = True
    for i in range(len(ksz) - 1):
        s, dil, p, n = d.strides[i], d.dilations[i], d.start_padding[i], sizes_in[i]
        inside = {v for v in range(out[i]) if v * s >= p and v * s + (ksz[i] - 1) * dil - p < n}
        edges = [v for v in range(out[i]) if v not in inside]
        classes = [(f"{affine([(o[i], s)])} >= {p} and "
                    f"{affine([(o[i], s)], (ksz[i] - 1) * dil - p)} < {n}", None)] if inside else []
        if len(edges) <= EDGE_ROWS:
            classes += [(f"{o[i]} == {v}", v) for v in edges]
        else:
            complete = False
        axes.append(classes)
    if prod(len(c) for c in axes) > EDGE_BRANCHES:  # too much code: edges take the general path
        complete = complete and not any(v is not None for c in axes for _, v in c)
        axes = [[c for c in classes if c[1] is None] for classes in axes]
    branches = []
    for picks in itertools.product(*axes):
        rows = {}
        for combo in itertools.product(*(range(k) for k in ksz[:-1])):
            coords = []
            for i, ((_, v), k) in enumerate(zip(picks, combo)):
                s, dil, p, n = d.strides[i], d.dilations[i], d.start_padding[i], sizes_in[i]
                if v is None:
                    coords.append(affine([(o[i], s)], k * dil - p))
                    continue
                r = v * s + k * dil - p
                if not 0 <= r < n and fold is not None:
                    r = int(AxisMap(fold[0], n, fold[1][i], p).at(r + p)[0])
                coords.append(str(r) if 0 <= r < n else None)
            rows[combo] = None if None in coords else coords
        branches.append((" and ".join(c for c, _ in picks) or "True", rows))
    return branches, complete


class _Write:
    """How the fused rows write a pixel's sum: added to the row (several input channels, the
    row zeroed first), assigned (``assign``: one channel), or assigned through the epilogue
    (``epilogue``: one channel, and the bias and the fused activation applied as it is
    written, in vectors too)."""

    def __init__(self, d, assign: bool, epilogue: bool):
        self.d, self.assign, self.epilogue = d, assign, epilogue
        self.zero = f"np.{accumulator(d.input_tensor.data_type).name}(0)"  # the row's type

    def scalar(self, w, target: str, value: str) -> None:
        if not self.assign:
            w(f"{target} += {value}")
        elif self.epilogue:
            conv_epilogue(w, self.d, value, target)
        else:
            w(f"{target} = {value}")

    def vector_setup(self, w, lanes: int) -> None:
        if self.epilogue and self.d.bias_tensor is not None:
            w(f"bsv = vsplat({bias_element(self.d)}, {lanes})")

    def vector(self, value: str) -> str:
        """The vector expression written for the sums ``value``."""
        if not self.epilogue:
            return value
        if self.d.bias_tensor is not None:
            value = f"vadd({value}, bsv)"
        return vector_activation(self.d).format(value)


def _emit_fused_rows(w, d, o, per_tap, fold, branches, complete, write: _Write,
                     lanes) -> None:
    """FORWARD rows: per input channel, one pass over the row sums all taps at once
    (``y[j] += x[..., j*s + off_0]*w_0 + ...``), the weights held in scalars; the row's edges,
    where some last-axis taps fall outside, take the same sum with only the taps inside (or,
    with ``fold``, mapped). Rows whose outer taps all lie inside the input share one branch;
    the few edge rows of each outer axis have their own (``branches``, from
    :func:`_outer_branches`); rows beyond those use ``per_tap`` (the general code; none where
    ``complete``). One read-modify-write of the output row per channel instead of one per tap;
    with one channel, one write (``write``). ``lanes``: the interior in explicit vectors."""
    row, geo = _Row(d), geometry(d)
    ksz = geo.kernel
    for b, (cond, rows) in enumerate(branches):
        head = ("else:" if complete and b == len(branches) - 1 else f"elif {cond}:") if b else \
            f"if {cond}:"
        with w.block(head):
            combos = [cb for cb in row.combos if rows[cb] is not None]
            if not combos:  # every tap reads zero padding: the row is zero
                if write.assign:
                    with w.block(f"for j in range({row.o}):"):
                        write.scalar(w, yrow("j"), write.zero)
                else:
                    w("pass")
                continue
            with w.block(f"for c in range({geo.in_channels}):"):
                w(f"ci = g * {geo.in_channels} + c")
                for combo in combos:
                    w(f"{row.xrow(combo)} = x[{index('n', 'ci', *rows[combo])}]")
                    for kk in range(ksz[-1]):
                        fidx = row.weight(combo, kk)
                        w(f"w_{'_'.join(map(str, fidx))} = w[{index('m', 'c', *fidx)}]")
                col = row.column(fold)
                span = _vector_span(row, col, combos, lanes) if lanes else None
                if span is not None:
                    _emit_vector_interior(w, row, combos, write, lanes, span, col)
                elif row.j_hi > row.j_lo:
                    # counted from 0: every index a non-negative offset (see _emit_per_tap)
                    with w.block(f"for t in range({row.j_hi - row.j_lo}):"):
                        terms = [row.term(cb, kk, affine([("t", row.s)],
                                                         row.j_lo * row.s + row.offs[kk]))
                                 for cb in combos for kk in range(ksz[-1])]
                        write.scalar(w, yrow(affine([("t", 1)], row.j_lo)), " + ".join(terms))
                lo, hi = span or (row.j_lo, row.j_hi)
                for edge in (range(0, lo), range(hi, row.o)):
                    if len(edge):
                        _emit_row_edge(w, row, edge, fold, combos, write)
    if not complete:
        with w.block("else:"):
            per_tap()


#: a row's edge vectors (lanes with taps outside the input) are built from an in-range load
#: by a shuffle, with at most this many columns from outside the load inserted a lane each, and
#: a row writes at most EDGE_VECTORS of them; rows past either bound sum their edges pixel by
#: pixel
EDGE_EXTRAS, EDGE_VECTORS = 4, 4


def _tap_vector(row: _Row, col, xr: str, c0: int, lanes: int) -> str | None:
    """The vector of input columns ``c0, c0 + 1, ...`` (a constant start) of row ``xr``, each
    read through ``col`` (:meth:`_Row.column`): a plain load where every column is itself;
    else a load inside the row with the other lanes picked from it or from a vector of the
    columns outside it (a zero where ``col`` gives None). None where every lane is a zero;
    ValueError past :data:`EDGE_EXTRAS`."""
    cols = [col(c0 + lane) for lane in range(lanes)]
    if cols == list(range(c0, c0 + lanes)):
        return f"vload({xr}, {c0}, {lanes})"
    if all(c is None for c in cols):
        return None
    a = min(max(c0, 0), row.n - lanes)
    extras, picks = [], []
    for c in cols:
        if c is not None and a <= c < a + lanes:
            picks.append(c - a)
            continue
        if c not in extras:
            extras.append(c)  # None: a lane left zero
        picks.append(lanes + extras.index(c))
    if len(extras) > lanes or sum(c is not None for c in extras) > EDGE_EXTRAS:
        raise ValueError(f"{len(extras)} columns from outside the load")
    outside = f"vzero({lanes})"
    for lane, c in enumerate(extras):
        if c is not None:
            outside = f"vinsert({outside}, {lane}, {xr}[{c}])"
    return f"vshuffle(vload({xr}, {a}, {lanes}), {outside}, \"{','.join(map(str, picks))}\")"


def _vector_span(row: _Row, col, combos, lanes: int) -> tuple[int, int] | None:
    """The pixels of a unit-stride row summed in vectors of ``lanes``: the whole row where its
    edge vectors can be built (:func:`_tap_vector`), else the interior ``[j_lo, j_hi)`` where
    it holds a vector, else None (scalar code)."""
    if row.o >= lanes <= row.n and (row.j_lo or row.j_hi < row.o):
        whole, tail = _vector_starts((0, row.o), lanes)
        edges = [j for j in whole + [tail] if j is not None
                 and not row.j_lo <= j <= row.j_hi - lanes]
        try:
            if len(edges) <= EDGE_VECTORS:
                for j, kk, cb in itertools.product(edges, range(row.ksz[-1]), combos):
                    _tap_vector(row, col, row.xrow(cb), j + row.offs[kk], lanes)
                return 0, row.o
        except ValueError:
            pass
    return (row.j_lo, row.j_hi) if row.j_hi - row.j_lo >= lanes else None


def _vector_starts(span, lanes: int) -> tuple[list[int], int | None]:
    """Where the vectors over ``span`` start: whole vectors from its start, and the last
    ``lanes`` pixels as one more where they do not fill it (None where they do)."""
    lo, hi = span
    return list(range(lo, hi - lanes + 1, lanes)), (hi - lanes if (hi - lo) % lanes else None)


def _emit_vector_interior(w, row: _Row, combos, write: _Write, lanes: int, span, col) -> None:
    """The pixels of ``span`` (:func:`_vector_span`) in vectors of ``lanes``: whole vectors
    from its start, those whose every tap lies inside the input in a loop, the others (edge
    vectors, through ``col``) written out; where they do not fill it, the last ``lanes``
    pixels as one more vector that overlaps them, computed first from the row as it was (so
    the pixels both write get the same value), stored last: no scalar remainder. Assigned
    (``write``): the row's old values are not read."""
    k_l, assign = row.ksz[-1], write.assign
    write.vector_setup(w, lanes)
    taps = [(cb, kk, "v_" + "_".join(map(str, row.weight(cb, kk)))) for cb in combos
            for kk in range(k_l)]
    for _, _, v in taps:
        w(f"{v} = vsplat({v.replace('v_', 'w_', 1)}, {lanes})")

    def sums(acc, at):  # the vector of pixels from ``at`` on (a constant or a name)
        for cb, kk, v in taps:
            if isinstance(at, int):
                load = _tap_vector(row, col, row.xrow(cb), at + row.offs[kk], lanes)
            else:
                load = f"vload({row.xrow(cb)}, {affine([(at, 1)], row.offs[kk])}, {lanes})"
            if load is not None:
                w(f"{acc} = vfma({load}, {v}, {acc})")

    def vector(acc, at, store=True):
        w(f"{acc} = vzero({lanes})" if assign else f"{acc} = vload(yr, {at}, {lanes})")
        sums(acc, at)
        if store:
            w(f"vstore(yr, {at}, {write.vector(acc)})")

    whole, tail = _vector_starts(span, lanes)
    inner = [j for j in whole if row.j_lo <= j <= row.j_hi - lanes]
    if tail is not None:
        vector("tail", tail, store=False)
    for j in whole:
        if j not in inner:
            vector("acc", j)
        elif j == inner[0]:
            with w.block(f"for t in range({len(inner)}):"):
                w(f"j0 = {affine([('t', lanes)], j)}")
                vector("acc", "j0")
    if tail is not None:
        w(f"vstore(yr, {tail}, {write.vector('tail')})")


def _emit_row_edge(w, row: _Row, edge: range, fold, combos, write: _Write) -> None:
    """The pixels of ``edge`` where some last-axis taps fall outside the input: a few written
    out with only the taps inside, more in a loop with a bounds test per tap. With ``fold``
    (kind, padded extent) the taps outside read the input through the map instead. ``combos``:
    the outer tap combinations the row reads; ``write``: how a pixel is written."""
    k_l = row.ksz[-1]
    pad = row.d.start_padding[-1]
    col = row.column(fold)
    if len(edge) <= EDGE_UNROLL:
        for j in edge:
            terms = [row.term(cb, kk, str(col(j * row.s + row.offs[kk]))) for kk in range(k_l)
                     if col(j * row.s + row.offs[kk]) is not None for cb in combos]
            if terms:
                write.scalar(w, yrow(j), " + ".join(terms))
            elif write.assign:
                write.scalar(w, yrow(j), write.zero)
        return
    with w.block(f"for j in range({edge.start}, {edge.stop}):"):
        w(f"acc = {write.zero}" if write.assign else f"acc = {yrow('j')}")
        for kk in range(k_l):
            w(f"xj = {row.xcol(row.offs[kk])}")  # (not ``b``: that is the bias argument)
            if fold is not None:
                w(f"pj = xj + {pad}")
                with w.block(f"if pj < {fold[1][-1]}:"):
                    emit_map(w, row.fold_map(fold), "pj", "xj")
                    w("acc += " + " + ".join(row.term(cb, kk, "xj") for cb in combos))
                continue
            with w.block(f"if xj >= 0 and xj < {row.n}:"):
                w("acc += " + " + ".join(row.term(cb, kk, "xj") for cb in combos))
        if write.assign:
            write.scalar(w, yrow("j"), "acc")
        else:
            w(f"{yrow('j')} = acc")


class DirectKernel(ConvolutionKernel):
    """The direct loop nest of ``desc``."""

    algorithm = "direct"

    def __init__(self, desc, options):
        self.desc = desc
        self.acc = accumulator(desc.input_tensor.data_type)
        rank = desc.input_tensor.rank
        # the plan: vectors for the rows' interiors, a padding in front read through its map
        key = dataclasses.replace(conv_key(desc, options), plan=row_plan(desc, options))
        super().__init__(key, emit,
                         [(self.acc, rank)] * (4 if desc.bias_tensor is not None else 3), options)

    def run(self, inputs, y):
        if self.key.plan is not None and self.key.plan.lanes:  # vector loads: C-contiguous rows
            inputs = [np.ascontiguousarray(a) for a in inputs]
        self.fn(*inputs, y)
