"""An operator with an addend (a graph's residual connection, FusedAddDesc): every blocked
FORWARD tile that adds it in its epilogue (pixels tiles by rows, flattened, staged, with a
narrow last run; channels tiles whole, through a row scratch, in passes over the input
channels) against the definition (brute force in float64, the addend, then the activation),
and bit for bit against the same tile without the addend followed by the addition in float32;
Winograd's output transform (and its direct sum where its sums are not finite); the kernels
that take no addend (direct, GEMM, float16) running ADD1 after them in place; the "numpy"
device; an output overlapping the addend refused (validation: in
tests/unit/test_validation_rules.py)."""
import dataclasses

import numpy as np
import pytest

import dml_numba as dml
from dml_numba.cpu import convolution as cpu_conv
from dml_numba.cpu._emit import Host
from dml_numba.cpu.convolution.blocked import forward
from dml_numba.cpu.convolution.blocked import plan as planner
from dml_numba.ops.fused_add import FusedAddDesc
from tests.cases import conv_case as _conv_case
from tests.ops.test_convolution_blocked import CHANNELS, FLAT, SHAPES, brute_force

RELU = dml.ActivationReluOperatorDesc()
LEAKY = dml.ActivationLeakyReluOperatorDesc(0.1)
SIGMOID = dml.ActivationSigmoidOperatorDesc()


def conv_case(args, act):
    """A case of the blocked tables (none with an activation of its own) with ``act``."""
    return _conv_case(*args, act=act)


def with_addend(desc):
    return FusedAddDesc(desc, dml.TensorDesc(desc.output.data_type, desc.output.sizes))


def activated(act, v):
    """``v`` (float64) through ``act`` by its definition."""
    if act is None:
        return v
    if act == RELU:
        return np.maximum(v, 0)
    if act == LEAKY:
        return np.where(v >= 0, v, 0.1 * v)
    assert act == SIGMOID
    return 1 / (1 + np.exp(-v))


def _plans():
    """(case name, table, plan maker) of each kind of blocked FORWARD tile."""
    def pixels(lanes, budget, **kw):
        return lambda kd: planner.block_plan(kd, lanes=lanes, budget=budget, **kw)

    def channels(host, staged=False):
        return lambda kd: planner.channel_plan(kd, host, staged=staged)

    return [
        ("rows", SHAPES["2d-tails"], pixels(8, 12, staged=False)),
        ("rows-16-lanes", SHAPES["2d-groups-rowstride-dil"], pixels(16, 24)),
        ("staged", SHAPES["2d-asym-pad-convmode"], pixels(4, 4, staged=True)),
        ("flat", FLAT["2d-tails"], pixels(8, 12, staged=False, flat_gain=100.0)),
        ("1x1-narrow-tail", ((2, 16, 14, 14), (12, 16, 1, 1), (1, 1), (1, 1), (0, 0), (0, 0), 1),
         pixels(8, 12)),
        ("1x1-runs-outside", SHAPES["1x1-runs-outside"], pixels(8, 12)),
        ("channels", CHANNELS["2d-two-vectors"], channels(Host(16, 2))),
        ("channels-row-scratch", CHANNELS["2d-two-vectors"], channels(Host(8, 2))),
        ("channels-staged", CHANNELS["2d-stride2-cropped"], channels(Host(8, 2), staged=True)),
        ("channels-1x1", CHANNELS["1x1-in-place"], channels(Host(8, 2))),
    ]


#: each tile with no activation, a ReLU (a vector form: the pass in vectors) and a sigmoid
#: (none: the pass element by element), in turn
PLANS = [plan + (act,) for plan, act in zip(_plans(), [None, RELU, SIGMOID] * 4)]


@pytest.mark.parametrize("name, args, make, act", PLANS, ids=[
    f"{p[0]}-{type(p[3]).__name__[10:-12].lower() or 'none'}" for p in PLANS])
def test_every_forward_tile_adds_the_addend_before_its_activation(name, args, make, act):
    """Each tile, its plan with the addend: every output written (NaN-filled first), equal to
    the definition within tolerance, and bit for bit the same tile without the addend, then
    the sum in float32 and the activation (ReLU exact; the sigmoid's scalar pass the same
    formula either way)."""
    desc, inputs = conv_case(args, act)
    kdesc = cpu_conv.pointwise_as_1d(desc) or desc
    plan = make(kdesc)
    assert plan is not None, name
    fused = cpu_conv.build(desc, {"algorithm": "blocked", "parallel": name.endswith("scratch")},
                           "blocked", dataclasses.replace(plan, addend=True))
    assert fused.key.plan.label.endswith(" +r")
    assert "ad[" in fused.source or "vload(ad" in fused.source
    if name == "flat":
        assert plan.flat
    if name == "channels-row-scratch":
        assert forward.row_scratch(planner.Layout.planned(kdesc, plan), plan)
    r = np.random.default_rng(7).standard_normal(desc.output.sizes).astype(np.float32)
    y = np.full(desc.output.sizes, np.nan, np.float32)
    fused(list(inputs) + [r], y)
    ref = activated(act, brute_force(desc, *inputs, *[None] * (3 - len(inputs))) + r)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    bare_desc = dataclasses.replace(desc, fused_activation=None)
    bare = cpu_conv.build(bare_desc, {"algorithm": "blocked", "parallel": False}, "blocked",
                          plan)
    z = np.empty_like(y)
    bare(list(inputs), z)
    then = dml.compile_operator(with_addend(desc).addition(), "cpu")(z, r)
    np.testing.assert_array_equal(y, then)


@pytest.mark.parametrize("algorithm", ["direct", "gemm"])
def test_kernels_without_an_addend_run_the_addition_after_them_in_place(algorithm):
    """A kernel that takes no addend (direct, GEMM): the bare kernel, then ADD1's kernel over
    its output in place with the activation: bit for bit the two operators one by one."""
    desc, inputs = conv_case(SHAPES["2d-tails"], RELU)
    d = with_addend(desc)
    op = dml.compile_operator(d, "cpu", algorithm=algorithm)
    assert not op.kernel.fused and op.kernel.kernel.algorithm == algorithm
    r = np.random.default_rng(3).standard_normal(desc.output.sizes).astype(np.float32)
    got = op(*inputs, r)
    conv = dml.compile_operator(dataclasses.replace(desc, fused_activation=None), "cpu",
                                algorithm=algorithm)(*inputs)
    np.testing.assert_array_equal(got, np.maximum(conv + r, 0))
    np.testing.assert_allclose(got, dml.compile_operator(d, "numpy")(*inputs, r), rtol=1e-4,
                               atol=1e-4)


@pytest.mark.parametrize("act", [None, RELU, SIGMOID], ids=["none", "relu", "sigmoid"])
def test_winograd_adds_the_addend_in_its_output_transform(act):
    """Winograd's output transform adds the addend after the bias, before the activation (its
    filter, input and product kernels are the plain ones'): bit for bit Winograd without the
    activation, then the addition in float32 and the activation."""
    desc, inputs = conv_case(SHAPES["no-padding-exact"], act)
    op = dml.compile_operator(with_addend(desc), "cpu", algorithm="winograd")
    assert op.kernel.fused and op.kernel.kernel.algorithm == "winograd"
    assert "ad[yr + ox]" in op.kernel.source
    r = np.random.default_rng(3).standard_normal(desc.output.sizes).astype(np.float32)
    got = op(*inputs, r)
    conv = dml.compile_operator(dataclasses.replace(desc, fused_activation=None), "cpu",
                                algorithm="winograd")(*inputs)
    np.testing.assert_array_equal(got, dml.compile_operator(with_addend(desc).addition(),
                                                            "cpu")(conv, r))
    np.testing.assert_allclose(got, activated(act, brute_force(desc, *inputs) + r), rtol=1e-4,
                               atol=1e-4)


@pytest.mark.parametrize("blocked", [True, False], ids=["blocked", "direct"])
def test_winograd_s_direct_sum_takes_the_addend_too(blocked, monkeypatch):
    """A call whose Winograd sums are not finite is the direct sum's (the blocked tile the
    static choice takes, adding the addend itself; or, where there is none, the direct loop
    nest then the addition in place): with the addend, the sum and the activation of the two
    nodes one by one."""
    from dml_numba.cpu.convolution import choice

    dml.cache.clear()  # a new operator: its direct sum's kernel is chosen at its first call
    if not blocked:
        monkeypatch.setattr(choice, "choose", lambda desc, among=None: ("direct", None))
    desc, inputs = conv_case(SHAPES["no-padding-exact"], RELU)
    x = inputs[0].copy()
    x[0, 1, 2, 3] = np.inf
    inputs = [x] + list(inputs[1:])
    op = dml.compile_operator(with_addend(desc), "cpu", algorithm="winograd")
    r = np.random.default_rng(3).standard_normal(desc.output.sizes).astype(np.float32)
    got = op(*inputs, r)
    assert op.kernel.kernel._direct is not None
    plain = dataclasses.replace(desc, fused_activation=None)
    if blocked:
        conv = dml.compile_operator(plain, "cpu", algorithm="blocked")(*inputs)
    else:  # the loop nest itself (what "direct" compiles to may be its rows kernel on a
        # host with wide vectors: the same sums in another order)
        conv = np.empty(desc.output.sizes, np.float32)
        cpu_conv.build(plain, {}, "direct", None)(list(inputs), conv)
    np.testing.assert_array_equal(got, np.maximum(conv + r, 0))


def test_float16_rounds_the_convolution_before_the_sum():
    """float16: the blocked kernel computes in float32, so adding the addend in its epilogue
    would round the sum once where the two nodes round the convolution's result first: the
    addition runs after it instead, and the result is the nodes' one by one, bit for bit."""
    desc, inputs = _conv_case(*SHAPES["2d-tails"], dtype=np.float16)
    d = with_addend(desc)
    op = dml.compile_operator(d, "cpu", algorithm="blocked")
    assert not op.kernel.fused
    r = np.random.default_rng(3).standard_normal(desc.output.sizes).astype(np.float16)
    conv = dml.compile_operator(desc, "cpu", algorithm="blocked")(*inputs)
    expect = (conv.astype(np.float32) + r.astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(op(*inputs, r), expect)


def test_the_default_choice_and_the_numpy_device():
    """``compile_operator`` with no options: the static choice for the convolution alone,
    given the addend where its kernel takes one; the "numpy" device: the nodes' vectorised
    variants one by one; both the definition's values; strided addends read right."""
    desc, inputs = conv_case(((1, 8, 9, 20), (16, 8, 1, 1), (1, 1), (1, 1), (0, 0), (0, 0), 1),
                             LEAKY)
    d = with_addend(desc)
    big = np.random.default_rng(4).standard_normal((1, 16, 9, 40)).astype(np.float32)
    r = big[:, :, :, ::2]  # strided views (evenly: their flat views too): read through copies
    inputs[2] = np.repeat(inputs[2], 2, axis=1)[:, ::2]
    assert not inputs[2].flags.c_contiguous
    ref = activated(LEAKY, brute_force(desc, *inputs) + r)
    for device in ("cpu", "numpy"):
        got = dml.compile_operator(d, device)(*inputs, r)
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    # the addend given to the static choice's kernel where it takes one: the blocked tile,
    # the choice with 4 and 8 lanes; not the direct kernel, the choice with 16
    from dml_numba._host import planned_for

    for host, fused in ((Host(8, 2), True), (Host(4, 2), True), (Host(16, 2), False)):
        with planned_for(host):
            dml.cache.clear()  # (operators are memoised without the host they were built for)
            alone = dml.compile_operator(desc, "cpu").kernel
            assert (alone.algorithm == "blocked") == fused
            assert dml.compile_operator(d, "cpu").kernel.fused == fused
    dml.cache.clear()
    # (the convolution alone reads such a bias too)
    np.testing.assert_allclose(dml.compile_operator(desc, "cpu")(*inputs),
                               activated(LEAKY, brute_force(desc, *inputs)), rtol=1e-4, atol=1e-4)


def test_a_graph_node_of_its_own():
    """A FusedAddDesc as a node of a user's graph: its inputs the convolution's slots (the
    absent bias's included), then the addend; the same values on "numpy" and "cpu"."""
    desc, inputs = conv_case(((1, 4, 6, 10), (4, 4, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1,
                              0, dml.ConvolutionMode.CROSS_CORRELATION, False), RELU)
    d = with_addend(desc)
    assert d.input_fields == ("input_tensor", "filter_tensor", "bias_tensor", "addend_tensor")
    assert d.filter_tensor == desc.filter_tensor and d.bias_tensor is None
    N, IN, OUT = dml.OperatorGraphNodeDesc, dml.InputGraphEdgeDesc, dml.OutputGraphEdgeDesc
    g = dml.GraphDesc(3, 1, (N(d, "conv+r"),), (IN(0, 0, 0), IN(1, 0, 1), IN(2, 0, 3)),
                      (OUT(0, 0, 0),), ())
    r = np.random.default_rng(2).standard_normal(desc.output.sizes).astype(np.float32)
    ref = activated(RELU, brute_force(desc, *inputs, None) + r)
    for device in ("numpy", "cpu"):
        np.testing.assert_allclose(dml.compile_graph(g, device)(*inputs, r), ref, rtol=1e-4,
                                   atol=1e-4)


def test_an_output_overlapping_the_addend_is_refused():
    """The kernel writes each output tile before it reads the addend there: an ``out`` that
    is the addend (or overlaps it) is refused before anything runs, on every device."""
    desc, inputs = conv_case(((1, 4, 6, 10), (4, 4, 1, 1), (1, 1), (1, 1), (0, 0), (0, 0), 1),
                             None)
    d = with_addend(desc)
    r = np.random.default_rng(0).standard_normal(desc.output.sizes).astype(np.float32)
    keep = r.copy()
    for device in ("cpu", "numpy"):
        op = dml.compile_operator(d, device)
        with pytest.raises(dml.ValidationError, match="overlap"):
            op(*inputs, r, out=r)
        np.testing.assert_array_equal(r, keep)


def test_the_addend_is_prefetched_as_each_tile_starts():
    """A tile with the addend fetches the lines its pass will read as it starts (the first
    and last element of each of its channels' runs, each line between); a channels tile in
    passes over the input channels only in the last pass (the one that stores); none without
    the addend."""
    desc, _ = conv_case(((1, 16, 14, 14), (12, 16, 1, 1), (1, 1), (1, 1), (0, 0), (0, 0), 1),
                        None)
    kdesc = cpu_conv.pointwise_as_1d(desc)
    plan = planner.block_plan(kdesc, lanes=8, budget=12)
    src = cpu_conv.build(desc, {"algorithm": "blocked"}, "blocked",
                         dataclasses.replace(plan, addend=True)).source
    span = plan.lanes * plan.vectors
    assert f"prefetch(ad, (n * 12 + m0 + m) * 196 + yr0 + r * 0 + j + {span - 1})" in src
    assert "prefetch(ad, (n * 12 + m0 + m) * 196 + yr0 + r * 0 + j + 0)" in src
    assert "prefetch(ad" not in cpu_conv.build(desc, {"algorithm": "blocked"}, "blocked",
                                               plan).source
    wide, _ = conv_case(((1, 256, 7, 7), (32, 256, 1, 1), (1, 1), (1, 1), (0, 0), (0, 0), 1),
                        None)
    kd = cpu_conv.pointwise_as_1d(wide)
    passes = dataclasses.replace(planner.channel_plan(kd, Host(8, 2)), cblock=64, addend=True)
    src = cpu_conv.build(wide, {"algorithm": "blocked"}, "blocked", passes).source
    assert "if c0 >= 192:\n" in src and src.count("prefetch(ad") == 2
