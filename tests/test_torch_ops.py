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

    g = torch.compile(f, backend="aot_eager", fullgraph=True)
    np.testing.assert_allclose(g(X).numpy(), oracle(X.numpy() * 2) - 1, rtol=1e-5, atol=1e-4)


def test_bad_parameters_are_validation_errors():
    with pytest.raises(dml.ValidationError, match="padding.mode: 'mirror' is invalid"):
        torch.ops.dml_numba.padding(X, [0, 0, 1, 1], [0, 0, 1, 1], "mirror")


def test_the_module_example_runs():
    result = doctest.testmod(dml_torch)
    assert result.attempted > 0 and result.failed == 0
