"""Explicit SIMD for generated CPU kernels: LLVM vector types reached from Numba.

LLVM does not vectorise a register-blocked convolution tile written as scalar code (a seventh of
the speed of explicit vectors: ``benchmarks/HISTORY.md``), so the blocked
convolution kernels hold their accumulators in ``<L x float>`` values: a Numba type of our own
(:class:`FloatVector`) whose data model is the LLVM vector, and five intrinsics over it:

* ``vload(a, i, L)``: ``a[i:i+L]`` of a 1-D C-contiguous float32 array (unaligned load);
* ``vstore(a, i, v)``: ``a[i:i+L] = v``;
* ``vsplat(s, L)``: every lane ``s`` (a float32 scalar);
* ``vbroadcast(a, i, L)``: every lane ``a[i]``, read without the negative-index wrap that
  ``a[i]`` costs (a compare and a select per read, where LLVM cannot prove ``i >= 0``), so the
  read folds into the FMA's broadcast operand;
* ``vfma(a, b, c)``: ``a * b + c`` per lane through ``llvm.fmuladd``, which is one FMA
  instruction where the target has FMA and a multiply and an add elsewhere (so the same code is
  right, and fast, on every CPU Numba targets: x86 with or without FMA, AArch64 NEON);
* ``vscatter(a, i, s, v)``: ``a[i + s * lane] = v[lane]`` for every lane, through
  ``llvm.masked.scatter`` (one instruction with AVX-512, a store per lane elsewhere; one call
  in the IR either way, which keeps compile times of kernels with many strided stores short);
* ``vstore_transposed(a, i, s, (v0, v1, ...))``: ``a[i + s * lane + p] = vp[lane]``, the
  vectors transposed in registers and each lane's row stored at once;
* ``vinterleave(a, b)``: the lanes of two vectors alternately, as one of twice the lanes;
* ``vstore_rows(a, base, p, v, width, pitch)``: the lanes of ``v`` that fall in the first
  ``width`` columns of a plane with rows of ``pitch`` (two masked stores);
* ``vsum(v)``: the lanes' sum, a float32 scalar (halves added pairwise: a fixed order);
* ``vload_every(a, i, s, L)``: ``a[i + lane * s]`` (one load and a shuffle) and
  ``vmax(acc, v)``: max pooling's rule lane by lane;
* ``vadd(a, b)``, ``vzero(L)``, ``vrelu(a)`` (a fused ReLU, lane by lane) and
  ``vclip(a, lo, hi)`` (a fused clip, ReLU6's);
* ``vshuffle(a, b, "p0,p1,...")`` (lanes picked from both, by a literal list) and
  ``vinsert(a, i, s)`` (lane ``i`` set to ``s``).

For data movement, :class:`RawVector` holds lanes of any element type: ``vload_stride(a, i, s,
L)`` reads ``a[i + lane * s]`` (one load and a shuffle) and ``vstore_raw(a, i, v)`` writes them.

``L`` is a compile-time constant (a literal in the generated source). LLVM legalises any lane
count: a 16-lane vector is one register with AVX-512, two with AVX2, four with SSE or NEON;
:func:`vector_lanes` picks the lane count of the host's widest float registers. No bounds are
checked: the generators prove every index in range.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.datamodel import models
from numba.extending import intrinsic, register_model

from .._host import vector_lanes as _host_lanes


class FloatVector(types.Type):
    """``<lanes x float>`` as a Numba type (a value held in registers, never boxed)."""

    def __init__(self, lanes: int):
        self.lanes = lanes
        super().__init__(name=f"float32x{lanes}")


@register_model(FloatVector)
class _FloatVectorModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, _floats(fe_type.lanes))


def _lanes(ty) -> int:
    if not isinstance(ty, types.IntegerLiteral):
        raise TypeError("the lane count must be an integer literal")
    return ty.literal_value


def _vector_pointer(context, builder, arr_ty, arr, index, vector_type):
    """``&a[index]`` as a pointer to ``vector_type`` (the lanes from there on)."""
    ary = context.make_array(arr_ty)(context, builder, arr)
    return builder.bitcast(builder.gep(ary.data, [index]), vector_type.as_pointer())


def _store_codegen(align: int):
    """Code for ``store(a, i, v)``: the vector ``v`` written from ``a[i]`` on."""
    def codegen(context, builder, sig, args):
        ptr = _vector_pointer(context, builder, sig.args[0], args[0], args[1], args[2].type)
        builder.store(args[2], ptr, align=align)
        return context.get_dummy_value()

    return codegen


def _floats(lanes: int):
    return ir.VectorType(ir.FloatType(), lanes)


def _check_array(ty):
    if not (isinstance(ty, types.Array) and ty.ndim == 1 and ty.dtype == types.float32
            and ty.layout == "C"):
        raise TypeError(f"expected a 1-D C-contiguous float32 array, got {ty}")


@intrinsic(prefer_literal=True)
def vload(typingctx, arr, index, lanes):
    _check_array(arr)
    n = _lanes(lanes)

    def codegen(context, builder, sig, args):
        ptr = _vector_pointer(context, builder, sig.args[0], args[0], args[1], _floats(n))
        return builder.load(ptr, align=4)

    return FloatVector(n)(arr, index, lanes), codegen


@intrinsic(prefer_literal=True)
def vstore(typingctx, arr, index, vec):
    _check_array(arr)
    if not isinstance(vec, FloatVector):
        raise TypeError("vstore stores a FloatVector")

    return types.none(arr, index, vec), _store_codegen(align=4)


@intrinsic(prefer_literal=True)
def vsplat(typingctx, scalar, lanes):
    if scalar != types.float32:
        raise TypeError(f"vsplat broadcasts a float32, got {scalar}")
    n = _lanes(lanes)

    def codegen(context, builder, sig, args):
        return _splat(builder, args[0], _floats(n))

    return FloatVector(n)(scalar, lanes), codegen


@intrinsic(prefer_literal=True)
def vbroadcast(typingctx, arr, index, lanes):
    _check_array(arr)
    n = _lanes(lanes)

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        value = builder.load(builder.gep(ary.data, [args[1]]), align=4)
        return _splat(builder, value, _floats(n))

    return FloatVector(n)(arr, index, lanes), codegen


@intrinsic
def prefetch(typingctx, arr, index):
    """A hint that ``a[i]`` is read soon: its cache line fetched into the first-level cache
    (``prefetcht0`` on x86; no fault where ``i`` lies past the array: a prefetch never faults).
    For the streams a hardware prefetcher loses track of (a tile reading one row per input
    channel: dozens of streams at once)."""
    if not (isinstance(arr, types.Array) and arr.ndim == 1 and arr.layout == "C"):
        raise TypeError(f"expected a 1-D C-contiguous array, got {arr}")

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        bytes_ = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fn = builder.module.declare_intrinsic(
            "llvm.prefetch", [bytes_], ir.FunctionType(ir.VoidType(), [bytes_, i32, i32, i32]))
        # (read, the highest locality, the data cache)
        builder.call(fn, [builder.bitcast(builder.gep(ary.data, [args[1]]), bytes_),
                          ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return types.none(arr, index), codegen


@intrinsic
def opaque(typingctx, value):
    """``value`` (an integer) as one LLVM cannot see through: an empty inline assembly (no
    instruction). Offsets taken from distinct opaque bases are not merged by LLVM's common
    subexpression elimination, so the same input value read for two taps is two loads, each
    dead after its use, rather than one value held in a register across both."""
    if not isinstance(value, types.Integer):
        raise TypeError(f"opaque takes an integer, got {value}")

    def codegen(context, builder, sig, args):
        ty = args[0].type
        return builder.asm(ir.FunctionType(ty, [ty]), "", "=r,0", [args[0]], False)

    return value(value), codegen


@intrinsic(prefer_literal=True)
def vzero(typingctx, lanes):
    n = _lanes(lanes)

    def codegen(context, builder, sig, args):
        return ir.Constant(_floats(n), [0.0] * n)

    return FloatVector(n)(lanes), codegen


@intrinsic(prefer_literal=True)
def vfma(typingctx, a, b, c):
    if not (isinstance(a, FloatVector) and a == b == c):
        raise TypeError("vfma takes three FloatVectors of one lane count")

    def codegen(context, builder, sig, args):
        vt = _floats(a.lanes)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vt, [vt, vt, vt]),
                                            f"llvm.fmuladd.v{a.lanes}f32")
        return builder.call(fn, list(args))

    return a(a, b, c), codegen


@intrinsic(prefer_literal=True)
def vadd(typingctx, a, b):
    if not (isinstance(a, FloatVector) and a == b):
        raise TypeError("vadd takes two FloatVectors of one lane count")

    def codegen(context, builder, sig, args):
        return builder.fadd(args[0], args[1])

    return a(a, b), codegen


@intrinsic(prefer_literal=True)
def vsum(typingctx, a):
    """The sum of ``a``'s lanes as a float32: the upper half added to the lower until one lane
    is left (log2 of the lanes shuffles and adds, the same order on every host)."""
    if not (isinstance(a, FloatVector) and a.lanes & (a.lanes - 1) == 0):
        raise TypeError("vsum takes a FloatVector of a power-of-two lane count")

    def codegen(context, builder, sig, args):
        return _halved_sum(builder, args[0], a.lanes)

    return types.float32(a), codegen


def _halved_sum(builder, v, n: int):
    """The sum of the ``n`` lanes of ``v`` (a power of two): the upper half added to the
    lower until one lane is left."""
    i32 = ir.IntType(32)
    while n > 1:
        n //= 2
        lo = builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(i32, n), list(range(n))))
        hi = builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(i32, n),
                                                      list(range(n, 2 * n))))
        v = builder.fadd(lo, hi)
    return builder.extract_element(v, ir.Constant(i32, 0))


#: the lanes of :func:`sum_wide`'s float64 sums, whatever the host's vectors (its order of
#: additions, and so its result, the same on every host)
WIDE_LANES = 8


@intrinsic(prefer_literal=True)
def sum_wide(typingctx, arr, index, count):
    """The float64 sum of the ``count`` (a literal) float32 elements from ``arr[index]``: their
    whole runs of WIDE_LANES widened and added lane by lane into one vector of float64 sums
    (one addition a run: no chain of scalar additions, no conversions one by one), its lanes
    added as :func:`vsum` adds them (the upper half to the lower), then the last elements one
    by one in order. A plane's mean over a 7 x 7 plane: a third of the scalar sum's time."""
    _check_array(arr)
    n = _lanes(count)
    runs = n // WIDE_LANES

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        base = builder.gep(ary.data, [args[1]])
        f64 = ir.DoubleType()
        wide = ir.VectorType(f64, WIDE_LANES)
        total = ir.Constant(f64, 0.0)
        if runs:
            acc = ir.Constant(wide, [0.0] * WIDE_LANES)
            for r in range(runs):
                ptr = builder.bitcast(builder.gep(base, [ir.Constant(ir.IntType(64),
                                                                    r * WIDE_LANES)]),
                                      _floats(WIDE_LANES).as_pointer())
                acc = builder.fadd(acc, builder.fpext(builder.load(ptr, align=4), wide))
            total = _halved_sum(builder, acc, WIDE_LANES)
        for i in range(runs * WIDE_LANES, n):
            value = builder.load(builder.gep(base, [ir.Constant(ir.IntType(64), i)]), align=4)
            total = builder.fadd(total, builder.fpext(value, f64))
        return total

    return types.float64(arr, index, count), codegen


@intrinsic(prefer_literal=True)
def vrelu(typingctx, a):
    """``a`` where ``a > 0``, else 0, per lane (a NaN lane gives 0, as the scalar
    ``where(v > 0.0, v, 0.0)`` does): a fused ReLU on the accumulators before their store."""
    if not isinstance(a, FloatVector):
        raise TypeError("vrelu takes a FloatVector")

    def codegen(context, builder, sig, args):
        zero = ir.Constant(args[0].type, None)
        return builder.select(builder.fcmp_ordered(">", args[0], zero), args[0], zero)

    return a(a), codegen


@intrinsic(prefer_literal=True)
def vclip(typingctx, a, lo, hi):
    """``hi`` where ``a > hi``, else ``lo`` where ``a < lo``, else ``a``, per lane, the bounds
    rounded to float32 (a NaN lane stays NaN): the clip activation (ReLU6) on the accumulators
    before their store. The same bits as the scalar ``where(v > hi, hi, where(v < lo, lo, v))``
    computed in float64 and rounded to float32: rounding to nearest is monotonic, so a float32
    value compares with a bound as with the bound rounded, and where it is replaced by the
    bound the rounded bound is what is stored either way (one beyond float32's range is an
    infinity both ways)."""
    if not (isinstance(a, FloatVector) and isinstance(lo, types.Float)
            and isinstance(hi, types.Float)):
        raise TypeError("vclip takes a FloatVector and two float bounds")

    def codegen(context, builder, sig, args):
        v, bounds = args[0], []
        for value in args[1:]:
            if value.type != ir.FloatType():
                value = builder.fptrunc(value, ir.FloatType())
            bounds.append(_splat(builder, value, v.type))
        low, high = bounds
        v = builder.select(builder.fcmp_ordered("<", v, low), low, v)
        return builder.select(builder.fcmp_ordered(">", args[0], high), high, v)

    return a(a, lo, hi), codegen


@intrinsic(prefer_literal=True)
def vinterleave(typingctx, a, b):
    """``[a[0], b[0], a[1], b[1], ...]``: two vectors of L lanes as one of 2L (one shuffle),
    the two stride phases of an output row made contiguous for one store."""
    if not (isinstance(a, FloatVector) and a == b):
        raise TypeError("vinterleave takes two FloatVectors of one lane count")
    n = a.lanes

    def codegen(context, builder, sig, args):
        picks = [lane // 2 + (n if lane % 2 else 0) for lane in range(2 * n)]
        return builder.shuffle_vector(args[0], args[1],
                                      ir.Constant(ir.VectorType(ir.IntType(32), 2 * n), picks))

    return FloatVector(2 * n)(a, b), codegen


@intrinsic(prefer_literal=True)
def vshuffle(typingctx, a, b, picks):
    """Lane ``i`` is lane ``picks[i]`` of ``a`` followed by ``b`` (LLVM's shufflevector; one
    or two instructions): ``picks`` a string literal of comma-separated lane numbers. The
    direct convolution builds a row's edge vectors with it: an in-range load with the lanes
    in the padding replaced by mapped columns or zeros."""
    if not (isinstance(a, FloatVector) and a == b and isinstance(picks, types.StringLiteral)):
        raise TypeError("vshuffle takes two FloatVectors of one lane count and a string "
                        "literal of lane numbers")
    lanes = [int(v) for v in picks.literal_value.split(",")]
    if len(lanes) != a.lanes or not all(0 <= v < 2 * a.lanes for v in lanes):
        raise TypeError(f"vshuffle: {picks.literal_value!r} is not {a.lanes} lanes of two "
                        f"vectors of {a.lanes}")

    def codegen(context, builder, sig, args):
        return builder.shuffle_vector(args[0], args[1],
                                      ir.Constant(ir.VectorType(ir.IntType(32), a.lanes), lanes))

    return a(a, b, picks), codegen


@intrinsic(prefer_literal=True)
def vinsert(typingctx, a, lane, scalar):
    """``a`` with lane ``lane`` (an integer literal) set to the float32 ``scalar``."""
    if not (isinstance(a, FloatVector) and scalar == types.float32):
        raise TypeError("vinsert sets a float32 lane of a FloatVector")
    at = _lanes(lane)
    if not 0 <= at < a.lanes:
        raise TypeError(f"vinsert: lane {at} of {a.lanes}")

    def codegen(context, builder, sig, args):
        return builder.insert_element(args[0], args[2], ir.Constant(ir.IntType(32), at))

    return a(a, lane, scalar), codegen


@intrinsic
def vstore_rows(typingctx, arr, base, p, vec, width, pitch):
    """Lanes of ``vec`` that hold elements ``p, p + 1, ...`` of a plane laid out with rows of
    ``pitch`` elements, of which the first ``width`` are kept (``pitch >= lanes``): each kept
    lane ``p + l`` (row ``r``, column ``c < width``) is written to ``a[base + r * width + c]``,
    the others not at all. Two masked stores: the lanes in the row of ``p`` and those in the
    next (one instruction each with AVX-512, per-lane stores where the target has none)."""
    _check_array(arr)
    if not (isinstance(vec, FloatVector) and all(isinstance(t, types.Integer)
                                                  for t in (base, p, width, pitch))):
        raise TypeError("vstore_rows takes an array, a base, a position, a FloatVector, "
                        "a width and a pitch")
    n = vec.lanes

    def codegen(context, builder, sig, args):
        i64 = ir.IntType(64)
        base_, p_, width_, pitch_ = (context.cast(builder, a, t, types.int64) for a, t in
                                     zip((args[1], args[2], args[4], args[5]),
                                         (sig.args[1], sig.args[2], sig.args[4], sig.args[5])))
        row = builder.sdiv(p_, pitch_)
        col = builder.sub(p_, builder.mul(row, pitch_))
        first = builder.add(base_, builder.add(builder.mul(row, width_), col))
        vi = ir.VectorType(i64, n)
        lane = ir.Constant(vi, list(range(n)))
        # row of p: lanes l < width - col; the next row: pitch - col <= l < pitch - col + width
        in_first = builder.icmp_signed("<", lane, _splat(builder, builder.sub(width_, col), vi))
        start = builder.sub(pitch_, col)
        in_next = builder.and_(
            builder.icmp_signed(">=", lane, _splat(builder, start, vi)),
            builder.icmp_signed("<", lane, _splat(builder, builder.add(start, width_), vi)))
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        for at, mask in ((first, in_first),
                         (builder.sub(first, builder.sub(pitch_, width_)), in_next)):
            _masked_store(builder, args[3], ary.data, at, mask)
        return context.get_dummy_value()

    return types.none(arr, base, p, vec, width, pitch), codegen


def _masked_store(builder, vec, data, at, mask) -> None:
    """``llvm.masked.store`` of float vector ``vec`` at element ``at`` of ``data`` (an array's
    data pointer), the lanes where ``mask`` (an i1 vector) is set."""
    vt = vec.type
    fnty = ir.FunctionType(ir.VoidType(), [vt, vt.as_pointer(), ir.IntType(32), mask.type])
    fn = cgutils.get_or_insert_function(builder.module, fnty,
                                        f"llvm.masked.store.v{vt.count}f32.p0")
    ptr = builder.bitcast(builder.gep(data, [at]), vt.as_pointer())
    builder.call(fn, [vec, ptr, ir.Constant(ir.IntType(32), 4), mask])


def masked_stores_native() -> bool:
    """Whether this host stores a masked vector in one cheap instruction (AVX-512's mask
    registers: the hosts whose widest vectors have 16 lanes, :func:`vector_lanes`). Without
    them (AVX2's ``vmaskmovps`` is microcoded on AMD, NEON has none) a prefix of a vector is
    stored as plain stores of power-of-two pieces (:func:`_store_prefix`): an 8-lane tile's 32
    masked row stores took ~500 cycles a tile on an AVX2 AMD EPYC."""
    return _host_lanes() >= 16


def _plain_store(builder, vec, data, at) -> None:
    """``vec`` stored whole at element ``at`` of ``data`` (unaligned)."""
    builder.store(vec, builder.bitcast(builder.gep(data, [at]), vec.type.as_pointer()), align=4)


def _store_prefix(builder, vec, data, at, count: int) -> None:
    """Lanes ``0 .. count-1`` of ``vec`` stored from element ``at`` of ``data`` as plain stores
    of power-of-two pieces, largest first (7 lanes: 4, 2 and 1), nothing past them written."""
    i32, i64 = ir.IntType(32), ir.IntType(64)
    first = 0
    while first < count:
        size = 1 << ((count - first).bit_length() - 1)
        if size == 1:
            piece = builder.extract_element(vec, ir.Constant(i32, first))
            builder.store(piece, builder.gep(data, [builder.add(at, ir.Constant(i64, first))]),
                          align=4)
        else:
            picks = ir.Constant(ir.VectorType(i32, size), list(range(first, first + size)))
            piece = builder.shuffle_vector(vec, ir.Constant(vec.type, ir.Undefined), picks)
            _plain_store(builder, piece, data, builder.add(at, ir.Constant(i64, first)))
        first += size


def _splat(builder, value, vt):
    one = builder.insert_element(ir.Constant(vt, ir.Undefined), value,
                                 ir.Constant(ir.IntType(32), 0))
    return builder.shuffle_vector(one, ir.Constant(vt, ir.Undefined),
                                  ir.Constant(ir.VectorType(ir.IntType(32), vt.count),
                                              [0] * vt.count))


@intrinsic
def vscatter(typingctx, arr, index, stride, vec):
    _check_array(arr)
    if not (isinstance(vec, FloatVector) and isinstance(index, types.Integer)
            and isinstance(stride, types.Integer)):
        raise TypeError("vscatter takes an array, an index, a stride and a FloatVector")
    n = vec.lanes

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        i64 = ir.IntType(64)
        vi = ir.VectorType(i64, n)
        first = builder.ptrtoint(builder.gep(ary.data, [args[1]]), i64)
        step = builder.mul(context.cast(builder, args[2], sig.args[2], types.int64),
                           ir.Constant(i64, 4))
        offsets = builder.mul(_splat(builder, step, vi), ir.Constant(vi, list(range(n))))
        ptrs = builder.inttoptr(builder.add(_splat(builder, first, vi), offsets),
                                ir.VectorType(ir.PointerType(ir.FloatType()), n))
        mask = ir.Constant(ir.VectorType(ir.IntType(1), n), [1] * n)
        fnty = ir.FunctionType(ir.VoidType(), [args[3].type, ptrs.type, ir.IntType(32), mask.type])
        fn = cgutils.get_or_insert_function(builder.module, fnty,
                                            f"llvm.masked.scatter.v{n}f32.v{n}p0")
        builder.call(fn, [args[3], ptrs, ir.Constant(ir.IntType(32), 4), mask])
        return context.get_dummy_value()

    return types.none(arr, index, stride, vec), codegen


@intrinsic
def vstore_transposed(typingctx, arr, index, stride, vecs):
    """``a[i + s * lane + p] = vecs[p][lane]`` for every lane and every ``p < P``: a tuple of
    ``P <= L`` vectors of ``L`` lanes (one pixel each, one output channel a lane) written as
    ``L`` rows of ``P`` consecutive elements ``s`` apart (one row a channel's plane). The
    vectors are transposed in registers (``log2 L`` rounds of pairwise interleaving, the
    vectors ``P`` to ``L`` undefined: L log2 L shuffles at most) and each row is one store,
    masked to its ``P`` lanes where ``P < L``: for 14 pixels of 16 channels, 64 shuffles and
    16 stores where scattering each pixel's vector writes 224 separate elements."""
    _check_array(arr)
    if not (isinstance(vecs, types.UniTuple) and isinstance(vecs.dtype, FloatVector)
            and isinstance(index, types.Integer) and isinstance(stride, types.Integer)):
        raise TypeError("vstore_transposed takes an array, an index, a stride and a tuple of "
                        "FloatVectors")
    n, count = vecs.dtype.lanes, vecs.count
    if n & (n - 1) or not 0 < count <= n:
        raise TypeError(f"vstore_transposed: {count} vectors of {n} lanes (at most one a lane, "
                        "a power-of-two lane count)")

    def codegen(context, builder, sig, args):
        vt = _floats(n)
        i32 = ir.IntType(32)
        rows = [builder.extract_value(args[3], p) for p in range(count)]
        rows += [ir.Constant(vt, ir.Undefined)] * (n - count)
        half = n // 2
        lo = ir.Constant(ir.VectorType(i32, n), [x for k in range(half) for x in (k, n + k)])
        hi = ir.Constant(ir.VectorType(i32, n),
                         [x for k in range(half, n) for x in (k, n + k)])
        for _ in range(n.bit_length() - 1):  # perfect shuffles: log2(n) rounds transpose
            new = [None] * n
            for i in range(half):
                new[2 * i] = builder.shuffle_vector(rows[i], rows[i + half], lo)
                new[2 * i + 1] = builder.shuffle_vector(rows[i], rows[i + half], hi)
            rows = new
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        index_ = context.cast(builder, args[1], sig.args[1], types.int64)
        stride_ = context.cast(builder, args[2], sig.args[2], types.int64)
        mask = ir.Constant(ir.VectorType(ir.IntType(1), n), [1] * count + [0] * (n - count))
        for c in range(n):
            at = builder.add(index_, builder.mul(stride_, ir.Constant(ir.IntType(64), c)))
            if count == n:
                _plain_store(builder, rows[c], ary.data, at)
            elif masked_stores_native():
                _masked_store(builder, rows[c], ary.data, at, mask)
            else:
                _store_prefix(builder, rows[c], ary.data, at, count)
        return context.get_dummy_value()

    return types.none(arr, index, stride, vecs), codegen


# -- data movement: vectors of any element type ---------------------------------------------

class RawVector(types.Type):
    """``<lanes x T>`` for an array element type ``T``: moved, never computed with."""

    def __init__(self, dtype, lanes: int):
        self.dtype, self.lanes = dtype, lanes
        super().__init__(name=f"raw_{dtype}x{lanes}")


@register_model(RawVector)
class _RawVectorModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        element = dmm.lookup(fe_type.dtype).get_value_type()
        super().__init__(dmm, fe_type, ir.VectorType(element, fe_type.lanes))


def _check_row(ty):
    if not (isinstance(ty, types.Array) and ty.ndim == 1 and ty.layout == "C"
            and isinstance(ty.dtype, (types.Integer, types.Float))):
        raise TypeError(f"expected a 1-D C-contiguous numeric array, got {ty}")


@intrinsic(prefer_literal=True)
def vload_every(typingctx, arr, index, stride, lanes):
    """``[a[i + lane * s] for lane in range(L)]`` of a float32 array as a FloatVector (``s`` a
    positive literal), for arithmetic (max pooling's strided windows): one load of ``L * s``
    elements from ``a[i]`` (whole vectors: ``s - 1`` elements past the last lane are read, the
    caller keeps them inside the array) and one shuffle."""
    _check_array(arr)
    n, st = _lanes(lanes), _lanes(stride)
    if st <= 0:
        raise TypeError("the stride must be positive")
    span = n * st

    def codegen(context, builder, sig, args):
        ptr = _vector_pointer(context, builder, sig.args[0], args[0], args[1], _floats(span))
        block = builder.load(ptr, align=1)
        if st == 1:
            return block
        return builder.shuffle_vector(block, ir.Constant(block.type, ir.Undefined),
                                      ir.Constant(ir.VectorType(ir.IntType(32), n),
                                                  [lane * st for lane in range(n)]))

    return FloatVector(n)(arr, index, stride, lanes), codegen


@intrinsic(prefer_literal=True)
def vmax(typingctx, acc, v):
    """Per lane ``v`` where ``v > acc`` or ``v`` is NaN, else ``acc``: max pooling's scalar
    rule lane by lane (the earlier of equal values stays, a NaN wins and stays), so taps
    taken in window order give the scalar loop's bits."""
    if not (isinstance(acc, FloatVector) and acc == v):
        raise TypeError("vmax takes two FloatVectors of one lane count")

    def codegen(context, builder, sig, args):
        a, b = args
        take = builder.or_(builder.fcmp_ordered(">", b, a), builder.fcmp_unordered("uno", b, b))
        return builder.select(take, b, a)

    return acc(acc, v), codegen


@intrinsic(prefer_literal=True)
def vload_stride(typingctx, arr, index, stride, lanes):
    """``[a[i + lane * s] for lane in range(L)]`` (``s`` a non-zero literal) as one load of the
    ``(L - 1) * |s| + 1`` elements the lanes span and one shuffle that picks them: a strided
    read at vector speed, touching no element outside the span."""
    _check_row(arr)
    n, st = _lanes(lanes), _lanes(stride)
    if st == 0:
        raise TypeError("the stride must be non-zero")
    span = (n - 1) * abs(st) + 1

    def codegen(context, builder, sig, args):
        first = args[1] if st > 0 else builder.add(
            args[1], context.get_constant(sig.args[1], (n - 1) * st))
        element = context.get_value_type(sig.args[0].dtype)
        ptr = _vector_pointer(context, builder, sig.args[0], args[0], first,
                              ir.VectorType(element, span))
        block = builder.load(ptr, align=1)
        picks = [lane * st if st > 0 else span - 1 + lane * st for lane in range(n)]
        return builder.shuffle_vector(block, ir.Constant(block.type, ir.Undefined),
                                      ir.Constant(ir.VectorType(ir.IntType(32), n), picks))

    return RawVector(arr.dtype, n)(arr, index, stride, lanes), codegen


@intrinsic
def vstore_raw(typingctx, arr, index, vec):
    """``a[i:i+L] = v`` for a RawVector of the array's element type."""
    _check_row(arr)
    if not (isinstance(vec, RawVector) and vec.dtype == arr.dtype):
        raise TypeError("vstore_raw stores a RawVector of the array's element type")

    return types.none(arr, index, vec), _store_codegen(align=1)


def vector_lanes() -> int:
    """float32 lanes of the host's widest vector registers (:func:`dml_numba._host.vector_lanes`:
    a fact of the host, found below the backends)."""
    return _host_lanes()
