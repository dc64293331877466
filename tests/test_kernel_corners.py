"""The kernels' own corners: classes of cases that only some paths of the generated kernels take,
each across the algorithms, variants, devices and ranks where it applies, against brute force.

* strided convolutions whose windows tile the input exactly, unpadded (kernel = stride): the
  blocked kernel then reads the input in place;
* depthwise convolutions with a last-axis stride and a last-axis dilation at once, on the plane
  kernel;
* 1x1 unit-stride convolutions of rank 4 and 5 with end padding but no start padding (and the
  mirror case);
* taps that read only the padding (a padding wider than the input), taps that reach one output
  of a row (a transposed 1 x 1 image, a window as wide as the row), and row edges wider than
  the window, forward and transposed, on every algorithm, with Numba's bounds checks on (an index
  past a row is invisible in the answer where the memory beyond is written again later);
* the direct kernel's edge rows (outer-axis rows with taps in the padding), zero padding and
  every mode padding folded in, and the edge pixels of its rows in vectors (and past their
  limits, pixel by pixel);
* ``out=`` arrays of the right type that are not C-contiguous (row- and column-strided views,
  negative strides, Fortran order), for every operator and for the paths that compute into an
  accumulator and copy back;
* lazy data-movement results of one Dask input differing only in the descriptor, computed
  together;
* float16 sums whose products round differently in half, on every algorithm of every device
  (bias-free, so CUDA's plane kernel runs without a bias too).
"""
from __future__ import annotations

import numpy as np
import pytest

import dml_numba as dml
from dml_numba.cpu import convolution as cpu_conv
from dml_numba.cpu._emit import Host
from tests.cases import BWD, CV, FWD, conv_case, pad_case, pool_case, slice_case, tile_case
from tests.helpers import (
    assert_close,
    assert_exact,
    brute_conv,
    brute_conv_forward,
    sampled,
)

ALGORITHMS = [None, "direct", "gemm", "blocked"]
#: each forced algorithm serially: for the bounds of taps and edges, which a kernel's serial and
#: parallel variants share (they differ in the outer loop only, a prange in the parallel one)
SERIAL_PATHS = [("direct", False), ("gemm", False), ("blocked", False)]
SERIAL_IDS = ["direct", "gemm", "blocked"]


def path_runs(table) -> list:
    """Parameters ``(name, algorithm, parallel)`` for every case of ``table``: each forced
    algorithm serially, and the automatic algorithm in both variants, its parallel one by
    default for the table's first case only (both loop variants of every path without every
    product: a parallel variant compiles in twice the time; every case with --runslow)."""
    runs = [(name, algorithm, parallel) for name in table
            for algorithm, parallel in SERIAL_PATHS + [(None, False), (None, True)]]
    first = next(iter(table))
    return sampled(runs, lambda run: f"{run[0]}-{run[1] or 'automatic'}"
                   + ("-parallel" if run[2] else ""),
                   lambda run: not run[2] or run[0] == first)


def _run_everywhere(desc, inputs, algorithm, parallel, device="cpu"):
    """The convolution on ``device`` (cpu: the algorithm and variant asked for); None where the
    blocked kernel does not take it."""
    if device == "cuda":
        return dml.compile_operator(desc, "cuda")(*inputs)
    if algorithm == "blocked" and cpu_conv.block_plan(
            cpu_conv.pointwise_as_1d(desc) or desc) is None:
        return None
    op = dml.compile_operator(desc, "cpu", algorithm=algorithm, parallel=parallel)
    return op(*inputs)


EXACT_TILING = {
    # (input, filter, strides): windows that tile every strided axis exactly, no padding
    "2d-2x2s2": ((2, 3, 8, 16), (5, 3, 2, 2), (2, 2)),
    "2d-3x3s3": ((1, 4, 9, 27), (4, 4, 3, 3), (3, 3)),
    "2d-rows-only": ((1, 3, 8, 13), (4, 3, 2, 3), (2, 1)),  # strided along the rows only
    "2d-columns-only": ((1, 3, 7, 24), (4, 3, 3, 4), (1, 4)),  # ... along the last axis only
    "2d-grouped": ((2, 8, 6, 20), (8, 4, 2, 2), (2, 2)),
    "1d-k2s2": ((2, 4, 40), (6, 4, 2), (2,)),
    "3d-2x2x2s2": ((1, 2, 4, 4, 16), (3, 2, 2, 2, 2), (2, 2, 2)),
}


@pytest.mark.parametrize("name,algorithm,parallel", path_runs(EXACT_TILING))
def test_strided_windows_that_tile_the_input_exactly(name, algorithm, parallel):
    xs, ws, s = EXACT_TILING[name]
    nd = len(s)
    groups = 2 if name == "2d-grouped" else 1
    desc, inputs = conv_case(xs, ws, s, (1,) * nd, (0,) * nd, (0,) * nd, groups)
    # the windows cover every input element exactly once along each strided axis
    assert all((n - k) % st == 0 for n, k, st in zip(xs[2:], ws[2:], s))
    y = _run_everywhere(desc, inputs, algorithm, parallel)
    if y is not None:
        assert_close(y, brute_conv(desc, inputs), np.float32)


@pytest.mark.cuda
@pytest.mark.parametrize("name", ["2d-2x2s2", "1d-k2s2"])
def test_strided_windows_that_tile_the_input_exactly_on_cuda(name):
    xs, ws, s = EXACT_TILING[name]
    xs = (1, 2) + xs[2:]
    ws = (2, 2) + ws[2:]
    nd = len(s)
    desc, inputs = conv_case(xs, ws, s, (1,) * nd, (0,) * nd, (0,) * nd, 1)
    assert_close(np.asarray(_run_everywhere(desc, inputs, None, None, "cuda")),
                 brute_conv(desc, inputs), np.float32)


DEPTHWISE_STRIDED_DILATED = {
    # (input, filter, strides, dilations, start, end, groups)
    "s2-d2": ((1, 4, 9, 40), (4, 1, 3, 3), (1, 2), (1, 2), (1, 1), (1, 1), 4),
    "s2-d3-unpadded": ((2, 3, 7, 44), (3, 1, 2, 3), (1, 2), (1, 3), (0, 0), (0, 0), 3),
    "s3-d2-rows-too": ((1, 4, 12, 50), (8, 1, 3, 3), (2, 3), (2, 2), (2, 2), (0, 1), 4),
    "1d-s2-d2": ((2, 5, 61), (5, 1, 3), (2,), (2,), (2,), (1,), 5),
}


@pytest.mark.parametrize("name,parallel", sampled(
    [(name, p) for p in (False, True) for name in DEPTHWISE_STRIDED_DILATED],
    lambda run: f"{run[0]}-{'parallel' if run[1] else 'serial'}",
    lambda run: not run[1] or run[0] == "s3-d2-rows-too"))
def test_depthwise_with_a_strided_and_dilated_last_axis_on_the_plane_kernel(name, parallel):
    desc, inputs = conv_case(*DEPTHWISE_STRIDED_DILATED[name])
    assert desc.strides[-1] > 1 and desc.dilations[-1] > 1
    op = dml.compile_operator(desc, "cpu", algorithm="blocked", parallel=parallel)
    assert op.kernel.plan.depthwise
    assert_close(op(*inputs), brute_conv(desc, inputs), np.float32)


POINTWISE_ONE_SIDED = {
    # (input, start, end): 1x1 unit-stride convolutions padded at one end only
    "2d-end": ((2, 8, 6, 9), (0, 0), (1, 2)),
    "2d-start": ((2, 8, 6, 9), (2, 1), (0, 0)),
    "2d-end-rows": ((1, 8, 5, 16), (0, 0), (3, 0)),
    "3d-end": ((1, 6, 3, 4, 10), (0, 0, 0), (1, 0, 2)),
    "3d-start": ((1, 6, 3, 4, 10), (0, 2, 1), (0, 0, 0)),
}


@pytest.mark.parametrize("name,algorithm,parallel", path_runs(POINTWISE_ONE_SIDED))
def test_pointwise_padded_at_one_end(name, algorithm, parallel):
    xs, start, end = POINTWISE_ONE_SIDED[name]
    nd = len(start)
    desc, inputs = conv_case(xs, (12, xs[1]) + (1,) * nd, (1,) * nd, (1,) * nd, start, end, 1)
    assert cpu_conv.pointwise_as_1d(desc) is None  # padded: not the flattened 1-D form
    y = _run_everywhere(desc, inputs, algorithm, parallel)
    if y is not None:
        assert_close(y, brute_conv(desc, inputs), np.float32)


# -- taps that read only the padding -------------------------------------------------------------

PADDING_ONLY_TAPS = {
    # (input, filter, dilations, start, end): a padding wider than the input, so that some taps
    # read nothing but padding for every output (the zero-range and past-the-end edges of the
    # kernels' per-tap loops), on the last axis, on an outer axis, and at either end
    "1d-end": ((1, 2, 2), (3, 2, 3), (3,), (0,), (6,)),
    "1d-start": ((1, 2, 2), (3, 2, 3), (3,), (6,), (0,)),
    "1d-both": ((2, 3, 3), (2, 3, 4), (3,), (4,), (4,)),
    "2d-last-axis": ((1, 2, 4, 2), (4, 2, 2, 3), (1, 3), (1, 6), (0, 1)),
    "2d-outer-axis": ((1, 2, 2, 9), (4, 2, 3, 2), (3, 1), (5, 1), (1, 0)),
    # transposed: an end padding that crops past the last taps' outputs, and a start padding
    # that crops past the first taps'
    "transposed-1d-end": ((1, 2, 2), (2, 3, 3), (2,), (0,), (2,)),
    "transposed-2d-start": ((1, 2, 3, 2), (2, 2, 2, 3), (1, 2), (0, 4), (0, 0)),
}

ONE_OUTPUT_TAPS = {
    # (input, filter, strides, direction): taps that reach exactly one output element of a row
    # (the last input element, or the only one): a transposed convolution of a 1 x 1 image (a
    # generator's first layer), of a one-element row, and a window as wide as the row with more
    # taps than the direct kernel fuses (each tap its own pass)
    "transposed-1x1-image": ((2, 4, 1, 1), (4, 3, 4, 4), (2, 2), BWD),
    "transposed-1-element-row": ((1, 3, 1), (3, 2, 5), (1,), BWD),
    "whole-row-window-6x6": ((1, 2, 6, 6), (3, 2, 6, 6), (1, 1), FWD),
}


@pytest.fixture
def bounds_checked(monkeypatch):
    """Numba's bounds checks on for the kernels the test compiles (the generated kernels turn
    them off), compiled in memory, not loaded from or written to the disk cache: an index past
    a row, invisible in the answer where the memory beyond is written again later, raises
    IndexError. (The memory cache is left as it is, so that the other tests keep the operators
    they share: the shapes of these tests are theirs alone, so none of their kernels was built
    before without the checks.)"""
    import numba

    monkeypatch.setattr(numba.config, "BOUNDSCHECK", 1)
    monkeypatch.setenv("DML_NUMBA_DISK_CACHE", "0")


@pytest.mark.parametrize("algorithm,parallel", SERIAL_PATHS, ids=SERIAL_IDS)
@pytest.mark.parametrize("name", list(PADDING_ONLY_TAPS))
def test_taps_that_read_only_the_padding(name, algorithm, parallel, bounds_checked):
    xs, ws, dil, start, end = PADDING_ONLY_TAPS[name]
    nd = len(dil)
    backward = name.startswith("transposed")
    desc, inputs = conv_case(xs, ws, (1,) * nd, dil, start, end, 1,
                             direction=BWD if backward else FWD)
    out = desc.output_tensor.sizes[2:]
    # forward: input o - start + k*d read by output o; transposed: input i written to output
    # i - start + k*d (unit strides); some tap reads (or writes) only padding
    reach, span = (xs[2:], out) if not backward else (out, xs[2:])
    outside = [(axis, k) for axis in range(nd) for k in range(ws[2 + axis])
               if not any(0 <= j - start[axis] + k * dil[axis] < reach[axis]
                          for j in range(span[axis]))]
    assert outside
    y = _run_everywhere(desc, inputs, algorithm, parallel)
    if y is not None:
        assert_close(y, brute_conv(desc, inputs), np.float32)


@pytest.mark.parametrize("name,algorithm,parallel", path_runs(ONE_OUTPUT_TAPS))
def test_taps_that_reach_one_output(name, algorithm, parallel, bounds_checked):
    xs, ws, strides, direction = ONE_OUTPUT_TAPS[name]
    nd = len(strides)
    desc, inputs = conv_case(xs, ws, strides, (1,) * nd, (0,) * nd, (0,) * nd, 1,
                             direction=direction)
    y = _run_everywhere(desc, inputs, algorithm, parallel)
    if y is not None:
        assert_close(y, brute_conv(desc, inputs), np.float32)


WIDE_EDGES = {
    # (input, filter, start, end, groups): edges of 4 pixels (as many as the direct kernel
    # writes out one by one) and of 6 (a loop with a bounds test per tap), with pixels no tap
    # of which reads the input (a padding wider than the window), for one input channel a
    # group (each pixel assigned once) and for several (accumulated); the 2-D and 3-D ones
    # in CONVOLUTION mode (the flipped filter) with axes of unequal sizes
    "one-channel-4-edge": ((1, 2, 3), (2, 1, 2), (4,), (4,), 2),
    "one-channel-6-edge": ((1, 2, 3), (4, 1, 2), (6,), (6,), 2),
    "channels-6-edge": ((2, 2, 3), (3, 2, 2), (6,), (5,), 1),
    "2d-channels-6-edge": ((1, 2, 3, 3), (2, 2, 2, 3), (1, 6), (0, 6), 1),
    "3d-channels-6-edge": ((1, 2, 2, 3, 3), (2, 2, 1, 2, 3), (0, 1, 6), (0, 0, 6), 1),
}


@pytest.mark.parametrize("algorithm,parallel", SERIAL_PATHS, ids=SERIAL_IDS)
@pytest.mark.parametrize("name", list(WIDE_EDGES))
def test_row_edges_wider_than_the_window(name, algorithm, parallel, bounds_checked):
    xs, ws, start, end, groups = WIDE_EDGES[name]
    nd = len(start)
    desc, inputs = conv_case(xs, ws, (1,) * nd, (1,) * nd, start, end, groups,
                             mode=CV if nd > 1 else dml.ConvolutionMode.CROSS_CORRELATION)
    # the last axis' first pixel reads no input: the padding is wider than the window
    assert start[-1] >= ws[-1]
    y = _run_everywhere(desc, inputs, algorithm, parallel)
    if y is not None:
        assert_close(y, brute_conv(desc, inputs), np.float32)


# -- the direct kernel's edge rows -----------------------------------------------------------------

#: (input, filter, strides, dilations, start, end, groups): outer-axis edge rows of every kind
#: the direct kernel's fused rows specialise (one a side, two on one side, a row whose every tap
#: reads padding, with several channels and with one) and those that take the general per-tap
#: path (more edge rows than branches, padding wider than the input, edges on two outer axes),
#: strided and dilated
DIRECT_EDGES = {
    "2d-same-3x3": ((2, 3, 7, 9), (4, 3, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1),
    "2d-start-only": ((2, 2, 6, 9), (3, 2, 3, 2), (1, 1), (1, 1), (2, 1), (0, 0), 1),
    "2d-a-row-of-padding-only": ((1, 2, 2, 10), (2, 2, 1, 3), (1, 1), (1, 1), (1, 1), (0, 1), 1),
    "2d-a-row-of-padding-only-one-channel": ((1, 2, 2, 10), (2, 1, 1, 3), (1, 1), (1, 1),
                                             (1, 1), (0, 1), 2),
    "2d-5x5-general-edges": ((1, 2, 8, 11), (3, 2, 5, 5), (1, 1), (1, 1), (2, 2), (2, 2), 1),
    "2d-padding-wider-than-input": ((1, 2, 3, 10), (2, 2, 3, 3), (1, 1), (1, 1), (4, 1), (3, 1),
                                    1),
    "2d-strided-dilated": ((1, 4, 13, 17), (4, 1, 3, 3), (2, 2), (2, 1), (3, 1), (1, 2), 4),
    "3d-edges-on-two-axes": ((1, 2, 5, 6, 9), (2, 2, 3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1),
                             (1, 1, 1), 1),
    "1d": ((2, 3, 12), (2, 3, 5), (1,), (1,), (2,), (2,), 1),
    # row interiors in explicit vectors (16 lanes here, 8 with AVX2): narrower than a vector,
    # exactly two of eight, one more; several channels (the overlapping last vector adds to
    # the row); one channel a group with long row edges (written by a loop, not added to)
    "2d-narrow-row": ((1, 4, 5, 12), (4, 1, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 4),
    "2d-row-sixteen": ((1, 2, 4, 18), (2, 1, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 2),
    "2d-row-seventeen": ((1, 2, 4, 19), (2, 1, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 2),
    "2d-channels-wide-row": ((1, 3, 6, 40), (4, 3, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1),
    "2d-long-row-edges": ((1, 2, 5, 30), (2, 1, 2, 11), (1, 1), (1, 1), (1, 5), (0, 5), 2),
}
NUMPY_MODES = {None: None, "EDGE": "edge", "REFLECTION": "reflect", "SYMMETRIC": "symmetric",
               "WRAP": "wrap"}
#: each case with zero padding and with one mode padding folded in (the modes in turn); one case
#: with every mode; serially, and in the parallel variant (the serial loop nest with its outer
#: loop a prange, compiled in twice the time) by default for two runs only, with --runslow for
#: every case's zero padding and the one case's every mode


def _reflects_once(name, mode) -> bool:
    """Whether ``mode`` can pad case ``name`` (DirectML's reflections reflect once: padding at
    most the axis' size less one, or its size for SYMMETRIC; EDGE and WRAP any)."""
    xs, _, _, _, start, end, _ = DIRECT_EDGES[name]
    short = {"REFLECTION": 1, "SYMMETRIC": 0}.get(mode)
    return short is None or all(max(a, b) <= n - short for a, b, n in zip(start, end, xs[2:]))


def _mode_for(i, name):
    """The modes in turn, skipping to the next one a case's padding allows."""
    modes = list(NUMPY_MODES)[1:]
    return next(m for k in range(4) if _reflects_once(name, m := modes[(i + k) % 4]))


DIRECT_EDGE_RUNS = list(dict.fromkeys(
    [(name, mode, False) for i, name in enumerate(DIRECT_EDGES)
     for mode in (None, _mode_for(i, name))]
    + [("2d-same-3x3", mode, False) for mode in NUMPY_MODES]
    + [(name, None, True) for name in DIRECT_EDGES]
    + [("2d-same-3x3", mode, True) for mode in NUMPY_MODES]))
PARALLEL_EDGE_RUNS = (("2d-same-3x3", "WRAP", True), ("3d-edges-on-two-axes", None, True))


def _folded_brute(desc, inputs, mode):
    """Brute force over the input padded by numpy.pad in ``mode`` (None: zeros), convolved
    without padding: what a FORWARD convolution with that padding folded in computes."""
    x, w = inputs[:2]
    wide = [(0, 0), (0, 0)] + list(zip(desc.start_padding, desc.end_padding))
    xp = np.pad(x, wide, mode=NUMPY_MODES[mode] or "constant")
    return brute_conv_forward(xp, w, inputs[2] if len(inputs) > 2 else None, desc.strides,
                              desc.dilations, (0,) * (x.ndim - 2), flip=desc.mode == CV,
                              groups=desc.group_count, out_spatial=desc.output_tensor.sizes[2:])


@pytest.mark.parametrize("name,mode,parallel", sampled(
    DIRECT_EDGE_RUNS,
    lambda run: f"{run[0]}-{(run[1] or 'zeros').lower()}-{'parallel' if run[2] else 'serial'}",
    lambda run: not run[2] or run in PARALLEL_EDGE_RUNS))
def test_direct_kernel_edge_rows(name, mode, parallel):
    """Every output row of the direct kernel, its edge rows' own fused branches included,
    against brute force: with zero padding, and with a mode padding folded in (against
    numpy.pad, then the convolution unpadded)."""
    desc, inputs = conv_case(*DIRECT_EDGES[name])
    if mode is not None:
        assert _reflects_once(name, mode)
        ref = _folded_brute(desc, inputs, mode)
        op = dml.compile_operator(desc, "cpu", algorithm="direct", parallel=parallel,
                                  input_padding=mode)
    else:
        ref = brute_conv(desc, inputs)
        op = dml.compile_operator(desc, "cpu", algorithm="direct", parallel=parallel)
    assert_close(op(*inputs), ref, np.float32)
    # every pixel written (rows of one channel are assigned, not added to zeros): an out=
    # full of NaN leaves none behind
    out = np.full(ref.shape, np.nan, np.float32)
    assert_close(op(*inputs, out=out), ref, np.float32)


ACTIVATIONS = {"relu": (dml.ActivationReluOperatorDesc(), lambda v: np.where(v > 0, v, 0)),
               "sigmoid": (dml.ActivationSigmoidOperatorDesc(), lambda v: 1 / (1 + np.exp(-v)))}


@pytest.mark.parametrize("act", list(ACTIVATIONS))
@pytest.mark.parametrize("name", ["2d-narrow-row", "2d-row-seventeen", "2d-long-row-edges",
                                  "2d-strided-dilated", "2d-a-row-of-padding-only-one-channel"])
def test_direct_kernel_rows_of_one_channel_with_bias_and_activation(name, act):
    """Rows of one input channel a group are written once: the bias and a ReLU as each pixel
    and vector is written, another activation (sigmoid) in a pass after; every pixel (vector
    interior, its overlapping last vector, unrolled and looped edges, edge rows) against
    brute force with the activation's formula, into an out= full of NaN."""
    fn, formula = ACTIVATIONS[act]
    args = DIRECT_EDGES[name]
    desc, inputs = conv_case(*args, act=fn)
    assert desc.input_tensor.sizes[1] == desc.group_count  # one input channel a group
    op = dml.compile_operator(desc, "cpu", algorithm="direct")
    wide = desc.output_tensor.sizes[-1] - 2 >= Host.current().lanes
    assert ("vrelu(" in op.source) == (act == "relu" and desc.strides[-1] == 1 and wide)
    out = np.full(desc.output_tensor.sizes, np.nan, np.float32)
    assert_close(op(*inputs, out=out), formula(brute_conv(desc, inputs)), np.float32)


@pytest.mark.parametrize("lanes", [8, 4], ids=["avx2", "sse-neon"])
def test_direct_kernel_rows_planned_for_narrower_vectors(lanes):
    """The direct kernel as a machine with 8-lane (AVX2) or 4-lane (SSE, NEON) vectors would
    build it: its row interiors are whole vectors of those lanes and an overlapping last one
    (rows 10 to 38 pixels wide: vectors where this machine's 16 lanes would not fit), one
    channel with its bias and ReLU, several channels added up; against brute force."""
    from dml_numba.cpu._emit import planned_for

    relu = dml.ActivationReluOperatorDesc()
    for name, act in (("2d-narrow-row", relu), ("2d-row-seventeen", None),
                      ("2d-channels-wide-row", relu)):
        desc, inputs = conv_case(*DIRECT_EDGES[name], act=act)
        with planned_for(Host(lanes, 2)):
            kernel = cpu_conv.make_kernel(desc, {"algorithm": "direct"})
        assert kernel.key.plan.lanes == lanes and "vload(xr_1, " in kernel.source
        out = np.full(desc.output_tensor.sizes, np.nan, np.float32)
        kernel(list(inputs), out)
        ref = brute_conv(desc, inputs)
        assert_close(out, np.where(ref > 0, ref, 0) if act else ref, np.float32)


#: (case, mode, host lanes, form): a row's edge pixels in vectors built by a shuffle of an
#: in-range load (mapped columns inside the load, zeros, columns inserted from outside it), and
#: the rows that sum their edges pixel by pixel instead: a wrap of 5 (five columns from
#: outside the load, past EDGE_EXTRAS), and 4-lane vectors over a row padded by 9 a side (five
#: edge vectors, past EDGE_VECTORS)
WIDE_PADDING = ((1, 2, 3, 12), (2, 1, 1, 11), (1, 1), (1, 1), (0, 9), (0, 9), 2)
EDGE_VECTOR_FORMS = [
    ("2d-row-seventeen", "REFLECTION", 16, "shuffle"),
    ("2d-row-seventeen", None, 16, "zeros"),
    ("2d-row-seventeen", "WRAP", 16, "insert"),
    ("2d-long-row-edges", "WRAP", 16, "pixels"),
    ("2d-wide-padding", None, 4, "pixels"),
]


@pytest.mark.parametrize("name,mode,lanes,form", EDGE_VECTOR_FORMS, ids=[
    f"{n}-{(m or 'zeros').lower()}-{k}-lanes-{f}" for n, m, k, f in EDGE_VECTOR_FORMS])
def test_direct_kernel_row_edges_in_vectors_and_their_limits(name, mode, lanes, form):
    """A unit-stride row's edge pixels are summed in vectors where each tap's lanes can be
    built from one load inside the row (a shuffle; a lane from outside it inserted, at most
    EDGE_EXTRAS, a zero lane for zero padding) and the row needs at most EDGE_VECTORS of
    them; past either limit the edges are summed pixel by pixel. The form the source takes,
    and every pixel against numpy.pad and brute force, into an out= full of NaN."""
    from dml_numba.cpu._emit import planned_for

    case = WIDE_PADDING if name == "2d-wide-padding" else DIRECT_EDGES[name]
    desc, inputs = conv_case(*case, act=dml.ActivationReluOperatorDesc())
    options = {"algorithm": "direct", **({"input_padding": mode} if mode else {})}
    with planned_for(Host(lanes, 2)):
        kernel = cpu_conv.make_kernel(desc, options)
    src = kernel.source
    assert ("vshuffle(" in src) == (form != "pixels")
    assert ("vinsert(" in src) == (form == "insert")
    assert (f", vzero({lanes}), \"" in src) == (form in ("shuffle", "zeros"))
    assert ("for j in range(" in src) == (form == "pixels")  # the edge pixels' loop
    ref = _folded_brute(desc, inputs, mode)
    out = np.full(desc.output_tensor.sizes, np.nan, np.float32)
    kernel(list(inputs), out)
    assert_close(out, np.where(ref > 0, ref, 0), np.float32)


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_direct_kernel_rows_in_every_type_and_layout(dtype):
    """The direct kernel's rows (vectors in float32 and float16, scalar code in float64) on
    inputs that are not C-contiguous (a strided view and a transposed copy), against brute
    force."""
    desc, inputs = conv_case((1, 2, 6, 40), (2, 1, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 2,
                             dtype=dtype)
    x, w, b = inputs
    wide = np.zeros(x.shape[:3] + (80,), dtype)
    wide[..., ::2] = x
    view = wide[..., ::2]
    fortran = np.asfortranarray(x)
    assert not view.flags.c_contiguous and not fortran.flags.c_contiguous
    op = dml.compile_operator(desc, "cpu", algorithm="direct")
    ref = brute_conv(desc, inputs)
    for a in (x, view, fortran):
        assert_close(op(a, w, b), ref, dtype)


RELU_TILES = {
    # (input, filter, groups): the dense tile (rows, and flattened), the depthwise plane tile
    "dense": ((1, 8, 6, 40), (8, 8, 3, 3), 1),
    "dense-narrow": ((2, 4, 5, 7), (8, 4, 3, 3), 1),
    "depthwise": ((1, 16, 6, 35), (16, 1, 3, 3), 16),
}


#: the kernels that apply an activation in vectors: (case arguments, algorithm, the planner
#: that gives the tile: None for the direct kernel); each has its vector activation's
#: import in its module, every fused activation in vectors bit for bit its scalar formula
VECTOR_ACTIVATION_KERNELS = {
    "pixels": (((1, 8, 6, 40), (8, 8, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1), "blocked",
               "block_plan"),
    "channels": (((1, 8, 6, 21), (16, 8, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1), "blocked",
                 "channel_plan"),
    "depthwise": (((1, 16, 6, 35), (16, 1, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 16),
                  "blocked", "block_plan"),
    "transposed": (((1, 8, 7, 9), (8, 8, 3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 1, BWD),
                   "blocked", "block_plan"),
    "direct-depthwise": (((1, 4, 6, 40), (4, 1, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 4),
                         "direct", None),
}
CLIPS = {"relu6": dml.ElementWiseClipOperatorDesc(0.0, 6.0),
         # bounds float32 cannot hold, one beyond its range: rounded (the scalar formula
         # compares in float64, the vectors with the rounded bound: the same bits)
         "unrepresentable": dml.ElementWiseClipOperatorDesc(0.1, 0.30000001),
         "unbounded-above": dml.ElementWiseClipOperatorDesc(-0.2, 1e300)}


def _activation_kernel(name, act):
    args, algorithm, planner = VECTOR_ACTIVATION_KERNELS[name]
    desc, inputs = conv_case(*args, act=act)
    x = inputs[0].copy()
    x.reshape(-1)[3] = np.nan  # NaN sums in the outputs that read it
    x.reshape(-1)[-5:] = -0.0
    inputs = (x,) + tuple(inputs[1:])
    if planner is None:
        return dml.compile_operator(desc, "cpu", algorithm=algorithm, parallel=False), inputs
    kdesc = cpu_conv.pointwise_as_1d(desc) or desc
    plan = getattr(cpu_conv.blocked.plan, planner)(kdesc)
    kernel = cpu_conv.build(desc, {"parallel": False}, "blocked", plan)
    return (lambda *a: _run_kernel(kernel, desc, a)), inputs, kernel


def _run_kernel(kernel, desc, inputs):
    y = np.empty(desc.output_tensor.sizes, np.float32)
    kernel(list(inputs), y)
    return y


#: the default run's cells: every kernel once and every clip at least once (all with --runslow)
CLIP_CELLS = dict(zip(VECTOR_ACTIVATION_KERNELS, ["relu6", "unrepresentable", "unbounded-above",
                                                   "relu6", "unrepresentable"]))


@pytest.mark.parametrize("name,clip", sampled(
    [(name, clip) for name in VECTOR_ACTIVATION_KERNELS for clip in CLIPS],
    lambda run: f"{run[0]}-{run[1]}", lambda run: CLIP_CELLS[run[0]] == run[1]))
def test_fused_clip_in_vectors_is_the_scalar_clip(name, clip):
    """A clip without scale and bias (ReLU6) is applied to the accumulators in vectors
    (``vclip``) by every kernel that applies activations in vectors: every output, bit for
    bit, the scalar formula ``where(v > hi, hi, where(v < lo, lo, v))`` computed in float64 on
    the same kernel's sums without the activation and rounded (NaN stays NaN, -0.0 stays);
    bounds float32 cannot hold and one beyond its range included."""
    act = CLIPS[clip]
    made = [_activation_kernel(name, a) for a in (None, act)]
    (plain, inputs, *_), (fused, _, *kernel) = made
    source = kernel[0].source if kernel else fused.source
    assert "vclip(" in source and ", vclip" in source
    v = plain(*inputs).astype(np.float64)
    assert np.isnan(v).any() and (v > act.min).any() and (v < act.max).any()
    expected = np.where(v > act.max, act.max, np.where(v < act.min, act.min, v))
    with np.errstate(over="ignore"):
        expected = expected.astype(np.float32)
    np.testing.assert_array_equal(fused(*inputs).view(np.uint32), expected.view(np.uint32))


def test_a_clip_with_a_scale_and_bias_keeps_its_scalar_pass():
    """The scaled clip's product would round otherwise in float32 vectors: no vclip, and the
    result is the vectorised device's."""
    act = dml.ElementWiseClipOperatorDesc(-1.0, 1.0, scale_bias=(0.3, 0.1))
    fused, inputs, kernel = _activation_kernel("pixels", act)
    assert "vclip" not in kernel.source
    desc = conv_case(*VECTOR_ACTIVATION_KERNELS["pixels"][0], act=act)[0]
    np.testing.assert_allclose(fused(*inputs), dml.compile_operator(desc, "numpy")(*inputs),
                               rtol=1e-6, atol=1e-6)


def test_a_transposed_convolution_with_a_fused_relu_compiles_on_the_blocked_kernel():
    """Its module imports ``vrelu`` (it did not: the kernel failed to compile); the result is
    the vectorised device's."""
    act = dml.ActivationReluOperatorDesc()
    fused, inputs, kernel = _activation_kernel("transposed", act)
    assert "vrelu(" in kernel.source and "vrelu" in kernel.source.split("def ")[0]
    desc = conv_case(*VECTOR_ACTIVATION_KERNELS["transposed"][0], act=act)[0]
    np.testing.assert_allclose(fused(*inputs), dml.compile_operator(desc, "numpy")(*inputs),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", list(RELU_TILES))
def test_fused_relu_in_vectors_is_the_scalar_relu(name):
    """The blocked kernels apply a fused ReLU to their accumulators before the store: every
    output is, bit for bit, ``where(v > 0, v, 0)`` of the same kernel's sums without the
    activation (NaN to +0, -0.0 to +0, negatives to +0), with and without a bias; and the
    values are the convolution's (against the vectorised device); the identity activation
    gives the bits of no activation (without a bias)."""
    xs, ws, g = RELU_TILES[name]
    relu = dml.ActivationReluOperatorDesc()
    rng = np.random.default_rng(3)
    x = rng.standard_normal(xs).astype(np.float32)
    x[0, 0, 2, 3] = np.nan  # NaN sums around it, in every output channel of its group
    x[0, -1] = -0.0  # the last plane all negative zeros: with a bias of -0.0 and positive
    w = rng.standard_normal(ws).astype(np.float32)  # weights, its interior sums are -0.0
    w[-1] = np.abs(w[-1])
    b = rng.standard_normal((1, ws[0], 1, 1)).astype(np.float32)
    b[0, -1] = -0.0
    for bias in (None, b):
        inputs = (x, w) if bias is None else (x, w, bias)
        plain, fused = (dml.compile_operator(dml.functional.convolution_desc(
            x, w, bias, start_padding=(1, 1), end_padding=(1, 1), group_count=g,
            fused_activation=a), "cpu", algorithm="blocked") for a in (None, relu))
        assert "vrelu" in fused.source
        v = plain(*inputs)
        assert np.isnan(v).any() and (v < 0).any()
        if g > 1 and bias is not None:  # the plane kernel starts its sums from the bias
            assert np.signbit(v[0, -1][v[0, -1] == 0]).any()
        y = fused(*inputs)
        expected = np.where(v > 0, v, np.float32(0))
        np.testing.assert_array_equal(y.view(np.uint32), expected.view(np.uint32))
        ref = dml.convolution(*inputs, start_padding=(1, 1), end_padding=(1, 1), group_count=g,
                              fused_activation=relu, device="numpy")
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
        if bias is not None:
            continue
        # the identity needs no pass over the stored tile: the same bits as no activation
        ident = dml.compile_operator(dml.functional.convolution_desc(
            x, w, bias, start_padding=(1, 1), end_padding=(1, 1), group_count=g,
            fused_activation=dml.ActivationIdentityOperatorDesc()), "cpu", algorithm="blocked")
        assert "v = y[" not in ident.source
        np.testing.assert_array_equal(ident(*inputs).view(np.uint32), v.view(np.uint32))


# -- float16: products formed in the accumulator's precision ------------------------------------

#: two taps whose float16 products differ from their float32 products, summing to float16's least
#: normal value: 8(1 + 2^-10) squared is 64.125 + 2^-14 (64.125 in half), and -8 x 8.015625 is
#: -64.125 exactly; products rounded to half leave 0
_HALF_TAPS = ((8 * (1 + 2.0 ** -10), -8.0, 8.0), (8 * (1 + 2.0 ** -10), 8.015625))


def _half_products_case(channels):
    """A 1 x 2 window over a 1 x 9 row (8 outputs: the blocked kernel's vector), no bias,
    ``channels`` input channels (1: depthwise, so CUDA's tiled choice is the plane kernel; 2:
    dense, the second channel's weights zero); the row's first three elements the taps above."""
    xs, ws = (1, channels, 1, 9), (1, channels, 1, 2)
    desc = conv_case(xs, ws, (1, 1), (1, 1), (0, 0), (0, 0), 1, bias=False,
                     dtype=np.float16)[0]
    x = np.zeros(xs, np.float16)
    w = np.zeros(ws, np.float16)
    x[0, :, 0, :3], w[0, 0, 0] = _HALF_TAPS[0], _HALF_TAPS[1]
    return desc, [x, w]


HALF_PATHS = [("cpu", a) for a in ALGORITHMS] + [("cuda", "direct"), ("cuda", "tiled")]


@pytest.mark.parametrize("channels", [1, 2], ids=["depthwise", "dense"])
@pytest.mark.parametrize("device, algorithm", HALF_PATHS,
                         ids=[f"{d}-{a or 'automatic'}" for d, a in HALF_PATHS])
def test_float16_products_are_formed_in_the_accumulators_precision(device, algorithm, channels):
    """float16 is stored as half and computed in float32 (SEMANTICS): a sum whose products
    round differently in half is exact on every algorithm of every device, and a bias-free
    kernel (CUDA's plane kernel included) runs."""
    desc, inputs = _half_products_case(channels)
    x, w = (a[0, 0, 0].astype(np.float64) for a in inputs)
    expected = x[:-1] * w[0] + x[1:] * w[1]
    assert expected[0] == 2.0 ** -14 and list(expected[1:3]) == [0.0625, 64.0625]
    assert (expected.astype(np.float16) == expected).all()  # every output exact in half
    if device == "cpu" and algorithm == "blocked":
        assert cpu_conv.block_plan(desc) is not None
    y = np.asarray(dml.compile_operator(desc, device, algorithm=algorithm)(*inputs))
    assert y.dtype == np.float16
    np.testing.assert_array_equal(y.reshape(-1).astype(np.float64), expected)


# -- out= views that are not C-contiguous --------------------------------------------------------

def _views(shape, dtype):
    """(name, base array, view of ``shape`` into it): row-strided, column-strided, reversed,
    Fortran-ordered."""
    nd = len(shape)
    rows = np.full(shape[:-1] + (shape[-1] * 2 + 3,), 7, dtype)
    cols = np.full(shape[:-2] + (shape[-2] * 2,) + shape[-1:], 7, dtype) if nd >= 2 else None
    rev = np.full(shape, 7, dtype)
    fort = np.asfortranarray(np.full(shape, 7, dtype))
    views = [("row-strided", rows, rows[..., 1:1 + 2 * shape[-1]:2]),
             ("reversed", rev, rev[..., ::-1]), ("fortran", fort, fort)]
    if cols is not None:
        views.append(("column-strided", cols, cols[..., ::2, :]))
    return views


OUT_CASES = {
    "conv-f32": (lambda: conv_case((2, 4, 6, 9), (6, 2, 3, 3), (1, 2), (1, 1), (1, 1), (1, 0), 2),
                 ALGORITHMS),
    "conv-f16": (lambda: conv_case((1, 4, 5, 12), (4, 4, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1,
                                   dtype=np.float16), ALGORITHMS),
    "conv-f64": (lambda: conv_case((1, 3, 5, 7), (4, 3, 2, 2), (1, 1), (1, 1), (0, 1), (1, 0), 1,
                                   dtype=np.float64), [None, "direct", "gemm"]),
    "conv-transposed": (lambda: conv_case((1, 4, 4, 5), (4, 3, 3, 3), (2, 2), (1, 1), (1, 1),
                                          (1, 1), 1, direction=dml.ConvolutionDirection.BACKWARD),
                        ALGORITHMS),
    "pool-f16": (lambda: pool_case((1, 2, 7, 9), (2, 3), (2, 1), (1, 0), (0, 1), (1, 1), 2,
                                   np.float16), [None]),
    "pool-f32": (lambda: pool_case((2, 3, 6, 8), (3, 2), (1, 2), (1, 1), (1, 0), (1, 1), 3),
                 [None]),
    "pad": (lambda: pad_case(dml.PaddingMode.SYMMETRIC, np.float32, (2, 3, 5), (0, 1, 2),
                             (1, 0, 3)), [None]),
    # a last axis repeated once (its rows copied whole), the others repeated
    "tile": (lambda: tile_case(np.float16, (2, 3, 4), (2, 2, 1)), [None]),
    "slice": (lambda: slice_case(np.int32, (4, 6, 9), (1, 0, 1), (3, 6, 8), (1, -1, 2)), [None]),
}


@pytest.mark.parametrize("name", list(OUT_CASES))
def test_out_views_that_are_not_c_contiguous_receive_the_result(name):
    """The result lands in the view, and nothing else of the base array is written."""
    make, algorithms = OUT_CASES[name]
    desc, inputs = make()
    ref = dml.compile_operator(desc, "numpy")(*inputs)
    shape, dtype = desc.output_tensor.sizes, desc.output_tensor.dtype
    for algorithm in algorithms:
        opts = {"algorithm": algorithm} if name.startswith("conv") else {}
        try:
            op = dml.compile_operator(desc, "cpu", **opts)
        except dml.ValidationError:  # the blocked kernel does not take this one
            continue
        for view_name, base, view in _views(shape, dtype):
            assert not view.flags.c_contiguous or view_name == "fortran" and len(shape) == 1
            outside = base.copy()
            result = op(*inputs, out=view)
            assert result is view, (algorithm, view_name)
            if desc.exact:
                assert_exact(np.ascontiguousarray(view), ref)
            else:
                assert_close(np.ascontiguousarray(view), ref.astype(np.float64), dtype)
            untouched = np.ones_like(base, dtype=bool)  # base's memory order
            _same_view(untouched, base, view)[...] = False  # where the result may be written
            assert (base[untouched] == outside[untouched]).all(), (algorithm, view_name)


def _same_view(mask, base, view):
    """The view of ``mask`` (laid out like ``base``) that ``view`` is of ``base``."""
    offset = (view.__array_interface__["data"][0] - base.__array_interface__["data"][0])
    item = base.itemsize
    return np.lib.stride_tricks.as_strided(
        mask.ravel(order="K")[offset // item:], shape=view.shape,
        strides=tuple(s // item * mask.itemsize for s in view.strides))


# -- Dask: data movement differing only in the descriptor ------------------------------------

def test_dask_data_movement_differing_only_in_the_descriptor_stays_apart():
    """One input, results that differ only in mode, constant, offsets, strides or repeats,
    computed in one ``dask.compute``: each graph has its own name and its own answer."""
    da = pytest.importorskip("dask.array")
    import dask

    import dml_numba.dask as dmd

    x = np.random.default_rng(1).standard_normal((2, 3, 7, 9)).astype(np.float32)
    lazy_x = da.from_array(x, chunks=(1, 2, 3, 4))
    pads = ((0, 0, 2, 1), (0, 0, 1, 2))
    cases = {
        "reflection": (dmd.padding(lazy_x, *pads, "reflection"),
                       np.pad(x, list(zip(*pads)), "reflect")),
        "symmetric": (dmd.padding(lazy_x, *pads, "symmetric"),
                      np.pad(x, list(zip(*pads)), "symmetric")),
        "constant 1": (dmd.padding(lazy_x, *pads, "constant", 1.0),
                       np.pad(x, list(zip(*pads)), constant_values=1.0)),
        "constant 2": (dmd.padding(lazy_x, *pads, "constant", 2.0),
                       np.pad(x, list(zip(*pads)), constant_values=2.0)),
        "offset 0": (dmd.slice1(lazy_x, (0, 0, 0, 0), (2, 3, 5, 9), (1, 1, 1, 2)),
                     x[:, :, 0:5, 0:9:2]),
        "offset 1": (dmd.slice1(lazy_x, (0, 0, 1, 0), (2, 3, 5, 9), (1, 1, 1, 2)),
                     x[:, :, 1:6, 0:9:2]),
        "stride 2": (dmd.slice1(lazy_x, (0, 0, 0, 0), (2, 3, 7, 9), (1, 1, 2, 1)),
                     x[:, :, ::2, :]),
        "stride -2": (dmd.slice1(lazy_x, (0, 0, 0, 0), (2, 3, 7, 9), (1, 1, -2, 1)),
                      x[:, :, ::-2, :]),
        "repeats 1x2": (dmd.tile(lazy_x, (1, 1, 1, 2)), np.tile(x, (1, 1, 1, 2))),
        "repeats 2x1": (dmd.tile(lazy_x, (1, 1, 2, 1)), np.tile(x, (1, 1, 2, 1))),
    }
    lazies = [lazy for lazy, _ in cases.values()]
    assert len({y.name for y in lazies}) == len(lazies)
    for (name, (_, expected)), got in zip(cases.items(), dask.compute(*lazies)):
        np.testing.assert_array_equal(got, expected, err_msg=name)


@pytest.mark.parametrize("itemsize, lanes", [(4, 16), (2, 32), (8, 8), (4, 8)])
def test_strided_rows_take_vector_reads_from_one_whole_step(itemsize, lanes):
    """A strided last axis is read in vectors where its row holds at least one step (one host
    vector of output elements); a row one element short is read element by element."""
    from dml_numba.cpu._emit import strided_lanes

    dtype = {2: np.float16, 4: np.float32, 8: np.float64}[itemsize]
    host = Host(lanes * itemsize // 4, 2)
    for n, expected in ((lanes, lanes), (lanes - 1, 0)):
        x = np.zeros((3, 2 * n + 4), dtype)
        plan = dml.functional.slice1_desc(x, (1, 1), (2, 2 * n - 1), (1, 2)).gather_plan()
        assert plan.maps[-1].size == n
        assert strided_lanes(plan, itemsize, host) == expected
