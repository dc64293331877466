"""The register-blocked SIMD convolution kernels (``algorithm="blocked"``, forward and
transposed) against the vectorised device and against brute-force loops (the transposed one as
a scatter, the kernels gather), for every tile shape the planner can choose (4, 8 and
16 lanes; one to several rows and vectors; channel blocks with a remainder), 1-D to 3-D, groups,
dilations, row strides, asymmetric padding, CONVOLUTION mode, bias and fused activation,
float16 and both parallel variants."""

import dataclasses
import re

import numpy as np
import pytest

import dml_numba as dml
from dml_numba.cpu import convolution as cpu_conv
from dml_numba.cpu._emit import Host
from dml_numba.cpu.convolution.base import LINE
from dml_numba.cpu.convolution.blocked import forward
from dml_numba.cpu.convolution.blocked import plan as planner
from tests.cases import CV, catalogue, compare, conv_case
from tests.helpers import sampled

F32 = np.float32
CC = dml.ConvolutionMode.CROSS_CORRELATION

SHAPES = {
    # name: conv_case arguments (input, filter, strides, dilations, start, end, groups, ...)
    "2d-tails": ((2, 3, 9, 21), (6, 3, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1),
    # two groups of 5 output channels: the last channel block of each group padded with zeros
    "2d-groups-rowstride-dil": ((1, 8, 11, 19), (10, 4, 3, 2), (2, 1), (2, 3), (2, 0), (0, 2), 2),
    "2d-asym-pad-convmode": ((1, 4, 6, 17), (5, 4, 2, 4), (1, 1), (1, 1), (0, 3), (2, 1), 1, 0, CV),
    "1d": ((3, 5, 37), (7, 5, 5), (1,), (2,), (2,), (3,), 1),
    "3d": ((1, 2, 5, 4, 18), (4, 2, 2, 3, 2), (2, 1, 1), (1, 2, 1), (1, 0, 1), (0, 1, 1), 1),
    "1x1-unpadded": ((2, 16, 5, 20), (12, 16, 1, 1), (1, 1), (1, 1), (0, 0), (0, 0), 1),
    # a pointwise plane whose input (560 KB) outgrows a core's cache: cut into chunks walked
    # outside the channel blocks (narrower tiles: two blocks), a chunk's runs ending mid-plane
    "1x1-chunks-outside": ((1, 64, 40, 56), (8, 64, 1, 1), (1, 1), (1, 1), (0, 0), (0, 0), 1),
    # a small plane over 256 input channels: one run a chunk, chunks outside the blocks (two
    # images, 13 output channels: the last block a remainder), the last run overlapping
    "1x1-runs-outside": ((2, 256, 5, 7), (13, 256, 1, 1), (1, 1), (1, 1), (0, 0), (0, 0), 1),
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
    return cpu_conv.build(desc, {"algorithm": "blocked", "parallel": parallel}, "blocked", tile)


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
    """The channels tile on every case, planned for each host (16 registers: streamed): within
    the host's registers (accumulators, a row's weight vectors or, streamed, one tap's
    weights or input values, and a broadcast), every output written once at
    least (the output starts as NaN), the values of the definition."""
    desc, inputs = conv_case(*CHANNELS[name])
    kdesc = cpu_conv.pointwise_as_1d(desc) or desc
    plan = planner.channel_plan(kdesc, host, staged=staged)
    assert plan is not None and plan.pixels >= 1 and plan.mb % plan.lanes == 0
    assert plan.staged == (staged and planner.needs_copy(kdesc))  # as asked, where it pads
    held = min(plan.vectors, plan.pixels) if plan.streamed else \
        plan.vectors * desc.filter_tensor.sizes[-1]  # streamed: one tap's weights or inputs
    assert plan.accumulators + held + 1 <= planner.registers(host)
    assert plan.streamed == (planner.registers(host) < 32)
    kernel = cpu_conv.build(desc, {"algorithm": "blocked", "parallel": False}, "blocked", plan)
    assert kernel.key.kernel.startswith("blocked-channels") and "vstore_transposed(" in kernel.source
    assert ("opaque(" in kernel.source) == plan.streamed
    y = np.full(desc.output_tensor.sizes, np.nan, F32)
    kernel(list(inputs), y)
    compare(desc, y, dml.compile_operator(desc, "numpy")(*inputs))
    ref = brute_force(desc, *inputs, *[None] * (3 - len(inputs)))
    relu = desc.fused_activation == dml.ActivationReluOperatorDesc()
    np.testing.assert_allclose(y, np.maximum(ref, 0) if relu else leaky(desc, ref), rtol=1e-4,
                               atol=1e-4)


def test_channels_tiles_take_one_vector_where_two_leave_few_pixels():
    """With 32 registers the channels tile takes two vectors of channels where a row's weight
    vectors (two a tap) leave PAIR_PIXELS pixels or more (3 taps: 12), else one vector and more
    pixels (ResNet-18's 7x7 stem: 16 pixels of 16 channels, not 8 of 32); every output
    written, the definition's values."""
    for ws, stride, pad, vectors, pixels in (((64, 3, 7, 7), 2, 3, 1, 16),
                                             ((32, 3, 3, 3), 2, 1, 2, 8),
                                             ((64, 8, 5, 5), 1, 2, 2, 8)):
        desc, inputs = conv_case((1, ws[1], 2 * 32 // stride, 32), ws, (stride,) * 2, (1, 1),
                                 (pad, pad), (pad, pad), 1)
        plan = planner.channel_plan(desc, Host(16, 2))
        assert (plan.vectors, plan.mb, plan.pixels) == (vectors, 16 * vectors, pixels), (ws, plan)
        held = plan.vectors * ws[-1]
        assert plan.accumulators + held + 1 <= 32
        assert (32 - 1 - 2 * ws[-1] >= 2 * planner.PAIR_PIXELS) == (vectors == 2)
        kernel = cpu_conv.build(desc, {"algorithm": "blocked", "parallel": False}, "blocked", plan)
        y = np.full(desc.output_tensor.sizes, np.nan, F32)
        kernel(list(inputs), y)
        np.testing.assert_allclose(y, leaky(desc, brute_force(desc, *inputs)), rtol=1e-4,
                                   atol=1e-4)


@pytest.mark.parametrize("width, cout, act", [
    (8, 16, None),  # a row of one block of 8 pixels
    (12, 16, dml.ActivationLeakyReluOperatorDesc(0.1)),  # one block and an overlapping last;
    # an activation with no vector form, run over the row once it is stored
    (27, 24, dml.ActivationReluOperatorDesc()),  # three blocks, a last overlapping; 3 vectors
])
def test_channels_rows_go_through_a_scratch_on_sixteen_registers(width, cout, act):
    """On 16 registers (streamed plans) a channels tile stores each pixel's vectors whole into
    the row's scratch and the row is transposed into its planes after its last tile, 8 pixels
    at a time (no tile's few pixels scattered over the planes): every output written (the
    output starts as NaN), the values of the definition, staged or not. Rows shorter than a
    vector, one-axis planes and 32-register plans store tile by tile as before."""
    desc, inputs = conv_case((1, 4, 5, width), (cout, 4, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1,
                             0, dml.ConvolutionMode.CROSS_CORRELATION, True, act)
    for staged in (False, True):
        plan = planner.channel_plan(desc, Host(8, 2), staged=staged)
        assert plan.streamed
        kernel = cpu_conv.build(desc, {"algorithm": "blocked", "parallel": False}, "blocked", plan)
        src = kernel.source
        assert "rs = np.empty(" in src and src.count("vstore(rs,") == plan.mb // 8 * plan.pixels
        assert src.count("vstore_transposed(") == plan.mb // 8 * (1 + (width % 8 > 0))
        y = np.full(desc.output_tensor.sizes, np.nan, F32)
        kernel(list(inputs), y)
        ref = brute_force(desc, *inputs)
        np.testing.assert_allclose(y, np.maximum(ref, 0) if act == dml.ActivationReluOperatorDesc()
                                   else leaky(desc, ref), rtol=1e-4, atol=1e-4)
    lay = planner.Layout.planned
    narrow = conv_case((1, 4, 5, 6), (16, 4, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1)[0]
    pointwise = cpu_conv.pointwise_as_1d(conv_case((1, 64, 7, 7), (64, 64, 1, 1), (1, 1), (1, 1),
                                                   (0, 0), (0, 0), 1)[0])
    for d, host, kept in ((desc, Host(8, 2), True), (narrow, Host(8, 2), False),
                          (pointwise, Host(8, 2), False), (desc, Host(16, 2), False)):
        plan = planner.channel_plan(d, host)
        assert forward.row_scratch(lay(d, plan), plan) == kept


#: channels tiles over many input channels (each channel's run prefetched ahead): a pointwise
#: 14 x 14 layer of 96 channels read in place, two groups of 64 padded 3 x 3 (the prefetch
#: stays inside its group), 200 channels at stride 2 in passes of 64
PREFETCHED = {
    "1x1-96-in-place": (((1, 96, 14, 14), (48, 96, 1, 1), (1, 1), (1, 1), (0, 0), (0, 0), 1), 0),
    "3x3-groups-of-64": (((2, 128, 9, 21), (32, 64, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 2), 0),
    "3x3-200-stride2-passes": (((1, 200, 7, 19), (16, 200, 3, 3), (2, 2), (1, 1), (1, 1), (1, 1),
                                1), 64),
}


@pytest.mark.parametrize("host", [Host(8, 2), Host(16, 2)], ids=["8-lanes", "16-lanes"])
@pytest.mark.parametrize("name", list(PREFETCHED))
def test_channels_tiles_prefetch_the_run_of_the_channel_32_on(name, host):
    """A channels tile over CHANNEL_PREFETCH_MIN or more input channels of a group prefetches,
    as it reads each channel's run, the lines of the same run CHANNEL_PREFETCH_AHEAD channels on
    (first to last element, a line apart), and that channel's weights (a 1x1 filter's in every
    tile, a larger one's row of taps in a block's first row tile), only while that channel is
    still the group's; a tile over fewer channels prefetches nothing. The sums are unchanged: every output written
    (NaN-filled), against the float64 brute force, staged and not, serial and parallel."""
    from dml_numba.cpu.convolution.blocked import tile

    args, cblock = PREFETCHED[name]
    desc, inputs = conv_case(*args)
    kdesc = cpu_conv.pointwise_as_1d(desc) or desc
    cg = kdesc.input_tensor.sizes[1] // kdesc.group_count
    ahead = tile.CHANNEL_PREFETCH_AHEAD
    assert cg >= tile.CHANNEL_PREFETCH_MIN
    ref = brute_force(desc, *inputs)
    for staged, par in ((False, False), (True, True)):
        plan = dataclasses.replace(planner.channel_plan(kdesc, host, staged=staged), cblock=cblock)
        lay = planner.Layout.planned(kdesc, plan)
        kernel = cpu_conv.build(desc, {"algorithm": "blocked", "parallel": par}, "blocked", plan)
        src = kernel.source
        assert f"if c < {cg - ahead}:" in src
        found = [int(k) - ahead * lay.plane_in for k in re.findall(
            r"prefetch\(xp, xq \+ (\d+)\)", src)]
        assert found and min(found) >= 0 and max(found) - min(found) < lay.plane_in, found
        assert all(b - a <= LINE // 4 for a, b in zip(sorted(found), sorted(found)[1:]))
        weights = [int(k) for k in re.findall(r"prefetch\(wp, wo \+ (\d+)\)", src)]
        # the weights of the channel ahead, a line apart: a 1x1 filter's mb packed weights in
        # every tile; a larger filter's row of taps in a block's first row tile
        taps = int(np.prod(lay.kernel))
        assert weights == [ahead * taps * plan.mb + i
                           for i in range(0, lay.kernel[-1] * plan.mb, LINE // 4)], weights
        assert ("if rt == 0:" in src) == (taps > 1)
        y = np.full(desc.output_tensor.sizes, np.nan, F32)
        kernel(list(inputs), y)
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4, err_msg=f"{staged} {par}")
    few = conv_case((1, 63, 14, 14), (48, 63, 1, 1), (1, 1), (1, 1), (0, 0), (0, 0), 1)[0]
    kfew = cpu_conv.pointwise_as_1d(few)
    kernel = cpu_conv.build(few, {"algorithm": "blocked", "parallel": False}, "blocked",
                            planner.channel_plan(kfew, host))
    assert "prefetch(xp, xq" not in kernel.source


#: channels tiles whose input channels run in passes (``plan.cblock``): a pointwise 7 x 7
#: plane (one call, 17 tiles) in passes that divide its 96 channels, and 100 channels in
#: passes of 32 (the last of 4); a pointwise plane cut into chunks (each call's tiles from
#: ``rt * chunk`` on: the partial sums indexed from the chunk's first), no bias; a 3 x 3
#: layer on rows (16 registers: the row's scratch after the last pass), an activation with no
#: vector form (run once, after the last pass), staged and not, CONVOLUTION mode
PASSES = {
    "1x1-7x7": (((1, 96, 7, 7), (32, 96, 1, 1), (1, 1), (1, 1), (0, 0), (0, 0), 1), 32),
    "1x1-7x7-ragged": (((2, 100, 7, 7), (16, 100, 1, 1), (1, 1), (1, 1), (0, 0), (0, 0), 1, 0,
                        CC, True, dml.ActivationReluOperatorDesc()), 32),
    "1x1-chunks": (((1, 64, 40, 56), (16, 64, 1, 1), (1, 1), (1, 1), (0, 0), (0, 0), 1, 0, CC,
                    False), 24),
    "3x3-rows-leaky": (((1, 40, 5, 27), (16, 40, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1, 0,
                        CV, True, dml.ActivationLeakyReluOperatorDesc(0.1)), 16),
}


@pytest.mark.parametrize("name", list(PASSES))
def test_channels_tiles_in_passes_are_the_sums_of_one_pass(name):
    """Input channels in passes (the partial sums in a scratch between them): element for
    element the result of one pass (the same sums in the same order), and the definition's
    values; every output written (the output starts as NaN), serial and parallel."""
    args, cblock = PASSES[name]
    desc, inputs = conv_case(*args)
    kdesc = cpu_conv.pointwise_as_1d(desc) or desc
    base = dataclasses.replace(planner.channel_plan(kdesc, Host(8, 2)), cblock=0)
    results = {}
    for cb, par, staged in ((0, False, False), (cblock, False, False), (cblock, True, True)):
        plan = dataclasses.replace(base, cblock=cb, staged=staged and planner.needs_copy(kdesc))
        kernel = cpu_conv.build(desc, {"algorithm": "blocked", "parallel": par}, "blocked", plan)
        assert ("ps = np.empty(" in kernel.source) == bool(cb)
        y = np.full(desc.output_tensor.sizes, np.nan, F32)
        kernel(list(inputs), y)
        results[cb, par] = y
    if name == "1x1-chunks":  # the case reaches the chunked runs it names
        lay = planner.Layout.planned(kdesc, base)
        assert planner.chunks_of(lay)[0] > 1
    for key, y in results.items():
        np.testing.assert_array_equal(y, results[0, False], err_msg=str(key))
    ref = brute_force(desc, *inputs, *[None] * (3 - len(inputs)))
    act = desc.fused_activation
    ref = np.maximum(ref, 0) if act == dml.ActivationReluOperatorDesc() else leaky(desc, ref)
    np.testing.assert_allclose(results[cblock, False], ref, rtol=1e-4, atol=1e-4)


def test_small_planes_over_many_channels_go_one_run_a_chunk_outside_the_blocks():
    """Pointwise layers of 256 input channels or more on planes of at most RUN_CHUNK_RUNS runs:
    a chunk a run, chunks outside (every block of a run one after another); fewer channels,
    bigger planes, a filter larger than CACHE_BYTES (960 -> 160: 614 KB) as before."""
    def chunks(xs, ws, lanes=8, budget=12):
        desc = conv_case(xs, ws, (1, 1), (1, 1), (0, 0), (0, 0), 1)[0]
        kdesc = cpu_conv.pointwise_as_1d(desc)
        plan = cpu_conv.block_plan(kdesc, Host(lanes, 2), budget=budget)
        lay = planner.Layout.planned(kdesc, plan)
        return planner.chunks_of(lay), -(-lay.out[-1] // (lay.lanes * lay.vectors))

    for xs, ws in (((1, 576, 14, 14), (96, 576, 1, 1)), ((1, 384, 14, 14), (64, 384, 1, 1)),
                   ((8, 576, 14, 14), (96, 576, 1, 1)), ((1, 256, 5, 7), (13, 256, 1, 1))):
        (count, outer), runs = chunks(xs, ws)
        assert outer and count == runs > 1, (xs, ws)
    for xs, ws in (((1, 144, 28, 28), (32, 144, 1, 1)), ((1, 192, 14, 14), (64, 192, 1, 1)),
                   ((1, 256, 56, 56), (64, 256, 1, 1)), ((1, 960, 7, 7), (160, 960, 1, 1))):
        (count, outer), runs = chunks(xs, ws)
        assert not (outer and count == runs), (xs, ws)


@pytest.mark.parametrize("parallel", [False, True])
def test_small_filters_walk_row_tiles_outside_the_channel_blocks(parallel, monkeypatch):
    """A 2-D layer whose whole filter is at most ROWS_OUTSIDE_FILTER_BYTES (a stem: 3 input
    channels, stride 2) walks its tiles a row tile at a time, that row tile's channel blocks
    innermost; bit for bit what the blocks-outside order computes (the same sums in the same
    order), and the definition's; every output written. A larger filter, a 1-D or a 3-D layer
    (its outer axes' tiles: no row-tile-outside order) keeps the blocks outside."""
    desc, inputs = conv_case((2, 3, 30, 34), (32, 3, 3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 1)
    ys = {}
    for bound in (forward.ROWS_OUTSIDE_FILTER_BYTES, 0):
        monkeypatch.setattr(forward, "ROWS_OUTSIDE_FILTER_BYTES", bound)
        kernel = blocked_kernel(desc, 16, 24, parallel)
        lay = planner.Layout.of(kernel.key)
        assert lay.blocks > 1 and -(-lay.out[-2] // lay.rows) > 1
        assert forward.rows_outside(lay) == bool(bound)
        # the innermost coordinate of the tiles' loop: the block, or the row tile
        inner = re.search(r"(\w+) = f % \d+", kernel.source).group(1)
        assert inner == ("mbi" if bound else "rt"), kernel.source
        ys[bound] = np.full(desc.output_tensor.sizes, np.nan, F32)
        kernel(list(inputs), ys[bound])
    np.testing.assert_array_equal(ys[forward.ROWS_OUTSIDE_FILTER_BYTES], ys[0])
    np.testing.assert_allclose(ys[0], leaky(desc, brute_force(desc, *inputs)),
                               rtol=1e-4, atol=1e-4)
    monkeypatch.undo()
    big = conv_case((1, 32, 12, 12), (64, 32, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1)
    assert 4 * 32 * 64 * 9 > forward.ROWS_OUTSIDE_FILTER_BYTES
    three = conv_case((1, 2, 5, 4, 18), (32, 2, 2, 3, 2), (2, 1, 1), (1, 2, 1), (1, 0, 1),
                      (0, 1, 1), 1)  # several blocks, a small filter
    for d, inputs in (big, conv_case(*SHAPES["1d"]), three):
        kernel = blocked_kernel(d, 16, 24, parallel)
        lay = planner.Layout.of(kernel.key)
        assert not forward.rows_outside(lay), d
        y = np.full(d.output_tensor.sizes, np.nan, F32)
        kernel(list(inputs), y)
        np.testing.assert_allclose(y, leaky(d, brute_force(d, *inputs)), rtol=1e-4, atol=1e-4)
    assert planner.Layout.of(blocked_kernel(three[0], 16, 24, parallel).key).blocks > 1


def test_the_planner_takes_passes_where_a_pass_would_not_fit_the_first_level_cache():
    """Passes where one tap's weights and input of a call outgrow PASS_BYTES on a streamed
    plan (16 registers, where they were measured) with enough tiles a call: MobileNetV2's
    pointwise layers on 7 x 7 (equal passes within the bound, at least MIN_PASS channels);
    none for few channels, for 3 x 3 filters, for rows of two tiles, or with 32 registers."""
    def plan(xs, ws, host=None, pad=(0, 0)):
        desc = conv_case(xs, ws, (1, 1), (1, 1), pad, pad, 1)[0]
        return planner.channel_plan(cpu_conv.pointwise_as_1d(desc) or desc, host or Host(8, 2))

    for cin, cout in ((320, 1280), (960, 320), (160, 960), (576, 160)):
        p = plan((1, cin, 7, 7), (cout, cin, 1, 1))
        lay = planner.Layout.planned(cpu_conv.pointwise_as_1d(conv_case(
            (1, cin, 7, 7), (cout, cin, 1, 1), (1, 1), (1, 1), (0, 0), (0, 0), 1)[0]), p)
        assert p.streamed and planner.MIN_PASS <= p.cblock < cin, (cin, cout, p)
        share = 4 * p.cblock * (p.mb + lay.padded[-1])  # a pass's weights and input
        assert share <= planner.PASS_BYTES * 1.5 and -(-cin // p.cblock) >= 2
    assert plan((1, 32, 7, 7), (64, 32, 1, 1)).cblock == 0  # fits in one pass
    assert plan((1, 256, 14, 14), (256, 256, 3, 3), pad=(1, 1)).cblock == 0  # 3 x 3
    assert plan((1, 512, 7, 7), (512, 512, 3, 3), pad=(1, 1)).cblock == 0
    assert plan((1, 320, 7, 7), (1280, 320, 1, 1), Host(16, 2)).cblock == 0  # 32 registers


def test_channels_tiles_in_the_parallel_loop_and_in_float16():
    """The parallel variant (the tile called from the prange, staged slots shared out) and
    float16 inputs (computed in float32 by the same kernel) agree with the definition."""
    for args, staged in ((CHANNELS["2d-two-vectors"], True), (CHANNELS["2d-stride2-cropped"], False)):
        desc, inputs = conv_case(*args)
        plan = planner.channel_plan(desc, Host(16, 2), staged=staged)
        kernel = cpu_conv.build(desc, {"algorithm": "blocked", "parallel": True}, "blocked", plan)
        assert "prange(" in kernel.source
        y = np.full(desc.output_tensor.sizes, np.nan, F32)
        kernel(list(inputs), y)
        np.testing.assert_allclose(y, brute_force(desc, *inputs), rtol=1e-4, atol=1e-4)
    desc, inputs = conv_case((1, 4, 5, 12), (16, 4, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1,
                             dtype=np.float16)
    plan = planner.channel_plan(desc, Host.current())
    op = dml.compile_operator(desc, "cpu", algorithm="blocked")
    assert op.kernel.plan == plan  # (the cost model's pick on this host: checked, not assumed)
    y = op(*inputs)
    assert y.dtype == np.float16
    compare(desc, y, dml.compile_operator(desc, "numpy")(*inputs))


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


def _slots_on_their_own_lines(kernel) -> None:
    """A slot kernel's slots are whole cache lines (64 bytes) of a scratch that starts on one:
    no line lies across two slots, which two cores would pass to each other at every plane."""
    slot = kernel.copy_size
    assert slot % 16 == 0 and re.search(rf"\bx[os] = s \* {slot}\b", kernel.source)
    for slots in range(1, 9):  # (the thread's scratch, grown twice on the way)
        assert kernel.buffer((slots * slot,)).ctypes.data % 64 == 0


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
    assert op.kernel.copy_size == 176  # the padded plane's 8 x 21, rounded up to a line
    _slots_on_their_own_lines(op.kernel)


#: depthwise layers for the channels-in-the-lanes kernel: stride 2 over a cropped input
#: (rows and columns the windows never read), narrow rows (7: tiles overlapping), a row
#: stride with dilation, asymmetric padding and CONVOLUTION mode with an activation that has
#: no vector form, no padding at stride 1 (still transposed), 12 channels (4 lanes on wider
#: hosts), a 1 x 3 window, no bias with a ReLU, two images
DEPTHWISE_LANES = {
    "stride2-cropped": ((2, 16, 9, 10), (16, 1, 3, 3), (2, 2), (1, 1), (1, 0), (0, 0), 16),
    "narrow-7x7-clip": ((1, 16, 7, 7), (16, 1, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 16, 0, CC,
                        True, dml.ElementWiseClipOperatorDesc(min=0.0, max=6.0)),
    "rowstride-dil": ((1, 8, 13, 6), (8, 1, 3, 2), (2, 1), (2, 3), (2, 0), (0, 2), 8),
    "asym-convmode-leaky": ((2, 8, 5, 11), (8, 1, 2, 3), (1, 2), (1, 1), (0, 2), (1, 0), 8, 0,
                            CV, True, dml.ActivationLeakyReluOperatorDesc(0.1)),
    "unpadded": ((1, 8, 6, 5), (8, 1, 3, 3), (1, 1), (1, 1), (0, 0), (0, 0), 8),
    "12-channels-1x3": ((1, 12, 4, 9), (12, 1, 1, 3), (1, 2), (1, 1), (0, 1), (0, 1), 12),
    "no-bias-relu": ((2, 8, 6, 6), (8, 1, 3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 8, 0, CC,
                     False, dml.ActivationReluOperatorDesc()),
}


@pytest.mark.parametrize("lanes", [4, 8, 16])
@pytest.mark.parametrize("name", list(DEPTHWISE_LANES))
def test_depthwise_lanes_kernel_against_brute_force(name, lanes):
    """The channels-in-the-lanes depthwise kernel, planned for 4, 8 and 16 lanes (its channels
    a vector halved until they divide the channels): every output written (the output starts
    as NaN), the definition's values; serial, and parallel with slots sharing the items."""
    desc, inputs = conv_case(*DEPTHWISE_LANES[name])
    host = Host(lanes, 2)
    plan = planner.depthwise_lanes_plan(desc, host)
    assert plan is not None and plan.depthwise and 1 <= plan.pixels <= plan.lanes
    assert desc.input_tensor.sizes[1] % plan.lanes == 0 and plan.lanes <= lanes
    ref = brute_force(desc, *inputs, *[None] * (3 - len(inputs)))
    act = desc.fused_activation
    ref = (np.maximum(ref, 0) if act == dml.ActivationReluOperatorDesc() else np.clip(ref, 0, 6)
           if isinstance(act, dml.ElementWiseClipOperatorDesc) else leaky(desc, ref))
    for par in (False, True):
        kernel = cpu_conv.build(desc, {"algorithm": "blocked", "parallel": par}, "blocked", plan)
        assert kernel.key.kernel == "blocked-depthwise-lanes"
        assert "vstore_transposed(xp" in kernel.source and "vstore_transposed(y" in kernel.source
        y = np.full(desc.output_tensor.sizes, np.nan, F32)
        kernel(list(inputs), y)
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("fit, rows, band", [
    (17, 28, 14),  # two bands of 14, not 17 and an overlapping 17 (six rows twice)
    (4, 14, 4),  # 4 + 4 + 4 + the last overlapping by two: four bands however they are cut
    (5, 14, 5),  # three bands: 5 + 5 + 4 would do; 5 + 5 + overlapping 5 computes as many
    (7, 7, 7),  # the whole plane
    (1, 9, 1),
])
def test_depthwise_lanes_bands_even_out(fit, rows, band, monkeypatch):
    """A band takes as many rows as fit its bytes, evened out over the bands that makes: no
    more bands, and the last one overlaps the one before by as little as it can."""
    from dml_numba.cpu.convolution.blocked import depthwise_lanes as dl

    desc, _ = conv_case((1, 16, rows, rows), (16, 1, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 16)
    plan = planner.depthwise_lanes_plan(desc, Host(16, 2))
    row = plan.padded[-1] * plan.lanes * 4
    monkeypatch.setattr(dl, "BAND_BYTES", dl.band_reach(desc, fit) * row)
    assert dl.band_rows(desc, plan) == band
    assert -(-rows // band) == -(-rows // fit)  # as many bands as the fit gives
    assert dl.units(desc, plan) == -(-rows // band)  # one block of 16 channels


@pytest.mark.parametrize("name", list(DEPTHWISE_LANES))
def test_depthwise_lanes_kernel_in_bands_of_rows(name, monkeypatch):
    """The lanes kernel transposes the padded rows a band of output rows reads (within
    BAND_BYTES) and computes the band before the next: bands of one row (serial) and of two
    (parallel, the last band overlapping the one before where they do not divide the rows):
    every output written (NaN-filled), the same values as the whole plane at once, bit for
    bit, and the definition's."""
    from dml_numba.cpu.convolution.blocked import depthwise_lanes as dl

    desc, inputs = conv_case(*DEPTHWISE_LANES[name])
    plan = planner.depthwise_lanes_plan(desc, Host(16, 2))
    oh = desc.output_tensor.sizes[2]
    (kh, _), (sh, _), (dh, _) = desc.filter_tensor.sizes[2:], desc.strides, desc.dilations
    row = plan.padded[-1] * plan.lanes * 4
    results = {}
    for band, par in ((oh, False), (1, False), (2, True)):
        reach = (band - 1) * sh + (kh - 1) * dh + 1  # the padded rows the band reads
        assert dl.band_reach(desc, band) == reach
        monkeypatch.setattr(dl, "BAND_BYTES", reach * row)
        dml.cache.clear()  # (the band is the source's, not the key's)
        assert dl.band_rows(desc, plan) == min(band, oh)
        kernel = cpu_conv.build(desc, {"algorithm": "blocked", "parallel": par}, "blocked", plan)
        bands = -(-oh // min(band, oh))
        # every (band, image, block of channels) an item of its own, the bands outside
        assert kernel.items == dl.units(desc, plan) == (
            desc.input_tensor.sizes[0] * desc.input_tensor.sizes[1] // plan.lanes * bands)
        assert (f"takes a share of the {kernel.items} (band of {min(band, oh)} output rows, "
                "image") in kernel.source
        y = np.full(desc.output_tensor.sizes, np.nan, F32)
        kernel(list(inputs), y)
        results[band] = y
    dml.cache.clear()
    for band, y in results.items():
        np.testing.assert_array_equal(y, results[oh], err_msg=str(band))
    ref = brute_force(desc, *inputs, *[None] * (3 - len(inputs)))
    act = desc.fused_activation
    ref = (np.maximum(ref, 0) if act == dml.ActivationReluOperatorDesc() else np.clip(ref, 0, 6)
           if isinstance(act, dml.ElementWiseClipOperatorDesc) else leaky(desc, ref))
    np.testing.assert_allclose(results[1], ref, rtol=1e-4, atol=1e-4)


def test_depthwise_lanes_in_float16_and_in_slots(monkeypatch):
    """float16 (computed in float32) through the public option; five items (image, block of
    channels) over three slots, twice through the same buffers."""
    import numba

    desc, inputs = conv_case((5, 8, 7, 7), (8, 1, 3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 8,
                             dtype=np.float16)
    op = dml.compile_operator(desc, "cpu", algorithm="blocked")
    assert op.kernel.key.kernel == "blocked-depthwise-lanes"
    compare(desc, op(*inputs), dml.compile_operator(desc, "numpy")(*inputs))
    monkeypatch.setattr(numba, "get_num_threads", lambda: 3)
    desc, inputs = conv_case((5, 8, 7, 7), (8, 1, 3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 8)
    op = dml.compile_operator(desc, "cpu", algorithm="blocked", parallel=True)
    assert op.kernel.items == 5
    for _ in range(2):
        np.testing.assert_allclose(op(*inputs), brute_force(desc, *inputs), rtol=1e-4, atol=1e-4)
    assert op.kernel.copy_size == 656  # 9 x 9 pixels of 8 lanes, rounded up to a line
    _slots_on_their_own_lines(op.kernel)


def test_the_planner_takes_depthwise_lanes_on_narrow_rows():
    """The lanes kernel is the planner's pick on output rows narrower than the host's vector
    (the plane-by-plane tile is not planned there, and the cost model ranks the lanes kernel
    first on MobileNetV2's such layers); on wider rows, strided or not, the plane by plane
    tile with 8 lanes (the lanes kernel stays among the tuner's candidates); with 16 lanes the
    lanes kernel at a strided last axis where its vectors have 16 lanes, the plane-by-plane
    tile at stride 1 and where 16 does not divide the channels. It does not apply to a channel
    multiplier, a channel count no vector of 4 or more divides, 1-D or 3-D, float64, or
    windows whose weights would not fit the registers."""
    from dml_numba.cpu.convolution import choice
    from dml_numba.cpu.convolution import tune as cpu_tune

    def desc(c, h, s, k=3, mult=1, dtype=np.float32, xs=None):
        xs = xs or (1, c, h, h)
        nd = len(xs) - 2
        return conv_case(xs, (c * mult, 1) + (k,) * nd, (s,) * nd, (1,) * nd, (k // 2,) * nd,
                         (k // 2,) * nd, c, dtype=dtype)[0]

    avx2 = Host(8, 2)
    for c, h, s in ((576, 14, 2), (960, 7, 1)):
        d = desc(c, h, s)
        assert planner.takes_depthwise_lanes(d, avx2), (c, h, s)
        assert choice.ranked(d, avx2)[0][0].name == "depthwise-lanes", (c, h, s)
    for c, h, s in ((384, 14, 1), (144, 56, 1), (32, 112, 1), (96, 112, 2), (192, 28, 2)):
        d = desc(c, h, s)
        assert not planner.takes_depthwise_lanes(d, avx2) and planner.depthwise_lanes(d, avx2)
        assert choice.ranked(d, avx2)[0][0].name != "depthwise-lanes"
        assert any(p.pixels for p in cpu_tune.blocked_plans(d, avx2))  # a tuner candidate
    avx512 = Host(16, 2)
    for c, h, s in ((96, 112, 2), (144, 56, 2), (192, 28, 2), (576, 14, 2), (960, 7, 1)):
        d = desc(c, h, s)
        assert planner.takes_depthwise_lanes(d, avx512), (c, h, s)
        assert choice.ranked(d, avx512)[0][0].name == "depthwise-lanes", (c, h, s)
    for c, h, s in ((144, 56, 1), (32, 112, 1), (24, 56, 2)):  # (24: vectors of 8)
        d = desc(c, h, s)
        assert not planner.takes_depthwise_lanes(d, avx512) and planner.depthwise_lanes(d, avx512)
    assert planner.depthwise_lanes(desc(12, 14, 2), avx2) == 4
    assert planner.depthwise_lanes(desc(12, 14, 2), Host(16, 2)) == 4
    assert planner.depthwise_lanes(desc(32, 14, 2), Host(16, 2)) == 16
    for d in (desc(8, 14, 2, mult=2), desc(6, 14, 2), desc(8, 14, 2, dtype=np.float64),
              desc(8, 0, 2, xs=(1, 8, 20)), desc(8, 0, 2, xs=(1, 8, 6, 6, 6)),
              desc(8, 14, 2, k=5)):
        assert planner.depthwise_lanes(d, avx2) == 0
    assert planner.depthwise_lanes(desc(16, 14, 2, k=5), Host(16, 2)) == 16  # 32 registers


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


@pytest.mark.parametrize("name", [k for k in SHAPES if k not in (
    "1x1-unpadded", "no-padding-exact", "1x1-chunks-outside", "1x1-runs-outside")])
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
    _slots_on_their_own_lines(kernel)


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


def _prefetches(source: str) -> list:
    """The distances (elements ahead of the tile's read) of the prefetches in ``source``."""
    return [int(d) for d in re.findall(r"prefetch\(xp, xo \+ xr0 \+ (\d+)\)", source)]


@pytest.mark.parametrize("lanes", [4, 8, 16])
def test_pointwise_tiles_prefetch_where_many_input_rows_stream_from_memory(lanes):
    """A 1x1 tile reading its input in place over 32 or more input channels of big planes
    prefetches each channel's row ahead (the lines of all channels within PREFETCH_BYTES, two
    to eight tiles of the row ahead; each line of the tile's run there); none with fewer channels, over small planes, where the
    input is copied first (padding, a strided row) or for 3x3 filters. The kernels run the
    same sums: against the float64 brute force, the last tiles prefetching past the input's
    end (a prefetch never faults)."""
    from dml_numba._diskcache import choosing
    from dml_numba._host import planned_for
    from dml_numba.cpu.convolution.blocked import tile

    def source(xs, ws, pad=(0, 0), strides=(1, 1)):
        desc = conv_case(xs, ws, strides, (1, 1), pad, pad, 1)[0]
        with choosing(), planned_for(Host(lanes, 2)):
            return dml.compile_operator(desc, "cpu", algorithm="blocked").source

    for cin, hw in ((32, 112), (96, 56), (144, 56), (64, 48)):
        ds = _prefetches(source((1, cin, hw, hw), (16, cin, 1, 1)))
        span = int(re.search(r"j = min\(jt \* (\d+),", source(
            (1, cin, hw, hw), (16, cin, 1, 1))).group(1))
        d = min(ds)  # and each line of the run from there
        assert ds and set(ds) == set(range(d, d + span, LINE // 4)), (cin, hw, ds)
        assert d % span == 0 and 2 <= d // span <= 8
        assert 4 * cin * d <= tile.PREFETCH_BYTES or d // span == 2
    for xs, ws, pad, strides in (((1, 16, 112, 112), (96, 16, 1, 1), (0, 0), (1, 1)),
                                 ((1, 384, 14, 14), (64, 384, 1, 1), (0, 0), (1, 1)),
                                 ((1, 64, 56, 56), (16, 64, 1, 1), (1, 1), (1, 1)),
                                 ((1, 64, 56, 56), (16, 64, 1, 1), (0, 0), (2, 2)),
                                 ((1, 64, 56, 56), (16, 64, 3, 3), (1, 1), (1, 1))):
        assert not _prefetches(source(xs, ws, pad, strides)), (xs, ws, pad, strides)

    desc, inputs = conv_case((2, 40, 48, 48), (10, 40, 1, 1), (1, 1), (1, 1), (0, 0), (0, 0), 1)
    with planned_for(Host(lanes, 2)):
        k = dml.compile_operator(desc, "cpu", algorithm="blocked")
    assert _prefetches(k.source)
    x, w, b = (a.astype(np.float64) for a in inputs)
    ref = np.einsum("nchw,kc->nkhw", x, w[:, :, 0, 0]) + b
    np.testing.assert_allclose(k(*inputs), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("lanes", [8, 16])
def test_a_rows_last_run_takes_fewer_vectors_where_fewer_cover_it(lanes):
    """A pixels tile of ``lanes x vectors`` outputs a run, on a row that is no multiple of
    that: the last run in as few vectors as cover the rest (``narrow_tail``), overlapping the
    run before by less than a vector; every output written (NaN-filled) and right against the
    float64 brute force; a row of whole runs, a flat plan and a row shorter than one run keep
    the whole tile."""
    from dml_numba._host import planned_for
    from dml_numba.cpu.convolution.blocked import forward as fwd

    cases = [((1, 24, 14, 14), (10, 24, 1, 1), (0, 0), 12),   # 196 flattened outputs
             ((2, 3, 4, 29), (6, 3, 3, 3), (1, 1), 24),       # rows of 29
             ((1, 16, 5, 7), (9, 16, 1, 1), (0, 0), 12)]      # 35 flattened
    taken = 0
    for xs, ws, pad, budget in cases:
        desc, inputs = conv_case(xs, ws, (1, 1), (1, 1), pad, pad, 1)
        kdesc = cpu_conv.pointwise_as_1d(desc) or desc
        plan = dataclasses.replace(cpu_conv.block_plan(kdesc, Host(8, 2), lanes=lanes, budget=budget),
                                   flat=False)
        lay = planner.Layout.planned(kdesc, plan)
        span, width = lay.lanes * lay.vectors, lay.out[-1]
        tail = fwd.narrow_tail(lay, plan)
        want = -(-(width % span) // lay.lanes)
        assert tail == (want if width % span and width > span and want < lay.vectors
                        else 0), (xs, ws, budget, plan)
        with planned_for(Host(lanes, 2)):
            kernel = cpu_conv.build(desc, {"algorithm": "blocked", "parallel": False},
                                    "blocked", plan)
        assert (f"j = {width - tail * lay.lanes}\n" in kernel.source) == bool(tail)
        taken += bool(tail)
        y = np.full(desc.output_tensor.sizes, np.nan, F32)
        kernel(list(inputs), y)
        np.testing.assert_allclose(y, leaky(desc, brute_force(desc, *inputs)),
                                   rtol=1e-4, atol=1e-4)
    assert taken


#: woven copies (``BlockPlan.woven``): input, output channels, start and end padding,
#: dilations, batch; rows of one to three pixels (element by element), runs that overlap
WOVEN = {
    "16-rows-23": ((2, 16, 20, 23), 16, (1, 1), (1, 1), (1, 1)),
    "32-asym-dil": ((1, 32, 9, 40), 32, (2, 0), (1, 3), (1, 2)),
    "one-pixel-rows": ((1, 16, 3, 1), 16, (1, 1), (1, 1), (1, 1)),
    "two-pixel-rows": ((1, 16, 4, 2), 16, (1, 1), (1, 1), (1, 1)),
    "three-pixel-rows-32-out": ((1, 16, 5, 3), 32, (1, 2), (0, 1), (1, 1)),
    "48-in-dil2": ((2, 48, 6, 19), 16, (1, 1), (1, 1), (2, 2)),
    "8-out-lanes-of-8": ((1, 24, 7, 9), 8, (1, 1), (1, 1), (1, 1)),  # 24 channels in 3 blocks
}


@pytest.mark.parametrize("name", list(WOVEN))
def test_woven_copies_give_the_planar_tiles_sums(name):
    """A channels tile reading the input's padded copy with each block of 16 channels side by
    side (a pixel's channels in one line) computes what it does from the planar copy, bit for
    bit (the same sums in the same order), and the definition's; every output written."""
    xs, cout, start, end, dil = WOVEN[name]
    desc, inputs = conv_case(xs, (cout, xs[1], 3, 3), (1, 1), dil, start, end, 1)
    plan = planner.channel_plan(desc, Host(16, 2))
    assert plan.woven and planner.weaves(desc, plan)
    ys = {}
    for woven in (True, False):
        kernel = cpu_conv.build(desc, {"algorithm": "blocked", "parallel": True}, "blocked",
                                dataclasses.replace(plan, woven=woven))
        assert ("woven" in kernel.source.splitlines()[0]) == woven
        assert ("side by side" in kernel.source) == woven
        # the woven copy is one image's (each image copied, then its tiles run, in turn)
        assert kernel.copy_size == (1 if woven else xs[0]) * xs[1] * np.prod(plan.padded)
        ys[woven] = np.full(desc.output_tensor.sizes, np.nan, F32)
        kernel(list(inputs), ys[woven])
    np.testing.assert_array_equal(ys[True], ys[False])
    np.testing.assert_allclose(ys[True], np.maximum(brute_force(desc, *inputs), 0)
                               if desc.fused_activation else brute_force(desc, *inputs),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("why, change, host", [
    ("64 input channels (their planar runs are prefetched)", dict(channels=64), Host(16, 2)),
    ("a strided layer", dict(strides=(2, 2)), Host(16, 2)),
    ("two groups", dict(groups=2), Host(16, 2)),
    ("no padding: the input read in place, no copy", dict(pad=0), Host(16, 2)),
    ("input channels not a multiple of the lanes", dict(channels=24), Host(16, 2)),
    ("float16", dict(dtype=np.float16), Host(16, 2)),
    ("16 registers: a streamed tile", {}, Host(8, 2)),
])
def test_what_is_not_woven(why, change, host):
    """Each condition of ``weaves`` on its own: the plan keeps its planar copy."""
    c = change.get("channels", 32)
    g = change.get("groups", 1)
    p = change.get("pad", 1)
    desc, _ = conv_case((4, c, 12, 20), (32, c // g, 3, 3), change.get("strides", (1, 1)),
                        (1, 1), (p, p), (p, p), g, dtype=change.get("dtype", np.float32))
    plan = planner.channel_plan(desc, host)
    assert plan is None or not plan.woven, why
    base, _ = conv_case((4, 32, 12, 20), (32, 32, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1)
    assert planner.channel_plan(base, Host(16, 2)).woven  # the same layer without the change


def test_staged_or_folded_plans_read_their_planar_copy():
    """A woven plan the tuner stages or folds a padding into reads the copy that plan makes
    (planar): the layout's column step is one, and the kernel is exact."""
    desc, inputs = conv_case((2, 16, 10, 12), (16, 16, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1)
    plan = planner.channel_plan(desc, Host(16, 2))
    assert plan.woven and not plan.staged
    assert planner.Layout.planned(desc, plan).step == 16
    for changed in (dataclasses.replace(plan, staged=True),
                    dataclasses.replace(plan, fold="reflect")):
        assert planner.Layout.planned(desc, changed).step == 1
        assert not planner.weaves(desc, changed)
    staged = dataclasses.replace(plan, staged=True)
    kernel = cpu_conv.build(desc, {"algorithm": "blocked", "parallel": True}, "blocked", staged)
    y = np.full(desc.output_tensor.sizes, np.nan, F32)
    kernel(list(inputs), y)
    np.testing.assert_allclose(y, brute_force(desc, *inputs), rtol=1e-4, atol=1e-4)
