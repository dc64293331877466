"""BACKWARD (transposed) convolution in the blocked kernels' register tiles, gathered per
stride phase.

Output ``o = q * stride + r`` along each axis receives the taps of residue ``r``
(:meth:`~dml_numba.ops.convolution.ConvolutionGeometry.transposed_phases`) from input
``a = q + e``: for a fixed phase that is a stride-1 correlation in ``q``, so a tile holds
consecutive ``q`` (rows of one row phase; vectors of one last-axis phase, whose taps are
unrolled per phase). Leading axes' taps are loops with the divisibility test. Stores are vectors
where the last stride is 1; at stride 2 with as many outputs in both phases (a plan with
``phases`` 2) one tile holds both phases for the same ``q`` and stores them interleaved as whole
vectors; otherwise lane by lane at the stride (one store per output).
"""
from __future__ import annotations

from ...._codegen import SourceWriter, affine, decompose, flat_index
from ...._dims import prod
from ....ops.convolution import geometry
from ..._emit import header
from .padding import emit_pad_phase
from .plan import Layout, needs_copy
from .tile import (
    TileSpec,
    Vec,
    activation_import,
    call_tiles,
    emit_tile,
    emit_tile_functions,
    tile_arrays,
)

#: what the transposed kernels' modules import (vrelu too: a fused ReLU is applied in vectors;
#: without it a transposed convolution with a fused ReLU failed to compile)
IMPORT = ("from dml_numba.cpu._simd import vadd, vbroadcast, vfma, vinterleave, vload, vrelu, "
          "vscatter, vsplat, vstore, vzero")


def emit(key) -> str:
    """The transposed blocked kernel of ``key``."""
    d, lay = key.desc, Layout.of(key)
    phases = geometry(d).transposed_phases()
    st, out, nd = d.strides, lay.out, lay.rank
    w = SourceWriter()
    loop = header(w, key, imports=(IMPORT + activation_import(d),))
    outer = [f"o{i}" for i in range(nd - 2)]
    rows_per_phase = -(-out[-2] // st[-2]) if nd >= 2 else 1  # the most rows a row phase has
    lead = [] if nd == 1 else [st[-2], -(-rows_per_phase // lay.rows)]
    coords = ["n", "g", "mbi"] + outer + (["rr", "rt"] if nd >= 2 else [])
    with w.block(f"def kernel(x, wp, {tile_arrays(d, lay)}, xp):"):
        if needs_copy(d):
            emit_pad_phase(w, loop, lay.batch * lay.cin, lay.size_in, lay.front, lay.padded,
                           lanes=lay.lanes)
        else:
            w("xp = x  # nothing to pad")
        w("# phase 2: register-blocked tiles, one row phase and row block per iteration")
        count = lay.batch * lay.groups * lay.blocks * prod(out[:-2]) * prod(lead)
        with w.block(f"for f in {loop}({count}):"):
            decompose(w, "f", coords, [lay.batch, lay.groups, lay.blocks] + list(out[:-2]) + lead)
            call_tiles(w, lay, coords, tile_arrays(d, lay))
    emit_tile_functions(w, lambda mb, names: _tile(w, names, d, lay, key.plan, phases, mb, outer),
                        lay, coords, tile_arrays(d, lay))
    return w.text()


def _tile(w, names, d, lay: Layout, plan, phases, mb, outer) -> None:
    """A tile function's body: the rows of its row phase, then per last-axis phase (or both
    together) the runs along the row and the tile."""
    st, nd = d.strides, lay.rank
    names.let("m0", f"g * {lay.mg} + mbi * {lay.mb}")
    if nd >= 2:
        names.let("qrow", f"({lay.out[-2] + st[-2] - 1} - rr) // {st[-2]}  # rows of this phase")
        names.let("r0", f"min(rt * {lay.rows}, qrow - {lay.rows})")
    for r in range(lay.rows):
        terms = [(o_, lay.ostride[i]) for i, o_ in enumerate(outer)]
        if nd >= 2:
            terms += [("r0", st[-2] * lay.ostride[-2]), ("rr", lay.ostride[-2])]
        names.let(f"yr{r}", affine(terms, r * st[-2] * lay.ostride[-2] if nd >= 2 else 0))
    together = plan.phases == 2  # both last-axis phases, interleaved
    for grp in ([[0, 1]] if together else [[rl] for rl in range(st[-1])]):
        q_l = -(-(lay.out[-1] - grp[0]) // st[-1])  # outputs of this last-axis phase
        span = lay.lanes * lay.vectors
        w(f"# last-axis phase{'s' if together else ''} {', '.join(map(str, grp))}: taps "
          + ", ".join(str([k for k, _ in phases[-1][rl]]) for rl in grp))
        with names.loop("jt", f"range({-(-q_l // span)})"):
            names.let("j", f"min(jt * {span}, {q_l - span})")
            emit_tile(w, names, d, _spec(w, names, d, lay, phases, grp, together, mb, outer))


def _spec(w, names, d, lay: Layout, phases, grp, together, mb, outer) -> TileSpec:
    """The tile of last-axis phase ``grp[0]`` (both phases where ``together``)."""
    st, nd, vec = d.strides, lay.rank, Vec(lay.lanes)
    rl = grp[0]
    row_step = st[-2] * lay.ostride[-2] if nd >= 2 else 0
    at = (f"(n * {lay.cout} + m0 + m) * {lay.plane_out} + yr0 + r * {row_step} + "
          + ("j + q" if st[-1] == 1 else "j * 2 + q" if together else f"(j + q) * {st[-1]} + {rl}"))

    def store(m, r, values):
        y0 = f"(n * {lay.cout} + {names['m0']} + {m}) * {lay.plane_out} + {names[f'yr{r}']}"
        if together:  # the two phases' lanes alternate along the row
            w(vec.store("y", f"{y0} + j * 2", f"vinterleave({values[0]}, {values[1]})"))
            return
        for v, value in enumerate(values):
            if st[-1] == 1:  # in place, contiguous
                w(vec.store("y", f"{y0} + j + {v * lay.lanes}", value))
            else:  # lane by lane at the stride
                w(f"vscatter(y, {y0} + (j + {v * lay.lanes}) * {st[-1]} + {rl}, {st[-1]}, "
                  f"{value})")

    columns = ([list(phases[-1][q]) for q in grp] if together else
               [[(k, e + v * lay.lanes) for k, e in phases[-1][rl]] for v in range(lay.vectors)])
    return TileSpec(lay, mb, lay.rows, columns,
                    lambda stack, names: _open_taps(w, names, d, lay, stack, outer),
                    lambda r: str(r * lay.pstride[-2]) if nd >= 2 else "0", store, at,
                    lay.lanes * lay.vectors * len(grp))


def _open_taps(w, names, d, lay: Layout, stack, outer) -> tuple:
    """The leading axes' taps that reach the tile's outputs; binds and returns the input offset
    ``xo`` and the weight offset ``wo``."""
    nd = lay.rank
    terms = [(names["xc"], 1), (names["j"], 1)]
    for i, o_ in enumerate(outer):
        terms.append((_tap_axis(w, names, d, lay, stack, i, o_), lay.pstride[i]))
    const = sum(f * ps_ for f, ps_ in zip(lay.front, lay.pstride))
    if nd >= 2:
        terms += [(names["r0"], lay.pstride[nd - 2]),
                  (_tap_axis(w, names, d, lay, stack, nd - 2, "rr"), lay.pstride[nd - 2])]
    xo = names.let("xo", affine(terms, const))
    ko = [f"k{i}" for i in range(nd - 1)]
    wo = names.let("wo", f"wc + ({flat_index(ko, list(lay.kernel[:-1]))}) * "
                         f"{lay.kernel[-1] * lay.mb}" if ko else "wc")
    return xo, wo


def _tap_axis(w, names, d, lay: Layout, stack, i, o_) -> str:
    """The taps ``k`` of axis ``i`` that reach output ``o_``: ``t = o_ + start - k * dilation``
    divisible by the stride; with dilation 1 every stride-th ``k`` from a start (no test),
    otherwise each ``k`` tested. Returns the input row's expression."""
    st, dil, start, ksz = d.strides[i], d.dilations[i], d.start_padding[i], lay.kernel[i]
    t = affine([(o_, 1), (f"k{i}", -dil)], start)
    if st != 1 and dil == 1:
        first = f"({affine([(o_, 1)], start)}) % {st}"
        stack.enter_context(names.loop(f"k{i}", f"range({first}, {ksz}, {st})"))
    else:
        stack.enter_context(names.loop(f"k{i}", f"range({ksz})"))
    names.let(f"t{i}", t)
    if st != 1 and dil != 1:
        stack.enter_context(w.block(f"if t{i} % {st} == 0:"))
    return f"t{i}" if st == 1 else f"(t{i} // {st})"
