"""The shared-memory tiled kernels on the simulator, against brute-force loops from SEMANTICS
(convolution forward gather and transposed scatter, LP pooling's window sum): implicit GEMM for
dense and grouped convolution (tiles whose pixels and channels do not divide the problem, every
register-block shape the planner makes), plane tiles for depthwise convolution and LP pooling
(several tiles a plane, 1-D to 3-D); strides, dilations, padding, CONVOLUTION mode, float16
stored as half and float64, bias and activation. The simulator runs every thread of a
256-thread block, so the shapes stay tiny."""
import itertools

import numpy as np
import pytest

import dml_numba as dml
from tests.cases import CV, catalogue, compare, conv_case, pool_case
from tests.helpers import brute_conv

pytestmark = pytest.mark.cuda
BWD = dml.ConvolutionDirection.BACKWARD

CASES = {
    # (case, expected (RM, RN, TX, TY)): channels a group -> RN 4/2/1 and TY up to 16
    "fwd-70ch-edges": (conv_case((1, 2, 5, 7), (70, 2, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1,
                                 act=dml.ActivationLeakyReluOperatorDesc(0.3)), (4, 2, 16, 16)),
    "fwd-groups-6-strided-dilated": (conv_case((2, 6, 7, 6), (18, 2, 3, 2), (2, 1), (2, 1),
                                               (1, 0), (2, 1), 3), (4, 2, 64, 4)),
    "fwd-1d-f64": (conv_case((2, 3, 9), (5, 3, 4), (2,), (1,), (2,), (1,), 1,
                             dtype=np.float64), (4, 1, 32, 8)),
    "fwd-3d-f16-convmode": (conv_case((1, 2, 3, 4, 3), (4, 2, 2, 2, 2), (1, 2, 1), (1, 1, 1),
                                      (0, 1, 1), (1, 0, 0), 1, mode=CV, dtype=np.float16),
                            (1, 4, 256, 1)),
    "bwd-stride2-groups": (conv_case((1, 4, 3, 2), (4, 4, 3, 3), (2, 2), (1, 1), (1, 0), (0, 1),
                                     2, direction=BWD, op=(1, 0)), (1, 4, 256, 1)),
    "bwd-3x3-s2-16ch-f16": (conv_case((1, 4, 3, 3), (4, 16, 3, 3), (2, 2), (1, 1), (1, 1), (1, 1),
                                      1, direction=BWD, op=(1, 1), dtype=np.float16,
                                      act=dml.ActivationReluOperatorDesc()), (4, 4, 64, 4)),
    # per-phase GEMMs: 1x1 taps at strides 3 x 2 (phases no tap reaches: bias only; 2 rows
    # under a stride of 3, so one phase has no output at all), stride 2 with dilation 2 (only
    # even phases have taps), and stride 1 (the plain gather form)
    "bwd-1x1-s3x2-phases-without-taps": (conv_case((1, 2, 1, 2), (2, 4, 1, 1), (3, 2), (1, 1),
                                                   (0, 0), (0, 0), 1, direction=BWD, op=(1, 1)),
                                         (1, 4, 256, 1)),
    "bwd-s2-dilation2-f64": (conv_case((1, 2, 3, 3), (2, 4, 2, 3), (2, 2), (2, 1), (1, 0),
                                       (0, 1), 1, direction=BWD, mode=CV, dtype=np.float64),
                             (1, 4, 256, 1)),
    "bwd-stride1": (conv_case((1, 3, 4, 3), (3, 4, 3, 2), (1, 1), (1, 2), (1, 1), (0, 1), 1,
                              direction=BWD), (1, 4, 256, 1)),
}


# formulas of the two activations used above (all of them: tests/ops/test_activation.py)
ACTIVATIONS = {
    dml.ActivationLeakyReluOperatorDesc: lambda v: np.where(v < 0, 0.3 * v, v),
    dml.ActivationReluOperatorDesc: lambda v: np.maximum(v, 0.0),
}


@pytest.mark.parametrize("name", list(CASES))
def test_tiled_convolution_agrees_with_brute_force(name):
    from dml_numba.cuda.convolution.implicit_gemm import tile_plan

    (desc, inputs), shape = CASES[name]
    plan = tile_plan(desc)
    assert (plan.rm, plan.rn, plan.tx, plan.ty) == shape and plan.tx * plan.ty == 256
    op = dml.compile_operator(desc, "cuda", algorithm="tiled")
    assert "cuda.shared.array" in op.source and "cuda.syncthreads()" in op.source
    # strided transposed convolution runs one GEMM per output phase, the rest one GEMM
    phased = desc.direction == BWD and any(s > 1 for s in desc.strides)
    assert ("implicit GEMM per phase" in op.source) == phased
    y = op(*inputs)
    ref = dml.compile_operator(desc, "numpy")(*inputs)
    compare(desc, y, ref)
    expected = brute_conv(desc, inputs)
    expected = ACTIVATIONS.get(type(desc.fused_activation), lambda v: v)(expected)
    tol = {np.float16: 2e-2, np.float32: 1e-4, np.float64: 1e-10}[inputs[0].dtype.type]
    np.testing.assert_allclose(y.astype(np.float64), expected, rtol=tol, atol=tol * 50)


def test_a_split_reduction_adds_its_parts_and_leaves_its_counters_at_zero():
    """A layer of few tiles and a long reduction runs it in parts (:func:`split_for`): 72
    channels are two tiles of 64, 8 x 5 x 7 = 280 reduction terms two parts of 144 and 136.
    Each (tile, part) is a block; the last of a tile's blocks adds the parts and stores: against
    brute-force loops (bias, activation), and the tiles' counters are back at zero for the next
    launch."""
    from dml_numba.cuda.convolution.implicit_gemm import Split, split_for

    desc, inputs = conv_case((1, 8, 1, 2), (72, 8, 5, 7), (1, 1), (1, 1), (2, 3), (2, 3), 1,
                             act=dml.ActivationLeakyReluOperatorDesc(0.3))
    assert split_for(desc) == Split(2, 144)
    op = dml.compile_operator(desc, "cuda", algorithm="tiled")
    assert "in 2 parts of 144" in op.source
    # the block that stores is the one that counts last (the simulator runs blocks one after
    # another, where storing at every count would end right too: pinned in the source; on a
    # GPU the CNN benchmark's split layers checked it against ONNX Runtime)
    assert "cuda.atomic.add(cnt, tile, 1) == 1 else 0" in op.source
    y = op(*inputs)
    expected = ACTIVATIONS[type(desc.fused_activation)](brute_conv(desc, inputs))
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=5e-3)
    (workspace, counters), = op.kernel._scratch.values()
    assert workspace.shape == (2, 2, 256 * 4 * 4)
    np.testing.assert_array_equal(counters.copy_to_host(), [0, 0])


def test_a_split_kernels_workspace_is_its_own_for_each_thread_and_stream():
    """Launches that may overlap never share a workspace or counters: one set per thread and
    stream, made zeroed on first use, the same set for the same thread and stream again."""
    import threading

    from numba import cuda

    desc, _ = conv_case((1, 8, 1, 2), (72, 8, 5, 7), (1, 1), (1, 1), (2, 3), (2, 3), 1)
    kernel = dml.compile_operator(desc, "cuda", algorithm="tiled").kernel
    mine = kernel._scratch_for(None)
    assert kernel._scratch_for(None) is mine
    other = kernel._scratch_for(cuda.stream())
    theirs = []
    worker = threading.Thread(target=lambda: theirs.append(kernel._scratch_for(None)))
    worker.start()
    worker.join()
    sets = [mine, other, theirs[0]]
    for i, a in enumerate(sets):
        np.testing.assert_array_equal(a[1].copy_to_host(), [0, 0])  # the counters, zeroed
        for b in sets[i + 1:]:
            assert a[0] is not b[0] and a[1] is not b[1]


@pytest.mark.parametrize("sizes, expected", [
    # (input, filter) -> (parts, chunk), worked by hand from split_for's rule: parts =
    # min(ceil(264 / tiles), reduction // 128), chunk = that share rounded up to slabs of 8,
    # parts = ceil(reduction / chunk); one part where 2 x tiles >= 264
    (((1, 512, 7, 7), (512, 512, 3, 3)), (32, 144)),   # 8 tiles, 4608 terms: 33 -> 140 -> 144
    (((8, 512, 7, 7), (512, 512, 3, 3)), (5, 928)),    # 56 tiles: 5 -> 921.6 -> 928
    (((1, 128, 28, 28), (128, 128, 3, 3)), (9, 128)),  # 26 tiles: min(11, 9)
    (((1, 64, 7, 7), (512, 64, 1, 1)), (1, 64)),       # 64 terms: no part of 128
    (((8, 64, 56, 56), (64, 64, 3, 3)), (1, 576)),     # 392 tiles fill the GPU
])
def test_the_split_of_each_layer_shape(sizes, expected):
    from dml_numba.cuda.convolution.implicit_gemm import split_for

    (xs, ws) = sizes
    pad = ws[2] // 2
    desc, _ = conv_case(xs, ws, (1, 1), (1, 1), (pad, pad), (pad, pad), 1)
    split = split_for(desc)
    assert (split.parts, split.chunk) == expected


def test_a_transposed_strided_convolution_is_not_split():
    """The phased kernel (one GEMM per output phase) keeps its reduction whole."""
    from dml_numba.cuda.convolution.implicit_gemm import split_for

    desc, _ = conv_case((1, 512, 4, 4), (512, 64, 3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 1,
                        direction=BWD, op=(1, 1))
    assert split_for(desc).parts == 1


@pytest.mark.parametrize("name", [n for n in catalogue() if n.startswith("conv")])
def test_catalogue_on_the_tiled_kernel(name):
    desc, inputs = catalogue()[name]
    y = dml.compile_operator(desc, "cuda", algorithm="tiled")(*inputs)
    compare(desc, y, dml.compile_operator(desc, "numpy")(*inputs))


@pytest.mark.parametrize("channels, shape", [
    # (output channels a group, (RM, RN, TX, TY)), worked by hand from tile_plan's rule: RN the
    # largest of 4, 2, 1 dividing the channels; TY the power of two covering channels / RN, at
    # most 16; TX = 256 / TY; RM = min(4, 256 / TX)
    (1, (1, 1, 256, 1)), (2, (1, 2, 256, 1)), (3, (4, 1, 64, 4)), (5, (4, 1, 32, 8)),
    (6, (4, 2, 64, 4)), (8, (2, 4, 128, 2)), (36, (4, 4, 16, 16)), (200, (4, 4, 16, 16))])
def test_the_tile_plan_of_each_channel_count(channels, shape):
    from dml_numba.cuda.convolution.implicit_gemm import tile_plan

    desc = conv_case((1, 2, 3, 3), (channels, 2, 1, 1), (1, 1), (1, 1), (0, 0), (0, 0), 1)[0]
    plan = tile_plan(desc)
    assert (plan.rm, plan.rn, plan.tx, plan.ty) == shape
    assert all(type(v) is int for v in (plan.rm, plan.rn, plan.tx, plan.ty))  # sizes in source


def test_phases_list_exactly_the_taps_that_reach_each_output():
    """Against the definition: output o receives tap k iff (o + start - k*dilation) is a
    non-negative multiple of the stride, from input (o + start - k*dilation) / stride."""
    from dml_numba.cuda.convolution.implicit_gemm import phases_for

    for name in ("bwd-stride2-groups", "bwd-1x1-s3x2-phases-without-taps",
                 "bwd-s2-dilation2-f64"):
        desc = CASES[name][0][0]
        for ax, s, dil, kk, pad, n_out in zip(phases_for(desc), desc.strides, desc.dilations,
                                               desc.filter_tensor.sizes[2:], desc.start_padding,
                                               desc.output_tensor.sizes[2:]):
            for o in range(n_out):
                f = (o + pad) % s
                j, rem = divmod(o - ax.o0[f], s)
                assert rem == 0 and 0 <= j < ax.outputs[f]
                listed = {(ax.k0[f] + t * ax.step, ax.base[f] + j - t * ax.dt)
                          for t in range(ax.count[f])}
                expected = {(k, (o + pad - k * dil) // s) for k in range(kk)
                            if (o + pad - k * dil) % s == 0}
                assert listed == expected, (name, o)
            assert sum(ax.outputs) == n_out


def test_the_automatic_choice_tiles_where_a_tile_is_reused():
    from dml_numba.cuda.convolution import choose_algorithm

    dense = CASES["fwd-70ch-edges"][0][0]
    depthwise = catalogue()["conv-fwd-depthwise-relu"][0]  # 3x3 windows overlap
    # depthwise 2x2 stride 2: the windows do not overlap, every input is read once anyway
    apart = conv_case((1, 3, 4, 4), (3, 1, 2, 2), (2, 2), (1, 1), (0, 0), (0, 0), 3)[0]
    tiny = catalogue()["conv-fwd-clip-nobias"][0]  # 2 channels, reduction of 8
    assert [choose_algorithm(d) for d in (dense, depthwise, apart, tiny)] == [
        "tiled", "tiled", "direct", "direct"]
    assert "implicit GEMM" in dml.compile_operator(dense, "cuda").source
    assert "plane patches" in dml.compile_operator(depthwise, "cuda").source
    for d in (apart, tiny):
        assert "cuda.shared.array" not in dml.compile_operator(d, "cuda").source


@pytest.mark.parametrize("cout, cin, k, expected", [
    (4, 4, (2, 2), "tiled"),   # a reduction of exactly 16 terms into 4 output channels
    (4, 5, (1, 3), "direct"),  # 15 terms
    (3, 4, (2, 2), "direct"),  # 3 output channels
])
def test_the_automatic_choice_at_its_thresholds(cout, cin, k, expected):
    from dml_numba.cuda.convolution import choose_algorithm

    d = conv_case((1, cin, 5, 5), (cout, cin) + k, (1, 1), (1, 1), (0, 0), (0, 0), 1)[0]
    assert choose_algorithm(d) == expected


# -- plane tiles: depthwise convolution and LP pooling ------------------------------------------

def _brute_pool(x, desc):
    """(sum over the window of |x|**p) ** (1/p), zero padding, from SEMANTICS' pseudo-code."""
    x = x.astype(np.float64)
    out = np.zeros(desc.output_tensor.sizes)
    for idx in itertools.product(*(range(s) for s in out.shape)):
        n, c, o = idx[0], idx[1], idx[2:]
        acc = 0.0
        for k in itertools.product(*(range(w) for w in desc.window_size)):
            a = [oo * s + kk * d - p for oo, s, kk, d, p in
                 zip(o, desc.strides, k, desc.dilations, desc.start_padding)]
            if all(0 <= v < n_ for v, n_ in zip(a, x.shape[2:])):
                acc += abs(x[(n, c, *a)]) ** desc.p
        out[idx] = acc ** (1.0 / desc.p)
    return out


PLANES = {
    # (case, tile): several tiles along both strided axes (10 x 34 outputs: 2 x 2 tiles of 8 x 32)
    "pool-p2-2x2-tiles-strided": (pool_case((1, 2, 20, 70), (3, 3), (2, 2), (1, 0), (0, 0),
                                            (1, 1), 2), (8, 32)),
    "pool-p3-dilated-strided-f16": (pool_case((1, 1, 9, 11), (2, 3), (1, 2), (1, 1), (0, 1),
                                              (2, 1), 3, dtype=np.float16), (32, 8)),
    "pool-p1-1d-f64": (pool_case((2, 1, 300), (4,), (1,), (2,), (1,), (1,), 1,
                                 dtype=np.float64), (256,)),
    "pool-p4-3d": (pool_case((1, 1, 3, 4, 5), (2, 2, 2), (1, 1, 1), (0, 1, 0), (1, 0, 1),
                             (1, 1, 1), 4), (1, 32, 8)),
    "depthwise-multiplier-2-convmode": (conv_case((1, 2, 10, 35), (4, 1, 3, 3), (1, 1), (1, 1),
                                                  (1, 1), (1, 1), 2, mode=CV,
                                                  act=dml.ActivationReluOperatorDesc()), (8, 32)),
    "depthwise-strided-dilated-f16": (conv_case((1, 3, 7, 9), (3, 1, 3, 2), (2, 1), (1, 2),
                                                (1, 0), (0, 1), 3, dtype=np.float16), (32, 8)),
    "depthwise-1d-f64": (conv_case((1, 2, 9), (2, 1, 3), (1,), (1,), (1,), (1,), 2,
                                   dtype=np.float64), (256,)),
}


@pytest.mark.parametrize("name", list(PLANES))
def test_plane_tiles_agree_with_brute_force(name):
    (desc, inputs), tile = PLANES[name]
    op = dml.compile_operator(desc, "cuda", algorithm="tiled")
    assert "plane patches" in op.source
    assert op.kernel.launch_bounds == (256, 3) and op.kernel.block == 256
    y = op(*inputs)
    compare(desc, y, dml.compile_operator(desc, "numpy")(*inputs))
    from dml_numba.cuda._planes import plane_plan

    if isinstance(desc, dml.LpPooling1OperatorDesc):
        expected = _brute_pool(inputs[0], desc)
        kernel = desc.window_size
    else:
        expected = ACTIVATIONS.get(type(desc.fused_activation), lambda v: v)(
            brute_conv(desc, inputs))
        kernel = desc.filter_tensor.sizes[2:]
    plan = plane_plan(desc.output_tensor.sizes[2:], kernel, desc.strides, desc.dilations, 4)
    assert plan.patch[-len(tile):] == tile
    tol = {np.float16: 2e-2, np.float32: 1e-4, np.float64: 1e-10}[inputs[0].dtype.type]
    np.testing.assert_allclose(y.astype(np.float64), expected, rtol=tol, atol=tol)


def test_no_plane_tile_where_windows_do_not_overlap_or_the_region_is_too_big():
    from dml_numba.cuda._planes import SHARED_LIMIT, plane_plan

    assert plane_plan((28, 28), (2, 2), (2, 2), (1, 1), 4) is None
    plan = plane_plan((56, 56), (3, 3), (1, 1), (1, 1), 4)
    assert plan.patch == (8, 32) and plan.region == (10, 34) and plan.counts == (7, 2)
    # a 31-wide dilated window: the region of 8 x 32 outputs exceeds shared memory
    big = plane_plan((64, 64), (31, 31), (1, 1), (4, 4), 4)
    assert big is None and (7 + 30 * 4 + 1) * (31 + 30 * 4 + 1) * 4 > SHARED_LIMIT
    # a region of exactly the limit still fits: 96 x 128 float32 elements
    exact = plane_plan((64, 64), (3, 3), (1, 1), (44, 48), 4)
    assert exact.region == (96, 128) and 96 * 128 * 4 == SHARED_LIMIT
    # a 3 x 3 window dilated by 30: a region of 68 x 92 elements fits shared memory in float32
    # (25,024 bytes), not in float64 (50,048): the plane kernel for the one, not the other
    from dml_numba.cuda.convolution import plane_plan_for
    from dml_numba.cuda.lp_pooling import plan_for

    assert 68 * 92 * 4 <= SHARED_LIMIT < 68 * 92 * 8
    for dtype, fits in ((np.float32, True), (np.float16, True), (np.float64, False)):
        conv = conv_case((1, 2, 124, 124), (2, 1, 3, 3), (1, 1), (30, 30), (0, 0), (0, 0), 2,
                         dtype=dtype)[0]
        lp = pool_case((1, 1, 124, 124), (3, 3), (1, 1), (0, 0), (0, 0), (30, 30), 2, dtype)[0]
        for plan in (plane_plan_for(conv), plan_for(lp)[0]):
            assert (plan is not None) == fits, (dtype, plan)
            assert not fits or plan.region == (68, 92)
    desc = pool_case((1, 1, 6, 6), (2, 2), (2, 2), (0, 0), (0, 0), (1, 1), 2)[0]
    assert "plane patches" not in dml.compile_operator(desc, "cuda", algorithm="tiled").source
