"""The explicit-SIMD intrinsics the blocked convolution kernels are written in, each against
NumPy, at the lane counts the planner picks (4: SSE/NEON, 8: AVX2, 16: AVX-512; LLVM
legalises any of them on any host)."""
import numba
import numpy as np
import pytest

from dml_numba.cpu import _simd
from dml_numba.cpu._simd import (
    opaque,
    sum_wide,
    vadd,
    vbroadcast,
    vfma,
    vinterleave,
    vload,
    vload_stride,
    vscatter,
    vsplat,
    vstore,
    vstore_raw,
    vstore_rows,
    vstore_transposed,
    vzero,
)


def _kernels(lanes):
    @numba.njit
    def arithmetic(a, b, c, s, out):
        # out[0:L] = a * b + c, out[L:2L] = a + s, out[2L:3L] = 0, out[3L:5L] = a, b interleaved
        va, vb = vload(a, 1, lanes), vload(b, 0, lanes)
        vstore(out, 0, vfma(va, vb, vload(c, 0, lanes)))
        vstore(out, lanes, vadd(va, vsplat(s, lanes)))
        vstore(out, 2 * lanes, vzero(lanes))
        vstore(out, 3 * lanes, vinterleave(va, vb))

    @numba.njit
    def broadcast(a, i, out):
        vstore(out, 0, vbroadcast(a, i, lanes))

    @numba.njit
    def strided(a, out, i):
        vscatter(out, i, 3, vload(a, 0, lanes))

    @numba.njit
    def gathered(a, out):
        vstore_raw(out, 0, vload_stride(a, 2, 3, lanes))
        vstore_raw(out, lanes, vload_stride(a, a.size - 1, -2, lanes))

    return arithmetic, strided, gathered, broadcast


@pytest.mark.parametrize("lanes", [4, 8, 16])
def test_intrinsics_agree_with_numpy(lanes):
    arithmetic, strided, gathered, broadcast = _kernels(lanes)
    rng = np.random.default_rng(lanes)
    a, b, c = (rng.standard_normal(lanes + 1).astype(np.float32) for _ in range(3))
    out = np.full(5 * lanes + 1, np.nan, np.float32)
    arithmetic(a, b, c, np.float32(0.5), out)
    va, vb = a[1:], b[:lanes]
    np.testing.assert_allclose(out[:lanes], va * vb + c[:lanes], rtol=1e-6)
    np.testing.assert_array_equal(out[lanes:2 * lanes], va + np.float32(0.5))
    np.testing.assert_array_equal(out[2 * lanes:3 * lanes], 0)
    np.testing.assert_array_equal(out[3 * lanes:5 * lanes:2], va)
    np.testing.assert_array_equal(out[3 * lanes + 1:5 * lanes:2], vb)
    assert np.isnan(out[-1])  # nothing written past the vectors

    out = np.zeros(3 * lanes + 2, np.float32)
    strided(a, out, 2)
    expect = np.zeros_like(out)
    expect[2:2 + 3 * lanes:3] = a[:lanes]
    np.testing.assert_array_equal(out, expect)

    src = np.arange(3 * lanes + 3, dtype=np.float32)
    got = np.zeros(2 * lanes, np.float32)
    gathered(src, got)
    np.testing.assert_array_equal(got[:lanes], src[2:2 + 3 * lanes:3])
    np.testing.assert_array_equal(got[lanes:], src[::-1][:2 * lanes:2])

    for i in (0, 3, src.size - 1):  # every lane a[i], the last element included
        got = np.full(lanes + 1, np.nan, np.float32)
        broadcast(src, i, got)
        np.testing.assert_array_equal(got[:lanes], src[i])
        assert np.isnan(got[-1])


def test_vbroadcast_reads_without_the_negative_index_wrap():
    """``vbroadcast(a, i, L)`` is one load of ``a[i]`` and a splat: none of the compare and select
    that ``vsplat(a[i], L)`` costs where the index's sign is unknown (the select picks ``i +
    len(a)`` for a negative ``i``; in a tile's inner loop it was one extra compare, select and
    address per broadcast weight)."""
    def ir_of(fn):
        fn(np.zeros(8, np.float32), 1, np.zeros(8, np.float32))
        return next(iter(fn.inspect_llvm().values()))

    @numba.njit
    def plain(a, i, out):
        vstore(out, 0, vsplat(a[i], 8))

    @numba.njit
    def broadcast(a, i, out):
        vstore(out, 0, vbroadcast(a, i, 8))

    assert "icmp slt" in ir_of(plain)  # the wrap's sign test (the check that this can fail)
    assert "icmp slt" not in ir_of(broadcast)


@numba.njit
def _store_rows(src, out, base, p, width, pitch):
    vstore_rows(out, base, p, vload(src, p, 8), width, pitch)


@pytest.mark.parametrize("width,pitch", [(5, 8), (7, 9), (1, 12), (12, 12)])
def test_vstore_rows_writes_the_kept_columns_only(width, pitch):
    """Every start position of an 8-lane vector over a plane of 4 rows of ``pitch`` elements:
    the lanes in the first ``width`` columns land at ``base + row * width + column``, in the
    row of the start and the next; nothing else is written."""
    rows = 4
    src = np.arange(rows * pitch, dtype=np.float32)
    for p in range(rows * pitch - 8 + 1):
        out = np.full(3 + rows * width + 3, -1, np.float32)
        _store_rows(src, out, 3, p, width, pitch)
        expect = np.full_like(out, -1)
        for q in range(p, p + 8):
            r, c = divmod(q, pitch)
            if c < width:
                expect[3 + r * width + c] = src[q]
        np.testing.assert_array_equal(out, expect, err_msg=f"start {p}")


def _transposed_store(lanes, count):
    """A kernel storing ``count`` vectors of ``lanes`` loaded from ``src`` (vector ``p`` from
    ``src[p * lanes:]``) with vstore_transposed (the tuple's length is fixed in the source)."""
    vecs = ", ".join(f"vload(src, {p * lanes}, {lanes})" for p in range(count))
    scope = {"numba": numba, "vload": vload, "vstore_transposed": vstore_transposed}
    exec(f"@numba.njit\ndef store(src, out, i, stride):\n"
         f"    vstore_transposed(out, i, stride, ({vecs},))\n", scope)
    return scope["store"]


@pytest.mark.parametrize("native", [True, False], ids=["masked", "pieces"])
@pytest.mark.parametrize("lanes,count", [(4, 1), (4, 3), (4, 4), (8, 2), (8, 3), (8, 5),
                                         (8, 7), (8, 8), (16, 1), (16, 14), (16, 16)])
def test_vstore_transposed_writes_each_lane_as_a_row(lanes, count, native, monkeypatch):
    """Vector ``p``'s lane ``c`` lands at ``i + c * stride + p``: ``lanes`` rows of ``count``
    elements (where ``count < lanes``, one masked store a row on a host with native masked
    stores, else plain stores of power-of-two pieces: both compiled here, whatever the host);
    nothing between the rows is written."""
    monkeypatch.setattr(_simd, "masked_stores_native", lambda: native)
    src = np.arange(lanes * count, dtype=np.float32) + 1
    stride = count + 3
    out = np.full(5 + lanes * stride + 2 * lanes, -1, np.float32)
    _transposed_store(lanes, count)(src, out, 5, stride)
    expect = np.full_like(out, -1)
    for p in range(count):
        for c in range(lanes):
            expect[5 + c * stride + p] = src[p * lanes + c]
    np.testing.assert_array_equal(out, expect)


def test_the_pieces_path_has_no_masked_store(monkeypatch):
    """Without native masked stores the prefix is plain stores: no ``llvm.masked.store`` in
    the IR (AVX2's ``vmaskmovps`` cost ~500 cycles a channels tile on an AMD EPYC)."""
    monkeypatch.setattr(_simd, "masked_stores_native", lambda: False)
    store = _transposed_store(8, 3)
    store(np.zeros(24, np.float32), np.zeros(64, np.float32), 0, 6)
    ir = "".join(store.inspect_llvm().values())
    assert "llvm.masked.store" not in ir and "store <2 x float>" in ir
    monkeypatch.setattr(_simd, "masked_stores_native", lambda: True)
    store = _transposed_store(8, 3)
    store(np.zeros(24, np.float32), np.zeros(64, np.float32), 0, 6)
    assert "llvm.masked.store" in "".join(store.inspect_llvm().values())


def test_opaque_is_its_value_and_keeps_two_reads_apart():
    """``opaque(i)`` is ``i``; the same element broadcast twice through distinct opaque bases
    stays two loads in the optimised IR, where plain offsets merge into one."""
    @numba.njit
    def through_opaque(a, i, out):
        vstore(out, 0, vadd(vbroadcast(a, opaque(i) + 1, 4), vbroadcast(a, opaque(i + 1), 4)))

    @numba.njit
    def plain(a, i, out):
        vstore(out, 0, vadd(vbroadcast(a, i + 1, 4), vbroadcast(a, i + 1, 4)))

    a = np.arange(8, dtype=np.float32)

    def loads(fn):
        out = np.zeros(4, np.float32)
        fn(a, 2, out)
        assert (out == 6.0).all()
        return "".join(fn.inspect_llvm().values()).count("= load float")

    assert loads(through_opaque) == 2 and loads(plain) == 1


def test_vstore_transposed_refuses_more_vectors_than_lanes():
    with pytest.raises(Exception, match="at most one a lane"):
        _transposed_store(4, 5)(np.zeros(20, np.float32), np.zeros(64, np.float32), 0, 8)


def test_mismatched_vectors_are_refused_at_compile_time():
    @numba.njit
    def bad(a):
        return vinterleave(vload(a, 0, 4), vload(a, 0, 8))

    with pytest.raises(TypeError, match="vinterleave takes two FloatVectors of one lane count"):
        bad(np.zeros(8, np.float32))


def test_the_vector_types_are_llvm_vectors_of_their_lanes():
    """Numba's data models of the two vector types: the LLVM vector of the element type and lane
    count each names (the registers the intrinsics load, shuffle and store)."""
    from llvmlite import ir
    from numba.core import types
    from numba.core.datamodel import default_manager

    from dml_numba.cpu._simd import FloatVector, RawVector

    for lanes in (4, 8, 16):
        model = default_manager.lookup(FloatVector(lanes))
        assert model.fe_type == FloatVector(lanes)
        assert model.get_value_type() == ir.VectorType(ir.FloatType(), lanes)
    for dtype, element in ((types.int16, ir.IntType(16)), (types.float64, ir.DoubleType()),
                           (types.uint8, ir.IntType(8))):
        model = default_manager.lookup(RawVector(dtype, 8))
        assert model.fe_type == RawVector(dtype, 8)
        assert model.get_value_type() == ir.VectorType(element, 8)


def _refused(fn, *args, match):
    with pytest.raises(TypeError, match=match):
        numba.njit(fn)(*args)


def test_the_intrinsics_refuse_what_they_cannot_read_as_a_row():
    """Each intrinsic refuses at compile time, by name, an array it cannot address as one
    contiguous row (2-D, strided, another element type) and a lane count that is not a
    literal."""
    floats = r"\bexpected a 1-D C-contiguous float32 array, got "
    row = r"\bexpected a 1-D C-contiguous numeric array, got "
    f32 = np.zeros(32, np.float32)
    for bad in (np.zeros((4, 8), np.float32), f32[::2], np.zeros(32, np.float64)):
        _refused(lambda a: vload(a, 0, 4), bad, match=floats)
        _refused(lambda a: vstore(a, 0, vzero(4)), bad, match=floats)
        _refused(lambda a: vbroadcast(a, 0, 4), bad, match=floats)
    for bad in (np.zeros((4, 8), np.int16), f32[::2], np.zeros(32, np.bool_)):
        _refused(lambda a: vload_stride(a, 0, 2, 4), bad, match=row)
    _refused(lambda a, n: vload(a, 0, n), f32, 4,
             match=r"\bthe lane count must be an integer literal\b")
    _refused(lambda a, n: vbroadcast(a, 0, n), f32, 4,
             match=r"\bthe lane count must be an integer literal\b")


def test_prefetch_is_a_hint_that_never_faults():
    """``prefetch(a, i)`` compiles to LLVM's prefetch (a read into the first-level cache),
    changes nothing, and does not fault at an index past the array's end (the last tiles of a
    row prefetch beyond the input); a 2-D array is refused at compile time."""
    @numba.njit
    def walk(a, ahead):
        s = 0.0
        for i in range(a.size):
            _simd.prefetch(a, i + ahead)
            s += a[i]
        return s

    a = np.arange(64, dtype=np.float32)
    before = a.copy()
    for ahead in (0, 16, 1 << 20):
        assert walk(a, ahead) == before.sum()
    assert (a == before).all()
    assert "@llvm.prefetch" in "".join(walk.inspect_llvm().values())
    _refused(lambda a: _simd.prefetch(a, 0), np.zeros((2, 2), np.float32),
             match="expected a 1-D C-contiguous array")


def _sum_wide_in_its_order(x, offset, count):
    """sum_wide's order, written out in NumPy float64: the runs of WIDE_LANES added lane by
    lane, the lanes halved and added, then the rest one by one."""
    lanes = _simd.WIDE_LANES
    v = x[offset:offset + count].astype(np.float64)
    runs = count // lanes
    total = 0.0
    if runs:
        acc = np.zeros(lanes)
        for r in range(runs):
            acc = acc + v[r * lanes:(r + 1) * lanes]
        while acc.size > 1:
            acc = acc[:acc.size // 2] + acc[acc.size // 2:]
        total = acc[0]
    for e in v[runs * lanes:]:
        total += e
    return total


@pytest.mark.parametrize("count", [1, 7, 8, 9, 49, 64, 196, 513])
def test_sum_wide_sums_in_float64_in_its_fixed_order(count):
    """The float64 sum of ``count`` float32 elements from any offset: exactly the order its
    docstring gives (equal to the last bit), and within float64's rounding of the exact sum;
    values float32 cannot sum exactly (1e8 + 1 - 1e8) are kept."""
    s = numba.njit(lambda a, o: sum_wide(a, o, count))
    rng = np.random.default_rng(count)
    x = (rng.standard_normal(count + 3) * 1000).astype(np.float32)
    for offset in (0, 3):
        got = s(x, offset)
        assert got == _sum_wide_in_its_order(x, offset, count)
        exact = sum(map(float, x[offset:offset + count]))  # float64 sums of float32 values
        assert abs(got - exact) <= 1e-12 * np.abs(x).sum()
    big = np.zeros(count + 3, np.float32)
    big[0], big[count - 1] = 1e8, 1.0
    if count > 1:
        assert s(big, 0) == 1e8 + 1.0  # float32 would lose the 1
