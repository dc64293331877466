"""Winograd's F(4x4, 3x3) (``dml_numba/cpu/convolution/winograd.py``, ``algorithm="winograd"``)
against a float64 brute-force sum over the zero-padded input (not our other kernels): tiles
cropped at the edges, every padding, batches cut into chunks, both modes, bias and fused
activations, each way its transforms are written (16, 8, 4 lanes and element by element); a
model's frozen filter transformed once; what it refuses; where the static choice takes it."""
import numpy as np
import pytest

import dml_numba as dml
from dml_numba._frozen import freeze
from dml_numba.cpu import convolution as cpu_conv
from dml_numba.cpu._emit import Host
from dml_numba.cpu.convolution import base, winograd
from tests.cases import conv_case

CC, CONV = dml.ConvolutionMode.CROSS_CORRELATION, dml.ConvolutionMode.CONVOLUTION


def brute_force(desc, x, w, b, *, activated=True):
    """``act(sum over c, i, j of xpad[n, c, y + i, x + j] * W[k, c, i, j] + b[k])`` in float64,
    W flipped in CONVOLUTION mode, the activation applied by the operator's own NumPy variant
    of it (a separate element-wise operator); ``activated=False``: the sum alone."""
    (pt, pl), (pb, pr) = desc.start_padding, desc.end_padding
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    wf = w.astype(np.float64)
    if desc.mode == CONV:
        wf = wf[:, :, ::-1, ::-1]
    oh, ow = desc.output_tensor.sizes[2:]
    y = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for i in range(3):
        for j in range(3):
            y += np.einsum("kc,nchw->nkhw", wf[:, :, i, j], xp[:, :, i:i + oh, j:j + ow])
    if b is not None:
        y += b.astype(np.float64).reshape(1, -1, 1, 1)
    if activated and desc.fused_activation is not None:
        y = dml.functional.activation(y, desc.fused_activation, device="numpy")
    return y


#: name -> (x shape, filter shape, start pads, end pads, mode, bias, activation, lanes, chunks
#: (None: the module's; ("images", n): n images a chunk; ("rows", n): an image in bands of n
#: rows of tiles; ("filter", n): a bound of n images, under the transformed filter's bytes,
#: so that the filter's share sets the chunk: every image in one)); outputs whose sizes are not
#: multiples of 4 (tiles cropped)
CASES = {
    "7x9-pad1-relu-L8": ((1, 3, 7, 9), (5, 3, 3, 3), (1, 1), (1, 1), CC, True,
                         dml.ActivationReluOperatorDesc(), 8, None),
    "13x6-asym-conv-leaky-L4-chunks": ((3, 17, 13, 6), (4, 17, 3, 3), (0, 2), (1, 0), CONV,
                                       False, dml.ActivationLeakyReluOperatorDesc(0.1), 4,
                                       ("images", 2)),
    "16x16-pad2-clip-L16-bands": ((2, 8, 16, 16), (16, 8, 3, 3), (2, 2), (2, 2), CC, True,
                                  dml.ElementWiseClipOperatorDesc(-0.5, 0.5), 16, ("rows", 2)),
    "3x3-unpadded-one-output-scalar": ((1, 4, 3, 3), (8, 4, 3, 3), (0, 0), (0, 0), CC, True,
                                       None, 0, None),
    "12x12-64ch-L8": ((1, 64, 12, 12), (64, 64, 3, 3), (1, 1), (1, 1), CC, True, None, 8, None),
    "6x6-24ch-batch3-filter-bound-L8": ((3, 24, 6, 6), (24, 24, 3, 3), (1, 1), (1, 1), CC,
                                        True, None, 8, ("filter", 1)),
    # 16 tiles of 64 channels: a page between positions, the rows one column longer
    "16x16-64ch-rows-a-page-L16": ((1, 64, 16, 16), (8, 64, 3, 3), (1, 1), (1, 1), CC, True,
                                   None, 16, None),
}


def _case(name):
    xs, ws, a, b, mode, bias, act, _, _ = CASES[name]
    return conv_case(xs, ws, (1, 1), (1, 1), a, b, 1, mode=mode, bias=bias, act=act)


#: F(4x4, 3x3)'s rounding, relative to the largest magnitude of the sums (before the
#: activation; the transforms' constants reach 8 and 1/24): measured up to 1.3e-5 with 256 input
#: channels of normal data
TOLERANCE = 3e-5


def _check(desc, y, inputs):
    args = list(inputs) + [None] * (3 - len(inputs))
    ref = brute_force(desc, *args)
    scale = max(np.abs(brute_force(desc, *args, activated=False)).max(), 1.0)
    assert np.isfinite(y).all()
    assert np.abs(y - ref).max() <= TOLERANCE * scale, np.abs(y - ref).max() / scale


@pytest.mark.parametrize("name", list(CASES))
def test_winograd_agrees_with_brute_force(name, monkeypatch):
    desc, inputs = _case(name)
    lanes, chunk = CASES[name][7], CASES[name][8]
    th, tw = winograd.tiles(desc)
    if chunk is not None:  # the bound on a chunk's transformed input and output: n images, or
        # n rows of tiles (the last chunk shorter either way)
        row = winograd.P * (desc.input_tensor.sizes[1] + desc.output_tensor.sizes[1]) * tw * 4
        monkeypatch.setattr(winograd, "CHUNK_BYTES", chunk[1] * row * (
            1 if chunk[0] == "rows" else th))
    # the parallel kernels where the batch is cut into images (their compile is the slow one)
    kernel = winograd.WinogradKernel(desc, {"parallel": chunk is not None and
                                            chunk[0] == "images"},
                                     plan=winograd.WinogradPlan(lanes))
    if chunk == ("images", 2):
        assert (kernel.chunk, kernel.band, desc.input_tensor.sizes[0]) == (2, th, 3)
    elif chunk == ("rows", 2):
        assert (kernel.chunk, kernel.band, th) == (1, 2, 5)
    elif chunk == ("filter", 1):  # 83 KB of transformed filter over 28 KB an image: the
        # filter read once for the three images, not once an image
        cin, cout = desc.input_tensor.sizes[1], desc.output_tensor.sizes[1]
        assert winograd.P * cin * cout * 4 > winograd.CHUNK_BYTES
        assert (kernel.chunk, kernel.band) == (3, th)
    # the products: a blocked tile's kernel per chunk column count (a full chunk's, the last
    # chunk's), each run on its chunks (a kernel of the wrong width would fail the check below)
    n_ = desc.input_tensor.sizes[0]
    counts = {("images", 2): {2 * th * tw, th * tw}, ("rows", 2): {2 * tw, tw}}
    assert set(kernel.products) == counts.get(chunk, {n_ * th * tw})
    if name == "16x16-64ch-rows-a-page-L16":
        assert kernel.widths == {16: 17}
    for cols, products in kernel.products.items():
        assert products.algorithm == "blocked"
        # read in place: a padded copy would take the thread's scratch, where v and m lie
        assert products.copy_size == 0
        assert products.desc == winograd.products_desc(desc, kernel.widths[cols])
        assert set(products.compiled_keys()) <= set(kernel.compiled_keys())
    y = np.full(desc.output_tensor.sizes, np.nan, np.float32)  # every element written
    kernel(inputs, y)
    _check(desc, y, inputs)
    # the transforms are in vectors where the plan has lanes, element by element where not
    # (the products' tiles, whose sources follow, always in vectors)
    source = kernel.source
    for products in kernel.products.values():
        assert products.source in source
        source = source.replace(products.source, "")
    assert ("vload(" in source) == (lanes > 0)
    if lanes:
        assert f", {lanes})" in source  # the plan's width (or half of it on short rows)


@pytest.mark.parametrize("value", [np.inf, -np.inf, np.nan, 3e37])
def test_sums_that_are_not_finite_are_the_direct_sums(value):
    """An infinity, a NaN or a value whose transform overflows (3e37 times the transforms'
    constants) in the input: Winograd's transforms would mix it into NaN or infinities where the
    direct sum has a number or an infinity of a sign; such a call is the direct sum's, element
    for element (the blocked kernel's result, the same NaN and infinities as the float64 sum).
    A call with finite sums never builds that kernel."""
    desc, (x, w, b) = _case("7x9-pad1-relu-L8")
    desc = dml.ConvolutionOperatorDesc(*(getattr(desc, f) for f in (
        "input_tensor", "filter_tensor", "bias_tensor", "output_tensor", "mode", "direction",
        "strides", "dilations", "start_padding", "end_padding", "output_padding",
        "group_count")), None)  # no activation: the sums themselves
    w = np.abs(w) + 0.5  # positive weights: an infinite input gives infinite sums, one sign
    kernel = winograd.WinogradKernel(desc, {"parallel": False}, plan=winograd.WinogradPlan(8))
    y = np.full(desc.output_tensor.sizes, np.nan, np.float32)
    kernel([x, w, b], y)
    assert kernel._direct is None
    _check(desc, y, [x, w, b])
    x = x.copy()
    x[0, 1, 3, 4] = value
    kernel([x, w, b], y)
    want = dml.compile_operator(desc, "cpu", algorithm="blocked")(x, w, b)
    np.testing.assert_array_equal(y, want)
    ref = brute_force(desc, x, w, b)
    assert (np.isnan(y) == np.isnan(ref)).all() and (np.isinf(y) == np.isinf(ref)).all()
    # the huge value's sums are finite (only Winograd's transforms overflowed)
    assert kernel._direct is not None and np.isfinite(y).all() == np.isfinite(value)


def test_the_public_option_runs_it_and_says_so():
    desc, inputs = _case("7x9-pad1-relu-L8")
    op = dml.compile_operator(desc, "cpu", algorithm="winograd")
    assert op.kernel.algorithm == "winograd" and op.kernel.variant() == "winograd"
    _check(desc, op(*inputs), inputs)


def test_a_models_filter_is_transformed_once_and_a_callers_each_call(monkeypatch):
    """A frozen (a model's) filter is transformed, and its transform packed for the products'
    tile, once; a caller's filter each call."""
    from dml_numba.cpu.convolution import blocked

    desc, (x, w, b) = _case("7x9-pad1-relu-L8")
    kernel = winograd.WinogradKernel(desc, {"parallel": False}, plan=winograd.WinogradPlan(8))
    made, packed = [], []
    real, pack = kernel.transformed, blocked.pack_filter
    monkeypatch.setattr(kernel, "transformed", lambda wt: made.append(1) or real(wt))
    monkeypatch.setattr(blocked, "pack_filter", lambda *a: packed.append(1) or pack(*a))
    y = np.empty(desc.output_tensor.sizes, np.float32)
    frozen = freeze(w.copy())
    for _ in range(3):
        kernel([x, frozen, b], y)
    assert len(made) == len(packed) == 1
    _check(desc, y, [x, frozen, b])
    # a caller's filter may change between calls: transformed each call, and right after a change
    mine = w.copy()
    kernel([x, mine, b], y)
    mine *= -2
    kernel([x, mine, b], y)
    assert len(made) == len(packed) == 3
    _check(desc, y, [x, mine, b])


def test_an_output_over_the_input_is_refused_or_right():
    """``out=`` the input itself (same shape: 4 -> 4 channels, padding 1) through the public
    call: refused with a ValidationError, or the result of the input as it was."""
    desc, (x, w, b) = conv_case((1, 4, 8, 8), (4, 4, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1)
    op = dml.compile_operator(desc, "cpu", algorithm="winograd")
    want = brute_force(desc, x, w, b)
    buf = x.copy()
    try:
        op(buf, w, b, out=buf)
    except dml.ValidationError:
        return
    assert np.abs(buf - want).max() <= TOLERANCE * max(np.abs(want).max(), 1.0)


@pytest.mark.parametrize("xs, ws, s, g, dtype", [
    ((1, 4, 8, 8), (4, 4, 3, 3), (2, 2), 1, np.float32),  # strided
    ((1, 4, 8, 8), (4, 4, 5, 5), (1, 1), 1, np.float32),  # 5x5
    ((1, 4, 8, 8), (4, 2, 3, 3), (1, 1), 2, np.float32),  # grouped
    ((1, 4, 8, 8), (4, 4, 3, 3), (1, 1), 1, np.float16),  # float16
    ((1, 4, 8, 8), (4, 4, 3, 3), (1, 1), 1, np.float64),  # float64
    ((1, 4, 8), (4, 4, 3), (1,), 1, np.float32),  # 1-D
    ((1, 4, 6, 6, 6), (4, 4, 3, 3, 3), (1, 1, 1), 1, np.float32),  # 3-D
])
def test_what_it_does_not_take_is_refused_by_name(xs, ws, s, g, dtype):
    nd = len(xs) - 2
    desc, _ = conv_case(xs, ws, s, (1,) * nd, (1,) * nd, (1,) * nd, g, dtype=dtype)
    assert not winograd.takes(desc)
    assert "winograd" not in cpu_conv.estimates(desc, Host(8, 2))
    with pytest.raises(dml.ValidationError, match=r"algorithm: 'winograd' is invalid"):
        dml.compile_operator(desc, "cpu", algorithm="winograd")


def test_a_folded_padding_is_refused_with_it():
    desc, _ = _case("7x9-pad1-relu-L8")
    with pytest.raises(dml.ValidationError, match="input_padding"):
        dml.compile_operator(desc, "cpu", algorithm="winograd", input_padding="REFLECTION")


def test_the_static_choice_takes_it_on_wide_layers_only():
    """The cost model's choice: Winograd for ResNet-18's and the U-Net's wide 3x3 layers on
    8 lanes (measured 1.3-2.6x faster than the blocked kernel on the AVX2 host:
    ``crossover.json``'s Winograd set), not for few channels, tiny planes or 512 channels on 7x7
    (its transformed filter, 4x the filter, no longer fits a cache). On 16 lanes the tiles run
    twice as fast and the transforms' memory traffic stays: the 64- and 128-channel layers only
    (the model's figures: no AVX-512 host measured it)."""
    def desc(c, k, hw, n=1):
        return conv_case((n, c, hw, hw), (k, c, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1)[0]

    wide = [desc(64, 64, 56), desc(128, 128, 28), desc(64, 64, 56, n=8)]
    for host, takes in ((Host(8, 2), wide + [desc(32, 32, 128), desc(256, 256, 14)]),
                        (Host(16, 2), wide)):
        for d in takes:
            assert cpu_conv.choose_algorithm(d, host) == "winograd"
        for d in (desc(8, 8, 32), desc(3, 16, 256), desc(512, 512, 7), desc(32, 32, 8)):
            assert cpu_conv.choose_algorithm(d, host) != "winograd"


def test_rows_keep_the_positions_apart_in_the_caches():
    """The transformed tiles' rows are a column longer exactly where the 36 positions'
    matrices (C or K rows apart) would lie a multiple of a page apart (all in one cache set),
    unless a row count of a page or more makes every length a multiple."""
    page = winograd.PAGE
    for cols in (1, 4, 9, 16, 17, 49, 64, 98, 128, 196, 256, 1024):
        for cin, cout in ((3, 5), (16, 16), (64, 8), (128, 128), (256, 512), (1024, 1024)):
            w = winograd.width(cols, cin, cout)
            fixable = [r for r in (cin, cout) if (r * 4) % page]
            apart = any((r * cols * 4) % page == 0 for r in fixable)
            assert w == cols + apart, (cols, cin, cout)
            assert all((r * w * 4) % page for r in fixable), (cols, cin, cout)


def test_the_scratch_is_one_a_thread_shared_by_every_kernel():
    """The transformed tiles of every Winograd kernel go through the calling thread's one
    scratch (grown to the largest asked for); another thread has its own, so two threads
    running Winograd kernels at once never share one."""
    import threading

    def scratch(n):
        return base.scratch((n,), np.float32)

    small, large = scratch(10), scratch(1000)
    again = scratch(500)
    assert small.size == 10 and large.size == 1000 and again.size == 500
    assert np.shares_memory(again, large)
    other = []
    t = threading.Thread(target=lambda: other.append(scratch(500)))
    t.start()
    t.join()
    assert not np.shares_memory(other[0], again)
    # two kernels of different sizes one after the other in this thread: both right
    for name in ("12x12-64ch-L8", "7x9-pad1-relu-L8"):
        desc, inputs = _case(name)
        y = np.full(desc.output_tensor.sizes, np.nan, np.float32)
        winograd.WinogradKernel(desc, {"parallel": False},
                                plan=winograd.WinogradPlan(8))(inputs, y)
        _check(desc, y, inputs)


@pytest.mark.parametrize("name", ["16x16-pad2-clip-L16-bands", "16x16-64ch-rows-a-page-L16"])
def test_a_bound_call_settles_once_and_each_call_is_right(name, monkeypatch):
    """A compiled graph's step (``bind``: a C-contiguous input, a model's frozen filter) is
    settled once, the filter transformed and packed at the binding, and each call runs the
    kernels alone: right on new input data each time (chunks of bands of rows; rows one
    column longer, whose padding column is zeroed each call, since the scratch under it is
    every kernel's: filled with NaN between the calls here); a call whose sums are not finite
    is the direct sum's and the next finite one is Winograd's again (the flag reset each
    call); a caller's filter (not frozen) is settled each call, so a change between calls is
    seen."""
    from dml_numba.cpu.convolution import blocked

    desc, (x, w, b) = _case(name)
    chunk = CASES[name][8]
    if chunk is not None:
        th, tw = winograd.tiles(desc)
        row = winograd.P * (desc.input_tensor.sizes[1] + desc.output_tensor.sizes[1]) * tw * 4
        monkeypatch.setattr(winograd, "CHUNK_BYTES", chunk[1] * row)
    kernel = winograd.WinogradKernel(desc, {"parallel": False},
                                     plan=winograd.WinogradPlan(CASES[name][7]))
    assert (len(kernel.column_counts()) > 1) == (chunk is not None)  # bands: several chunks
    made, packed, direct = [], [], []
    real, pack, real_direct = kernel.transformed, blocked.pack_filter, kernel.direct_sum
    monkeypatch.setattr(kernel, "transformed", lambda wt: made.append(1) or real(wt))
    monkeypatch.setattr(blocked, "pack_filter", lambda *a: packed.append(1) or pack(*a))
    monkeypatch.setattr(kernel, "direct_sum", lambda: direct.append(1) or real_direct())
    x = x.copy()
    y = np.full(desc.output_tensor.sizes, np.nan, np.float32)
    frozen = freeze(w.copy())
    call = kernel.bind([x, frozen, b], y)
    assert len(made) == 1 and len(packed) == len(kernel.products)
    rng = np.random.default_rng(5)
    cin, cout = desc.input_tensor.sizes[1], desc.output_tensor.sizes[1]
    for _ in range(3):
        x[...] = rng.standard_normal(x.shape)
        base.scratch((winograd.P * (cin + cout) * max(kernel.widths.values()),),
                     np.float32)[...] = np.nan
        call()
        _check(desc, y, [x, frozen, b])
        if name == "16x16-64ch-rows-a-page-L16":  # the padding column the products read
            v = base.scratch((winograd.P * cin * 17,), np.float32).reshape(-1, 17)
            assert (v[:, 16] == 0).all()
    assert len(made) == 1 and len(packed) == len(kernel.products) and not direct
    x[0, 0, 2, 3] = np.inf
    call()
    assert len(direct) == 1
    np.testing.assert_array_equal(
        y, dml.compile_operator(desc, "cpu", algorithm="blocked")(x, frozen, b))
    x[0, 0, 2, 3] = 0.0
    call()
    assert len(direct) == 1
    _check(desc, y, [x, frozen, b])
    # a caller's filter: settled each call (no step keeps it)
    mine = w.copy()
    call = kernel.bind([x, mine, b], y)
    mine *= -2
    call()
    _check(desc, y, [x, mine, b])
