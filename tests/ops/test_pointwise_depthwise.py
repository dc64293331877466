"""A depthwise convolution of a pointwise convolution's result (a graph's pair rule,
PointwiseDepthwiseDesc): the one kernel that computes the pointwise result band by band into
the depthwise lanes kernel's slots, for 16, 8 and 4 lanes, against the definition (both
convolutions by brute force in float64, each activation by its formula, the depthwise
padding zeros); strides along either axis and both, dilations, padding on any side and cropped
ends, no biases, batches, runs of pixels that overlap at a row's end, bands of several rows;
where it does not run (unit strides, float16, an activation without a vector form, a forced
algorithm) the two kernels one by one; the "numpy" device; the descriptor's validation; a node
of a user's graph."""
import numpy as np
import pytest

import dml_numba as dml
from dml_numba.cpu import pointwise_depthwise as cpu_pair
from dml_numba.cpu._emit import Host
from dml_numba.ops.pointwise_depthwise import PointwiseDepthwiseDesc
from tests.ops.test_convolution_blocked import brute_force

F = dml.functional
RELU = dml.ActivationReluOperatorDesc()
CLIP6 = dml.ElementWiseClipOperatorDesc(min=0.0, max=6.0)
SIGMOID = dml.ActivationSigmoidOperatorDesc()


def activated(act, v):
    """``v`` (float64) through ``act`` by its formula."""
    if act is None:
        return v
    if act == RELU:
        return np.maximum(v, 0)
    if act == CLIP6:
        return np.clip(v, 0, 6)
    assert act == SIGMOID
    return 1 / (1 + np.exp(-v))


def case(x_shape, channels, k=(3, 3), strides=(2, 2), dilations=(1, 1), start=(1, 1),
         end=(1, 1), bias=(True, True), acts=(CLIP6, CLIP6), dtype=np.float32, seed=0,
         oracle=True):
    """(desc, inputs, the definition's result (None without ``oracle``)): a pointwise
    convolution to ``channels``, then a depthwise one of window ``k``."""
    rng = np.random.default_rng(seed)
    n, cin, h, w = x_shape
    x = rng.standard_normal(x_shape).astype(dtype)
    w1 = (rng.standard_normal((channels, cin, 1, 1)) / np.sqrt(cin)).astype(dtype)
    b1 = rng.standard_normal((1, channels, 1, 1)).astype(dtype) if bias[0] else None
    w2 = rng.standard_normal((channels, 1) + tuple(k)).astype(dtype)
    b2 = rng.standard_normal((1, channels, 1, 1)).astype(dtype) if bias[1] else None
    pw = F.convolution_desc(x, w1, b1, fused_activation=acts[0])
    mid = np.zeros(pw.output.sizes, dtype)
    dw = F.convolution_desc(mid, w2, b2, strides=strides, dilations=dilations,
                            start_padding=start, end_padding=end, group_count=channels,
                            fused_activation=acts[1])
    inputs = [a for a in (x, w1, b1, w2, b2) if a is not None]
    if not oracle:
        return PointwiseDepthwiseDesc(pw, dw), inputs, None
    first = activated(acts[0], brute_force(pw, x, w1, b1))
    return PointwiseDepthwiseDesc(pw, dw), inputs, activated(acts[1],
                                                             brute_force(dw, first, w2, b2))


#: (name, the case's arguments, its keyword arguments, the hosts the kernel is made for)
CASES = [
    ("mobilenet-stride2", ((1, 16, 20, 20), 32), {}, (Host(16, 2), Host(8, 2))),
    ("no-biases-no-acts-stride-2x1-asym", ((1, 5, 9, 13), 16),
     dict(strides=(2, 1), start=(0, 2), end=(1, 0), bias=(False, False), acts=(None, None)),
     (Host(16, 2),)),
    ("batch2-24ch-5x5-tail-relu", ((2, 3, 11, 19), 24),
     dict(k=(5, 5), start=(2, 2), end=(2, 2), acts=(RELU, None)), (Host(16, 2),)),
    ("stride3-unpadded-right-unread", ((1, 7, 11, 12), 8),
     dict(strides=(3, 3), start=(0, 0), end=(0, 0), bias=(True, False)),
     (Host(8, 2), Host(4, 2))),
    ("dilated-stride1x2-cropped", ((1, 4, 10, 17), 16),
     dict(strides=(1, 2), dilations=(2, 2), start=(1, 0), end=(0, 0)), (Host(16, 2),)),
    ("tall-bands", ((1, 8, 70, 9), 16), {}, (Host(16, 2),)),
]


@pytest.mark.parametrize("name, args, kw, hosts", CASES, ids=[c[0] for c in CASES])
def test_the_one_kernel_against_the_definition(name, args, kw, hosts):
    desc, inputs, ref = case(*args, **kw)
    assert all(cpu_pair.fuses(desc, host) for host in hosts)
    for host in hosts:
        kernel = cpu_pair.PointwiseDepthwiseKernel(desc, {}, host)
        assert kernel.plan.lanes == min(host.lanes, 8 if args[1] % 16 else 16)
        y = np.full(desc.output.sizes, np.nan, np.float32)
        kernel(inputs, y)
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4, err_msg=f"{host}")
    # the source: the pointwise result computed into the slot, nothing copied from a stored one
    assert "def expand(" in kernel.source and "def pad(" not in kernel.source


def test_the_kernel_declares_the_scratch_it_takes():
    """``scratch_bytes()`` (what a compiled graph reserves before binding its steps) is what a
    call takes of the thread's scratch: a slot a thread. A call in a new thread (its scratch
    empty) grows it to exactly that."""
    import threading

    from dml_numba.cpu.convolution import base

    desc, inputs, ref = case((1, 16, 20, 20), 32)
    kernel = cpu_pair.PointwiseDepthwiseKernel(desc, {}, Host(16, 2))
    got = []

    def work():
        y = np.full(desc.output.sizes, np.nan, np.float32)
        kernel(inputs, y)
        got.append((y, base._scratch.buf.nbytes))

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    (y, taken), = got
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    assert taken == kernel.scratch_bytes() > 0


def test_bands_of_several_rows_recompute_only_the_rows_they_share():
    """Each band computes the rows its windows read, the row it shares with the band before
    again: a 112-wide layer at stride 2 takes bands of 8 output rows (17 padded rows for 16:
    the pointwise result computed 1.06 times over)."""
    from dml_numba.cpu.convolution.blocked import depthwise_lanes as lanes_kernel
    from dml_numba.cpu.convolution.blocked.plan import depthwise_lanes_plan

    desc, _, _ = case((1, 16, 112, 112), 96, oracle=False)
    plan = depthwise_lanes_plan(desc.depthwise, Host(16, 2))
    band = lanes_kernel.band_rows(desc.depthwise, plan, lanes_kernel.POINTWISE_BAND_BYTES)
    assert band == 8 and lanes_kernel.band_reach(desc.depthwise, band) == 17
    # the copying kernel's bands stay in the first-level cache: one output row there
    assert lanes_kernel.band_rows(desc.depthwise, plan) == 1


@pytest.mark.parametrize("parallel", [False, True])
def test_bands_of_several_images_and_blocks(parallel, monkeypatch):
    """Items of a band per (image, block of channels), the bands outside: two images of three
    blocks of 16 channels in bands of two output rows (the last overlapping the one before):
    every output written (NaN-filled), the definition's values, serial and parallel."""
    from dml_numba.cpu.convolution.blocked import depthwise_lanes as lanes_kernel
    from dml_numba.cpu.convolution.blocked.plan import depthwise_lanes_plan

    desc, inputs, ref = case((2, 8, 13, 11), 48)
    plan = depthwise_lanes_plan(desc.depthwise, Host(16, 2))
    row = plan.padded[-1] * plan.lanes * 4
    monkeypatch.setattr(lanes_kernel, "POINTWISE_BAND_BYTES",
                        lanes_kernel.band_reach(desc.depthwise, 2) * row)
    dml.cache.clear()  # (the band is the source's, not the key's)
    kernel = cpu_pair.PointwiseDepthwiseKernel(desc, {"parallel": parallel}, Host(16, 2))
    assert kernel.items == 2 * 3 * 4  # (7 output rows: bands from rows 0, 2, 4 and 5)
    y = np.full(desc.output.sizes, np.nan, np.float32)
    kernel(inputs, y)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("why, kw, option", [
    ("unit strides", dict(strides=(1, 1)), {}),
    ("float16", dict(dtype=np.float16), {}),
    ("an activation without a vector form", dict(acts=(SIGMOID, CLIP6)), {}),
    ("a forced algorithm", {}, {"algorithm": "direct"}),
])
def test_elsewhere_the_two_kernels_one_by_one(why, kw, option):
    desc, inputs, ref = case((1, 3, 9, 9), 8, **kw)
    op = dml.compile_operator(desc, "cpu", **option)
    assert isinstance(op.kernel, cpu_pair.OneByOne)
    dtype = kw.get("dtype", np.float32)
    got = op(*inputs)
    assert got.dtype == dtype
    tol = 2e-2 if dtype == np.float16 else 1e-4
    np.testing.assert_allclose(got.astype(np.float64), ref, rtol=tol, atol=tol)


def test_a_folded_padding_is_refused_before_anything_is_compiled():
    """The pair reads zeros around the pointwise result: ``input_padding`` (what a graph's
    fold gives a window) is no option of it."""
    desc, _, _ = case((1, 3, 9, 7), 16)
    with pytest.raises(dml.ValidationError, match="'input_padding' is invalid"):
        dml.compile_operator(desc, "cpu", input_padding="REFLECTION")


def test_the_default_choice_and_the_numpy_device():
    """``compile_operator`` on "cpu": the one kernel (a strided depthwise layer of 16 channels:
    within the lanes kernel's reach on every host); "numpy": the two convolutions' vectorised
    variants one by one; both the definition's values."""
    desc, inputs, ref = case((1, 3, 9, 7), 16)
    op = dml.compile_operator(desc, "cpu")
    assert isinstance(op.kernel, cpu_pair.PointwiseDepthwiseKernel)
    for device in ("cpu", "numpy"):
        np.testing.assert_allclose(dml.compile_operator(desc, device)(*inputs), ref,
                                   rtol=1e-4, atol=1e-4)


def test_the_descriptor_is_validated():
    desc, _, _ = case((1, 3, 9, 9), 8)
    pw, dw = desc.pointwise, desc.depthwise
    dense = F.convolution_desc(np.zeros((1, 8, 9, 9), np.float32),
                               np.zeros((8, 8, 3, 3), np.float32))
    with pytest.raises(dml.ValidationError, match=r"PointwiseDepthwiseDesc\.pointwise: "):
        PointwiseDepthwiseDesc(dense, dw)
    with pytest.raises(dml.ValidationError, match=r"PointwiseDepthwiseDesc\.depthwise: "):
        PointwiseDepthwiseDesc(pw, dense)
    other = F.convolution_desc(np.zeros((1, 8, 9, 8), np.float32),
                               np.zeros((8, 1, 3, 3), np.float32), group_count=8)
    with pytest.raises(dml.ValidationError,
                       match=r"depthwise\.input_tensor\.sizes: .*\(1, 8, 9, 9\)"):
        PointwiseDepthwiseDesc(pw, other)
    half = F.convolution_desc(np.zeros((1, 8, 9, 9), np.float16),
                              np.zeros((8, 1, 3, 3), np.float16), group_count=8)
    with pytest.raises(dml.ValidationError, match=r"depthwise\.input_tensor\.data_type: "):
        PointwiseDepthwiseDesc(pw, half)
    with pytest.raises(dml.ValidationError, match=r"PointwiseDepthwiseDesc\.pointwise: "):
        PointwiseDepthwiseDesc("conv", dw)


def test_a_graph_node_of_its_own():
    """A PointwiseDepthwiseDesc as a node of a user's graph: its inputs the pointwise slots
    (the absent bias's included), then the depthwise filter and bias; the same values on
    "numpy" and "cpu"."""
    desc, inputs, ref = case((1, 3, 8, 6), 8, bias=(False, True))
    assert desc.input_fields == ("input_tensor", "filter_tensor", "bias_tensor",
                                 "depthwise_filter_tensor", "depthwise_bias_tensor")
    assert desc.bias_tensor is None and desc.depthwise_bias_tensor is not None
    N, IN, OUT = dml.OperatorGraphNodeDesc, dml.InputGraphEdgeDesc, dml.OutputGraphEdgeDesc
    g = dml.GraphDesc(4, 1, (N(desc, "pair"),), (IN(0, 0, 0), IN(1, 0, 1), IN(2, 0, 3),
                                                IN(3, 0, 4)), (OUT(0, 0, 0),), ())
    for device in ("numpy", "cpu"):
        np.testing.assert_allclose(dml.compile_graph(g, device)(*inputs), ref, rtol=1e-4,
                                   atol=1e-4)
