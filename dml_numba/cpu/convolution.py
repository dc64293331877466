"""Convolution on the CPU: three algorithms over the same semantics.

* ``blocked``: register-blocked SIMD tiles (float32 and float16; FORWARD, a strided last axis
  stored by stride phase; BACKWARD per stride phase, both phases of a stride-2 row in one tile):
  the input zero-padded (per image and group just before its tiles where the pairs are many
  and small, else the whole input first), the filter packed once per call, and for each tile of
  output channels x rows x vectors of pixels (or x vectors of the padded plane flattened, where
  rows would waste lanes) the accumulators held in LLVM vector registers
  (``cpu/_simd.py``), every multiply-add a fused vector FMA; all inside Numba's own thread pool.
  One input channel per group (depthwise) runs plane by plane instead: each plane padded into a
  per-thread buffer, tiles of rows sharing the input vectors they load.
* ``direct``: one generated loop nest, parallel over (n, output channel, outer spatial);
  FORWARD gathers input taps, BACKWARD is the adjoint in gather form (no scatter, no races);
  bias and the fused activation in each element's epilogue. Best for 3x3-sized depthwise
  windows on strided rows, and the fallback for float64 and rows under 4 pixels.
* ``gemm``: the work goes to BLAS (NumPy's ``matmul``), with generated kernels around it.
  FORWARD: a batched im2col (skipped for unpadded stride-1 1x1 convolutions, whose input already
  is the matrix), one ``matmul`` per image and group written straight into the output, then a
  fused bias + activation pass. BACKWARD: ``matmul`` of the transposed filter with the input
  gives every tap's contribution ("columns"), then col2im gathers them per output element
  (race-free) with bias and activation fused in. CONVOLUTION mode flips the filter once per call.

``algorithm=None`` (the default) chooses by :func:`choose_algorithm`;
``compile_operator(desc, "cpu", algorithm="blocked"|"direct"|"gemm")`` forces one.
"""
from __future__ import annotations

import dataclasses
import itertools
import threading
from contextlib import ExitStack, contextmanager

import numpy as np

from .._cache import KernelKey
from .._codegen import SourceWriter, affine, decompose, index
from .._dims import prod
from .._dtypes import DataType, accumulator
from .._errors import ValidationError
from .._registry import register
from ..elements import open_window_loops
from ..elements.convolution import conv_epilogue
from ..ops.convolution import (
    ConvolutionDirection,
    ConvolutionMode,
    ConvolutionOperatorDesc,
)
from ..tensor import TensorDesc
from ._emit import (
    CpuKernel,
    build_variants,
    header,
    helper_header,
    make_key,
    run_in_accumulator,
)

#: most multiply-adds unrolled in one depthwise tile (taps x rows x vectors): a bound on the
#: generated code, and on compile time
DEPTHWISE_UNROLL = 256

#: the flattened tiles are taken where they compute at most this fraction of the positions
#: whole-row tiles do (:func:`_flat_vectors`)
FLAT_GAIN = 0.97

#: bound on the im2col / columns buffer of one call; larger batches are processed in chunks
COLUMNS_BUDGET_BYTES = 8 << 20  # one 3x3 64-channel 56x56 image: cache-friendly, ~5% faster than 64 MiB


def emit(key) -> str:
    """The direct loop nest (``key.kernel == "main"``) or a GEMM helper kernel."""
    return {"main": _emit_direct, "im2col": _emit_im2col, "col2im": _emit_col2im,
            "epilogue": _emit_epilogue, "blocked": _emit_blocked,
            "blocked-transposed": _emit_blocked_transposed,
            "blocked-depthwise": _emit_blocked_depthwise,
            "blocked-staged": _emit_blocked}[key.kernel.split()[0]](key)


def _emit_direct(key) -> str:
    """Row-wise direct convolution: each (p)range iteration owns one output row (n, m, outer
    spatial...), accumulates every tap into it, then applies bias and activation in place.

    Along the last axis each tap's valid range is a constant worked out here, so the innermost
    loop has no bounds test and, for stride 1, is contiguous (LLVM vectorises it). FORWARD
    gathers ``y[j] += x[j*s + k*d - p] * w``; BACKWARD scatters each input row into the private
    output row, ``y[j*s + k*d - p] += x[j] * w`` (no races: one row, one iteration).
    """
    d = key.desc
    n_, cin = d.input_tensor.sizes[:2]
    cout = d.output_tensor.sizes[1]
    out = d.output_tensor.sizes[2:]
    sizes_in = d.input_tensor.sizes[2:]
    ksz = d.filter_tensor.sizes[2:]
    nd = len(out)
    g = d.group_count
    forward = d.direction == ConvolutionDirection.FORWARD
    flip = d.mode == ConvolutionMode.CONVOLUTION
    cg, mg = cin // g, cout // g
    o = [f"o{i}" for i in range(nd - 1)]
    a = [f"a{i}" for i in range(nd - 1)]
    s_l, d_l, p_l = d.strides[-1], d.dilations[-1], d.start_padding[-1]
    n_l, o_l, k_l = sizes_in[-1], out[-1], ksz[-1]
    w = SourceWriter()
    loop = header(w, key)
    args = "x, w, b, y" if d.bias_tensor is not None else "x, w, y"
    with w.block(f"def kernel({args}):"):
        with w.block(f"for f in {loop}({n_ * cout * prod(out[:-1])}):"):
            decompose(w, "f", ["n", "m"] + o, [n_, cout] + list(out[:-1]))
            w(f"g = m // {mg}")
            if not forward:
                w(f"col = m - g * {mg}")
            w(f"yr = y[{index('n', 'm', *o)}]")  # 1-D row views keep LLVM's work small
            yrow = lambda j: f"yr[{j}]"  # noqa: E731
            with w.block(f"for j in range({o_l}):"):
                w(f"{yrow('j')} = 0")

            def _per_tap():  # every tap its own pass, with the bounds of each (any row)
                with ExitStack() as stack:
                    stack.enter_context(w.block(f"for c in range({cg}):"))
                    w(f"ci = g * {cg} + c")
                    fo = open_window_loops(  # outer spatial taps, with their bounds tests
                        w, stack, [f"k{i}" for i in range(nd - 1)], a, sizes_in[:-1],
                        starts={"o": o, "k": ksz[:-1], "pad": d.start_padding[:-1]},
                        steps=d.strides[:-1], dilations=d.dilations[:-1], transposed=not forward,
                        flip=flip)
                    w(f"xr = x[{index('n', 'ci', *a)}]")
                    for kk in range(k_l):  # the last axis' taps, unrolled with constant ranges
                        fk = k_l - 1 - kk if flip else kk
                        off = kk * d_l - p_l
                        widx = index("m", "c", *fo, fk) if forward else index("ci", "col", *fo, fk)
                        # j runs over ``span`` elements; j*s + off must land inside [0, limit)
                        span, limit = (o_l, n_l) if forward else (n_l, o_l)
                        lo = max(0, -(off // s_l))
                        hi = min(span, (limit - 1 - off) // s_l + 1) if limit - 1 - off >= 0 else 0
                        strided = f"j * {s_l} + {off}" if s_l != 1 else f"j + {off}"
                        xi, yi = (strided, "j") if forward else ("j", strided)
                        if hi <= lo:
                            continue
                        w(f"wv = w[{widx}]")
                        with w.block(f"for j in range({lo}, {hi}):"):
                            w(f"{yrow(yi)} += xr[{xi}] * wv")

            if forward and prod(ksz) <= FUSED_MAX_TAPS:
                _emit_fused_rows(w, d, o, a, yrow, per_tap=_per_tap)
            else:
                _per_tap()
            if d.bias_tensor is not None or d.fused_activation is not None:
                with w.block(f"for j in range({o_l}):"):
                    conv_epilogue(w, d, yrow("j"), yrow("j"))
    return w.text()


#: the fused row loop sums every tap in one expression; beyond this many taps it stops paying
FUSED_MAX_TAPS = 32
#: edge runs of at most this many pixels are written out with only their valid taps (no loop,
#: no bounds tests: less code for Numba's passes, which dominate the compile)
EDGE_UNROLL = 4


def _emit_fused_rows(w, d, o, a, yrow, per_tap) -> None:
    """FORWARD rows whose every outer tap lies inside the input: per input channel, one pass
    over the row sums all taps at once (``y[j] += x[..., j*s + off_0]*w_0 + ...``), the
    weights held in scalars; the row's edges, where some last-axis taps fall outside, take
    the same sum with a bounds test per tap. Other rows use ``per_tap`` (the general code).
    One read-modify-write of the output row per channel instead of one per tap."""
    ksz = d.filter_tensor.sizes[2:]
    sizes_in = d.input_tensor.sizes[2:]
    out = d.output_tensor.sizes[2:]
    nd = len(out)
    flip = d.mode == ConvolutionMode.CONVOLUTION
    cg = d.input_tensor.sizes[1] // d.group_count
    s_l, d_l, p_l, n_l, o_l, k_l = (d.strides[-1], d.dilations[-1], d.start_padding[-1],
                                    sizes_in[-1], out[-1], ksz[-1])
    conds = []
    for i in range(nd - 1):
        s, dil, p, k, n = d.strides[i], d.dilations[i], d.start_padding[i], ksz[i], sizes_in[i]
        conds.append(f"{affine([(o[i], s)])} >= {p} and {affine([(o[i], s)], (k - 1) * dil - p)} < {n}")
    offs = [kk * d_l - p_l for kk in range(k_l)]
    lo = [max(0, -(off // s_l)) for off in offs]
    hi = [min(o_l, (n_l - 1 - off) // s_l + 1) if n_l - 1 - off >= 0 else 0 for off in offs]
    j_lo = min(max(lo), o_l)
    j_hi = max(j_lo, min(hi))
    combos = list(itertools.product(*(range(k) for k in ksz[:-1])))

    def xcol(off):
        return affine([("j", s_l)], off)

    def xrow(combo):
        return "xr_" + "_".join(map(str, combo)) if combo else "xr"

    def term(combo, kk, col):
        fidx = [ksz[i] - 1 - t if flip else t for i, t in enumerate(combo)]
        fk = k_l - 1 - kk if flip else kk
        return f"{xrow(combo)}[{col}] * w_{'_'.join(map(str, fidx + [fk]))}"

    with w.block(f"if {' and '.join(conds)}:" if conds else "if True:"):
        with w.block(f"for c in range({cg}):"):
            w(f"ci = g * {cg} + c")
            for combo in combos:
                rows = [affine([(o[i], d.strides[i])], combo[i] * d.dilations[i] - d.start_padding[i])
                        for i in range(nd - 1)]
                w(f"{xrow(combo)} = x[{index('n', 'ci', *rows)}]")
                for kk in range(k_l):
                    fidx = [ksz[i] - 1 - t if flip else t for i, t in enumerate(combo)]
                    fk = k_l - 1 - kk if flip else kk
                    w(f"w_{'_'.join(map(str, fidx + [fk]))} = w[{index('m', 'c', *fidx, fk)}]")
            if j_hi > j_lo:
                with w.block(f"for j in range({j_lo}, {j_hi}):"):
                    terms = [term(cb, kk, xcol(offs[kk])) for cb in combos for kk in range(k_l)]
                    w(f"{yrow('j')} += " + " + ".join(terms))
            edges = [r for r in (range(0, j_lo), range(j_hi, o_l)) if len(r)]
            for r in edges:
                if len(r) <= EDGE_UNROLL:  # a few pixels: written out, only the taps inside
                    for j in r:
                        terms = [term(cb, kk, str(j * s_l + offs[kk])) for kk in range(k_l)
                                 if 0 <= j * s_l + offs[kk] < n_l for cb in combos]
                        if terms:
                            w(f"{yrow(j)} += " + " + ".join(terms))
                    continue
                with w.block(f"for j in range({r.start}, {r.stop}):"):
                    w(f"acc = {yrow('j')}")
                    for kk in range(k_l):
                        w(f"xj = {xcol(offs[kk])}")  # (not ``b``: that is the bias argument)
                        with w.block(f"if xj >= 0 and xj < {n_l}:"):
                            w("acc += " + " + ".join(term(cb, kk, "xj") for cb in combos))
                    w(f"{yrow('j')} = acc")
    with w.block("else:"):
        per_tap()


def _flat(names, sizes) -> str:
    """Row-major flat index of coordinates ``names`` in constant ``sizes``."""
    expr = names[0]
    for name, size in zip(names[1:], sizes[1:]):
        expr = f"({expr}) * {size} + {name}"
    return expr


def _emit_im2col(key) -> str:
    """cols[nn, g, c*K + k, flat(o)] = x[n0 + nn, g*Cg + c, o*s + k*d - start] (0 outside)."""
    d = key.desc
    g = d.group_count
    cg = d.input_tensor.sizes[1] // g
    sizes_in = d.input_tensor.sizes[2:]
    ksz = d.filter_tensor.sizes[2:]
    out = d.output_tensor.sizes[2:]
    nd = len(out)
    rows = g * cg * prod(ksz)
    k = [f"k{i}" for i in range(nd)]
    o = [f"o{i}" for i in range(nd)]
    w = SourceWriter()
    loop = header(w, key)
    with w.block("def kernel(x, n0, cols):"):
        w("nb = cols.shape[0]")
        with w.block(f"for q in {loop}(nb * {rows}):"):
            decompose(w, "q", ["nn", "g", "c"] + k, [1 << 62, g, cg] + list(ksz))
            w("n = n0 + nn")
            w(f"ci = g * {cg} + c")
            w(f"r = {_flat(['c'] + k, [cg] + list(ksz))}")

            def level(i, base):
                inner = prod(out[i + 1:])
                s, dil, p, n = d.strides[i], d.dilations[i], d.start_padding[i], sizes_in[i]
                if i == nd - 1:
                    # the valid range of o along the last axis, where 0 <= o*s + k*d - p < n
                    w(f"lo = min(max(0, -(({k[i]} * {dil} - {p}) // {s})), {out[i]})")
                    w(f"hi = min({out[i]}, max(lo, ({n - 1 + p} - {k[i]} * {dil}) // {s} + 1))")
                    w(f"base = {base} * {out[i]}" if base else "base = 0")
                    with w.block("for j in range(lo):"):
                        w("cols[nn, g, r, base + j] = 0")
                    with w.block("for j in range(lo, hi):"):
                        xi = index("n", "ci", *[f"a{t}" for t in range(i)],
                                   f"j * {s} + {k[i]} * {dil} - {p}")
                        w(f"cols[nn, g, r, base + j] = x[{xi}]")
                    with w.block(f"for j in range(hi, {out[i]}):"):
                        w("cols[nn, g, r, base + j] = 0")
                    return
                with w.block(f"for {o[i]} in range({out[i]}):"):
                    w(f"a{i} = {affine([(o[i], s), (k[i], dil)], -p)}")
                    b = f"b{i}"
                    w(f"{b} = {base} * {out[i]} + {o[i]}" if base else f"{b} = {o[i]}")
                    with w.block(f"if a{i} < 0 or a{i} >= {n}:"):
                        with w.block(f"for j in range({b} * {inner}, ({b} + 1) * {inner}):"):
                            w("cols[nn, g, r, j] = 0")
                    with w.block("else:"):
                        level(i + 1, b)

            level(0, "")
    return w.text()


def _emit_col2im(key) -> str:
    """y[n, m, o] = act(sum over taps of cols[nn, g, col*K + k, flat(a)] + b[m]) (gather)."""
    d = key.desc
    g = d.group_count
    cout = d.output_tensor.sizes[1]
    cog = cout // g
    sizes_in = d.input_tensor.sizes[2:]
    ksz = d.filter_tensor.sizes[2:]
    out = d.output_tensor.sizes[2:]
    nd = len(out)
    acc = accumulator(d.input_tensor.data_type).name
    o = [f"o{i}" for i in range(nd)]
    a = [f"a{i}" for i in range(nd)]
    w = SourceWriter()
    loop = header(w, key)
    args = "cols, n0, b, y" if d.bias_tensor is not None else "cols, n0, y"
    with w.block(f"def kernel({args}):"):
        w("nb = cols.shape[0]")
        with w.block(f"for f in {loop}(nb * {cout * prod(out[:-1])}):"):
            decompose(w, "f", ["nn", "m"] + o[:-1], [1 << 62, cout] + list(out[:-1]))
            w("n = n0 + nn")
            w(f"g = m // {cog}")
            w(f"col = m - g * {cog}")
            with w.block(f"for {o[-1]} in range({out[-1]}):"):
                w(f"acc = numba.{acc}(0.0)")
                with ExitStack() as stack:
                    fidx = open_window_loops(
                        w, stack, [f"k{i}" for i in range(nd)], a, sizes_in,
                        starts={"o": o, "k": ksz, "pad": d.start_padding}, steps=d.strides,
                        dilations=d.dilations, transposed=True, flip=False)
                    row = f"col * {prod(ksz)} + {_flat(fidx, list(ksz))}"
                    w(f"acc += cols[nn, g, {row}, {_flat(a, list(sizes_in))}]")
                conv_epilogue(w, d, "acc", f"y[{index('n', 'm', *o)}]")
    return w.text()


def _emit_epilogue(key) -> str:
    """In place on y viewed (N, M, spatial): v = act(y + b[m])."""
    d = key.desc
    n_, cout = d.output_tensor.sizes[:2]
    inner = prod(d.output_tensor.sizes[2:])
    nd = d.input_tensor.rank - 2
    w = SourceWriter()
    loop = header(w, key)
    args = "b, y" if d.bias_tensor is not None else "y"
    with w.block(f"def kernel({args}):"):
        with w.block(f"for f in {loop}({n_ * cout}):"):
            decompose(w, "f", ["n", "m"], [n_, cout])
            if d.bias_tensor is not None:
                w(f"bm = b[{index(0, 'm', *([0] * nd))}]")
            with w.block(f"for j in range({inner}):"):
                conv_epilogue(w, d, "y[n, m, j]", "y[n, m, j]", bias="bm")
    return w.text()


# -- blocked: register-blocked SIMD tiles ---------------------------------------------------

@dataclasses.dataclass(frozen=True)
class BlockPlan:
    """The tile of the blocked kernel: ``mb`` output channels x ``rows`` output rows (the
    second-to-last spatial axis) x ``vectors`` vectors of ``lanes`` pixels along the last axis,
    all held in ``mb * rows * vectors`` vector accumulators."""
    lanes: int
    mb: int
    rows: int
    vectors: int
    padded: tuple  # the spatial sizes of the zero-padded input the tiles read
    depthwise: bool = False  # one channel at a time, plane by plane (_emit_blocked_depthwise)
    staged: bool = False  # FORWARD: each (image, group) padded into a per-thread buffer first
    phases: int = 1  # BACKWARD: last-axis stride phases in one tile (2: stored interleaved)
    flat: bool = False  # FORWARD: tiles of ``vectors`` walk the padded plane flattened

    @property
    def accumulators(self) -> int:
        return self.mb * self.rows * self.vectors * self.phases


def block_plan(desc, lanes: int | None = None, budget: int | None = None,
               channels: int | None = None) -> BlockPlan | None:
    """The tile for ``desc`` on this machine, or None where the blocked kernel does not apply:
    float64, or fewer than 4 output pixels per row (per stride phase for BACKWARD).

    ``lanes`` defaults to the host's widest float32 vector (16 with AVX-512, 8 with AVX2, 4 with
    SSE/NEON), reduced to fit the row; ``budget`` (accumulator registers) to 12, which leaves
    four of AVX2's 16 vector registers for the input vectors and the broadcast weight, and with
    AVX-512's 32 registers to 16 (24 for one tap); ``channels`` output channels (4; 8 for one
    tap) share each loaded input vector."""
    from ._simd import vector_lanes

    d = desc
    forward = d.direction == ConvolutionDirection.FORWARD
    if d.input_tensor.data_type not in (DataType.FLOAT32, DataType.FLOAT16):
        return None
    out = d.output_tensor.sizes[2:]
    # BACKWARD runs per stride phase: output o = q * stride + r, the fewest q's a phase has
    width = out[-1] if forward else out[-1] // d.strides[-1]
    height = (out[-2] if forward else out[-2] // d.strides[-2]) if len(out) >= 2 else 1
    lanes = lanes or vector_lanes()
    while lanes > 4 and lanes > width:
        lanes //= 2
    if width < lanes or height < 1:
        return None
    # measured (AVX-512, 2 cores): 8, 12, 16, 24 accumulators gave 163, 173, 170, 150 GFLOP/s
    # for 3x3 64->64 on 8x56x56 and 134, 180, 153, 150 for 1x1 256->128 on 8x28x28 (flattened);
    # rows that divide the height count more than the last few accumulators: 4 rows instead of
    # 3 (16 accumulators, no overlapping row block) took 3x3/2 64->128 to 28x28 from 126 to
    # 155 GFLOP/s and grouped 3x3 on 28x28 from 160 to 177
    mg = d.output_tensor.sizes[1] // d.group_count
    taps = prod(d.filter_tensor.sizes[2:])
    # With AVX-512's 32 vector registers: 16 accumulators for 2-D and more, and for one tap
    # (pointwise, flattened) 8 channels x 3 vectors (1x1 256->128 on 8x28x28: 208 GFLOP/s,
    # against 191-199 for 4 x 3); with 9 taps 8 channels' broadcast weights no longer fit
    # beside the accumulators (87 GFLOP/s). 12 where there are 16 registers (AVX2).
    if budget is None:
        budget = ((24 if taps == 1 else 16 if len(out) >= 2 else 12)
                  if vector_lanes() >= 16 else 12)
    channels = channels or (8 if taps == 1 else 4)
    padded = padded_geometry(d)[1]
    if (forward and d.input_tensor.sizes[1] == d.group_count and mg < channels
            and taps <= DEPTHWISE_UNROLL):
        # one input channel per group: rows share loaded input vectors instead of channels
        # sharing them (3x3 at 56x56, 8x128 planes: 4 rows x 1 vector 0.64 ms, 1.7 direct)
        rows = min(4, height, budget) if len(out) >= 2 else 1
        vectors = max(1, min(budget // (3 * rows) if len(out) >= 2 else 4, width // lanes))
        while rows > 1 and taps * rows * vectors > DEPTHWISE_UNROLL:
            rows -= 1
        vectors = max(1, min(vectors, DEPTHWISE_UNROLL // (taps * rows)))
        return BlockPlan(lanes, 1, rows, vectors, padded, depthwise=True)
    mb = min(mg, channels, budget)
    # BACKWARD at stride 2 with as many outputs in both phases: a tile holds both and stores
    # them interleaved, whole vectors instead of a scatter per vector (4x4/2 64->32 to 56x56:
    # 2.9 -> 2.4 ms)
    phases = 2 if not forward and d.strides[-1] == 2 and out[-1] % 2 == 0 else 1
    room = max(1, budget // (mb * phases))
    rows = _tile_rows(height, room) if len(out) >= 2 else 1
    vectors = 1 if phases > 1 else max(1, min(room // rows, width // lanes))
    staged = forward and needs_copy(d) and _stages(d, padded)
    flat = _flat_vectors(d, padded, lanes, room, rows, vectors) if forward else 0
    if flat:
        return BlockPlan(lanes, mb, 1, flat, padded, staged=staged, flat=True)
    return BlockPlan(lanes, mb, rows, vectors, padded, phases=phases, staged=staged)


def _flat_vectors(desc, padded, lanes, room, rows, vectors) -> int:
    """Vectors a tile takes when it walks the padded plane flattened (0: keep rows): for unit
    strides over the last two axes (a padded row is never shorter than a vector: the planner's
    lanes fit the output row, which the padded row holds, so a vector's lanes fall in at most
    two rows, as ``vstore_rows`` needs), where runs of
    ``room`` vectors compute at least 3% fewer positions than tiles of whole rows. A run covers
    the padding columns of the rows it crosses, but no row block or row is rounded up to the
    tile: 56-pixel rows in 16-lane vectors compute 64 a row; flattened over rows of 58, 51 runs
    of 64 compute 3,264 positions for 3,136 outputs against 3,584 (3x3 64->64 on 8x56x56: 9.87
    -> 9.41 ms, same run). Runs of fewer vectors, or a short run to end the plane, gained less
    than their smaller tiles or extra code cost (grouped 3x3 on 28x28: 5.08 -> 5.01 ms, 0.4 s
    more to compile)."""
    out = desc.output_tensor.sizes[2:]
    if len(out) < 2 or desc.strides[-1] != 1 or desc.strides[-2] != 1:
        return 0
    size = (out[-2] - 1) * padded[-1] + out[-1]
    by_rows = -(-out[-2] // rows) * rows * -(-out[-1] // (lanes * vectors)) * lanes * vectors
    run = lanes * room  # every accumulator: smaller runs lose more than the lanes they save
    flat = -(-size // run) * run
    return room if run <= size and flat <= FLAT_GAIN * by_rows else 0


def _stages(desc, padded) -> bool:
    """Whether the forward kernel pads each (image, group) into a per-thread buffer just before
    its tiles instead of padding the whole input first: where there are enough pairs for every
    thread (four each) and a group's padded planes fit a second-level cache (1 MiB). The
    whole-input pass writes and re-reads a padded copy of the input through memory; measured
    (medians of five, same run): grouped 3x3 on 8x256x28x28 5.20 -> 5.09 ms, 3x3 64->64 on
    8x56x56 (861 KB a group) 9.92 -> 9.67, 3x3/2 64->128 5.21 -> 5.11."""
    import numba

    cg = desc.input_tensor.sizes[1] // desc.group_count
    return (desc.input_tensor.sizes[0] * desc.group_count >= 4 * numba.config.NUMBA_NUM_THREADS
            and cg * prod(padded) * 4 <= 1 << 20)


def _tile_rows(height: int, room: int) -> int:
    """Rows of a tile, from half ``room`` to ``room`` (at most ``height``): the fewest rows
    computed twice by the overlapping last row block, ties (within 3% a row) to the taller tile,
    which loads fewer input vectors per multiply-add. 56 rows -> 4, 28 -> 4, 14 -> 2 of 4."""
    top = min(room, height)
    low = min(max(1, (room + 1) // 2), top)
    return min(range(low, top + 1),
               key=lambda r: -(-height // r) * r / height + 0.03 * (top - r))


def transposed_phases(desc) -> list:
    """BACKWARD in gather form, per spatial axis and per residue ``r`` of the output coordinate
    modulo the stride: the taps ``(k, e)`` that reach outputs ``o = q * stride + r``, reading
    input ``a = q + e`` (``(r + start - k * dilation)`` divisible by the stride, ``e`` the
    quotient)."""
    d = desc
    phases = []
    for s, dl, p, k_n in zip(d.strides, d.dilations, d.start_padding, d.filter_tensor.sizes[2:]):
        phases.append([[(k, (r + p - k * dl) // s) for k in range(k_n) if (r + p - k * dl) % s == 0]
                       for r in range(s)])
    return phases


def padded_geometry(desc) -> tuple:
    """``(front, sizes)`` of the zero-padded input the blocked kernel reads: input element ``a``
    sits at ``a + front``. FORWARD: ``front`` is the start padding and the sizes reach the last
    tap of the last output (the last rounded up to a multiple of its stride, for the rows stored
    by stride phase); BACKWARD: enough in front for the most negative phase offset and
    behind for the last q plus the largest."""
    d = desc
    if d.direction == ConvolutionDirection.FORWARD:  # a strided last axis is stored by phases
        sizes = padded_sizes(d)
        s = d.strides[-1]
        return tuple(d.start_padding), sizes[:-1] + (s * -(-sizes[-1] // s),)
    front, sizes = [], []
    for n, o, s, axis in zip(d.input_tensor.sizes[2:], d.output_tensor.sizes[2:], d.strides,
                             transposed_phases(d)):
        es = [e for taps in axis for _, e in taps]
        f = max(0, -min(es)) if es else 0
        front.append(f)
        sizes.append(f + max(n, -(-o // s) + (max(es) if es else 0)))
    return tuple(front), tuple(sizes)


def padded_sizes(desc) -> tuple:
    """Spatial sizes of the zero-padded input that the forward windows read: up to the last
    tap of the last output, ``(out - 1) * stride + (k - 1) * dilation + 1``."""
    d = desc
    return tuple((o - 1) * s + (k - 1) * dil + 1 for o, s, k, dil in zip(
        d.output_tensor.sizes[2:], d.strides, d.filter_tensor.sizes[2:], d.dilations))


def _emit_run(w, lanes, dst, n, src=None, stride: int = 1) -> None:
    """``xp[dst + k] = x[src + k * stride]`` for ``k < n`` (zeros without ``src``): whole
    vectors of ``lanes`` and an overlapping last one where the run holds a vector (strided:
    one load spanning the lanes and a shuffle), else element by element. (Numba's scalar
    indexing wraps negative indices, which keeps LLVM from vectorising such a copy: measured 3x
    slower for 56-element rows.)"""
    if n <= 0:
        return

    def vector(terms, k):  # the vector of elements k, k + 1, ... (k = terms + constant)
        if src is None:
            return f"vzero({lanes})"
        i = affine([(src, 1)] + [(t, c * stride) for t, c in terms], k * stride)
        return (f"vload(x, {i}, {lanes})" if stride == 1
                else f"vload_stride(x, {i}, {stride}, {lanes})")

    store = "vstore" if src is None or stride == 1 else "vstore_raw"
    if lanes and n >= lanes:
        with w.block(f"for t in range({n // lanes}):"):
            w(f"{store}(xp, {affine([(dst, 1), ('t', lanes)])}, {vector([('t', lanes)], 0)})")
        if n % lanes:
            w(f"{store}(xp, {affine([(dst, 1)], n - lanes)}, {vector([], n - lanes)})")
        return
    with w.block(f"for t in range({n}):"):
        w(f"xp[{affine([(dst, 1), ('t', 1)])}] = "
          + (f"x[{affine([(src, 1), ('t', stride)])}]" if src else "0"))


def _emit_pad_phase(w, loop, planes, size_in, front, P, split: int = 1, row=None,
                    plane=None, base=None, lanes: int = 0) -> None:
    """Phase 1 of the blocked kernels: ``xp`` (``planes`` planes of spatial sizes ``P``) holds
    ``x`` at offset ``front`` (cropped to ``P``) and zeros elsewhere; one row per iteration.
    ``split`` > 1 stores each row by phases of that stride: padded element ``j`` of a row at
    ``(j % split) * (P[-1] // split) + j // split``, so that a strided window reads consecutive
    elements; ``row`` is then the padded row's length (at most ``P[-1]``). With ``plane`` (an
    expression), only that input plane, written from ``xp[base]`` on."""
    nd = len(P)
    q = P[-1] // split
    row = P[-1] if row is None else row
    w(f"# phase 1: the input{'' if plane is None else ' plane'} with its zero padding, one "
      "padded row per iteration" + (f", split by the stride {split}" if split > 1 else ""))
    pc = [f"p{i}" for i in range(nd - 1)]
    if plane is not None:
        w(f"nc = {plane}")
    with w.block(f"for r in {loop}({(1 if plane is not None else planes) * prod(P[:-1])}):"):
        if plane is None:
            decompose(w, "r", ["nc"] + pc, [planes] + list(P[:-1]))
            w(f"dst = r * {P[-1]}")
        else:
            decompose(w, "r", pc, list(P[:-1]))
            w(f"dst = {base} + r * {P[-1]}")
        conds = [f"{p} >= {front[i]} and {p} < {front[i] + size_in[i]}" for i, p in enumerate(pc)]
        lo = min(front[-1], row)
        n_copy = max(0, min(size_in[-1], row - front[-1]))
        src = "nc"
        for i, p in enumerate(pc):
            src = f"({src}) * {size_in[i]} + {affine([(p, 1)], -front[i])}"
        with w.block(f"if {' and '.join(conds)}:" if conds else "if True:"):
            w(f"src = ({src}) * {size_in[-1]}")
            if split > 1:  # every slot first: the row is not written in order
                _emit_run(w, lanes, "dst", P[-1])
                for ph in range(split):  # padded j = i + lo in phase ph: i = i0, i0 + split, ...
                    i0 = (ph - lo) % split
                    count = max(0, -(-(n_copy - i0) // split))
                    _emit_run(w, lanes, affine([("dst", 1)], ph * q + (i0 + lo) // split), count,
                              affine([("src", 1)], i0), split)
            else:
                _emit_run(w, lanes, "dst", lo)
                _emit_run(w, lanes, f"dst + {lo}" if lo else "dst", n_copy, "src")
                _emit_run(w, lanes, f"dst + {lo + n_copy}", P[-1] - lo - n_copy)
        with w.block("else:"):
            _emit_run(w, lanes, "dst", P[-1])


def needs_copy(desc) -> bool:
    """Whether the blocked kernel copies the input (padding, or a strided last axis) or reads
    it in place."""
    front, sizes = padded_geometry(desc)
    split = desc.strides[-1] if desc.direction == ConvolutionDirection.FORWARD else 1
    return any(front) or tuple(desc.input_tensor.sizes[2:]) != tuple(sizes) or split != 1


#: what the forward blocked kernels' modules import (the strided reads added where rows are split)
_SIMD_IMPORT = "from dml_numba.cpu._simd import vadd, vfma, vload, vsplat, vstore, vzero"


def _emit_tile(w, d, L, R, mb, MB, ps, open_taps, columns, x_row, store, at, span,
               staged: bool = False, keep=None) -> None:
    """One register tile of the blocked kernels: ``mb x R x len(columns)`` accumulators of
    ``L`` lanes, the loop over the group's input channels, the taps (``open_taps`` opens the
    leading axes' loops and sets ``xo``/``wo``; ``columns[v]`` lists the ``(tap, offset)`` pairs
    of the last axis that accumulator column ``v`` takes, unrolled), then bias,
    ``store(m, r, values)`` per channel and row (one value per column), and the fused activation
    over the stored tile: ``y[at]`` for ``m``, ``r``, ``q`` over ``mb x R x span``. ``staged``:
    the group's padded input planes lie one after another from ``xp[xs]`` on. ``keep``: the
    condition on ``q`` for an element of the tile to be in the output (the activation skips the
    others)."""
    cin = d.input_tensor.sizes[1]
    cg = cin // d.group_count
    nmb = -(-(d.output_tensor.sizes[1] // d.group_count) // MB)
    J = len(columns)
    accs = [[[f"a{m}_{r}_{v}" for v in range(J)] for r in range(R)] for m in range(mb)]
    for m in range(mb):
        for r in range(R):
            for v in range(J):
                w(f"{accs[m][r][v]} = vzero({L})")
    taps = list(dict.fromkeys(t for col in columns for t, _ in col))
    with w.block(f"for c in range({cg}):"):
        w(f"xc = xs + c * {ps}" if staged else f"xc = (n * {cin} + g * {cg} + c) * {ps}")
        w(f"wc = ((g * {nmb} + mbi) * {cg} + c) * {prod(d.filter_tensor.sizes[2:]) * MB}")
        with ExitStack() as stack:
            open_taps(stack)
            for t in taps:
                cols = [(v, off) for v, col in enumerate(columns) for tt, off in col if tt == t]
                for r in range(R):
                    for v, off in cols:
                        w(f"x{r}_{v} = vload(xp, {affine([('xo', 1), (x_row(r), 1)], off)}, {L})")
                for m in range(mb):
                    w(f"ws = vsplat(wp[wo + {t * MB + m}], {L})")
                    for r in range(R):
                        for v, _ in cols:
                            w(f"{accs[m][r][v]} = vfma(ws, x{r}_{v}, {accs[m][r][v]})")
    for m in range(mb):
        if d.bias_tensor is not None:
            w(f"bs = vsplat(b[m0 + {m}], {L})")
        for r in range(R):
            store(m, r, [f"vadd({a}, bs)" if d.bias_tensor is not None else a
                         for a in accs[m][r]])
    _emit_activation_pass(w, d, [("m", mb), ("r", R), ("q", span)], at, keep)


def _emit_activation_pass(w, d, loops, at, keep=None) -> None:
    """The fused activation over a stored tile, in place: ``y[at]`` for the loop variables
    ``loops`` (``(name, count)`` pairs), where ``keep`` holds (every element without it)."""
    if d.fused_activation is None:
        return
    with ExitStack() as stack:
        for name, count in loops:
            stack.enter_context(w.block(f"for {name} in range({count}):"))
        if keep:
            stack.enter_context(w.block(f"if {keep}:"))
        w(f"v = y[{at}]")
        w(f"v = {d.fused_activation.expression('v')}")
        w(f"y[{at}] = v")


def _blocked_layout(key) -> tuple:
    """What both blocked emitters read off their key: the tile ("blocked L MB R J"), the sizes,
    the channel blocks (``nmb`` of them, ``tail`` channels in the last), the padded input's
    ``front`` and sizes ``P`` with their strides, the output's strides, and the plane sizes.
    (CONVOLUTION mode needs nothing here: the host packs the filter flipped.)"""
    d = key.desc
    L, MB, R, J = map(int, key.kernel.split()[1:5])
    n_, cin = d.input_tensor.sizes[:2]
    cout = d.output_tensor.sizes[1]
    out = d.output_tensor.sizes[2:]
    nd = len(out)
    mg = cout // d.group_count
    nmb = -(-mg // MB)
    front, P = padded_geometry(d)
    return (L, MB, R, J, n_, cin, cout, d.input_tensor.sizes[2:], out, d.filter_tensor.sizes[2:],
            nd, d.group_count, mg, nmb, mg - (nmb - 1) * MB, front, P,
            [prod(P[i + 1:]) for i in range(nd)], [prod(out[i + 1:]) for i in range(nd)],
            prod(P), prod(out))


def _emit_blocked(key) -> str:
    """Forward convolution in register-blocked tiles (dense, grouped, depthwise; 1-D to 3-D).

    ``kernel(x, wp, [b,] y, xp)``, every argument a flat float32 array: phase 1 copies the input
    into ``xp`` with its zero padding (skipped when nothing is padded); phase 2 runs a (p)range
    over (n, group, channel block, outer spatial, row block). Each iteration walks the row in
    vectors; for one tile it keeps ``mb x rows x vectors`` accumulators in vector registers and,
    per input channel and tap, loads ``rows x vectors`` input vectors and broadcasts ``mb``
    weights from ``wp`` (the filter packed once per call as [g][channel block][c][tap][mb]):
    ``mb * rows * vectors`` fused multiply-adds per ``rows * vectors + mb`` loads. Taps are
    unrolled with constant offsets. The last row block and vector overlap the previous ones
    instead of running a remainder loop (the same values are stored twice). Bias is added in
    registers; a fused activation runs over the stored tile.

    ``blocked-staged`` keys: ``kernel(x, wp, [b,] y, xp, slots)`` instead; each of ``slots``
    (p)range iterations takes a share of the (n, group) pairs and, for each, pads the group's
    input planes into its own part of ``xp`` (``pad``) and runs every tile of the pair from
    there, so the padded copy stays in cache instead of going through memory.

    Keys ending in ``flat`` (unit strides over the last two axes): a tile is a run of
    ``vectors`` consecutive vectors of the padded plane flattened (row by row, padding columns
    included) instead of rows x vectors; taps are constant offsets in the flat plane, the
    stores skip the padding columns (``vstore_rows``), the last run ends at the plane's last
    output, overlapping the one before."""
    d = key.desc
    (L, MB, R, J, n_, cin, cout, size_in, out, ksz, nd, g, mg, nmb, tail, start, P, pstride,
     ostride, ps, os_) = _blocked_layout(key)
    pad = needs_copy(d)
    split = d.strides[-1]  # > 1: rows stored by stride phase, a window's taps read consecutively
    w = SourceWriter()
    loop = header(w, key, imports=(_SIMD_IMPORT + (", vload_stride, vstore_raw" if split > 1
                                                   else "")
                                   + (", vstore_rows" if "flat" in key.kernel else ""),))
    has_bias = d.bias_tensor is not None
    staged = key.kernel.split()[0] == "blocked-staged"
    outer = [f"o{i}" for i in range(nd - 2)]
    # flat: tiles walk the padded plane flattened (taps at constant offsets) up to the last
    # output, the padding columns computed and not stored; rt numbers the runs
    flat = "flat" in key.kernel.split()[5:]
    flat_size = (out[-2] - 1) * P[-1] + out[-1] if flat else 0
    nrt = -(-flat_size // (L * J)) if flat else -(-out[-2] // R) if nd >= 2 else 1
    njt = -(-out[-1] // (L * J))
    coords = ["n", "g", "mbi"] + outer + ["rt"] + (["xs"] if staged else [])
    args = f"wp, {'b, ' if has_bias else ''}y"
    if staged:
        cg = cin // g
        items = n_ * g
        with w.block(f"def kernel(x, {args}, xp, slots):"):
            w(f"# each slot takes a share of the {items} (image, group) pairs, pads the group's "
              f"{cg} input planes into xp[slot * {cg * ps}:] and runs every tile of the group")
            with _slot_share(w, loop, items):
                decompose(w, "f", ["n", "g"], [n_, g])
                w(f"xs = s * {cg * ps}")
                w("pad(x, xp, n, g, xs)")
                tiles = [nmb] + list(out[:-2]) + [nrt]
                with w.block(f"for t in range({prod(tiles)}):"):
                    decompose(w, "t", ["mbi"] + outer + ["rt"], tiles)
                    _call_tiles(w, MB, nmb, tail, coords, has_bias)
        # the padding in a function of its own: a short parallel loop body compiles faster
        helper_header(w)
        with w.block("def pad(x, xp, n, g, xs):"):
            with w.block(f"for c in range({cg}):"):
                _emit_pad_phase(w, "range", 1, size_in, start, P, split, padded_sizes(d)[-1],
                                plane=f"n * {cin} + g * {cg} + c", base=f"xs + c * {ps}",
                                lanes=L)
    else:
        with w.block(f"def kernel(x, {args}, xp):"):
            if pad:
                _emit_pad_phase(w, loop, n_ * cin, size_in, start, P, split, padded_sizes(d)[-1],
                                lanes=L)
            else:
                w("xp = x  # nothing to pad")
            w("# phase 2: register-blocked tiles")
            with w.block(f"for f in {loop}({n_ * g * nmb * prod(out[:-2]) * nrt}):"):
                decompose(w, "f", coords, [n_, g, nmb] + list(out[:-2]) + [nrt])
                _call_tiles(w, MB, nmb, tail, coords, has_bias)

    def tile(mb):
        w(f"m0 = g * {mg} + mbi * {MB}")
        # offsets of each tile row in xp and in y (without the channel)
        terms_x, terms_y = _row_block_terms(
            d, outer + (["r0"] if nd >= 2 and not flat else []), pstride, ostride)
        if flat:  # one run of L * J positions of the flattened padded plane, from j; the
            # last run ends where the plane's last output does, overlapping the one before
            w(f"xr0 = {affine(terms_x)}")
            w(f"yr0 = {affine(terms_y)}")
            w(f"j = min(rt * {L * J}, {flat_size - L * J})")
        else:
            if nd >= 2:
                w(f"r0 = min(rt * {R}, {out[-2] - R})")
            for r in range(R):
                w(f"xr{r} = {affine(terms_x, r * d.strides[-2] * pstride[-2] if nd >= 2 else 0)}")
                w(f"yr{r} = {affine(terms_y, r * ostride[-2] if nd >= 2 else 0)}")
        with ExitStack() as jt_loop:
            if not flat:
                jt_loop.enter_context(w.block(f"for jt in range({njt}):"))
                w(f"j = min(jt * {L * J}, {out[-1] - L * J})")

            def open_taps(stack):
                # the taps of the leading axes as loops, the last axis's unrolled
                ko = [f"k{i}" for i in range(nd - 1)]
                for i, k in enumerate(ko):
                    stack.enter_context(w.block(f"for {k} in range({ksz[i]}):"))
                w("xo = " + affine([("xc", 1), ("j", 1)] + [
                    (k, d.dilations[i] * pstride[i]) for i, k in enumerate(ko)]))
                w(f"wo = wc + ({_flat(ko, list(ksz[:-1]))}) * {ksz[-1] * MB}"
                  if ko else "wo = wc")

            def store(m, r, values):
                y0 = f"(n * {cout} + m0 + {m}) * {os_} + yr{r}"
                for v, value in enumerate(values):
                    if flat:  # the padding columns the run covers are not written
                        w(f"vstore_rows(y, {y0}, j + {v * L}, {value}, {out[-1]}, {P[-1]})")
                    else:
                        w(f"vstore(y, {y0} + j + {v * L}, {value})")

            row_step = ostride[-2] if nd >= 2 else 0
            last = [(t, (t * d.dilations[-1]) % split * (P[-1] // split)
                     + t * d.dilations[-1] // split) for t in range(ksz[-1])]
            y0 = f"(n * {cout} + m0 + m) * {os_} + yr0"
            _emit_tile(w, d, L, R, mb, MB, ps, open_taps,
                       [[(t, off + v * L) for t, off in last] for v in range(J)],
                       lambda r: f"xr{r}", store,
                       f"{y0} + (j + q) // {P[-1]} * {out[-1]} + (j + q) % {P[-1]}" if flat
                       else f"{y0} + r * {row_step} + j + q", L * J, staged,
                       f"(j + q) % {P[-1]} < {out[-1]}" if flat else None)

    _emit_tile_functions(w, tile, MB, tail, coords, d.bias_tensor is not None)
    return w.text()


@contextmanager
def _slot_share(w, loop, items):
    """``for s in (p)range(slots)``, then the share of ``items`` that slot ``s`` takes (``f``
    from ``s * items // slots`` on): the kernels whose iterations each own a part of ``xp``."""
    with w.block(f"for s in {loop}(slots):"), \
            w.block(f"for f in range(s * {items} // slots, (s + 1) * {items} // slots):"):
        yield


def _row_block_terms(d, coords, pstride, ostride) -> tuple:
    """``(terms_x, terms_y)``: the :func:`affine` terms of FORWARD output coordinates
    ``coords`` (the leading spatial axes, in order; the first row of a tile as ``r0``) in the
    padded input and in the output plane."""
    return ([(o_, d.strides[i] * pstride[i]) for i, o_ in enumerate(coords)],
            [(o_, ostride[i]) for i, o_ in enumerate(coords)])


def _call_tiles(w, MB, nmb, tail, coords, has_bias) -> None:
    """The (p)range body's call of the tile function (the remainder block's where it has one).
    The tiles are functions of their own: Numba's parallel passes then see a short loop body,
    which keeps compile times down (measured: 6.6 s against 2.3 s serial with the tile
    inline)."""
    args = f"xp, wp, {'b, ' if has_bias else ''}y, {', '.join(coords)}"
    if tail == MB:
        w(f"tile{MB}({args})")
        return
    with w.block(f"if mbi < {nmb - 1}:"):
        w(f"tile{MB}({args})")
    with w.block("else:"):
        w(f"tile{tail}({args})")


def _emit_tile_functions(w, tile, MB, tail, coords, has_bias) -> None:
    """``tile{mb}(...)`` for the full channel block and the remainder, after the kernel."""
    for mb in sorted({MB, tail}, reverse=True):
        helper_header(w)
        with w.block(f"def tile{mb}(xp, wp, {'b, ' if has_bias else ''}y, {', '.join(coords)}):"):
            tile(mb)


def _emit_blocked_transposed(key) -> str:
    """BACKWARD (transposed) convolution in the same register tiles, gathered per stride phase.

    Output ``o = q * stride + r`` along each axis receives the taps of residue ``r``
    (:func:`transposed_phases`) from input ``a = q + e``: for a fixed phase that is a stride-1
    correlation in ``q``, so a tile holds consecutive ``q`` (rows of one row phase; vectors of
    one last-axis phase, whose taps are unrolled per phase). Leading axes' taps are loops with
    the divisibility test. Stores are vectors where the last stride is 1; at stride 2 with as
    many outputs in both phases (the plan's ``phases`` 2, a sixth number in the key) one tile
    holds both phases for the same ``q`` and stores them interleaved as whole vectors; otherwise
    lane by lane at the stride (one store per output)."""
    d = key.desc
    (L, MB, R, J, n_, cin, cout, size_in, out, ksz, nd, g, mg, nmb, tail, front, P, pstride,
     ostride, ps, os_) = _blocked_layout(key)
    phases = transposed_phases(d)
    st, start, dil = d.strides, d.start_padding, d.dilations
    w = SourceWriter()
    loop = header(w, key, imports=("from dml_numba.cpu._simd import vadd, vfma, vinterleave, "
                                   "vload, vscatter, vsplat, vstore, vzero",))
    with w.block(f"def kernel(x, wp, {'b, ' if d.bias_tensor is not None else ''}y, xp):"):
        if needs_copy(d):
            _emit_pad_phase(w, loop, n_ * cin, size_in, front, P, lanes=L)
        else:
            w("xp = x  # nothing to pad")
        w("# phase 2: register-blocked tiles, one row phase and row block per iteration")
        outer = [f"o{i}" for i in range(nd - 2)]
        lead = [] if nd == 1 else [st[-2], -(-(-(-out[-2] // st[-2])) // R)]
        coords = ["n", "g", "mbi"] + outer + (["rr", "rt"] if nd >= 2 else [])
        with w.block(f"for f in {loop}({n_ * g * nmb * prod(out[:-2]) * prod(lead)}):"):
            decompose(w, "f", coords, [n_, g, nmb] + list(out[:-2]) + lead)
            _call_tiles(w, MB, nmb, tail, coords, d.bias_tensor is not None)

    def tile(mb):
        w(f"m0 = g * {mg} + mbi * {MB}")
        if nd >= 2:
            w(f"qrow = ({out[-2] + st[-2] - 1} - rr) // {st[-2]}  # rows of this phase")
            w(f"r0 = min(rt * {R}, qrow - {R})")
        for r in range(R):
            terms = [(o_, ostride[i]) for i, o_ in enumerate(outer)]
            if nd >= 2:
                terms += [("r0", st[-2] * ostride[-2]), ("rr", ostride[-2])]
            w(f"yr{r} = {affine(terms, r * st[-2] * ostride[-2] if nd >= 2 else 0)}")
        together = key.kernel.split()[5:] == ["2"]  # both last-axis phases, interleaved
        for grp in ([[0, 1]] if together else [[rl] for rl in range(st[-1])]):
            q_l = -(-(out[-1] - grp[0]) // st[-1])  # outputs of this last-axis phase
            w(f"# last-axis phase{'s' if together else ''} {', '.join(map(str, grp))}: taps "
              + ", ".join(str([k for k, _ in phases[-1][rl]]) for rl in grp))
            with w.block(f"for jt in range({-(-q_l // (L * J))}):"):
                w(f"j = min(jt * {L * J}, {q_l - L * J})")

                def tap_axis(stack, i, o_):
                    # the taps k of axis i that reach output o_: t = o_ + start - k * dilation
                    # divisible by the stride; with dilation 1 every stride-th k from a start
                    # (no test), otherwise each k tested
                    t = affine([(o_, 1), (f"k{i}", -dil[i])], start[i])
                    if st[i] != 1 and dil[i] == 1:
                        first = f"({affine([(o_, 1)], start[i])}) % {st[i]}"
                        stack.enter_context(w.block(f"for k{i} in range({first}, {ksz[i]}, "
                                                    f"{st[i]}):"))
                    else:
                        stack.enter_context(w.block(f"for k{i} in range({ksz[i]}):"))
                    w(f"t{i} = {t}")
                    if st[i] != 1 and dil[i] != 1:
                        stack.enter_context(w.block(f"if t{i} % {st[i]} == 0:"))
                    return f"t{i}" if st[i] == 1 else f"(t{i} // {st[i]})"

                def open_taps(stack):
                    terms = [("xc", 1), ("j", 1)]
                    for i, o_ in enumerate(outer):
                        terms.append((tap_axis(stack, i, o_), pstride[i]))
                    const = sum(f * ps_ for f, ps_ in zip(front, pstride))
                    if nd >= 2:
                        terms += [("r0", pstride[nd - 2]),
                                  (tap_axis(stack, nd - 2, "rr"), pstride[nd - 2])]
                    w(f"xo = {affine(terms, const)}")
                    ko = [f"k{i}" for i in range(nd - 1)]
                    w(f"wo = wc + ({_flat(ko, list(ksz[:-1]))}) * {ksz[-1] * MB}"
                      if ko else "wo = wc")

                row_step = st[-2] * ostride[-2] if nd >= 2 else 0
                rl = grp[0]
                at = (f"(n * {cout} + m0 + m) * {os_} + yr0 + r * {row_step} + "
                      + ("j + q" if st[-1] == 1 else "j * 2 + q" if together
                         else f"(j + q) * {st[-1]} + {rl}"))

                def store(m, r, values):
                    y0 = f"(n * {cout} + m0 + {m}) * {os_} + yr{r}"
                    if together:  # the two phases' lanes alternate along the row
                        w(f"vstore(y, {y0} + j * 2, vinterleave({values[0]}, {values[1]}))")
                        return
                    for v, value in enumerate(values):
                        if st[-1] == 1:  # in place, contiguous
                            w(f"vstore(y, {y0} + j + {v * L}, {value})")
                        else:  # lane by lane at the stride
                            w(f"vscatter(y, {y0} + (j + {v * L}) * {st[-1]} + {rl}, {st[-1]}, "
                              f"{value})")

                columns = ([list(phases[-1][q]) for q in grp] if together else
                           [[(k, e + v * L) for k, e in phases[-1][rl]] for v in range(J)])
                _emit_tile(w, d, L, R, mb, MB, ps, open_taps, columns,
                           lambda r: str(r * pstride[-2]) if nd >= 2 else "0", store, at,
                           L * J * len(grp))

    _emit_tile_functions(w, tile, MB, tail, coords, d.bias_tensor is not None)
    return w.text()


def _emit_blocked_depthwise(key) -> str:
    """FORWARD convolution with one input channel per group (depthwise, and channel
    multipliers below the dense tile's channel block), plane by plane.

    ``kernel(x, wp, [b,] y, xp, slots)``: ``slots`` (p)range iterations share the planes
    ``(n, g)`` out evenly; each copies its plane with the zero padding into its own slot of
    ``xp`` (one plane: it stays in the first-level cache; skipped when nothing is padded), then
    for each of the group's output channels holds every tap's weight as a broadcast vector and
    walks the output in tiles of ``rows x vectors`` accumulators. A tile loads each input row
    its windows touch once per tap of the last axis and feeds it to every tile row whose window
    holds that row (3x3 on 4 rows: 18 loads for 36 fused multiply-adds); every tap is unrolled.
    The copy of the whole input that the other blocked kernels make first, and its second pass
    over memory, is gone: a depthwise layer is light enough for that pass to cost as much as the
    arithmetic."""
    d = key.desc
    (L, _, R, J, n_, cin, cout, size_in, out, ksz, nd, g, mg, _, _, start, P, pstride,
     ostride, ps, os_) = _blocked_layout(key)
    copy = needs_copy(d)
    split = d.strides[-1]
    has_bias = d.bias_tensor is not None
    taps = prod(ksz)
    planes = n_ * g
    w = SourceWriter()
    loop = header(w, key, imports=(_SIMD_IMPORT + (", vload_stride, vstore_raw" if split > 1
                                                   else ""),))
    args = f"wp, {'b, ' if has_bias else ''}y"
    with w.block(f"def kernel(x, {args}, xp, slots):"):
        w(f"# each slot takes a share of the {planes} planes (n, g)"
          + (f" and pads them in xp[slot * {ps}:]" if copy else ""))
        with _slot_share(w, loop, planes):
            if copy:
                w(f"xo = s * {ps}")
                _emit_pad_phase(w, "range", 1, size_in, start, P, split, padded_sizes(d)[-1],
                                plane="f", base="xo", lanes=L)
                w(f"plane(xp, {args}, f, xo)")
            else:
                w(f"plane(x, {args}, f, f * {ps})  # nothing to pad: read in place")

    helper_header(w)
    with w.block(f"def plane(xp, {args}, f, xo):"):
        decompose(w, "f", ["n", "g"], [n_, g])
        outer = [f"o{i}" for i in range(nd - 2)]
        rows = out[-2] if nd >= 2 else 1
        with w.block(f"for mi in range({mg}):"):
            w(f"m = g * {mg} + mi")
            for t in range(taps):
                w(f"w{t} = vsplat(wp[m * {taps} + {t}], {L})")
            w(f"bs = vsplat(b[m], {L})" if has_bias else f"bs = vzero({L})")
            with ExitStack() as stack:
                for i, o_ in enumerate(outer):
                    stack.enter_context(w.block(f"for {o_} in range({out[i]}):"))
                with w.block(f"for rt in range({-(-rows // R)}):"):
                    w(f"r0 = min(rt * {R}, {rows - R})")
                    xt, yt = _row_block_terms(d, outer + ["r0"][:nd - 1], pstride, ostride)
                    w(f"xb = {affine([('xo', 1)] + xt)}")
                    w(f"yb = {affine([(f'(n * {cout} + m)', os_)] + yt)}")
                    with w.block(f"for jt in range({-(-out[-1] // (L * J))}):"):
                        w(f"j = min(jt * {L * J}, {out[-1] - L * J})")
                        _emit_depthwise_tile(w, d, L, R, J, ksz, pstride, ostride, P, split)

    return w.text()


def _emit_depthwise_tile(w, d, L, R, J, ksz, pstride, ostride, P, split) -> None:
    """One tile of :func:`_emit_blocked_depthwise`: ``R x J`` accumulators from ``bs``; every
    input vector a tap of the last axis reads loaded once and multiplied into each tile row
    whose window holds it; the stores; the fused activation over the stored tile."""
    nd = len(ksz)
    acc = [[f"a{r}_{v}" for v in range(J)] for r in range(R)]
    for r in range(R):
        for v in range(J):
            w(f"{acc[r][v]} = bs")
    row_s, row_d = (d.strides[-2], d.dilations[-2]) if nd >= 2 else (1, 1)
    k_rows = ksz[-2] if nd >= 2 else 1
    # input row ``ir`` (relative to the tile's first) feeds tile row r through tap kr
    feeds = {}
    for r in range(R):
        for kr in range(k_rows):
            feeds.setdefault(r * row_s + kr * row_d, []).append((r, kr))
    for lead in itertools.product(*(range(k) for k in ksz[:-2])):
        lead_off = sum(k * d.dilations[i] * pstride[i] for i, k in enumerate(lead))
        for ir in sorted(feeds):
            for kc in range(ksz[-1]):
                t_c = kc * d.dilations[-1]
                off = (lead_off + (ir * pstride[-2] if nd >= 2 else 0)
                       + t_c % split * (P[-1] // split) + t_c // split)
                for v in range(J):
                    w(f"x{v} = vload(xp, {affine([('xb', 1), ('j', 1)], off + v * L)}, {L})")
                for r, kr in feeds[ir]:
                    t = ((sum(k * prod(ksz[i + 1:]) for i, k in enumerate(lead))
                          + kr * ksz[-1] + kc) if nd >= 2 else kc)
                    for v in range(J):
                        w(f"{acc[r][v]} = vfma(w{t}, x{v}, {acc[r][v]})")
    row_y = ostride[-2] if nd >= 2 else 0
    for r in range(R):
        for v in range(J):
            w(f"vstore(y, {affine([('yb', 1), ('j', 1)], r * row_y + v * L)}, {acc[r][v]})")
    _emit_activation_pass(w, d, [("r", R), ("q", L * J)],
                          affine([("yb", 1), ("r", row_y), ("j", 1), ("q", 1)]))


def _pointwise_as_1d(desc):
    """A FORWARD 1x1 convolution with unit strides and no padding is the same computation over
    the flattened spatial axes: the equivalent 1-D descriptor (one long row, so the tile takes
    several vectors and no row is cut into a remainder), or None."""
    d = desc
    if (d.direction != ConvolutionDirection.FORWARD or d.input_tensor.rank <= 3
            or any(k != 1 for k in d.filter_tensor.sizes[2:]) or any(s != 1 for s in d.strides)
            or any(d.start_padding) or any(d.end_padding)):
        return None

    def flat(t):
        return TensorDesc(t.data_type, tuple(t.sizes[:2]) + (prod(t.sizes[2:]),))

    return dataclasses.replace(
        d, input_tensor=flat(d.input_tensor), filter_tensor=flat(d.filter_tensor),
        bias_tensor=flat(d.bias_tensor) if d.bias_tensor is not None else None,
        output_tensor=flat(d.output_tensor), strides=(1,), dilations=(1,), start_padding=(0,),
        end_padding=(0,), output_padding=(0,))


def pack_filter(desc, w, plan: BlockPlan) -> np.ndarray:
    """The filter as the blocked kernel reads it: [g][channel block][c][tap][mb], float32,
    flipped for CONVOLUTION mode, zeros past the last block's channels."""
    d = desc
    g = d.group_count
    if d.mode == ConvolutionMode.CONVOLUTION:
        w = w[(Ellipsis,) + (slice(None, None, -1),) * (w.ndim - 2)]
    if d.direction == ConvolutionDirection.FORWARD:  # (M, C/g, k...)
        cout, cg = w.shape[0], w.shape[1]
        wg = w.reshape(g, cout // g, cg, -1)
    else:  # (C, M/g, k...): output channel m = g * M/g + col
        cg, mg_ = w.shape[0] // g, w.shape[1]
        cout = mg_ * g
        wg = w.reshape(g, cg, mg_, -1).transpose(0, 2, 1, 3)
    mg, mb = cout // g, plan.mb
    nmb = -(-mg // mb)
    if nmb * mb != mg:
        wg = np.concatenate([wg, np.zeros((g, nmb * mb - mg) + wg.shape[2:], wg.dtype)], axis=1)
    return np.ascontiguousarray(
        wg.reshape(g, nmb, mb, cg, -1).transpose(0, 1, 3, 4, 2), dtype=np.float32).reshape(-1)


def choose_algorithm(desc) -> str:
    """The algorithm for ``desc``, from the crossover grid in benchmarks/RESULTS.md (float32,
    batch 1 and 8, 2 cores, AVX-512):

    * one input channel per group (depthwise): ``blocked`` (the plane-by-plane kernel: 3x3 at
      56x56, 8x16 planes, 0.13 against 0.14 ms direct, strided 0.08 against 0.16; 7x7 at 28x28
      0.32 against 2.6; 3-D 3x3x3 0.52 against 5.8), except ``direct`` for windows of 2-9 taps
      over fewer planes (batch x channels) than threads, which the plane kernel shares out by
      plane;
    * ``gemm`` where the blocked tile would be poor and BLAS is big enough to pay off: dense
      (one group) convolutions with rows too short for half the host's vector (7x7 outputs: 19
      against 36 ms) or 1x1 over fewer than 512 pixels (14x14: 1.2 against 1.7 ms); grouped
      ones over planes of fewer than 32 pixels, or 64 for 1x1 (4x4 outputs, 8 groups: 0.19
      against 0.59 ms; 1x1 on 7x7: 0.31 against 0.54);
    * ``blocked`` for every other float32/float16 convolution it takes (3x3 64->64 at 56x56: 185
      GFLOP/s against 74 gemm and 64 direct; grouped, 5x5, 7x7, 1-D, 3-D, transposed);
    * without the blocked kernel (float64; rows under 4 pixels): ``gemm`` when each group's
      matrix product is big enough (forward: 32 output channels and 32 inner products per
      group), else ``direct``."""
    from ._simd import vector_lanes

    g = desc.group_count
    ksz = desc.filter_tensor.sizes[2:]
    taps = prod(ksz)
    forward = desc.direction == ConvolutionDirection.FORWARD
    if forward:
        inner, rows = desc.input_tensor.sizes[1] // g * taps, desc.output_tensor.sizes[1] // g
        gemm = inner >= 32 and rows >= 32
    else:
        inner, rows = desc.input_tensor.sizes[1] // g, desc.output_tensor.sizes[1] // g * taps
        gemm = inner >= 32 and rows >= 8
    plan = block_plan(_pointwise_as_1d(desc) or desc)
    mg = desc.output_tensor.sizes[1] // g
    if plan is not None and plan.depthwise:
        import numba

        few = desc.input_tensor.sizes[0] * g < numba.config.NUMBA_NUM_THREADS
        return "direct" if 2 <= taps <= 9 and few else "blocked"
    if plan is not None and mg == 1:
        strided = any(s > 1 for s in desc.strides)
        narrow = desc.output_tensor.sizes[-1] < 28
        return "direct" if 2 <= taps <= 9 and (strided or not narrow) else "blocked"
    pixels = prod(desc.output_tensor.sizes[2:])
    if plan is not None and gemm and (
            (g == 1 and (plan.lanes * 2 < vector_lanes()
                         or (taps == 1 and forward and pixels < 512)))
            or (g > 1 and forward and pixels < (64 if taps == 1 else 32))):
        return "gemm"
    if plan is not None and mg >= 4:
        return "blocked"
    return "gemm" if gemm else "direct"


class ConvolutionKernel(CpuKernel):
    def __init__(self, desc, options):
        algorithm = options.get("algorithm")
        self.desc = desc
        self.algorithm = algorithm or choose_algorithm(desc)
        self.acc = accumulator(desc.input_tensor.data_type)
        rank = desc.input_tensor.rank
        has_bias = desc.bias_tensor is not None
        cg = desc.input_tensor.sizes[1] // desc.group_count
        taps = prod(desc.filter_tensor.sizes[2:])
        work = desc.output_tensor.element_count * cg * taps
        key = make_key(desc, options, work)
        if self.algorithm == "blocked":
            self.kdesc = _pointwise_as_1d(desc) or desc  # what the kernel is generated for
            self.plan = block_plan(self.kdesc)
            if self.plan is None:
                raise ValidationError(
                    "compile_operator.algorithm: 'blocked' is invalid; expected 'direct' or "
                    "'gemm' for this descriptor (the blocked kernel takes float32 or float16 "
                    "convolutions with at least 4 output pixels per row, per stride phase for "
                    "BACKWARD)")
            self.acc = np.dtype(np.float32)
            p = self.plan
            kind = ("blocked-depthwise" if p.depthwise else "blocked-staged" if p.staged
                    else "blocked" if desc.direction == ConvolutionDirection.FORWARD
                    else "blocked-transposed")
            key = KernelKey("cpu", self.kdesc, f"{kind} {p.lanes} {p.mb} {p.rows} {p.vectors}"
                            + (f" {p.phases}" if p.phases > 1 else "")
                            + (" flat" if p.flat else ""), key.parallel)
            n_args = 5 if has_bias else 4
            slots = [(np.dtype(np.int64), 0)] if p.depthwise or p.staged else []
            CpuKernel.__init__(self, key, emit, [(self.acc, 1)] * n_args + slots, options)
            self._local = threading.local()
            # elements of the padded copy of the input (0: the kernel reads the input in place);
            # per slot, the depthwise kernel pads one plane, the staged one a group's planes
            planes = (1 if p.depthwise else self.kdesc.input_tensor.sizes[1] // desc.group_count
                      if p.staged else prod(self.kdesc.input_tensor.sizes[:2]))
            self.copy_size = planes * prod(self.plan.padded) if needs_copy(self.kdesc) else 0
            return
        if self.algorithm == "direct":
            CpuKernel.__init__(self, key, emit, [(self.acc, rank)] * (4 if has_bias else 3),
                               options)
            return
        par = options.get("parallel")
        forward = desc.direction == ConvolutionDirection.FORWARD
        n_ = desc.input_tensor.sizes[0]
        self.skip_im2col = forward and taps == 1 and all(
            s == 1 for s in desc.strides) and not any(desc.start_padding + desc.end_padding)
        per_image = (desc.input_tensor.sizes[1] * taps * desc.output_tensor.element_count // (
            n_ * desc.output_tensor.sizes[1]) if forward else
            desc.output_tensor.sizes[1] * taps * desc.input_tensor.element_count // (
                n_ * desc.input_tensor.sizes[1])) * self.acc.itemsize
        self.chunk = max(1, min(n_, COLUMNS_BUDGET_BYTES // max(per_image, 1)))
        self._local = threading.local()
        sources = []

        def helper(op, arg_types):
            # Serial unless forced: BLAS runs on every core between these kernels, and two
            # thread pools handing the cores back and forth (OpenBLAS threads yield-spin after
            # each call, libgomp's spin too) cost more than the kernels gain (measured: 3x3
            # 64->64 on 8x56x56, 72 GFLOP/s serial vs 42 parallel, see benchmarks/RESULTS.md).
            key = KernelKey("cpu", desc, op, bool(par))
            src = emit(key)
            sources.append(src)
            return build_variants(key, src, emit, arg_types, automatic=False)

        acc, i64 = self.acc, np.dtype(np.int64)
        bias_arg = [(acc, rank)] if has_bias else []
        if forward:
            if not self.skip_im2col:
                self.im2col = helper("im2col", [(acc, rank), (i64, 0), (acc, 4)])
            if has_bias or desc.fused_activation is not None:
                self.epilogue = helper("epilogue", bias_arg + [(acc, 3)])
            else:
                self.epilogue = None
        else:
            self.col2im = helper("col2im",
                                 [(acc, 4), (i64, 0)] + bias_arg + [(acc, rank)])
        self.source = "\n".join(sources)

    def variant(self) -> str:
        if self.algorithm in ("direct", "blocked"):
            return f"{self.algorithm}, " + super().variant()
        return "gemm"

    # -- running ---------------------------------------------------------------------------
    def _buffer(self, shape):
        buf = getattr(self._local, "cols", None)
        if buf is None or buf.shape != shape:
            buf = self._local.cols = np.empty(shape, self.acc)
        return buf

    def __call__(self, inputs, out):
        run = {"direct": lambda xs, y: self.fn(*xs, y), "gemm": self._gemm,
               "blocked": self._blocked}[self.algorithm]
        run_in_accumulator(self.acc, run, inputs, out)

    def _blocked(self, inputs, y):
        x = np.ascontiguousarray(inputs[0]).reshape(-1)
        wp = pack_filter(self.kdesc, inputs[1], self.plan)
        bias = [inputs[2].reshape(-1)] if len(inputs) > 2 else []
        if self.plan.depthwise or self.plan.staged:  # a padded plane / group per slot
            import numba

            slots = min(numba.get_num_threads(), self.kdesc.input_tensor.sizes[0]
                        * self.kdesc.group_count)
            xp = self._buffer((slots * self.copy_size,)) if self.copy_size else x
            self.fn(x, wp, *bias, y.reshape(-1), xp, slots)
            return
        xp = self._buffer((self.copy_size,)) if self.copy_size else x
        self.fn(x, wp, *bias, y.reshape(-1), xp)

    def _gemm(self, inputs, y):
        x, w = inputs[:2]
        b = inputs[2] if len(inputs) > 2 else None
        d = self.desc
        nd = x.ndim - 2
        g = d.group_count
        x = np.ascontiguousarray(x)
        if d.mode == ConvolutionMode.CONVOLUTION:
            w = w[(Ellipsis,) + (slice(None, None, -1),) * nd]
        w = np.ascontiguousarray(w)
        n_, cin = x.shape[:2]
        cout = y.shape[1]
        taps = prod(w.shape[2:])
        size_in, size_out = prod(x.shape[2:]), prod(y.shape[2:])
        if d.direction == ConvolutionDirection.FORWARD:
            wg = w.reshape(g, cout // g, cin // g * taps)
            yv = y.reshape(n_, g, cout // g, size_out)
            if self.skip_im2col:
                np.matmul(wg, x.reshape(n_, g, cin // g, size_in), out=yv)
            else:
                for n0 in range(0, n_, self.chunk):
                    n1 = min(n_, n0 + self.chunk)
                    cols = self._buffer((n1 - n0, g, cin // g * taps, size_out))
                    self.im2col(x, n0, cols)
                    np.matmul(wg, cols, out=yv[n0:n1])
            if self.epilogue is not None:
                args = (b, y.reshape(n_, cout, size_out)) if b is not None else (
                    y.reshape(n_, cout, size_out),)
                self.epilogue(*args)
        else:
            cig, cog = cin // g, cout // g
            wt = w.reshape(g, cig, cog * taps).transpose(0, 2, 1)
            xg = x.reshape(n_, g, cig, size_in)
            for n0 in range(0, n_, self.chunk):
                n1 = min(n_, n0 + self.chunk)
                cols = self._buffer((n1 - n0, g, cog * taps, size_in))
                np.matmul(wt, xg[n0:n1], out=cols)
                self.col2im(*((cols, n0, b, y) if b is not None else (cols, n0, y)))


register(ConvolutionOperatorDesc, "cpu",
         options={"algorithm": (None, "direct", "gemm", "blocked")})(ConvolutionKernel)
