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
from ...elements.convolution import conv_epilogue
from ...ops._base import FOLDS
from ...ops.convolution import ConvolutionMode, geometry
from .._emit import Host, bound_contiguous, header
from .base import ConvolutionKernel, conv_key
from .blocked.tile import SIMD_IMPORT, activation_import, vector_activation
from .direct_rows import (
    Row,
    Write,
    emit_row_edge,
    emit_vector_interior,
    vector_span,
    yrow,
)

#: the fused row loop sums every tap in one expression; beyond this many taps it stops paying
FUSED_MAX_TAPS = 32


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
    write = Write(d, assign, assign and vector_activation(d) is not None)
    w = SourceWriter()
    loop = header(w, key, imports=(SIMD_IMPORT + activation_import(d),) if plan.lanes else ())
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


def _emit_fused_rows(w, d, o, per_tap, fold, branches, complete, write: Write,
                     lanes) -> None:
    """FORWARD rows: per input channel, one pass over the row sums all taps at once
    (``y[j] += x[..., j*s + off_0]*w_0 + ...``), the weights held in scalars; the row's edges,
    where some last-axis taps fall outside, take the same sum with only the taps inside (or,
    with ``fold``, mapped). Rows whose outer taps all lie inside the input share one branch;
    the few edge rows of each outer axis have their own (``branches``, from
    :func:`_outer_branches`); rows beyond those use ``per_tap`` (the general code; none where
    ``complete``). One read-modify-write of the output row per channel instead of one per tap;
    with one channel, one write (``write``). ``lanes``: the interior in explicit vectors."""
    row, geo = Row(d), geometry(d)
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
                span = vector_span(row, col, combos, lanes) if lanes else None
                if span is not None:
                    emit_vector_interior(w, row, combos, write, lanes, span, col)
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
                        emit_row_edge(w, row, edge, fold, combos, write)
    if not complete:
        with w.block("else:"):
            per_tap()


class DirectKernel(ConvolutionKernel):
    """The direct loop nest of ``desc``."""

    algorithm = "direct"
    emitters = {"main": emit}  # key.kernel -> the emitter of that kernel

    def __init__(self, desc, options, plan=None):  # one kernel: no plan to take
        self.desc = desc
        self.acc = accumulator(desc.input_tensor.data_type)
        rank = desc.input_tensor.rank
        # the plan: vectors for the rows' interiors, a padding in front read through its map
        key = dataclasses.replace(conv_key(desc, options), plan=row_plan(desc, options))
        super().__init__(key, emit,
                         [(self.acc, rank)] * (4 if desc.bias_tensor is not None else 3), options)

    def bound(self, inputs, y):
        """The kernel itself on the arrays where they are C-contiguous (what :meth:`run`
        makes them otherwise)."""
        return bound_contiguous(self, inputs, y)

    def run(self, inputs, y):
        if self.key.plan is not None and self.key.plan.lanes:  # vector loads: C-contiguous rows
            inputs = [np.ascontiguousarray(a) for a in inputs]
        self.fn(*inputs, y)
