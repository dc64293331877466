"""The shared-memory tiled convolution (implicit GEMM) on the simulator, against the brute-force
loops of SEMANTICS (forward gather, transposed scatter): tiles whose pixels and channels do not
divide the problem, every register-block shape the planner makes, groups, strides, dilations,
padding, 1-D to 3-D, CONVOLUTION mode, float16 stored as half and float64, bias and activation.
The simulator runs every thread of a 256-thread block, so the shapes stay tiny."""
import numpy as np
import pytest

import dml_numba as dml
from tests.cases import CV, catalogue, compare, conv_case
from tests.helpers import brute_conv_backward, brute_conv_forward

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
}


ACTIVATIONS = {  # formulas of the two activations used above (all of them: test_activations)
    dml.ActivationLeakyReluOperatorDesc: lambda v: np.where(v < 0, 0.3 * v, v),
    dml.ActivationReluOperatorDesc: lambda v: np.maximum(v, 0.0),
}


def _oracle(desc, inputs):
    x, w = (a.astype(np.float64) for a in inputs[:2])
    b = inputs[2].astype(np.float64) if len(inputs) > 2 else None
    flip = desc.mode == dml.ConvolutionMode.CONVOLUTION
    spatial = desc.output_tensor.sizes[2:]
    if desc.direction == BWD:
        return brute_conv_backward(x, w, b, desc.strides, desc.dilations, desc.start_padding,
                                   spatial, flip, desc.group_count)
    return brute_conv_forward(x, w, b, desc.strides, desc.dilations, desc.start_padding, flip,
                              desc.group_count, spatial)


@pytest.mark.parametrize("name", list(CASES))
def test_tiled_convolution_agrees_with_brute_force(name):
    from dml_numba.cuda.convolution import tile_plan

    (desc, inputs), shape = CASES[name]
    plan = tile_plan(desc)
    assert (plan.rm, plan.rn, plan.tx, plan.ty) == shape and plan.tx * plan.ty == 256
    op = dml.compile_operator(desc, "cuda", algorithm="tiled")
    assert "cuda.shared.array" in op.source and "cuda.syncthreads()" in op.source
    y = op(*inputs)
    ref = dml.compile_operator(desc, "numpy")(*inputs)
    compare(desc, y, ref)
    expected = _oracle(desc, inputs)
    expected = ACTIVATIONS.get(type(desc.fused_activation), lambda v: v)(expected)
    tol = {np.float16: 2e-2, np.float32: 1e-4, np.float64: 1e-10}[inputs[0].dtype.type]
    np.testing.assert_allclose(y.astype(np.float64), expected, rtol=tol, atol=tol * 50)


@pytest.mark.parametrize("name", [n for n in catalogue() if n.startswith("conv")])
def test_catalogue_on_the_tiled_kernel(name):
    desc, inputs = catalogue()[name]
    y = dml.compile_operator(desc, "cuda", algorithm="tiled")(*inputs)
    compare(desc, y, dml.compile_operator(desc, "numpy")(*inputs))


def test_the_automatic_choice_tiles_where_a_group_has_channels_to_share():
    from dml_numba.cuda.convolution import choose_algorithm

    dense = CASES["fwd-70ch-edges"][0][0]
    depthwise = catalogue()["conv-fwd-depthwise-relu"][0]
    assert choose_algorithm(dense) == "tiled"
    assert choose_algorithm(depthwise) == "direct"
    assert "cuda.shared.array" in dml.compile_operator(dense, "cuda").source
    assert "cuda.shared.array" not in dml.compile_operator(depthwise, "cuda").source
