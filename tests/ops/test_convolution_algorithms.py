"""The direct and GEMM CPU convolution algorithms (row-wise direct, im2col/col2im + BLAS) agree
with the vectorised device on every catalogue case, in both parallel variants; the automatic
choice, the 1x1 fast path and chunked batches are exercised explicitly (the blocked kernel has
tests of its own in test_convolution_blocked.py)."""
import numpy as np
import pytest

import dml_numba as dml
from dml_numba.cpu import convolution as cpu_conv
from tests.cases import catalogue, compare, conv_case

CASES = {k: v for k, v in catalogue().items() if k.startswith("conv")}
CASES["conv-fwd-1x1-groups"] = conv_case((2, 4, 3, 5), (6, 2, 1, 1), (1, 1), (1, 1), (0, 0),
                                         (0, 0), 2)
CASES["conv-fwd-1x1-stride2"] = conv_case((2, 4, 5, 5), (6, 4, 1, 1), (2, 2), (1, 1), (0, 0),
                                          (0, 0), 1)


@pytest.mark.parametrize("parallel", [None, True, False], ids=["auto", "parallel", "serial"])
@pytest.mark.parametrize("algorithm", ["direct", "gemm"])
@pytest.mark.parametrize("name", list(CASES))
def test_algorithm_agrees_with_numpy(name, algorithm, parallel):
    desc, inputs = CASES[name]
    op = dml.compile_operator(desc, "cpu", algorithm=algorithm, parallel=parallel)
    assert op.kernel.algorithm == algorithm
    compare(desc, op(*inputs), dml.compile_operator(desc, "numpy")(*inputs))


def test_unpadded_stride1_1x1_skips_im2col():
    desc, inputs = CASES["conv-fwd-1x1-groups"]
    op = dml.compile_operator(desc, "cpu", algorithm="gemm")
    assert op.kernel.skip_im2col and "im2col" not in op.source
    desc2, _ = CASES["conv-fwd-1x1-stride2"]
    assert not dml.compile_operator(desc2, "cpu", algorithm="gemm").kernel.skip_im2col


@pytest.mark.parametrize("name", ["conv-fwd-groups", "conv-bwd-groups-outpad"])
def test_batches_larger_than_the_column_budget_are_chunked(monkeypatch, name):
    desc, inputs = CASES[name]
    monkeypatch.setattr(cpu_conv.gemm, "COLUMNS_BUDGET_BYTES", 1)  # one image per chunk
    kernel = cpu_conv.make_kernel(desc, {"algorithm": "gemm"})
    assert kernel.chunk == 1 and desc.input_tensor.sizes[0] > 1
    out = np.empty(desc.output_tensor.sizes, desc.output_tensor.dtype)
    kernel(list(inputs), out)
    compare(desc, out, dml.compile_operator(desc, "numpy")(*inputs))


def test_automatic_choice():
    """The rules read off the crossover grid (benchmarks/RESULTS.md), for a host with 16-lane
    vectors (AVX-512) and two threads, whatever this one has."""
    from dml_numba.cpu._emit import Host

    f32 = dml.DataType.FLOAT32

    def desc(cin, cout, g, k=3, hw=8, s=1, n=1):
        o = (hw - k) // s + 1
        return dml.ConvolutionOperatorDesc(
            dml.TensorDesc(f32, (n, cin, hw, hw)),
            dml.TensorDesc(f32, (cout, cin // g, k, k)),
            None,
            dml.TensorDesc(f32, (n, cout, o, o)),
            1,
            0,
            (s, s),
            (1, 1),
            (0, 0),
            (0, 0),
            (0, 0),
            g,
        )

    def choose(d):
        return cpu_conv.choose_algorithm(d, Host(16, 2))

    assert choose(desc(64, 64, 1, hw=58)) == "blocked"
    assert choose(desc(128, 128, 8, hw=30)) == "blocked"   # 16 output channels a group
    assert choose(desc(64, 64, 64, hw=58)) == "blocked"    # depthwise 3x3, plane by plane
    assert choose(desc(64, 64, 64, hw=58, s=2)) == "blocked"  # depthwise 3x3, strided
    assert choose(desc(1, 1, 1, hw=58)) == "direct"        # one plane: the plane kernel is serial
    assert choose(desc(1, 1, 1, hw=58, s=2)) == "direct"
    assert choose(desc(1, 1, 1, k=5, hw=58)) == "blocked"  # ... but direct is slower still
    assert choose(desc(64, 64, 64, hw=16)) == "blocked"    # depthwise 3x3, 14-pixel rows
    assert choose(desc(64, 64, 64, k=5, hw=60)) == "blocked"  # depthwise 5x5
    assert choose(desc(64, 64, 64, k=1, hw=56)) == "blocked"  # depthwise 1x1
    assert choose(desc(8, 8, 1, k=7)) == "direct"          # rows of 2 pixels: no tile
    assert choose(desc(6, 6, 3)) == "direct"               # 2 output channels a group, no BLAS
    assert choose(desc(512, 512, 1, hw=9)) == "gemm"        # 7-pixel rows: a quarter vector
    assert choose(desc(256, 256, 1, k=1, hw=14)) == "gemm"  # 1x1 over 196 pixels
    assert choose(desc(256, 256, 1, k=1, hw=28)) == "blocked"  # 1x1 over 784 pixels
    assert choose(desc(512, 512, 8, hw=9)) == "blocked"     # grouped: the blocked tile still wins
    assert choose(desc(512, 512, 8, hw=9, s=2)) == "gemm"   # ... but not on 4x4 outputs
    assert choose(desc(512, 512, 8, k=1, hw=7)) == "gemm"   # grouped 1x1 on 49 pixels
    assert choose(desc(256, 256, 8, k=1, hw=14)) == "blocked"  # ... 196 pixels
    assert choose(desc(64, 64, 8, hw=12, s=2)) == "blocked"  # 8 outputs a group: no BLAS
    # the pixel thresholds count the batch's pixels: BLAS runs a product per image and group,
    # the blocked kernel shares out the whole batch (measured at batch 8: 1.01-1.21x faster
    # than BLAS on these, where BLAS is 1.7-2.3x faster at batch 1)
    assert choose(desc(256, 256, 1, k=1, hw=14, n=8)) == "blocked"  # 1x1 over 8 x 196 pixels
    assert choose(desc(512, 512, 8, k=1, hw=7, n=8)) == "blocked"   # grouped 1x1, 8 x 49
    assert choose(desc(512, 512, 8, hw=9, s=2, n=8)) == "blocked"   # grouped 3x3/2, 8 x 16


def test_automatic_choice_without_the_blocked_kernel():
    """float64 (and BACKWARD, strided last axes): GEMM when each group's product is big."""
    f64 = dml.DataType.FLOAT64

    def desc(cin, cout, g):
        return dml.ConvolutionOperatorDesc(
            dml.TensorDesc(f64, (1, cin, 8, 8)), dml.TensorDesc(f64, (cout, cin // g, 3, 3)), None,
            dml.TensorDesc(f64, (1, cout, 6, 6)), 1, 0, (1, 1), (1, 1), (0, 0), (0, 0), (0, 0), g)

    assert cpu_conv.choose_algorithm(desc(64, 64, 1)) == "gemm"
    assert cpu_conv.choose_algorithm(desc(4, 4, 1)) == "direct"     # too small for BLAS
    assert cpu_conv.choose_algorithm(desc(128, 128, 8)) == "direct"  # 16 output channels a group


def test_bad_algorithm_refused():
    desc, _ = CASES["conv-fwd-groups"]
    with pytest.raises(dml.ValidationError, match="compile_operator.algorithm: 'winograd'"):
        dml.compile_operator(desc, "cpu", algorithm="winograd")
