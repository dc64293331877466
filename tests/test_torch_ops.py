"""dml_numba.torch: the operators as PyTorch custom operators, eager, on the meta device (their
fake implementations) and inside a torch.compile graph, against NumPy oracles."""
import doctest

import numpy as np
import pytest

import dml_numba as dml

torch = pytest.importorskip("torch", reason="PyTorch is optional: dml_numba.torch needs it")
dml_torch = pytest.importorskip("dml_numba.torch")

X = torch.arange(2 * 3 * 5 * 6, dtype=torch.float32).reshape(2, 3, 5, 6) / 7
W = torch.linspace(-1, 1, 4 * 3 * 3 * 3).reshape(4, 3, 3, 3)
B = torch.tensor([0.5, -1.0, 2.0, 0.0])

#: every operator: (its custom-operator call on (x, filter, bias), the NumPy oracle)
OPS = {
    "padding": (lambda x, w, b: torch.ops.dml_numba.padding(x, [0, 0, 1, 2], [0, 0, 2, 0],
                                                            "reflect"),
                lambda x: np.pad(x, ((0, 0), (0, 0), (1, 2), (2, 0)), mode="reflect")),
    "lp_pooling": (lambda x, w, b: torch.ops.dml_numba.lp_pooling(x, [2, 3], [1, 2], None, None,
                                                            None, 1),
                   lambda x: np.abs(np.lib.stride_tricks.sliding_window_view(
                       x, (2, 3), axis=(2, 3))[:, :, :, ::2]).sum(axis=(-1, -2))),
    "convolution": (lambda x, w, b: torch.ops.dml_numba.convolution(x, w, b, [2, 1]),
                    lambda x: np.einsum("nchwij,ocij->nohw", np.lib.stride_tricks
                                        .sliding_window_view(x, (3, 3), axis=(2, 3))[:, :, ::2],
                                        W.numpy()) + B.numpy()[None, :, None, None]),
    "tile": (lambda x, w, b: torch.ops.dml_numba.tile(x, [1, 2, 1, 3]),
             lambda x: np.tile(x, (1, 2, 1, 3))),
    "slice1": (lambda x, w, b: torch.ops.dml_numba.slice1(x, [0, 1, 0, 0], [2, 2, 5, 6],
                                                    [1, 1, 2, -3]),
               lambda x: x[:, 1:3, 0:5:2, ::-3]),
    "max_pooling": (lambda x, w, b: torch.ops.dml_numba.max_pooling(x, [2, 3], [1, 2]),
                    lambda x: np.lib.stride_tricks.sliding_window_view(
                        x, (2, 3), axis=(2, 3))[:, :, :, ::2].max(axis=(-1, -2))),
    "average_pooling": (lambda x, w, b: torch.ops.dml_numba.average_pooling(x, [2, 3], [1, 2]),
                        lambda x: np.lib.stride_tricks.sliding_window_view(
                            x, (2, 3), axis=(2, 3))[:, :, :, ::2].mean(axis=(-1, -2))),
    "element_wise_add": (lambda x, w, b: torch.ops.dml_numba.element_wise_add(x, b[:3, None,
                                                                                None]),
                         lambda x: x + B.numpy()[:3, None, None]),
    "element_wise_multiply": (lambda x, w, b: torch.ops.dml_numba.element_wise_multiply(x, x),
                              lambda x: x * x),
    "batch_normalization": (lambda x, w, b: torch.ops.dml_numba.batch_normalization(
        x, b[:3], b[:3].abs() + 1, b[1:], b[:3] * 2),
        lambda x: (x - B.numpy()[:3, None, None]) / np.sqrt(np.abs(B.numpy()[:3]) + 1 + 1e-5)[
            :, None, None] * B.numpy()[1:, None, None] + 2 * B.numpy()[:3, None, None]),
    "gemm": (lambda x, w, b: torch.ops.dml_numba.gemm(x, x, None, False, True, 0.5),
             lambda x: 0.5 * x @ np.swapaxes(x, -1, -2)),
    "join": (lambda x, w, b: torch.ops.dml_numba.join([x, x[:, :1]], 1),
             lambda x: np.concatenate([x, x[:, :1]], 1)),
    "activation": (lambda x, w, b: torch.ops.dml_numba.activation(x - 2, "elu", [0.5]),
                   lambda x: np.where(x - 2 >= 0, x - 2, 0.5 * np.expm1(x - 2))),
}


def test_every_operator_is_registered():
    assert set(OPS) == set(dml.functional.__all__) == set(dml_torch.SCHEMAS)


@pytest.mark.parametrize("name", sorted(OPS))
def test_eager_against_numpy(name):
    call, oracle = OPS[name]
    y = call(X, W, B)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32
    np.testing.assert_allclose(y.numpy(), oracle(X.numpy()), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", sorted(OPS))
def test_the_fake_implementation_gives_the_output_shape(name):
    call, oracle = OPS[name]
    y = call(X.to("meta"), W.to("meta"), B.to("meta"))
    assert y.device.type == "meta" and tuple(y.shape) == oracle(X.numpy()).shape


@pytest.mark.parametrize("name", sorted(OPS))
def test_a_compiled_graph_calls_the_operator(name):
    call, oracle = OPS[name]

    def f(x):
        return call(x * 2, W, B) - 1

    torch._dynamo.reset()  # one code object for every operator: no recompile limit reached
    g = torch.compile(f, backend="aot_eager", fullgraph=True)
    np.testing.assert_allclose(g(X).numpy(), oracle(X.numpy() * 2) - 1, rtol=1e-5, atol=1e-4)


def test_bad_parameters_are_validation_errors():
    with pytest.raises(dml.ValidationError, match="padding.mode: 'mirror' is invalid"):
        torch.ops.dml_numba.padding(X, [0, 0, 1, 1], [0, 0, 1, 1], "mirror")


def test_the_module_example_runs():
    result = doctest.testmod(dml_torch)
    assert result.attempted > 0 and result.failed == 0


# -- gradients ------------------------------------------------------------------------------------

D = torch.float64
G = torch.Generator().manual_seed(3)
XD = torch.randn(1, 4, 5, 6, dtype=D, generator=G)  # small: gradcheck evaluates per element
X1 = torch.randn(1, 3, 7, dtype=D, generator=G)
X3 = torch.randn(1, 2, 3, 4, 4, dtype=D, generator=G)
C = torch.ops.dml_numba.convolution

#: every operator and mode: (the call on its tensor arguments, those arguments); gradcheck in
#: float64 against finite differences
GRADIENTS = {
    **{f"padding {m}": (lambda x, m=m: torch.ops.dml_numba.padding(
        x, [0, 0, 3, 2], [0, 0, 4, 5] if m in ("edge", "symmetric", "wrap") else [0, 0, 2, 3],
        m), (XD,)) for m in ("reflect", "edge", "symmetric", "wrap")},
    "padding constant, channels too": (lambda x: torch.ops.dml_numba.padding(
        x, [0, 1, 1, 2], [1, 0, 2, 0], "constant", 3.0), (XD,)),
    "tile": (lambda x: torch.ops.dml_numba.tile(x, [2, 1, 3, 2]), (XD,)),
    "slice strided and reversed": (lambda x: torch.ops.dml_numba.slice1(
        x, [0, 1, 0, 1], [1, 3, 5, 5], [1, 2, 2, -3]), (XD,)),
    "lp p=1 padded": (lambda x: torch.ops.dml_numba.lp_pooling(x, [3, 2], [1, 1], [1, 1], [1, 1],
                                                              None, 1), (XD,)),
    "lp p=2 strided": (lambda x: torch.ops.dml_numba.lp_pooling(x, [2, 3], [1, 2], [1, 0],
                                                               [0, 1], None, 2), (XD,)),
    "lp p=3 dilated": (lambda x: torch.ops.dml_numba.lp_pooling(x, [2, 2], [2, 1], None, None,
                                                               [2, 1], 3), (XD,)),
    "convolution, bias, strides, dilations, padding": (
        lambda x, w, b: C(x, w, b, [2, 1], [2, 1], [1, 0], [0, 2]),
        (XD, torch.randn(3, 4, 3, 3, dtype=D, generator=G),
         torch.randn(3, dtype=D, generator=G))),
    "convolution grouped": (lambda x, w: C(x, w, None, [1, 2], [1, 1], [1, 0], [1, 1], None, 2),
                            (XD, torch.randn(6, 2, 3, 2, dtype=D, generator=G))),
    "convolution mode": (lambda x, w: C(x, w, None, [1, 1], [1, 1], [1, 1], [1, 1], None, 1,
                                        "convolution"),
                         (XD, torch.randn(2, 4, 3, 3, dtype=D, generator=G))),
    "transposed": (lambda x, w, b: C(x, w, b, [2, 2], [1, 1], [1, 0], [0, 1], [1, 0], 1,
                                     "cross_correlation", "backward"),
                   (XD, torch.randn(4, 3, 3, 3, dtype=D, generator=G),
                    torch.randn(3, dtype=D, generator=G))),
    "transposed grouped": (lambda x, w: C(x, w, None, [2, 1], [1, 2], [0, 0], [0, 0], None, 2,
                                          "cross_correlation", "backward"),
                           (XD, torch.randn(4, 2, 2, 3, dtype=D, generator=G))),
    "convolution 1-D": (lambda x, w: C(x, w, None, [2], [2], [1], [0]),
                        (X1, torch.randn(2, 3, 3, dtype=D, generator=G))),
    "convolution 3-D": (lambda x, w: C(x, w, None, [1, 2, 1], None, [1, 0, 1], [0, 1, 1]),
                        (X3, torch.randn(2, 2, 2, 3, 2, dtype=D, generator=G))),
    "max pooling padded, dilated": (lambda x: torch.ops.dml_numba.max_pooling(
        x, [2, 3], [2, 1], [1, 1], [0, 1], [1, 2]), (XD,)),
    "average pooling, padding counted": (lambda x: torch.ops.dml_numba.average_pooling(
        x, [3, 2], [1, 2], [1, 1], [1, 0], None, True), (XD,)),
    "average pooling, padding not counted": (lambda x: torch.ops.dml_numba.average_pooling(
        x, [3, 2], [2, 1], [1, 1], [1, 0], [1, 2], False), (XD,)),
    "element-wise add, broadcast": (lambda a, b: torch.ops.dml_numba.element_wise_add(a, b),
                                    (XD, torch.randn(4, 1, 1, dtype=D, generator=G))),
    "element-wise multiply, broadcast": (
        lambda a, b: torch.ops.dml_numba.element_wise_multiply(a, b),
        (XD, torch.randn(1, 5, 6, dtype=D, generator=G))),
    "batch normalization": (lambda x, m, v, s, b: torch.ops.dml_numba.batch_normalization(
        x, m, v, s, b, 0.1), (XD, torch.randn(4, dtype=D, generator=G),
                              torch.rand(4, dtype=D, generator=G) + .5,
                              torch.randn(4, dtype=D, generator=G),
                              torch.randn(4, dtype=D, generator=G))),
    "gemm transposed, c": (lambda a, b, c: torch.ops.dml_numba.gemm(a, b, c, True, True, 0.5, 2.),
                           (torch.randn(2, 4, 3, dtype=D, generator=G),
                            torch.randn(2, 5, 4, dtype=D, generator=G),
                            torch.randn(2, 3, 5, dtype=D, generator=G))),
    "join": (lambda a, b: torch.ops.dml_numba.join([a, b], 2),
             (XD, torch.randn(1, 4, 2, 6, dtype=D, generator=G))),
    **{f"activation {n}": (lambda x, n=n, p=p: torch.ops.dml_numba.activation(x, n, p), (XD,))
       for n, p in (("sigmoid", None), ("scaled_tanh", [1.5, 0.7]), ("celu", [1.3]),
                    ("gelu", None), ("clip", [-0.5, 0.75, 2.0, 0.1]),
                    ("parametric_softplus", [0.5, 1.5]))},
}


@pytest.mark.parametrize("name", sorted(GRADIENTS))
def test_every_operator_has_a_real_gradient(name):
    call, args = GRADIENTS[name]
    args = [a.clone().requires_grad_() for a in args]
    assert torch.autograd.gradcheck(call, args, eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("name", sorted(OPS))
def test_backward_leaves_gradients_on_every_tensor_input(name):
    call, _ = OPS[name]
    x, w, b = (t.clone().requires_grad_() for t in (X, W, B))
    call(x, w, b).sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape
    uses = {"convolution": "wb", "element_wise_add": "b", "batch_normalization": "b"}
    for t, letter in ((w, "w"), (b, "b")):
        if letter in uses.get(name, ""):
            assert t.grad is not None and t.grad.shape == t.shape


FUNCTIONAL = {
    "padding": lambda x, w, b: dml.padding(x, pad_width=2, mode="symmetric"),
    "lp_pooling": lambda x, w, b: dml.lp_pooling(x, (2, 2), strides=(1, 2), p=2),
    "convolution": lambda x, w, b: dml.convolution(x, w, b, strides=(2, 1), start_padding=1,
                                                   end_padding=1),
    "tile": lambda x, w, b: dml.tile(x, (1, 2, 1, 2)),
    "slice1": lambda x, w, b: dml.slice1(x, (0, 0, 1, 0), (1, 3, 4, 6), (1, 1, 2, -1)),
    "max_pooling": lambda x, w, b: dml.max_pooling(x, (2, 2), 1, 1, 0),
    "average_pooling": lambda x, w, b: dml.average_pooling(x, (2, 3), 1, 1, 1),
    "element_wise_add": lambda x, w, b: dml.element_wise_add(x, b[:3, None, None]),
    "element_wise_multiply": lambda x, w, b: dml.element_wise_multiply(x, x),
    "batch_normalization": lambda x, w, b: dml.batch_normalization(x, b[:3], b[:3] ** 2 + 1,
                                                                   b[1:], b[:3]),
    "gemm": lambda x, w, b: dml.gemm(x, x, trans_b=True),
    "join": lambda x, w, b: dml.join([x, x], 3),
    "activation": lambda x, w, b: dml.activation(x, dml.ActivationSoftsignOperatorDesc()),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONAL))
def test_the_functional_layer_and_compiled_operators_take_the_same_gradient(name):
    """A tensor that requires grad, given to the functional layer or a compiled operator:
    the result requires grad and its gradient is right (it came back detached)."""
    x = XD[:, :3].clone().requires_grad_()
    w = torch.randn(4, 3, 3, 3, dtype=D, generator=G, requires_grad=True)
    b = torch.randn(4, dtype=D, generator=G, requires_grad=True)
    y = FUNCTIONAL[name](x, w, b)
    assert y.requires_grad
    args = (x, w, b) if name in ("convolution", "element_wise_add",
                                 "batch_normalization") else (x,)
    assert torch.autograd.gradcheck(lambda *a: FUNCTIONAL[name](*a, *(w, b)[len(a) - 1:]),
                                    args, eps=1e-6, atol=1e-5)
    desc = dml.functional.tile_desc(x.detach().numpy(), (1, 2, 1, 1))
    op = dml.compile_operator(desc, "cpu")
    assert torch.autograd.gradcheck(lambda a: op(a), (x,), eps=1e-6, atol=1e-5)


def test_where_no_gradient_is_computed_it_is_refused_not_dropped():
    """A fused activation (differentiate it in PyTorch instead) and a compiled graph: a
    ValidationError at the call, never a result without a gradient."""
    x = XD[:, :3].clone().requires_grad_()
    w = torch.randn(4, 3, 3, 3, dtype=D, generator=G)
    with pytest.raises(dml.ValidationError, match="convolution.fused_activation: "
                                                  "ActivationReluOperatorDesc is invalid where a "
                                                  "gradient is wanted"):
        dml.convolution(x, w, fused_activation=dml.ActivationReluOperatorDesc())
    desc = dml.functional.tile_desc(x.detach().numpy(), (1, 1, 1, 2))
    g = dml.GraphDesc(1, 1, (dml.OperatorGraphNodeDesc(desc),), (dml.InputGraphEdgeDesc(0, 0, 0),),
                      (dml.OutputGraphEdgeDesc(0, 0, 0),))
    with pytest.raises(dml.ValidationError, match="compile_graph.input 0: a torch tensor that "
                                                  "requires grad is invalid"):
        dml.compile_graph(g, "cpu")(x)
    with torch.no_grad():  # no gradient wanted: both run
        dml.convolution(x, w, fused_activation=dml.ActivationReluOperatorDesc())
        dml.compile_graph(g, "cpu")(x)


# -- dynamic shapes and PyTorch's own operator checks ---------------------------------------------

@pytest.mark.parametrize("name", sorted(OPS))
def test_dynamic_shapes_compile_once_and_run_every_shape(name):
    """torch.compile(dynamic=True): the fake implementations take symbolic sizes; two input
    shapes run through the one compiled graph, forward and backward."""
    call, oracle = OPS[name]
    torch._dynamo.reset()  # one code object for every operator: no recompile limit reached
    g = torch.compile(lambda x: call(x, W, B), backend="aot_eager", dynamic=True, fullgraph=True)
    shapes = [(2, 3, 5, 6)] + ([] if name == "slice1" else [(3, 3, 7, 9)])
    for shape in shapes:
        x = torch.randn(*shape, generator=G).requires_grad_()
        y = g(x)
        np.testing.assert_allclose(y.detach().numpy(), oracle(x.detach().numpy()) if
                                   shape == (2, 3, 5, 6) else call(x.detach(), W, B).numpy(),
                                   rtol=1e-5, atol=1e-5)
        y.sum().backward()
        assert x.grad is not None and x.grad.shape == x.shape


OPCHECK = {
    "padding": lambda x, w, b: (x, [0, 0, 1, 2], [0, 0, 2, 0], "reflect"),
    "lp_pooling": lambda x, w, b: (x, [2, 3], [1, 2], None, None, None, 2),
    "convolution": lambda x, w, b: (x, w, b, [2, 1], [1, 1], [1, 0], [0, 1]),
    "tile": lambda x, w, b: (x, [1, 2, 1, 3]),
    "slice1": lambda x, w, b: (x, [0, 1, 0, 0], [2, 2, 5, 6], [1, 1, 2, -3]),
    "max_pooling": lambda x, w, b: (x, [2, 3], [1, 2], [1, 0], [0, 1]),
    "average_pooling": lambda x, w, b: (x, [2, 3], [1, 2], [1, 1], [1, 1], None, True),
    "element_wise_add": lambda x, w, b: (x, b[:3].reshape(3, 1, 1)),
    "element_wise_multiply": lambda x, w, b: (x, x),
    "batch_normalization": lambda x, w, b: (x, b[:3], b[1:] ** 2 + 1, b[1:], b[:3]),
    "gemm": lambda x, w, b: (x, x, None, False, True, 0.5),
    "join": lambda x, w, b: ([x, x], 2),
    "activation": lambda x, w, b: (x, "leaky_relu", [0.2]),
}


@pytest.mark.parametrize("name", sorted(OPCHECK))
def test_opcheck_passes_every_test(name):
    """torch.library.opcheck: the schema, the autograd registration, the fake implementation
    and AOT dispatch with dynamic shapes (the backward operators' fakes included)."""
    x, w, b = (t.clone().requires_grad_() for t in (X, W, B))
    result = torch.library.opcheck(getattr(torch.ops.dml_numba, name), OPCHECK[name](x, w, b))
    assert set(result.values()) == {"SUCCESS"} and len(result) >= 4, result
