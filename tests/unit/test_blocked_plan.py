"""The blocked convolution kernels' planner (``dml_numba/cpu/convolution/blocked/plan.py``) and
the choice between its tiles: which tile a descriptor gets on a host (pixels or channels,
rows, vectors, flattened, staged, phases), worked out by hand; nothing here compiles. The
kernels each plan names are checked against brute force in tests/ops/test_convolution_blocked.py."""
import numpy as np
import pytest

from dml_numba.cpu import convolution as cpu_conv
from dml_numba.cpu._emit import Host
from dml_numba.cpu.convolution.blocked import plan as planner
from dml_numba.ops.convolution import geometry
from tests.cases import conv_case
from tests.ops.test_convolution_blocked import DEPTHWISE, SHAPES, TRANSPOSED


def test_channels_planner():
    """Pixels fill the registers left, the count that computes the fewest pixels in the upper
    half of the range (ties to the larger), a tile of fewer than FMA_CHAINS accumulators
    counted as that many: 56-pixel rows of 3 taps take 8 pixels with two vectors of 16
    channels (12 fit, 8 divides 56) and 28 with one; 28-pixel rows at stride 2, 7 with two.
    With 16 registers the tile is streamed (:func:`test_streamed_tiles_on_sixteen_registers`).
    Lanes halve until they divide a group's channels; None for BACKWARD, float64, and a
    group's channels that 4 does not divide."""
    def case(cout, hw=56, s=1, k=3, g=1, cin=8, direction=0, dtype=np.float32):
        ws = (cout, cin // g, k, k) if direction == 0 else (cin, cout // g, k, k)
        return conv_case((1, cin, hw, hw), ws, (s, s), (1, 1), (1, 1), (1, 1), g, direction,
                         dtype=dtype)[0]

    def plan(desc, host=None, **kw):
        p = planner.channel_plan(desc, host or Host(16, 2), **kw)
        return p and (p.lanes, p.vectors, p.pixels)

    assert plan(case(64)) == (16, 2, 8)
    assert plan(case(64), vectors=1) == (16, 1, 28)
    assert plan(case(128, s=2)) == (16, 2, 7)
    assert plan(case(48)) == (16, 1, 28)        # 48 = 3 vectors: no pairs
    assert plan(case(24, g=2, cin=8)) == (4, 1, 28)  # 12 a group: 4 lanes
    assert planner.channel_plan(case(64), Host(8, 2)).streamed
    assert not planner.channel_plan(case(64), Host(16, 2)).streamed
    assert plan(case(8, hw=2)) == (8, 1, 2)  # rows of 2 pixels
    assert plan(case(6)) is None and plan(case(64, direction=1)) is None
    assert plan(case(64, dtype=np.float64)) is None
    assert plan(case(48), vectors=2) is None  # 48 channels are no pairs of 16
    # the range and the waste: 25-pixel rows take 9 (27 computed) of 6-12, not 5 (below half
    # the room); 13-pixel rows 7 (14), not 13 (more than the room); one pixel, one
    assert plan(case(32, hw=25)) == (16, 2, 9) and plan(case(32, hw=13)) == (16, 2, 7)
    assert plan(case(32, hw=1)) == (16, 2, 1)
    # two vectors while a row's weights leave room for 4 pixels: 12 taps on 32 registers
    # (31 - 24 = 7) take one
    assert plan(case(32, k=12, hw=20)) == (16, 1, 11)


def test_streamed_tiles_on_sixteen_registers():
    """With 16 registers (AVX2) the channels tile holds per tap the smaller of its weight
    vectors and input values (``vectors x pixels + min + 1`` registers): 12 sums where every
    tap's weights held leave room for 8. Chosen by positions computed x the cost a position:
    56-pixel rows 4 x 3 (57 computed), 14-pixel rows 4 x 3 (15; not 4 x 2, whose weight loads
    cost more, nor 2 x 4's 16), 7-pixel rows 2 x 4 (8 computed, 9 for 4 x 3), 96 channels 3 x
    4, 16 channels 2 x 6; one block of 8 channels 1 x 14; one pixel only on rows of one. The
    kernel's taps (``k=7``) do not change it: no tap's weights are held beside another's."""
    def case(cout, hw=56, k=3):
        return conv_case((1, 8, hw, hw), (cout, 8, k, k), (1, 1), (1, 1), (k // 2,) * 2,
                         (k // 2,) * 2, 1, 0)[0]

    def plan(desc, **kw):
        p = planner.channel_plan(desc, Host(8, 2), **kw)
        assert p.streamed and p.mb == p.vectors * p.lanes
        return p.vectors, p.pixels

    assert plan(case(64)) == (4, 3) and plan(case(64, k=7)) == (4, 3)
    assert plan(case(256, hw=14)) == (4, 3)
    assert plan(case(512, hw=7)) == (2, 4)
    assert plan(case(96)) == (3, 4) and plan(case(16)) == (2, 6) and plan(case(8)) == (1, 14)
    assert plan(case(64), vectors=2) == (2, 6) and plan(case(64), vectors=8) == (8, 1)
    for blocks, width in [(b, w) for b in (1, 2, 3, 4, 6, 8, 12, 20, 64) for w in (1, 7, 14, 56)]:
        v, p = planner.streamed_tile(blocks, width, 16)
        assert blocks % v == 0 and v * p + min(v, p) + 1 <= 16 and p <= width
        assert p > 1 or width == 1  # one pixel: a weight vector a multiply-add
    assert planner.streamed_tile(6, 56, 16, vectors=4) is None


def test_the_tile_is_the_cost_models_pick_for_the_host_given():
    """``blocked_plan`` plans both tiles for the host passed (not this machine) and takes the
    one the constants given price lower: a transposed store priced out, the pixels tile."""
    import dataclasses

    from dml_numba.cpu.convolution.cost import COSTS

    dense = conv_case((8, 64, 56, 56), (64, 64, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1)[0]
    for host in (Host(16, 2), Host(8, 2), Host(4, 1)):
        plan = cpu_conv.blocked_plan(dense, host)
        assert plan.lanes == host.lanes and plan.pixels
        dear = dataclasses.replace(COSTS, transpose=1e6)
        assert cpu_conv.blocked_plan(dense, host, dear) == planner.block_plan(dense, host)


def test_the_dense_layers_static_tile_is_the_channels_tile():
    """The cost model's pick between the planner's two tiles for the benchmark set's dense and
    strided 3x3 layers on a 16-lane, two-thread host: the channels tile (measured on the Intel
    Xeon: 1.03-1.18x PyTorch against 0.88-0.94x for the pixels tile)."""
    dense = conv_case((8, 64, 56, 56), (64, 64, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1)[0]
    strided = conv_case((8, 64, 56, 56), (128, 64, 3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 1)[0]
    for desc in (dense, strided):
        assert cpu_conv.blocked_plan(desc, Host(16, 2)).pixels


def test_one_tap_on_sixteen_registers_takes_the_pixels_tile_where_it_wastes_little():
    """A one-tap convolution on a host of 16 vector registers (AVX2) plans no channels tile
    where the pixels tile runs at the host's width and computes at most POINTWISE_WASTE of
    the outputs (MobileNetV2's pointwise layers on 56, 28 and 14 planes, ResNet's stride-2
    shortcuts to 28 and 14): the static choice is the pixels tile. On 7 x 7 planes (49
    positions: the pixels tile computes 64) and 7-pixel rows (the pixels tile in 4 lanes) the
    channels tile stays in the choice and wins; with 32 registers it is always planned."""
    from dml_numba.cpu.convolution import variants

    def case(cin, cout, hw, s=1):
        return conv_case((1, cin, hw, hw), (cout, cin, 1, 1), (s, s), (1, 1), (0, 0), (0, 0),
                         1)[0]

    avx2, avx512 = Host(8, 2), Host(16, 2)
    channels = variants.Channels()
    for desc in (case(144, 24, 56), case(32, 192, 28), case(64, 384, 14),
                 case(64, 128, 56, 2), case(128, 256, 28, 2)):
        assert channels.planned(desc, avx2) == [] and channels.planned(desc, avx512)
        assert not cpu_conv.blocked_plan(desc, avx2).pixels
    for desc in (case(960, 160, 7), case(256, 512, 14, 2)):
        assert channels.planned(desc, avx2)
        assert cpu_conv.blocked_plan(desc, avx2).pixels
    # the threshold: the 7 x 7 plane's pixels tile computes 64 / 49 positions an output
    seven = cpu_conv.pointwise_as_1d(case(960, 160, 7))
    assert variants.waste_of(seven, planner.block_plan(seven, avx2)) == 64 / 49
    assert variants.POINTWISE_WASTE < 64 / 49


def test_tile_rows_divide_the_height_where_they_can():
    """Row blocks from half the room to the room: the fewest rows computed twice by the
    overlapping last block, ties to the taller tile; never more than the height or the room."""
    rows = planner.tile_rows
    assert [rows(h, 4) for h in (56, 28, 14, 7, 9, 3, 1)] == [4, 4, 2, 4, 3, 3, 1]
    assert [rows(h, 3) for h in (28, 11, 2)] == [2, 3, 2]
    assert rows(14, 6) == 5 and rows(100, 1) == 1
    for h in range(1, 40):
        for room in range(1, 9):
            assert 1 <= rows(h, room) <= min(h, room)


def test_depthwise_planner_takes_rows_and_vectors_within_the_unroll_bound():
    """Four rows share each loaded vector; a 1-D row takes several vectors; a window too large
    to unroll on one row block falls back to the dense tile (one channel a block)."""
    plan = cpu_conv.block_plan(conv_case(*DEPTHWISE["2d-3x3"])[0], lanes=8, budget=24)
    assert (plan.rows, plan.vectors, plan.depthwise) == (4, 2, True)
    plan = cpu_conv.block_plan(conv_case(*DEPTHWISE["1d"])[0], lanes=8)
    assert (plan.rows, plan.vectors) == (1, 4)
    big = conv_case((1, 2, 8, 9, 20), (2, 1, 7, 7, 7), (1, 1, 1), (1, 1, 1), (3, 3, 3), (3, 3, 3), 2)[0]
    plan = cpu_conv.block_plan(big, lanes=8)
    assert not plan.depthwise and plan.mb == 1
    plan = cpu_conv.block_plan(conv_case((1, 2, 9, 20), (2, 1, 9, 9), (1, 1), (1, 1), (4, 4), (4, 4), 2)[0],
                               lanes=8)
    assert plan.depthwise and plan.rows * plan.vectors * 81 <= planner.DEPTHWISE_UNROLL


@pytest.mark.parametrize("k, expected", [
    # (window, (rows, vectors)) of an 8-channel depthwise convolution over 32 x 64 outputs,
    # 16 lanes, 28 accumulators, worked by hand: rows = min(4, height, budget) = 4, vectors =
    # min(28 // (3 * 4), 64 // 16) = 2; then rows drop while taps x rows x vectors exceed the
    # unroll bound of 256, and vectors are cut to 256 // (taps x rows)
    (3, (4, 2)),  # 9 x 4 x 2 = 72
    (7, (2, 2)),  # 49 x 4 x 2 = 392, x 3 x 2 = 294, x 2 x 2 = 196 (ConvNeXt's window)
    (11, (1, 2)),  # 121 x 1 x 2 = 242: one row, two vectors
    (13, (1, 1)),  # 169: one row, 256 // 169 = 1 vector
])
def test_depthwise_planner_rows_and_vectors_by_window(k, expected):
    desc = conv_case((1, 8, 32, 64), (8, 1, k, k), (1, 1), (1, 1), (k // 2,) * 2, (k // 2,) * 2,
                     8)[0]
    plan = cpu_conv.block_plan(desc, lanes=16, budget=28)
    assert plan.depthwise and (plan.rows, plan.vectors) == expected
    assert type(plan.rows) is int and type(plan.vectors) is int  # sizes in the source


def test_flattened_tiles_where_they_save_positions():
    """56-pixel rows in 16 lanes: flattened (3,264 positions against 3,584); 28-pixel rows:
    whole rows (896 either way), as 12-pixel rows in 8 lanes (192 either way); strided: never."""
    def plan(hw, s=1, lanes=16):
        return cpu_conv.block_plan(conv_case((1, 8, hw, hw), (8, 8, 3, 3), (s, s), (1, 1), (1, 1),
                                             (1, 1), 1)[0], lanes=lanes, budget=16)

    assert plan(56).flat and (plan(56).rows, plan(56).vectors) == (1, 4)
    assert not plan(28).flat and plan(28).rows == 4
    assert not plan(56, s=2).flat
    assert not plan(12, lanes=16).flat and plan(12, lanes=16).lanes == 8


def test_staged_padding_rule():
    """Staged where every thread gets four (image, group) pairs and a group's padded planes fit
    in 1 MiB; the whole input padded first otherwise; never where nothing is padded."""
    def plan(n, c, g, hw, pad=1):
        return cpu_conv.block_plan(conv_case((n, c, hw, hw), (c, c // g, 3, 3), (1, 1), (1, 1),
                                             (pad, pad), (pad, pad), g)[0], Host(16, 2))

    assert plan(8, 256, 8, 28).staged            # 64 pairs, 115 KB a group
    assert plan(8, 64, 1, 56).staged             # 8 pairs, 861 KB a group
    assert not plan(4, 64, 1, 56).staged         # 4 pairs for 2 threads
    assert not plan(8, 128, 1, 56).staged        # 1.7 MB a group
    assert not plan(8, 256, 8, 28, pad=0).staged  # read in place


def test_transposed_phases_cover_every_tap_once():
    """Each tap reaches exactly one residue class per axis; a stride larger than the kernel
    leaves phases with no tap (those outputs are the bias alone)."""
    desc, _ = conv_case(*TRANSPOSED["2d-stride3-dil-outpad"])
    phases = geometry(desc).transposed_phases()
    for axis, k_n in zip(phases, desc.filter_tensor.sizes[2:]):
        assert sorted(k for taps in axis for k, _ in taps) == list(range(k_n))
    assert () in phases[0]


def test_the_planner_covers_remainders_and_several_vectors():
    """The cases above include a channel block with a remainder (6 = 4 + 2), rows not a
    multiple of the row block, rows narrower than the widest vector, and several vectors."""
    plans = {name: cpu_conv.block_plan(conv_case(*args)[0], lanes=8, budget=12)
             for name, args in SHAPES.items()}
    assert plans["2d-tails"].mb == 4 and 6 % plans["2d-tails"].mb
    strided = conv_case(*SHAPES["2d-groups-rowstride-dil"])[0]
    plan = plans["2d-groups-rowstride-dil"]
    assert not plan.flat and strided.output_tensor.sizes[-2] % plan.rows  # overlapping block
    assert strided.output_tensor.sizes[-1] % plan.lanes  # overlapping vector
    assert plans["2d-asym-pad-convmode"].flat  # 18-pixel rows in 8 lanes: flattened
    assert plans["1d"].rows == 1 and plans["1d"].vectors > 1
    assert cpu_conv.block_plan(conv_case(*SHAPES["1x1-unpadded"])[0], lanes=16).lanes == 16
    # one tap: 8 channels share a loaded vector where the host has 32 vector registers (12 =
    # 8 + a block of 4), 6 where it has 16 (6 x 2 vectors in AVX2's 12 accumulators, not
    # 8 x 1); never more than budget
    pointwise = cpu_conv.pointwise_as_1d(conv_case(*SHAPES["1x1-unpadded"])[0])
    assert cpu_conv.block_plan(pointwise, Host(16, 2), lanes=8, budget=12).mb == 8
    avx2 = cpu_conv.block_plan(pointwise, Host(8, 2))
    assert (avx2.mb, avx2.rows, avx2.vectors) == (6, 1, 2)
    assert cpu_conv.block_plan(pointwise, Host(16, 2), lanes=8, budget=4).mb == 4
    assert cpu_conv.block_plan(conv_case((1, 1, 3, 6), (4, 1, 1, 1), (1, 1), (1, 1), (0, 0), (0, 0), 1)[0],
                               lanes=16).lanes == 4


def _pointwise(n, cin, cout, hw):
    """A pointwise layer as the kernel sees it (one axis of ``hw * hw`` pixels)."""
    desc = conv_case((n, cin, hw, hw), (cout, cin, 1, 1), (1, 1), (1, 1), (0, 0), (0, 0), 1, 0)[0]
    return cpu_conv.pointwise_as_1d(desc)


def _source(kdesc, plan) -> str:
    from dml_numba._cache import KernelKey
    from dml_numba.cpu.convolution.blocked import forward

    return forward.emit(KernelKey("cpu", kdesc, "blocked", True, plan=plan))


def test_one_axis_planes_are_cut_into_chunks():
    """A pointwise layer's plane (one axis: no rows to share out) is cut into chunks of its
    runs: enough for MIN_ITEMS (p)range iterations (3 channel blocks on 2 threads: one does
    twice the other's work) and each reading at most CHUNK_BYTES of the input. The chunks go
    outside the channel blocks where the input outgrows a core's cache and the filter is the
    smaller read (96 -> 24 on 56 x 56: 1.2 MB of input, 9 KB of filter, read once instead of 4
    times), inside where the filter is the larger (960 -> 160 on 7 x 7); a plane with items
    enough and a small input is one chunk. The generated (p)range has the items the cost model
    counts, in that order, and the chunks cover every run once."""
    from dml_numba.cpu.convolution import variants
    from dml_numba.cpu.convolution.blocked import forward

    host = Host(8, 2)
    cases = {  # (n, cin, cout, hw): (chunks, outer)
        (1, 96, 24, 56): (10, True), (1, 32, 16, 112): (13, True), (1, 960, 160, 7): (2, False),
        (1, 320, 1280, 7): (1, False), (8, 96, 24, 56): (10, True), (1, 16, 8, 8): (4, False),
    }
    for (n, cin, cout, hw), expected in cases.items():
        kdesc = _pointwise(n, cin, cout, hw)
        plan = planner.block_plan(kdesc, host)
        lay = planner.Layout.planned(kdesc, plan)
        chunks, outer = planner.chunks_of(lay)
        assert (chunks, outer) == expected, (n, cin, cout, hw)
        columns = -(-hw * hw // (plan.lanes * plan.vectors))
        assert 1 <= chunks <= columns
        assert chunks == columns or n * lay.blocks * chunks >= planner.MIN_ITEMS \
            or 4 * cin * hw * hw <= chunks * planner.CHUNK_BYTES
        items = variants.variant_of(kdesc, "blocked", plan).items(kdesc, kdesc, plan)
        assert items == n * lay.blocks * chunks
        src = _source(kdesc, plan)
        # the threads share out (claim: dml_numba.cpu._share) exactly the model's items
        assert f"min(threads(), {items})" in src and "numba.prange(slots_)" in src
        if chunks > 1:
            per = -(-columns // chunks)
            assert f"range(rt * {per}, min(rt * {per} + {per}, {columns}))" in src
            assert -(-columns // per) == chunks  # no chunk is empty
            assert (f"mbi = f % {lay.blocks}" in src) == (outer and lay.blocks > 1)
    # the model's items are the kernel's on a grid (6 channels on 12 x 12: 8 chunks wanted of
    # 9 runs, which equal chunks of whole runs make 5)
    for n, cin, cout, hw in [(n, c, m, hw) for n in (1, 3) for c in (8, 200) for m in (6, 16)
                             for hw in (3, 9, 12, 23)]:
        kdesc = _pointwise(n, cin, cout, hw)
        plan = planner.block_plan(kdesc, host)
        if plan is None:
            continue
        runs = forward.Runs.of(planner.Layout.planned(kdesc, plan), plan.flat)
        chunks = planner.chunks_of(planner.Layout.planned(kdesc, plan))[0]
        assert runs.row_tiles == chunks and -(-runs.column_tiles // runs.chunk) == chunks
        assert variants.variant_of(kdesc, "blocked", plan).items(kdesc, kdesc, plan) == \
            n * -(-cout // plan.mb) * chunks


def test_planes_with_rows_are_not_chunked():
    """A plane of two axes shares its rows out: its walk is unchanged by the chunks."""
    desc = conv_case((1, 8, 14, 14), (16, 8, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1, 0)[0]
    plan = planner.block_plan(desc, Host(8, 2))
    src = _source(desc, plan)
    assert "rt * " in src and "range(rt *" not in src
