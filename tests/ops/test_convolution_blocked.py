"""The register-blocked SIMD convolution kernels (``algorithm="blocked"``, forward and
transposed) against the vectorised device and against brute-force loops (the transposed one as
a scatter, the kernels gather), for every tile shape the planner can choose (4, 8 and
16 lanes; one to several rows and vectors; channel blocks with a remainder), 1-D to 3-D, groups,
dilations, row strides, asymmetric padding, CONVOLUTION mode, bias and fused activation,
float16 and both parallel variants."""

import numpy as np
import pytest

import dml_numba as dml
from dml_numba.cpu import convolution as cpu_conv
from dml_numba.cpu._emit import Host
from dml_numba.cpu.convolution.blocked import plan as planner
from dml_numba.ops.convolution import geometry
from tests.cases import CV, catalogue, compare, conv_case
from tests.helpers import sampled

F32 = np.float32

SHAPES = {
    # name: conv_case arguments (input, filter, strides, dilations, start, end, groups, ...)
    "2d-tails": ((2, 3, 9, 21), (6, 3, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1),
    # two groups of 5 output channels: the last channel block of each group padded with zeros
    "2d-groups-rowstride-dil": ((1, 8, 11, 19), (10, 4, 3, 2), (2, 1), (2, 3), (2, 0), (0, 2), 2),
    "2d-asym-pad-convmode": ((1, 4, 6, 17), (5, 4, 2, 4), (1, 1), (1, 1), (0, 3), (2, 1), 1, 0, CV),
    "1d": ((3, 5, 37), (7, 5, 5), (1,), (2,), (2,), (3,), 1),
    "3d": ((1, 2, 5, 4, 18), (4, 2, 2, 3, 2), (2, 1, 1), (1, 2, 1), (1, 0, 1), (0, 1, 1), 1),
    "1x1-unpadded": ((2, 16, 5, 20), (12, 16, 1, 1), (1, 1), (1, 1), (0, 0), (0, 0), 1),
    "no-padding-exact": ((1, 3, 6, 10), (4, 3, 3, 3), (1, 1), (1, 1), (0, 0), (0, 0), 1),
    # strided last axis (rows stored by stride phase), with an input longer than the windows read
    "2d-stride2-cropped": ((2, 3, 9, 25), (5, 3, 3, 3), (2, 2), (1, 1), (1, 1), (0, 0), 1),
    "1d-stride3-dil2": ((1, 4, 41), (4, 4, 3), (3,), (2,), (2,), (1,), 1),
}


TRANSPOSED = {
    # stride 2 and 3 (phases with 1 and 2 taps, and phases with none), groups, dilation,
    # output padding, CONVOLUTION mode, 1-D and 3-D (a strided, dilated outer axis: each tap
    # tested), stride 1 (contiguous stores); an activation with no vector form (a pass over the
    # stored outputs) at strides 1, 2 and 3
    "2d-stride2": ((2, 4, 6, 11), (4, 3, 4, 4), (2, 2), (1, 1), (1, 1), (1, 1), 2, 1),
    "2d-stride3-dil-outpad": ((1, 3, 4, 9), (3, 5, 2, 3), (3, 3), (2, 1), (1, 0), (0, 2), 1, 1, CV,
                              True, dml.ActivationLeakyReluOperatorDesc(0.1), np.float32,
                              (1, 2)),
    "2d-stride1": ((1, 2, 5, 9), (2, 6, 3, 3), (1, 1), (1, 1), (1, 2), (0, 1), 1, 1,
                   dml.ConvolutionMode.CROSS_CORRELATION, True,
                   dml.ActivationLeakyReluOperatorDesc(0.1)),
    # stride 2 with an odd output width: the phases differ in length, stored lane by lane
    "2d-stride2-odd": ((1, 2, 5, 8), (2, 3, 3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 1, 1, CV),
    # both phases in one tile with the activation over the interleaved stores
    "2d-stride2-leaky": ((2, 3, 5, 7), (3, 2, 2, 4), (2, 2), (1, 1), (0, 0), (0, 0), 1, 1,
                         dml.ConvolutionMode.CROSS_CORRELATION, True,
                         dml.ActivationLeakyReluOperatorDesc(0.1)),
    "1d": ((2, 3, 17), (3, 6, 5), (2,), (1,), (1,), (2,), 1, 1),
    "3d": ((1, 2, 3, 4, 9), (2, 4, 2, 2, 3), (2, 1, 2), (2, 1, 1), (0, 1, 1), (1, 0, 0), 1, 1),
}


DEPTHWISE = {
    # one input channel per group: rows not a multiple of the row block, an overlapping last
    # vector, a channel multiplier, row stride with dilation, a strided last axis (split rows)
    # over a cropped input, no padding (read in place), 1-D, 3-D, CONVOLUTION mode, activation
    "2d-3x3": ((2, 5, 11, 21), (5, 1, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 5),
    "2d-multiplier2-rowstride-dil": ((1, 3, 13, 18), (6, 1, 3, 2), (2, 1), (2, 3), (2, 0), (0, 2), 3),
    "2d-stride2-cropped-convmode": ((2, 4, 9, 27), (4, 1, 3, 3), (2, 2), (1, 1), (1, 1), (0, 0), 4,
                                    0, CV),
    "2d-unpadded-5x5": ((1, 6, 9, 12), (6, 1, 5, 5), (1, 1), (1, 1), (0, 0), (0, 0), 6),
    "1d": ((3, 4, 40), (4, 1, 7), (1,), (2,), (3,), (2,), 4),
    "3d-leaky": ((1, 3, 4, 6, 17), (3, 1, 2, 3, 2), (1, 2, 1), (2, 1, 1), (1, 1, 1), (0, 1, 1), 3, 0,
                 dml.ConvolutionMode.CROSS_CORRELATION, True, dml.ActivationLeakyReluOperatorDesc(0.1)),
}


def brute_force_transposed(desc, x, w, b):
    """BACKWARD by the definition, as a scatter (the kernels gather):
    ``y[n, g*M/g + col, a*s + k*d - start] += x[n, g*C/g + c, a] * w[g*C/g + c, col, k]``."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    out = desc.output_tensor.sizes
    g = desc.group_count
    cg, mg = x.shape[1] // g, w.shape[1]
    if desc.mode == dml.ConvolutionMode.CONVOLUTION:
        w = w[(Ellipsis,) + (slice(None, None, -1),) * (x.ndim - 2)]
    y = np.zeros(out)
    for ci in range(x.shape[1]):
        gi = ci // cg
        for col in range(mg):
            for a in np.ndindex(*x.shape[2:]):
                for k in np.ndindex(*w.shape[2:]):
                    o = tuple(ai * s + ki * dl - p for ai, ki, s, dl, p in
                              zip(a, k, desc.strides, desc.dilations, desc.start_padding))
                    if all(0 <= oi < n for oi, n in zip(o, out[2:])):
                        y[(slice(None), gi * mg + col) + o] += x[(slice(None), ci) + a] * w[(ci, col) + k]
    if b is not None:
        y += b.astype(np.float64).reshape((1, out[1]) + (1,) * (x.ndim - 2))
    return y


def brute_force(desc, x, w, b):
    """Forward convolution by the definition: one output element at a time, in float64."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    n_, cin = x.shape[:2]
    cout = desc.output_tensor.sizes[1]
    out = desc.output_tensor.sizes[2:]
    g = desc.group_count
    cg, mg = cin // g, cout // g
    if desc.mode == dml.ConvolutionMode.CONVOLUTION:
        w = w[(Ellipsis,) + (slice(None, None, -1),) * len(out)]
    xp = np.pad(x, [(0, 0), (0, 0)] + [(a, b_) for a, b_ in zip(desc.start_padding, desc.end_padding)])
    y = np.zeros((n_, cout) + tuple(out))
    for m in range(cout):
        gi = m // mg
        for o in np.ndindex(*out):
            win = tuple(slice(oi * s, oi * s + (k - 1) * dl + 1, dl) for oi, s, k, dl in
                        zip(o, desc.strides, w.shape[2:], desc.dilations))
            patch = xp[(slice(None), slice(gi * cg, (gi + 1) * cg)) + win]
            y[(slice(None), m) + o] = (patch * w[m]).reshape(n_, -1).sum(axis=1)
    if b is not None:
        y += b.astype(np.float64).reshape((1, cout) + (1,) * len(out))
    return y


def leaky(desc, y):
    """``y`` through the descriptor's fused activation (these cases fuse leaky ReLU 0.1 or
    nothing)."""
    if desc.fused_activation is None:
        return y
    assert desc.fused_activation == dml.ActivationLeakyReluOperatorDesc(0.1)
    return np.where(y >= 0, y, 0.1 * y)


#: (lanes, accumulators) of the tiles the planner is asked for: SSE/NEON-like, AVX2-like,
#: AVX-512-like
TILES = [(4, 4), (8, 12), (16, 24)]


def tile_runs(table) -> list:
    """Parameters ``(name, lanes, budget)``: every case of ``table`` on every tile; by default
    each case on the widest tile and on one narrower, 4 and 8 lanes in turn (each cell compiles
    a kernel of its own; every cell with --runslow)."""
    runs = [(name, lanes, budget) for name in table for lanes, budget in TILES]
    narrower = {name: TILES[i % 2] for i, name in enumerate(table)}
    return sampled(runs, lambda run: "{}-{}x{}".format(*run),
                   lambda run: run[1:] == TILES[-1] or run[1:] == narrower[run[0]])


def blocked_kernel(desc, lanes, budget, parallel, **plan):
    """The blocked kernel of ``desc`` on the tile the planner chooses for ``lanes`` and
    ``budget`` (and ``plan``'s other settings: ``staged``, ``flat_gain``)."""
    tile = cpu_conv.block_plan(cpu_conv.pointwise_as_1d(desc) or desc, lanes=lanes, budget=budget,
                               **plan)
    return cpu_conv.BlockedKernel(desc, {"algorithm": "blocked", "parallel": parallel}, plan=tile)


@pytest.mark.parametrize("name,lanes,budget", tile_runs(SHAPES))
def test_every_tile_shape_agrees_with_brute_force_and_numpy(name, lanes, budget):
    desc, inputs = conv_case(*SHAPES[name])
    kernel = blocked_kernel(desc, lanes, budget, parallel=False)
    plan = kernel.plan
    assert plan.lanes <= lanes and plan.accumulators <= budget
    y = np.empty(desc.output_tensor.sizes, F32)
    kernel(list(inputs), y)
    compare(desc, y, dml.compile_operator(desc, "numpy")(*inputs))
    np.testing.assert_allclose(y, leaky(desc, brute_force(desc, *inputs)), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name,lanes,budget", tile_runs(TRANSPOSED))
def test_transposed_agrees_with_the_scatter_definition_and_numpy(name, lanes, budget):
    desc, inputs = conv_case(*TRANSPOSED[name])
    kernel = blocked_kernel(desc, lanes, budget, parallel=False)
    assert "blocked-transposed" in kernel.key.kernel
    y = np.empty(desc.output_tensor.sizes, F32)
    kernel(list(inputs), y)
    compare(desc, y, dml.compile_operator(desc, "numpy")(*inputs))
    np.testing.assert_allclose(y, leaky(desc, brute_force_transposed(desc, *inputs)), rtol=1e-4,
                               atol=1e-4)


@pytest.mark.parametrize("name,lanes,budget", tile_runs(DEPTHWISE))
def test_depthwise_plane_kernel_agrees_with_brute_force_and_numpy(name, lanes, budget):
    desc, inputs = conv_case(*DEPTHWISE[name])
    kernel = blocked_kernel(desc, lanes, budget, parallel=False)
    assert "blocked-depthwise" in kernel.key.kernel and kernel.plan.depthwise
    assert kernel.plan.accumulators <= budget
    y = np.empty(desc.output_tensor.sizes, F32)
    kernel(list(inputs), y)
    compare(desc, y, dml.compile_operator(desc, "numpy")(*inputs))
    np.testing.assert_allclose(y, leaky(desc, brute_force(desc, *inputs)), rtol=1e-4, atol=1e-4)


CHANNELS = {
    # channels tiles (output channels in the lanes, pixels broadcast): two vectors of channels
    # over rows of 23 (an overlapping last run of pixels); a group's 8 channels (8 lanes) with
    # a row stride and dilations; a strided last axis (rows stored by stride phase) over a
    # cropped input; 1-D at stride 3; 3-D with 12 channels (4 lanes, three runs of channels);
    # CONVOLUTION mode with an activation that has no vector form (a pass over the stored
    # tile); a pointwise layer read in place (one long row); rows of 2 pixels with no bias and
    # a vector ReLU
    "2d-two-vectors": ((2, 3, 7, 23), (32, 3, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1),
    "2d-groups-rowstride-dil": ((1, 8, 11, 19), (16, 4, 3, 2), (2, 1), (2, 3), (2, 0), (0, 2), 2),
    "2d-stride2-cropped": ((2, 4, 9, 25), (16, 4, 3, 3), (2, 2), (1, 1), (1, 1), (0, 0), 1),
    "1d-stride3-dil2": ((1, 4, 41), (8, 4, 3), (3,), (2,), (2,), (1,), 1),
    "3d": ((1, 2, 5, 4, 18), (12, 2, 2, 3, 2), (2, 1, 1), (1, 2, 1), (1, 0, 1), (0, 1, 1), 1),
    "2d-convmode-leaky": ((1, 4, 6, 17), (16, 4, 2, 4), (1, 1), (1, 1), (0, 3), (2, 1), 1, 0, CV,
                          True, dml.ActivationLeakyReluOperatorDesc(0.1)),
    "1x1-in-place": ((2, 16, 5, 20), (32, 16, 1, 1), (1, 1), (1, 1), (0, 0), (0, 0), 1),
    "2d-narrow-relu": ((1, 4, 3, 2), (8, 4, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1, 0,
                       dml.ConvolutionMode.CROSS_CORRELATION, False,
                       dml.ActivationReluOperatorDesc()),
}

#: (hosts, staged) the channels tiles are planned for: 4 and 8 lanes with 16 registers,
#: 16 lanes with 32
CHANNEL_HOSTS = [Host(4, 2), Host(8, 2), Host(16, 2)]
CHANNEL_RUNS = [(name, host, staged) for name in CHANNELS for host in CHANNEL_HOSTS
                for staged in (False, True)]


@pytest.mark.parametrize("name,host,staged", sampled(
    CHANNEL_RUNS, lambda run: f"{run[0]}-{run[1].lanes}-{'staged' if run[2] else 'whole'}",
    # by default the widest host one way and a narrower one the other, in turn
    lambda run: (run[1].lanes == 16 and run[2] == (list(CHANNELS).index(run[0]) % 2 == 0))
    or (run[1] == CHANNEL_HOSTS[list(CHANNELS).index(run[0]) % 2]
        and run[2] != (list(CHANNELS).index(run[0]) % 2 == 0))))
def test_channels_tiles_agree_with_brute_force_and_numpy(name, host, staged):
    """The channels tile on every case, planned for each host: within the host's registers
    (accumulators, a row's weight vectors and a broadcast), every output written once at
    least (the output starts as NaN), the values of the definition."""
    desc, inputs = conv_case(*CHANNELS[name])
    kdesc = cpu_conv.pointwise_as_1d(desc) or desc
    plan = planner.channel_plan(kdesc, host, staged=staged)
    assert plan is not None and plan.pixels >= 1 and plan.mb % plan.lanes == 0
    assert plan.staged == (staged and planner.needs_copy(kdesc))  # as asked, where it pads
    assert plan.accumulators + plan.vectors * desc.filter_tensor.sizes[-1] + 1 \
        <= planner.registers(host)
    kernel = cpu_conv.BlockedKernel(desc, {"algorithm": "blocked", "parallel": False}, plan=plan)
    assert kernel.key.kernel.startswith("blocked-channels") and "vscatter(" in kernel.source
    y = np.full(desc.output_tensor.sizes, np.nan, F32)
    kernel(list(inputs), y)
    compare(desc, y, dml.compile_operator(desc, "numpy")(*inputs))
    ref = brute_force(desc, *inputs, *[None] * (3 - len(inputs)))
    relu = desc.fused_activation == dml.ActivationReluOperatorDesc()
    np.testing.assert_allclose(y, np.maximum(ref, 0) if relu else leaky(desc, ref), rtol=1e-4,
                               atol=1e-4)


def test_channels_tiles_in_the_parallel_loop_and_in_float16():
    """The parallel variant (the tile called from the prange, staged slots shared out) and
    float16 inputs (computed in float32 by the same kernel) agree with the definition."""
    for args, staged in ((CHANNELS["2d-two-vectors"], True), (CHANNELS["2d-stride2-cropped"], False)):
        desc, inputs = conv_case(*args)
        plan = planner.channel_plan(desc, Host(16, 2), staged=staged)
        kernel = cpu_conv.BlockedKernel(desc, {"algorithm": "blocked", "parallel": True}, plan=plan)
        assert "prange(" in kernel.source
        y = np.full(desc.output_tensor.sizes, np.nan, F32)
        kernel(list(inputs), y)
        np.testing.assert_allclose(y, brute_force(desc, *inputs), rtol=1e-4, atol=1e-4)
    desc, inputs = conv_case((1, 4, 5, 12), (16, 4, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1,
                             dtype=np.float16)
    plan = planner.channel_plan(desc, Host(16, 2))
    op = dml.compile_operator(desc, "cpu", algorithm="blocked")
    assert op.kernel.plan == plan  # (the cost model's pick here: checked, not assumed)
    y = op(*inputs)
    assert y.dtype == np.float16
    compare(desc, y, dml.compile_operator(desc, "numpy")(*inputs))


def test_channels_planner():
    """Pixels fill the registers left, the count that wastes the fewest pixels in the upper
    half of the range (ties to the larger): 56-pixel rows of 3 taps take 8 pixels with two
    vectors of 16 channels (12 fit, 8 divides 56) and 28 with one; 28-pixel rows at stride 2,
    7 with two. Lanes halve until they divide a group's channels; None for BACKWARD, float64,
    and a group's channels that 4 does not divide."""
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
    assert plan(case(64), Host(8, 2)) == (8, 2, 4)  # 16 registers: 6 weights, 8 accumulators
    # 7 weights leave 8 accumulators; 4 divides the 52-pixel rows
    assert plan(case(64, k=7), Host(8, 2)) == (8, 1, 4)
    assert plan(case(8, hw=2)) == (8, 1, 2)  # rows of 2 pixels
    assert plan(case(6)) is None and plan(case(64, direction=1)) is None
    assert plan(case(64, dtype=np.float64)) is None
    assert plan(case(48), vectors=2) is None  # 48 channels are no pairs of 16
    # the range and the waste: 25-pixel rows take 9 (27 computed) of 6-12, not 5 (below half
    # the room); 13-pixel rows 7 (14), not 13 (more than the room); one pixel, one
    assert plan(case(32, hw=25)) == (16, 2, 9) and plan(case(32, hw=13)) == (16, 2, 7)
    assert plan(case(32, hw=1)) == (16, 2, 1)
    # two vectors while a row's weights leave room for 4 pixels: 12 taps on 32 registers
    # (31 - 24 = 7) and 4 on 16 (15 - 8 = 7) take one
    assert plan(case(32, k=12, hw=20)) == (16, 1, 11) and plan(case(16, k=4), Host(8, 2))[1] == 1


def test_the_tile_is_the_cost_models_pick_for_the_host_given():
    """``blocked_plan`` plans both tiles for the host passed (not this machine) and takes the
    one the constants given price lower: a scatter priced out, the pixels tile."""
    import dataclasses

    from dml_numba.cpu.convolution.cost import COSTS

    dense = conv_case((8, 64, 56, 56), (64, 64, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1)[0]
    for host in (Host(16, 2), Host(8, 2), Host(4, 1)):
        plan = cpu_conv.blocked_plan(dense, host)
        assert plan.lanes == host.lanes and plan.pixels
        dear = dataclasses.replace(COSTS, scatter=1e6)
        assert cpu_conv.blocked_plan(dense, host, dear) == planner.block_plan(dense, host)


def test_the_dense_layers_static_tile_is_the_channels_tile():
    """The cost model's pick between the planner's two tiles for the benchmark set's dense and
    strided 3x3 layers on a 16-lane, two-thread host: the channels tile (measured on the Intel
    Xeon: 1.03-1.18x PyTorch against 0.88-0.94x for the pixels tile)."""
    dense = conv_case((8, 64, 56, 56), (64, 64, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1)[0]
    strided = conv_case((8, 64, 56, 56), (128, 64, 3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 1)[0]
    for desc in (dense, strided):
        assert cpu_conv.blocked_plan(desc, Host(16, 2)).pixels


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


@pytest.mark.parametrize("parallel", [True, False])
def test_depthwise_slots_share_planes_unevenly(parallel, monkeypatch):
    """Seven planes over three slots (each pads into its own part of the buffer), in both
    variants, twice through the same buffers."""
    import numba

    monkeypatch.setattr(numba, "get_num_threads", lambda: 3)
    desc, inputs = conv_case((7, 1, 6, 19), (2, 1, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1)
    op = dml.compile_operator(desc, "cpu", algorithm="blocked", parallel=parallel)
    assert op.kernel.key.kernel == "blocked-depthwise" and op.kernel.plan.depthwise
    ref = brute_force(desc, *inputs)
    for _ in range(2):
        np.testing.assert_allclose(op(*inputs), ref, rtol=1e-4, atol=1e-4)


def test_a_3d_flattened_tile_with_an_activation_pass():
    """3-D on a flattened tile (the planes' rows walked as one run) with an activation that has
    no vector form: its pass over the outputs walks the flattened run too."""
    desc, inputs = conv_case((1, 8, 3, 7, 58), (16, 8, 1, 3, 3), (1, 1, 1), (1, 1, 1), (0, 1, 1),
                             (0, 1, 1), 1, act=dml.ActivationLeakyReluOperatorDesc(0.1))
    kernel = blocked_kernel(desc, 8, 12, parallel=False)
    assert kernel.plan.flat
    y = np.empty(desc.output_tensor.sizes, F32)
    kernel(list(inputs), y)
    np.testing.assert_allclose(y, leaky(desc, brute_force(desc, *inputs)), rtol=1e-4, atol=1e-4)


def test_transposed_stride2_tiles_hold_both_phases_where_they_match():
    """Stride 2 with an even output width: both last-axis phases in one tile, stored
    interleaved (the plan's phases); an odd width or another stride: a phase a tile."""
    phases = {name: cpu_conv.block_plan(conv_case(*args)[0], lanes=8).phases
              for name, args in TRANSPOSED.items()}
    assert phases == {"2d-stride2": 2, "2d-stride3-dil-outpad": 1, "2d-stride1": 1,
                      "2d-stride2-odd": 1, "2d-stride2-leaky": 2, "1d": 2, "3d": 2}
    kernel = blocked_kernel(conv_case(*TRANSPOSED["2d-stride2"])[0], 8, 12, parallel=False)
    assert kernel.key.plan.phases == 2 and "vinterleave(" in kernel.source
    assert "vscatter(" not in kernel.source.split("def tile")[1]


@pytest.mark.parametrize("name", [k for k in SHAPES if k not in ("1x1-unpadded", "no-padding-exact")])
def test_staged_padding_per_image_and_group_agrees_with_brute_force(name):
    """The forward kernel that pads each (image, group) into a per-thread buffer just before its
    tiles (forced on: the rule picks it for batches of groups, four for every thread)."""
    desc, inputs = conv_case(*SHAPES[name])
    kernel = blocked_kernel(desc, 8, 12, parallel=True, staged=True)
    assert kernel.plan.staged and kernel.key.kernel == "blocked-staged"
    assert "def pad(" in kernel.source
    ref = leaky(desc, brute_force(desc, *inputs))
    for _ in range(2):  # the buffers are reused
        y = np.full(desc.output_tensor.sizes, np.nan, F32)
        kernel(list(inputs), y)
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


FLAT = {
    # unit strides over the last two axes: the tiles walk the padded plane flattened
    "2d-tails": SHAPES["2d-tails"],
    "2d-asym-pad-convmode": SHAPES["2d-asym-pad-convmode"],
    "no-padding-exact": SHAPES["no-padding-exact"],
    "2d-dil-groups-selu": ((2, 4, 7, 19), (6, 2, 3, 3), (1, 1), (2, 2), (2, 1), (1, 2), 2, 0,
                           dml.ConvolutionMode.CROSS_CORRELATION, True,
                           dml.ActivationLeakyReluOperatorDesc(0.1)),
    "3d": ((1, 3, 4, 5, 13), (4, 3, 2, 3, 3), (2, 1, 1), (1, 1, 2), (1, 1, 0), (0, 1, 2), 1),
}


#: every case on 4 and 8 lanes, its input padded whole or staged; by default each case on both
#: lanes with the staging one way on one and the other way on the other, in turn (every
#: combination on some case; all four on every case with --runslow)
FLAT_RUNS = [(name, lanes, staged) for name in FLAT for lanes in (4, 8) for staged in (False, True)]


@pytest.mark.parametrize("name,lanes,staged", sampled(
    FLAT_RUNS, lambda run: f"{run[0]}-{run[1]}-{'staged' if run[2] else 'whole-input'}",
    lambda run: run[2] == ((run[1] == 8) != (list(FLAT).index(run[0]) % 2 == 1))))
def test_flattened_tiles_agree_with_brute_force(name, lanes, staged):
    """Tiles over the padded plane flattened (forced wherever they apply): runs crossing rows,
    the padding columns computed and not stored (nor activated), the last run overlapping."""
    desc, inputs = conv_case(*FLAT[name])
    kernel = blocked_kernel(desc, lanes, 12, parallel=False, staged=staged, flat_gain=100.0)
    assert kernel.plan.flat and kernel.key.plan.label.endswith(" flat")
    assert "vstore_rows(" in kernel.source
    y = np.full(desc.output_tensor.sizes, np.nan, F32)
    kernel(list(inputs), y)
    np.testing.assert_allclose(y, leaky(desc, brute_force(desc, *inputs)), rtol=1e-4, atol=1e-4)


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
    # one tap: 8 channels share a loaded vector (12 = 8 + a block of 4), never more than budget
    pointwise = cpu_conv.pointwise_as_1d(conv_case(*SHAPES["1x1-unpadded"])[0])
    assert cpu_conv.block_plan(pointwise, lanes=8, budget=12).mb == 8
    assert cpu_conv.block_plan(pointwise, lanes=8, budget=4).mb == 4
    assert cpu_conv.block_plan(conv_case((1, 1, 3, 6), (4, 1, 1, 1), (1, 1), (1, 1), (0, 0), (0, 0), 1)[0],
                               lanes=16).lanes == 4


@pytest.mark.parametrize("parallel", [True, False])
@pytest.mark.parametrize("act", [None, dml.ActivationLeakyReluOperatorDesc(0.1),
                                 dml.ActivationScaledEluOperatorDesc(1.2, 0.7)],
                         ids=["none", "leaky", "selu"])
def test_bias_and_fused_activation_in_both_variants(act, parallel):
    desc, inputs = conv_case((2, 4, 7, 13), (8, 4, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1, act=act)
    op = dml.compile_operator(desc, "cpu", algorithm="blocked", parallel=parallel)
    assert op.kernel.algorithm == "blocked"
    compare(desc, op(*inputs), dml.compile_operator(desc, "numpy")(*inputs))


def test_float16_computes_in_float32_through_the_same_kernel():
    desc, inputs = conv_case((1, 4, 5, 12), (4, 4, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1, dtype=np.float16)
    op = dml.compile_operator(desc, "cpu", algorithm="blocked")
    y = op(*inputs)
    assert y.dtype == np.float16
    compare(desc, y, dml.compile_operator(desc, "numpy")(*inputs))


@pytest.mark.parametrize("name", [k for k in catalogue() if k.startswith("conv")])
def test_catalogue_blocked_or_refused(name):
    """Every catalogue convolution runs blocked where the kernel applies and is refused with a
    ValidationError (nothing compiled) where it does not."""
    desc, inputs = catalogue()[name]
    if cpu_conv.blocked_plan(desc) is None:
        with pytest.raises(dml.ValidationError, match="compile_operator.algorithm: 'blocked' is "
                                                      "invalid; expected 'direct' or 'gemm'"):
            dml.compile_operator(desc, "cpu", algorithm="blocked")
        return
    op = dml.compile_operator(desc, "cpu", algorithm="blocked")
    compare(desc, op(*inputs), dml.compile_operator(desc, "numpy")(*inputs))


def test_out_argument_and_reuse_of_the_padding_buffer():
    desc, inputs = conv_case(*SHAPES["2d-tails"])
    op = dml.compile_operator(desc, "cpu", algorithm="blocked")
    out = np.full(desc.output_tensor.sizes, np.nan, F32)
    ref = dml.compile_operator(desc, "numpy")(*inputs)
    for _ in range(2):
        op(*inputs, out=out)
        compare(desc, out, ref)
    x2 = inputs[0] * 2
    compare(desc, op(x2, *inputs[1:]), dml.compile_operator(desc, "numpy")(x2, *inputs[1:]))
