"""The direct kernel's fused FORWARD rows, the last axis's arithmetic: each tap's offset and the
run where every tap lies inside the input (:class:`Row`), how a pixel's sum is written
(:class:`Write`), the interior summed in vectors (each tap's vector an in-range load, the
lanes in the padding replaced by a shuffle) and the edges pixel by pixel."""
from __future__ import annotations

import itertools

from ..._codegen import affine
from ..._dtypes import accumulator
from ..._gather import AxisMap, emit_map
from ...elements.convolution import bias_element, conv_epilogue
from ...ops.convolution import ConvolutionMode, geometry
from .blocked.tile import vector_activation

#: edge runs of at most this many pixels are written out with only their valid taps (no loop,
#: no bounds tests: less code for Numba's passes, which dominate the compile)
EDGE_UNROLL = 4
#: a row's edge vectors (lanes with taps outside the input) are built from an in-range load
#: by a shuffle, with at most this many columns from outside the load inserted a lane each, and
#: a row writes at most EDGE_VECTORS of them; rows past either bound sum their edges pixel by
#: pixel
EDGE_EXTRAS, EDGE_VECTORS = 4, 4


def yrow(j) -> str:
    """Element ``j`` of the output row the iteration owns."""
    return f"yr[{j}]"


class Row:
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


class Write:
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


def tap_vector(row: Row, col, xr: str, c0: int, lanes: int) -> str | None:
    """The vector of input columns ``c0, c0 + 1, ...`` (a constant start) of row ``xr``, each
    read through ``col`` (:meth:`Row.column`): a plain load where every column is itself;
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


def vector_span(row: Row, col, combos, lanes: int) -> tuple[int, int] | None:
    """The pixels of a unit-stride row summed in vectors of ``lanes``: the whole row where its
    edge vectors can be built (:func:`tap_vector`), else the interior ``[j_lo, j_hi)`` where
    it holds a vector, else None (scalar code)."""
    if row.o >= lanes <= row.n and (row.j_lo or row.j_hi < row.o):
        whole, tail = vector_starts((0, row.o), lanes)
        edges = [j for j in whole + [tail] if j is not None
                 and not row.j_lo <= j <= row.j_hi - lanes]
        try:
            if len(edges) <= EDGE_VECTORS:
                for j, kk, cb in itertools.product(edges, range(row.ksz[-1]), combos):
                    tap_vector(row, col, row.xrow(cb), j + row.offs[kk], lanes)
                return 0, row.o
        except ValueError:
            pass
    return (row.j_lo, row.j_hi) if row.j_hi - row.j_lo >= lanes else None


def vector_starts(span, lanes: int) -> tuple[list[int], int | None]:
    """Where the vectors over ``span`` start: whole vectors from its start, and the last
    ``lanes`` pixels as one more where they do not fill it (None where they do)."""
    lo, hi = span
    return list(range(lo, hi - lanes + 1, lanes)), (hi - lanes if (hi - lo) % lanes else None)


def emit_vector_interior(w, row: Row, combos, write: Write, lanes: int, span, col) -> None:
    """The pixels of ``span`` (:func:`vector_span`) in vectors of ``lanes``: whole vectors
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
                load = tap_vector(row, col, row.xrow(cb), at + row.offs[kk], lanes)
            else:
                load = f"vload({row.xrow(cb)}, {affine([(at, 1)], row.offs[kk])}, {lanes})"
            if load is not None:
                w(f"{acc} = vfma({load}, {v}, {acc})")

    def vector(acc, at, store=True):
        w(f"{acc} = vzero({lanes})" if assign else f"{acc} = vload(yr, {at}, {lanes})")
        sums(acc, at)
        if store:
            w(f"vstore(yr, {at}, {write.vector(acc)})")

    whole, tail = vector_starts(span, lanes)
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


def emit_row_edge(w, row: Row, edge: range, fold, combos, write: Write) -> None:
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
