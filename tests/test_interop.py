"""Other libraries' arrays and NumPy's conventions at the boundary: a PyTorch (or JAX) array in
gives the same kind out, read without a copy, ``out=`` written in place; ``numpy.pad``'s
``pad_width`` and mode names; ``slice``; a missing batch axis and mixed data types named with
their fix; the command line's conventions."""
import inspect
import re

import numpy as np
import pytest

import dml_numba as dml
from dml_numba import _interop
from dml_numba.__main__ import main


@pytest.fixture(scope="module")
def torch():
    """PyTorch, for the tests that need it (its PyPI wheel is several GB with CUDA, so it is not
    in the test extras; the other tests here run without it)."""
    return pytest.importorskip("torch", reason="PyTorch is optional: not installed")


@pytest.fixture(scope="module")
def jax():
    return pytest.importorskip("jax", reason="JAX is in the [test] extra")


F32 = np.float32
RNG = np.random.default_rng(5)
X4 = RNG.standard_normal((1, 2, 5, 6)).astype(F32)
W4 = RNG.standard_normal((3, 2, 3, 3)).astype(F32)

#: every function of the functional layer: (call on any array kind, the NumPy oracle)
CALLS = {
    "padding": (lambda x, **kw: dml.padding(x, (0, 0, 1, 2), (0, 0, 2, 1), "reflection", **kw),
                lambda x: np.pad(x, ((0, 0), (0, 0), (1, 2), (2, 1)), mode="reflect")),
    "lp_pooling": (lambda x, **kw: dml.lp_pooling(x, (2, 2), strides=1, p=1, **kw),
                   lambda x: sum(np.abs(x[:, :, i:i + 4, j:j + 5]) for i in (0, 1)
                                 for j in (0, 1))),
    "convolution": (lambda x, **kw: dml.convolution(x, W4, **kw),
                    lambda x: np.einsum("nchwij,ocij->nohw", np.lib.stride_tricks
                                        .sliding_window_view(x, (3, 3), axis=(2, 3)), W4)),
    "tile": (lambda x, **kw: dml.tile(x, (1, 2, 1, 2), **kw), lambda x: np.tile(x, (1, 2, 1, 2))),
    "slice1": (lambda x, **kw: dml.slice1(x, (0, 0, 1, 0), (1, 2, 4, 6), (1, 1, 2, -1), **kw),
               lambda x: x[:, :, 1:5:2, ::-1]),
    "max_pooling": (lambda x, **kw: dml.max_pooling(x, (2, 3), 1, **kw),
                    lambda x: np.lib.stride_tricks.sliding_window_view(
                        x, (2, 3), axis=(2, 3)).max(axis=(-1, -2))),
    "average_pooling": (lambda x, **kw: dml.average_pooling(x, (2, 3), 1, **kw),
                        lambda x: np.lib.stride_tricks.sliding_window_view(
                            x, (2, 3), axis=(2, 3)).mean(axis=(-1, -2))),
    "element_wise_add": (lambda x, **kw: dml.element_wise_add(x, X4[:, :1], **kw),
                         lambda x: x + X4[:, :1]),
    "element_wise_multiply": (lambda x, **kw: dml.element_wise_multiply(x, x, **kw),
                              lambda x: x * x),
    "batch_normalization": (lambda x, **kw: dml.batch_normalization(
        x, [1, 2], [4, 1], [0.5, 2], [0, 1], epsilon=0.0, **kw),
        lambda x: (x - np.array([1, 2], F32)[:, None, None]) * np.array([0.25, 2], F32)[
            :, None, None] + np.array([0, 1], F32)[:, None, None]),
    "gemm": (lambda x, **kw: dml.gemm(x, np.ones((1, 2, 6, 2), F32), **kw),
             lambda x: x @ np.ones((6, 2), F32)),
    "join": (lambda x, **kw: dml.join([x, X4], 3, **kw), lambda x: np.concatenate([x, X4], 3)),
    "activation": (lambda x, **kw: dml.activation(x, "leaky_relu", [0.25], **kw),
                   lambda x: np.where(x > 0, x, 0.25 * x)),
}


def test_every_function_is_in_the_table():
    assert set(CALLS) == set(dml.functional.__all__)


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_tensor_in_gives_a_tensor_out(name, torch):
    call, oracle = CALLS[name]
    y = call(torch.from_numpy(X4.copy()))
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32
    np.testing.assert_allclose(y.numpy(), oracle(X4), rtol=1e-5, atol=1e-5)
    assert type(call(X4)) is np.ndarray  # NumPy in, NumPy out


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_tensor_out_is_written_in_place(name, torch):
    call, oracle = CALLS[name]
    expected = oracle(X4)
    out = torch.full(expected.shape, -7.0)
    assert call(torch.from_numpy(X4.copy()), out=out) is out
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)
    out2 = torch.full(expected.shape, -7.0)
    assert call(X4, out=out2) is out2  # a NumPy input, a tensor out
    np.testing.assert_allclose(out2.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_compiled_operators_take_and_give_tensors_without_copying_the_input(torch):
    desc = dml.TileOperatorDesc(dml.TensorDesc(dml.DataType.FLOAT32, (2, 3)),
                                dml.TensorDesc(dml.DataType.FLOAT32, (4, 3)), (2, 1))
    op = dml.compile_operator(desc, "cpu")
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    assert _interop.host_view(x).ctypes.data == x.data_ptr()  # read in place
    y = op(x)
    assert isinstance(y, torch.Tensor) and torch.equal(y, x.repeat(2, 1))
    out = torch.zeros(4, 3)
    assert op(x, out=out) is out and torch.equal(out, x.repeat(2, 1))
    t = torch.arange(6, dtype=torch.float32).reshape(3, 2).t()  # not contiguous
    assert torch.equal(op(t), t.repeat(2, 1))
    g = torch.ones(2, 3, requires_grad=True)
    assert torch.equal(op(g), torch.ones(4, 3))
    with pytest.raises(dml.ValidationError, match="dtype float64 is invalid; expected float32"):
        op(x.double())


def test_tensor_parameters_are_values(torch):
    x = torch.from_numpy(X4.copy())
    a = dml.convolution(x, W4, strides=torch.tensor([2, 2]))
    b = dml.convolution(x, W4, strides=torch.tensor([1, 2]))
    assert a.shape == (1, 3, 2, 2) and b.shape == (1, 3, 3, 2)


@pytest.mark.parametrize("name", sorted(CALLS))
def test_jax_arrays_come_back_as_jax_arrays(name, jax):
    call, oracle = CALLS[name]
    y = call(jax.numpy.asarray(X4))
    assert isinstance(y, jax.Array) and y.dtype == jax.numpy.float32
    np.testing.assert_allclose(np.asarray(y), oracle(X4), rtol=1e-5, atol=1e-5)


def test_compiled_operators_and_graphs_take_and_give_jax_arrays(jax):
    desc = dml.TileOperatorDesc(dml.TensorDesc(dml.DataType.FLOAT32, (2, 3)),
                                dml.TensorDesc(dml.DataType.FLOAT32, (4, 3)), (2, 1))
    x = jax.numpy.arange(6, dtype=jax.numpy.float32).reshape(2, 3)
    y = dml.compile_operator(desc, "cpu")(x)
    assert isinstance(y, jax.Array)
    np.testing.assert_array_equal(np.asarray(y), np.tile(np.arange(6, dtype=F32).reshape(2, 3),
                                                         (2, 1)))
    g = dml.GraphDesc(1, 1, (dml.OperatorGraphNodeDesc(desc),), (dml.InputGraphEdgeDesc(0, 0, 0),),
                      (dml.OutputGraphEdgeDesc(0, 0, 0),))
    z = dml.compile_graph(g, "cpu")(x)
    assert isinstance(z, jax.Array) and np.array_equal(np.asarray(z), np.asarray(y))
    with pytest.raises(dml.ValidationError, match="dtype float16 is invalid; expected float32"):
        dml.compile_operator(desc, "cpu")(x.astype(jax.numpy.float16))


# -- NumPy's conventions -----------------------------------------------------------------------

X2 = np.arange(12, dtype=np.int16).reshape(3, 4)


@pytest.mark.parametrize("pad_width", [1, (1, 2), ((1, 2),), ((0, 1), (2, 0)),
                                       np.array([[2, 0], [1, 1]]), np.int64(2)])
@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "symmetric", "wrap"])
def test_pad_width_and_modes_as_numpy_pad_takes_them(pad_width, mode):
    expected = np.pad(X2, pad_width, mode=mode)
    got = dml.padding(X2, pad_width=pad_width, mode=mode)
    np.testing.assert_array_equal(got, expected)


X3 = np.arange(24, dtype=np.float32).reshape(2, 3, 4)


@pytest.mark.parametrize("repeats", [2, np.int8(3), np.array(2), (2,), [3, 2], np.array([2, 1]),
                                     (2, 1, 3), (np.int64(1), 2)])
@pytest.mark.parametrize("where", ["functional", "dask"])
def test_tile_repeats_as_numpy_tile_takes_them(repeats, where):
    """One integer or fewer repeats than axes repeat the last axes, as numpy.tile (the output
    keeps x's rank), in the functional layer and on Dask."""
    expected = np.tile(X3, repeats)
    if where == "dask":
        da = pytest.importorskip("dask.array")
        import dml_numba.dask as dmd

        got = dmd.tile(da.from_array(X3, chunks=(1, 2, 3)), repeats).compute(scheduler="sync")
    else:
        got = dml.tile(X3, repeats)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("repeats,message", [
    ((1, 1, 1, 2), "tile.repeats: (1, 1, 1, 2) is invalid; expected 3 entries"),
    ((2, 0), "tile.repeats"), (2.0, "tile.repeats: 2.0 is invalid"),
    ((True, 2), "tile.repeats"), ((), "tile.repeats: () is invalid")])
def test_tile_repeats_numpy_tile_would_widen_x_with_are_refused(repeats, message):
    """More repeats than axes (numpy.tile would add axes: a tile keeps the rank), zero,
    floats and bools are refused, naming the field."""
    with pytest.raises(dml.ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        dml.tile(X3, repeats)


@pytest.mark.parametrize("kwargs,message", [
    ({"pad_width": ((1, 1), (1, 1), (1, 1))}, "expected 2 (before, after) pairs, one per axis"),
    ({"pad_width": (1, 2, 3)}, "expected numpy.pad's form"),
    ({"pad_width": (1.5, 2)}, "expected numpy.pad's form"),
    ({"pad_width": "wide"}, "expected numpy.pad's form"),
    ({"pad_width": 1, "start_padding": (1, 1)}, "expected either pad_width or start_padding"),
    ({"start_padding": (1, 1)}, "padding.end_padding: None is invalid; expected the padding"),
    ({}, "padding.start_padding: None is invalid"),
    ({"pad_width": 1, "mode": "mirror"}, "expected one of constant, edge, reflection, "
                                         "symmetric, wrap, or NumPy's reflect (= reflection)"),
])
def test_padding_amounts_and_modes_are_refused_with_what_is_expected(kwargs, message):
    with pytest.raises(dml.ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")) \
            as caught:
        dml.padding(X2, **kwargs)
    # one prefix: the function, the field the caller typed, the value, "is invalid; expected"
    assert re.match(r"padding\.(pad_width|mode|start_padding|end_padding): .* is invalid; "
                    r"expected ", str(caught.value))
    if set(kwargs) == {"pad_width"}:  # the value as the caller gave it
        assert str(caught.value).startswith(f"padding.pad_width: {_shown(kwargs['pad_width'])} ")


def _shown(value):
    """A parameter as the messages show it: sequences as tuples."""
    return repr(tuple(_shown_item(v) for v in value)) if isinstance(value, (tuple, list)) \
        else repr(value)


def _shown_item(v):
    return tuple(v) if isinstance(v, (tuple, list)) else v


def test_a_list_parameter_out_of_the_inputs_range_is_refused():
    """A bias given as a list takes x's type where its values round into it; a value beyond
    the type's range (a finite number that would become infinity) is refused, saying what to
    cast."""
    x, w = X4.astype(np.float16), W4.astype(np.float16)
    np.testing.assert_array_equal(dml.convolution(x, w, bias=[0.1, 2.0, 3.0]),
                                  dml.convolution(x, w, bias=np.array([0.1, 2.0, 3.0],
                                                                      np.float16)))
    with pytest.raises(dml.ValidationError, match=r"convolution.bias.dtype: 'float64' is "
                       r"invalid; expected float16"):
        dml.convolution(x, w, bias=[1e6, 2.0, 3.0])


def test_convolution_enums_are_named_in_their_messages():
    with pytest.raises(dml.ValidationError, match=r"^convolution\.mode: 'diagonal' is invalid; "
                       r"expected one of convolution, cross_correlation"):
        dml.convolution(X4, W4, mode="diagonal")
    with pytest.raises(dml.ValidationError, match=r"^convolution\.direction: 'sideways' is "
                       r"invalid; expected one of forward, backward"):
        dml.convolution(X4, W4, direction="sideways")


def test_slice_is_slice1_everywhere_a_user_types_it(capsys):
    assert dml.slice is dml.slice1 and "slice" in dml.__all__
    np.testing.assert_array_equal(dml.slice(np.arange(10), (1,), (7,), (3,)), [1, 4, 7])
    assert main(["profile", "--quick", "--ops", "slice", "--devices", "numpy", "--no-peers",
                 "--processes", "1", "--repeat", "3", "--min-time", "0.0005"]) == 0
    assert "every 2nd row" in capsys.readouterr().out


# -- errors that point at the fix ---------------------------------------------------------------

def test_a_missing_batch_axis_is_named():
    with pytest.raises(dml.ValidationError, match=r"convolution.filter_tensor.sizes: \(3, 2, 3, "
                       r"3\) is invalid; expected 3 dimensions, the dimension count of "
                       r"input_tensor; is the input's batch axis missing\? x\[None\] adds it"):
        dml.convolution(X4[0], W4)
    with pytest.raises(dml.ValidationError, match=r"lp_pooling.x.shape: \(2, 5, 6\) is invalid; "
                       r"expected 4 dimensions .* for this window_size: is the batch axis"):
        dml.lp_pooling(X4[0], (2, 2))
    assert dml.convolution(X4[0][None], W4).shape == (1, 3, 3, 4)  # the fix works


def test_parameters_take_the_inputs_type_where_exact_and_say_what_to_cast_otherwise():
    ref = dml.convolution(X4, W4, bias=np.array([1, 2, 3], F32))
    # a bias without a type of its own takes x's
    np.testing.assert_array_equal(dml.convolution(X4, W4, bias=[1.0, 2.0, 3.0]), ref)
    # float64 arrays whose values are exact in float32: cast
    np.testing.assert_array_equal(
        dml.convolution(X4, W4.astype(np.float64), bias=np.array([1.0, 2.0, 3.0])), ref)
    # a float32 filter with a float64 input: exact the other way too
    assert dml.convolution(X4.astype(np.float64), W4).dtype == np.float64
    with pytest.raises(dml.ValidationError, match=r"convolution.filter.dtype: 'float64' is "
                       r"invalid; expected float32, the data type of x, or values exact in "
                       r"it: cast one of them, e.g. filter.astype\(np.float32\) or "
                       r"x.astype\(np.float64\)"):
        dml.convolution(X4, W4.astype(np.float64) + 1e-12)
    with pytest.raises(dml.ValidationError, match=r"convolution.bias.dtype: 'float64' is invalid"):
        dml.convolution(X4, W4, bias=np.array([0.1, 2.0, 3.0]))


@pytest.mark.parametrize("name", sorted(CALLS))
def test_functional_messages_begin_with_the_function_called(name):
    """One prefix: whichever check finds the problem (the functional layer, the descriptor, the
    binding), a functional call's message begins with the function's name."""
    call, oracle = CALLS[name]
    wrong = np.zeros(oracle(X4).shape, np.float64)
    with pytest.raises(dml.ValidationError, match=rf"^{name}\.out: dtype float64 is invalid; "
                       r"expected float32 \(FLOAT32\)$"):
        call(X4, out=wrong)
    with pytest.raises(dml.ValidationError, match=rf"^{name}\.") as info:
        call(X4.astype(np.complex64) if name != "convolution" else X4.astype(np.int16))
    assert "OperatorDesc" not in str(info.value)


# -- the command line ----------------------------------------------------------------------------

def test_version_and_cache_without_a_subcommand(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out.strip() == (
        f"dml-numba {dml.__version__}")
    assert main(["cache"]) == 0
    out = capsys.readouterr().out
    assert "usage: dml-numba cache" in out and "clear" in out and "prune" in out


def test_help_is_plain_text(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "``" not in capsys.readouterr().out


def test_an_unknown_device_lists_the_usable_ones(capsys):
    assert main(["profile", "--quick", "--devices", "gpu"]) == 2
    err = capsys.readouterr().err
    assert "device 'gpu' is not usable here: unknown device; expected some of numpy, cpu" in err


def _unsupported_tensors(torch):
    x = torch.from_numpy(X4.copy())
    return {"bfloat16": x.to(torch.bfloat16), "complex64": x.to(torch.complex64),
            "complex128 conj view": x.to(torch.complex128).conj()}


@pytest.mark.parametrize("kind", ["bfloat16", "complex64", "complex128 conj view"])
@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_tensor_of_a_type_the_operators_lack_is_named(name, kind, torch):
    """PyTorch's bfloat16, complex tensors and conjugate views: a ValidationError naming the
    function, the argument, the dtype and the types taken, through the functional layer, a
    compiled operator and a compiled graph (it was a TypeError or RuntimeError from inside)."""
    t = _unsupported_tensors(torch)[kind]
    dtype = kind.split()[0]
    call, _ = CALLS[name]
    first = next(iter(inspect.signature(getattr(dml, name)).parameters))  # x, a, inputs
    field = re.escape("inputs[0]" if first == "inputs" else first)
    with pytest.raises(dml.ValidationError, match=f"{name}.{field}: a torch tensor of dtype "
                                                  f"{dtype} is invalid; expected float32, "
                                                  "float16"):
        call(t)
    desc = dml.functional.tile_desc(X4, (1, 1, 1, 1))
    with pytest.raises(dml.ValidationError, match=f"TileOperatorDesc.input_tensor: a torch "
                                                  f"tensor of dtype {dtype} is invalid"):
        dml.compile_operator(desc, "cpu")(t)
    g = dml.GraphDesc(1, 1, (dml.OperatorGraphNodeDesc(desc),), (dml.InputGraphEdgeDesc(0, 0, 0),),
                      (dml.OutputGraphEdgeDesc(0, 0, 0),))
    with pytest.raises(dml.ValidationError, match=f"compile_graph.input 0: a torch tensor of "
                                                  f"dtype {dtype} is invalid"):
        dml.compile_graph(g, "cpu")(t)


def test_a_call_inside_jax_jit_says_to_call_outside_it(jax):
    import jax.numpy as jnp

    @jax.jit
    def f(x):
        return dml.padding(x, (0, 0, 1, 1), (0, 0, 1, 1))

    with pytest.raises(dml.ValidationError, match="padding.x: DynamicJaxprTracer is invalid; "
                                                  "expected an array with data: call dml_numba "
                                                  "outside jax.jit"):
        f(jnp.ones((1, 1, 4, 4)))


@pytest.mark.parametrize("entry", ["functional", "operator", "graph"])
def test_out_tensors_follow_pytorchs_own_out_rules(entry, torch):
    """An out= tensor that requires grad (grad mode on) or lives on the meta device: a
    ValidationError naming out, nothing written (PyTorch refuses both); under no_grad a tensor
    that requires grad is written, as PyTorch allows."""
    x = torch.from_numpy(X4.copy())
    desc = dml.functional.tile_desc(X4, (1, 1, 1, 2))
    g = dml.GraphDesc(1, 1, (dml.OperatorGraphNodeDesc(desc),), (dml.InputGraphEdgeDesc(0, 0, 0),),
                      (dml.OutputGraphEdgeDesc(0, 0, 0),))
    run = {"functional": lambda out: dml.tile(x, (1, 1, 1, 2), out=out),
           "operator": lambda out: dml.compile_operator(desc, "cpu")(x, out=out),
           "graph": lambda out: dml.compile_graph(g, "cpu")(x, out=out)}[entry]
    where = {"functional": "tile.out", "operator": "TileOperatorDesc.out",
             "graph": "compile_graph.out\\[0\\]"}[entry]
    grad = torch.zeros(desc.output.sizes, requires_grad=True)
    with pytest.raises(dml.ValidationError, match=f"{where}: a torch tensor that requires grad "
                                                  "is invalid"):
        run(grad)
    assert not grad.detach().any()
    with pytest.raises(dml.ValidationError, match=f"{where}: a torch tensor on the meta device "
                                                  "is invalid"):
        run(torch.empty(desc.output.sizes, device="meta"))
    with torch.no_grad():
        run(grad)
    np.testing.assert_array_equal(grad.detach().numpy(), np.tile(X4, (1, 1, 1, 2)))


def test_a_meta_tensor_input_is_named(torch):
    m = torch.empty(X4.shape, device="meta")
    with pytest.raises(dml.ValidationError, match="tile.x: a torch tensor on the meta device"):
        dml.tile(m, (1, 1, 1, 2))
    with pytest.raises(dml.ValidationError, match="TileOperatorDesc.input_tensor: a torch "
                                                  "tensor on the meta device"):
        dml.compile_operator(dml.functional.tile_desc(X4, (1, 1, 1, 2)), "cpu")(m)
