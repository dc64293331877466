"""A catalogue of small operator cases (desc + inputs) covering every operator, mode, direction,
rank class and dtype class; shared by the parallel-CPU, CUDA-simulator and PTX tests."""
from __future__ import annotations

import numpy as np

import dml_numba as dml
from tests.helpers import random_array

T = dml.TensorDesc
CC, CV = dml.ConvolutionMode.CROSS_CORRELATION, dml.ConvolutionMode.CONVOLUTION
FWD, BWD = dml.ConvolutionDirection.FORWARD, dml.ConvolutionDirection.BACKWARD


def _t(dtype, shape):
    return T(dml.DataType.from_numpy(dtype), shape)


def pad_case(mode, dtype, shape, start, end, value=0):
    out = tuple(n + a + b for n, a, b in zip(shape, start, end))
    dt = dml.DataType.from_numpy(dtype)
    if np.dtype(dtype).kind != "f":
        value = int(value)
    desc = dml.Padding1OperatorDesc(_t(dtype, shape), _t(dtype, out), mode, dt, value, start, end)
    return desc, [random_array(shape, dtype)]


def conv_case(xs, ws, s, d, a, b, g, direction=FWD, mode=CC, bias=True, act=None, dtype=np.float32,
              op=None):
    nd = len(xs) - 2
    op = op or (0,) * nd
    k = ws[2:]
    if direction == FWD:
        spatial = tuple((n + p + q - ((kk - 1) * dd + 1)) // ss + 1 for n, p, q, kk, dd, ss in
                        zip(xs[2:], a, b, k, d, s))
        cout = ws[0]
    else:
        spatial = tuple((n - 1) * ss + (kk - 1) * dd + 1 - p - q + o for n, p, q, kk, dd, ss, o in
                        zip(xs[2:], a, b, k, d, s, op))
        cout = ws[1] * g
    rng = np.random.default_rng(5)
    inputs = [random_array(xs, dtype, rng), random_array(ws, dtype, rng)]
    bdesc = None
    if bias:
        bdesc = _t(dtype, (1, cout) + (1,) * nd)
        inputs.append(random_array((1, cout) + (1,) * nd, dtype, rng))
    desc = dml.ConvolutionOperatorDesc(_t(dtype, xs), _t(dtype, ws), bdesc,
                                       _t(dtype, (xs[0], cout) + spatial), mode, direction, s, d,
                                       a, b, op, g, act)
    return desc, inputs


def pool_case(xs, w, s, a, b, d, p, dtype=np.float32):
    spatial = tuple((n + q + r - ((ww - 1) * dd + 1)) // ss + 1 for n, q, r, ww, dd, ss in
                    zip(xs[2:], a, b, w, d, s))
    desc = dml.LpPooling1OperatorDesc(_t(dtype, xs), _t(dtype, xs[:2] + spatial), s, w, a, b, d, p)
    return desc, [random_array(xs, dtype)]


def tile_case(dtype, shape, reps):
    out = tuple(n * r for n, r in zip(shape, reps))
    return dml.TileOperatorDesc(_t(dtype, shape), _t(dtype, out), reps), [random_array(shape, dtype)]


def slice_case(dtype, shape, offs, sizes, strides):
    out = tuple(1 + (n - 1) // abs(s) for n, s in zip(sizes, strides))
    desc = dml.Slice1OperatorDesc(_t(dtype, shape), _t(dtype, out), offs, sizes, strides)
    return desc, [random_array(shape, dtype)]


def functional_case(build, arrays):
    """A case from the functional layer's descriptor builder (``build(*arrays)``)."""
    return build(*arrays), list(arrays)


def arrays(dtype, *shapes, seed=3):
    rng = np.random.default_rng(seed)
    return [random_array(s, dtype, rng) for s in shapes]


def bn_case(dtype, xs, spatial=True, act=None):
    rng = np.random.default_rng(4)
    ps = (1, xs[1]) + ((1,) * (len(xs) - 2) if spatial else tuple(xs[2:]))
    x, mean, scale, bias = (random_array(s, dtype, rng) for s in (xs, ps, ps, ps))
    var = (np.abs(random_array(ps, dtype, rng)) + 0.5).astype(dtype)
    return dml.functional.batch_normalization_desc(x, mean, var, scale, bias, 1e-3, act), \
        [x, mean, var, scale, bias]


def pooling_case(kind, dtype, xs, w, s, a, b, d, include=False, ceil=False, indices=None):
    """A max or average pooling (``ceil``: the ceil-mode output size; ``indices``: a max
    pooling's indices output of that DataType)."""
    from dml_numba._dims import pooled_size, pooled_size_ceil

    size = pooled_size_ceil if ceil else pooled_size
    spatial = tuple(size(n, p, q, k, st, dd) for n, p, q, k, st, dd in zip(xs[2:], a, b, w, s, d))
    inp, out = _t(dtype, xs), _t(dtype, xs[:2] + spatial)
    at = None if indices is None else dml.TensorDesc(indices, out.sizes)
    desc = dml.MaxPooling2OperatorDesc(inp, out, at, s, w, a, b, d) if kind == "max" else \
        dml.AveragePooling1OperatorDesc(inp, out, s, w, a, b, d, include)
    return desc, [random_array(xs, dtype)]


F = dml.functional
M = dml.PaddingMode


def catalogue():
    """name -> (desc, inputs). Tiny shapes: the CUDA simulator runs one thread per element."""
    return {
        "pad-constant-f32-4d": pad_case(M.CONSTANT, np.float32, (2, 1, 3, 2), (0, 1, 1, 2), (1, 0, 2, 1), 9.5),
        "pad-edge-i8-3d": pad_case(M.EDGE, np.int8, (2, 3, 2), (1, 0, 3), (0, 2, 1)),
        "pad-reflection-f16-2d": pad_case(M.REFLECTION, np.float16, (3, 2), (4, 3), (5, 2)),
        "pad-symmetric-u64-1d": pad_case(M.SYMMETRIC, np.uint64, (3,), (7,), (5,)),
        "pad-wrap-f64-5d": pad_case(M.WRAP, np.float64, (1, 2, 1, 2, 3), (0, 1, 1, 0, 4), (1, 0, 2, 3, 2)),
        "pad-constant-i64-big": pad_case(M.CONSTANT, np.int64, (2, 2), (1, 0), (0, 1), 2**62 + 3),
        "pad-constant-f16-frac": pad_case(M.CONSTANT, np.float16, (2, 3), (1, 0), (0, 2), 2.5),
        "pad-constant-f32-negzero": pad_case(M.CONSTANT, np.float32, (3,), (2,), (1,), -0.0),
        "pad-constant-i16-1d-zero": pad_case(M.CONSTANT, np.int16, (5,), (3,), (2,), 0),
        "tile-u16-3d": tile_case(np.uint16, (2, 1, 3), (2, 3, 2)),
        "tile-f16-8d": tile_case(np.float16, (1, 2, 1, 2, 1, 1, 2, 1), (2, 1, 2, 1, 1, 2, 1, 2)),
        "slice-i32-neg": slice_case(np.int32, (4, 5, 3), (1, 0, 0), (3, 5, 3), (-2, 2, -1)),
        "slice-f32-1d": slice_case(np.float32, (9,), (2,), (7,), (3,)),
        "pool-p2-4d": pool_case((2, 2, 5, 4), (2, 3), (2, 1), (1, 0), (0, 1), (1, 1), 2),
        "pool-p3-dil-3d": pool_case((1, 2, 7), (2,), (2,), (1,), (1,), (2,), 3, np.float64),
        "pool-p1-f16-5d": pool_case((1, 1, 3, 3, 4), (2, 2, 2), (1, 2, 1), (0, 1, 0), (1, 0, 1), (1, 1, 2), 1, np.float16),
        "conv-fwd-groups": conv_case((2, 4, 4, 5), (6, 2, 3, 2), (1, 2), (1, 1), (1, 0), (0, 1), 2),
        "conv-fwd-convmode-dil": conv_case((1, 2, 5, 4), (2, 2, 2, 2), (1, 1), (2, 1), (0, 1), (1, 0), 1, mode=CV),
        "conv-fwd-depthwise-relu": conv_case((1, 3, 4, 4), (3, 1, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 3, act=dml.ActivationReluOperatorDesc()),
        "conv-fwd-1d-gelu-f64": conv_case((2, 2, 7), (3, 2, 3), (2,), (1,), (1,), (1,), 1, act=dml.ActivationGeluOperatorDesc(), dtype=np.float64),
        "conv-fwd-3d-f16": conv_case((1, 2, 3, 3, 4), (2, 2, 2, 2, 2), (1, 1, 2), (1, 1, 1), (0, 1, 0), (1, 0, 1), 1, dtype=np.float16),
        "conv-bwd-stride2": conv_case((1, 2, 3, 2), (2, 3, 3, 2), (2, 2), (1, 1), (1, 0), (0, 1), 1, direction=BWD),
        "conv-bwd-groups-outpad": conv_case((2, 4, 2, 3), (4, 1, 2, 3), (2, 3), (1, 2), (0, 1), (1, 0), 2, direction=BWD, op=(1, 2)),
        "conv-bwd-convmode-elu": conv_case((1, 2, 4), (2, 2, 3), (3,), (2,), (2,), (1,), 1, direction=BWD, mode=CV, act=dml.ActivationEluOperatorDesc(0.5)),
        "maxpool-pad-dil-4d": pooling_case("max", np.float32, (2, 2, 5, 6), (2, 3), (2, 1), (1, 0), (1, 2), (2, 1)),
        "maxpool-ceil-f16-3d": pooling_case("max", np.float16, (1, 3, 7), (3,), (2,), (0,), (1,), (1,), ceil=True),
        "maxpool-f64-5d": pooling_case("max", np.float64, (1, 1, 3, 4, 3), (2, 2, 2), (1, 2, 1), (0, 1, 0), (1, 0, 1), (1, 1, 1)),
        "maxpool-i64-big-3d": functional_case(lambda x: F.max_pooling_desc(x, (2,), 1, 1, 0), [np.array([[[2**62 + 1, 2**62, -2**63, 7]]], np.int64)]),
        "maxpool-u8-4d": pooling_case("max", np.uint8, (1, 2, 3, 4), (2, 2), (1, 2), (1, 0), (0, 1), (1, 1)),
        "maxpool-indices-u32-ceil-4d": pooling_case("max", np.int8, (1, 2, 4, 5), (2, 2), (2, 2), (1, 0), (0, 1), (1, 2), ceil=True, indices=dml.DataType.UINT32),
        "maxpool-indices-u64-f16-3d": pooling_case("max", np.float16, (2, 2, 6), (3,), (2,), (1,), (1,), (1,), indices=dml.DataType.UINT64),
        "avgpool-include-4d": pooling_case("average", np.float32, (1, 2, 5, 5), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), include=True, ceil=True),
        "avgpool-exclude-dil-f16-3d": pooling_case("average", np.float16, (2, 2, 8), (2,), (3,), (2,), (1,), (3,)),
        "add-relu-f32-4d": functional_case(lambda a, b: F.element_wise_add_desc(a, b, dml.ActivationReluOperatorDesc()), arrays(np.float32, (2, 3, 2, 5), (2, 3, 2, 5))),
        "add-i8-wrap": functional_case(F.element_wise_add_desc, [np.array([[120, -128, 5]], np.int8), np.array([[100, -1, -7]], np.int8)]),
        "add-f16-sigmoid": functional_case(lambda a, b: F.element_wise_add_desc(a, b, dml.ActivationSigmoidOperatorDesc()), arrays(np.float16, (4, 5), (4, 5))),
        "mul-u32-wrap": functional_case(F.element_wise_multiply_desc, [np.array([4000000000, 7, 65536], np.uint32), np.array([3, 9, 65536], np.uint32)]),
        "mul-f64-3d": functional_case(F.element_wise_multiply_desc, arrays(np.float64, (2, 1, 4), (2, 1, 4))),
        "activation-relu-f32-4d": functional_case(lambda x: F.activation_desc(x, "relu"), arrays(np.float32, (2, 3, 2, 5))),
        "activation-gelu-f16": functional_case(lambda x: F.activation_desc(x, "gelu"), arrays(np.float16, (4, 5))),
        "activation-clip-scaled-f64-1d": functional_case(lambda x: F.activation_desc(x, "clip", [-0.5, 0.5, 2.0, 0.1]), arrays(np.float64, (7,))),
        "activation-relu-i16-2d": functional_case(lambda x: F.activation_desc(x, "relu"), [np.array([[-32768, -1, 0], [1, 2, 32767]], np.int16)]),
        "activation-softplus-f32-5d": functional_case(lambda x: F.activation_desc(x, "softplus", [2.0]), arrays(np.float32, (1, 2, 2, 1, 3))),
        "bn-spatial-relu-f32": bn_case(np.float32, (2, 3, 3, 4), act=dml.ActivationReluOperatorDesc()),
        "bn-per-position-f64-3d": bn_case(np.float64, (2, 2, 5), spatial=False),
        "bn-f16-5d": bn_case(np.float16, (1, 2, 2, 3, 2)),
        "gemm-tb-c-f32": functional_case(lambda a, b, c: F.gemm_desc(a, b, c, False, True, 0.5, 2.0), arrays(np.float32, (3, 5), (4, 5), (3, 4))),
        "gemm-ta-batched-clip-f64": functional_case(lambda a, b: F.gemm_desc(a, b, None, True, False, 1.5, fused_activation=dml.ElementWiseClipOperatorDesc(-1.0, 1.0)), arrays(np.float64, (2, 3, 4, 2), (2, 3, 4, 3))),
        "gemm-f16": functional_case(F.gemm_desc, arrays(np.float16, (2, 6), (6, 3))),
        "join-axis1-f32": functional_case(lambda *a: F.join_desc(a, 1), arrays(np.float32, (2, 3, 4), (2, 1, 4), (2, 2, 4))),
        "join-axis0-i16": functional_case(lambda *a: F.join_desc(a, 0), arrays(np.int16, (1, 5), (2, 5))),
        "join-last-f16-4d": functional_case(lambda *a: F.join_desc(a, 3), arrays(np.float16, (1, 2, 2, 3), (1, 2, 2, 1))),
        "conv-fwd-clip-nobias": conv_case((1, 2, 3, 4), (2, 2, 2, 2), (1, 1), (1, 1), (0, 0), (0, 0), 1, bias=False, act=dml.ElementWiseClipOperatorDesc(-0.5, 0.5, (2.0, 0.1))),
    }


def compare(desc, y, ref):
    """Exact for data movement, the tolerance table for convolution and pooling."""
    from tests.helpers import assert_close, assert_exact

    if isinstance(ref, tuple):  # several outputs: the first as below, the others (indices) exact
        assert isinstance(y, tuple) and len(y) == len(ref)
        compare(desc, y[0], ref[0])
        for a, b in zip(y[1:], ref[1:]):
            assert_exact(a, b)
        return
    if desc.exact or desc.output.dtype.kind in "iu":  # integer arithmetic is exact too
        assert_exact(y, ref)
    else:
        assert_close(y, ref, desc.output_tensor.dtype)
