"""Binding arrays and DirectML-style buffers; out= checks; nothing written when refused.
Every binding rule runs on every device, CUDA (simulator) included: NumPy arrays bound to the
"cuda" device follow exactly the host rules."""
import numpy as np
import pytest

import dml_numba as dml
from tests.conftest import ALL_DEVICES, HOST_DEVICES
from tests.helpers import assert_exact

F32 = dml.DataType.FLOAT32


@pytest.fixture(params=ALL_DEVICES)
def device(request):
    return request.param


def _tile_desc(in_strides=None, out_strides=None):
    return dml.TileOperatorDesc(dml.TensorDesc(F32, (2, 3), in_strides),
                                dml.TensorDesc(F32, (4, 3), out_strides), (2, 1))


def test_any_memory_layout_is_the_tensor(device):
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    op = dml.compile_operator(_tile_desc(), device)
    for x in (np.asfortranarray(base[:2, :3]),     # Fortran order
              base[::-2, 4::-2][:, :3],          # negative strides
              base[:3, :2].T):                   # a transposed view
        assert_exact(op(x), np.tile(x, (2, 1)))


def test_pitched_buffer_is_read_through_strides(device):
    """A 2x3 tensor with row stride 5 (DirectML's 'padding between rows' example)."""
    buf = np.arange(10, dtype=np.float32)
    y = dml.compile_operator(_tile_desc(in_strides=(5, 1)), device)(buf)
    expected = np.array([[0, 1, 2], [5, 6, 7]], np.float32)
    assert_exact(y, np.tile(expected, (2, 1)))


def test_stride_zero_broadcasts(device):
    """Strides {0, 1}: every row reads the same 3 elements (docs/SEMANTICS.md §1)."""
    buf = np.array([7, 8, 9], np.float32)
    y = dml.compile_operator(_tile_desc(in_strides=(0, 1)), device)(buf)
    assert_exact(y, np.tile([[7, 8, 9]], (4, 1)).astype(np.float32))


def test_output_buffer_written_through_strides(device):
    out = np.full(20, -1, np.float32)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    res = dml.compile_operator(_tile_desc(out_strides=(5, 1)), device)(x, out=out)
    assert res is out
    view = out.reshape(4, 5)
    assert_exact(view[:, :3], np.tile(x, (2, 1)))
    assert (view[:, 3:] == -1).all()  # bytes between pitched rows untouched here


def test_out_array_is_returned(device):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = np.empty((4, 3), np.float32)
    assert dml.tile(x, (2, 1), device=device, out=out) is out
    assert_exact(out, np.tile(x, (2, 1)))


@pytest.mark.parametrize("bad,match", [
    (lambda x: x.astype(np.float64), "input_tensor: dtype float64 is invalid; expected float32"),
    (lambda x: x[:1], r"input_tensor: shape \(1, 3\) is invalid"),
    (lambda x: np.zeros(3, np.float32),
     "input_tensor: a buffer of 12 bytes is invalid; expected at least 24"),
    (lambda x: x.tolist(), "input_tensor: list is invalid; expected a numpy.ndarray"),
])
def test_bad_inputs_refused(device, bad, match):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    with pytest.raises(dml.ValidationError, match="TileOperatorDesc." + match):
        dml.compile_operator(_tile_desc(), device)(bad(x))


def _read_only(shape):
    a = np.zeros(shape, np.float32)
    a.setflags(write=False)
    return a


@pytest.mark.parametrize("out,match", [
    (np.zeros((4, 3), np.float64), "out: dtype float64"),
    (np.zeros((3, 3), np.float32), r"out: shape \(3, 3\)"),
    (_read_only((4, 3)), "out: a read-only array is invalid"),
    (np.zeros(4, np.float32), "out: a buffer of 16 bytes is invalid"),
], ids=["dtype", "shape", "read-only", "short-buffer"])
def test_bad_out_refused_and_nothing_written(device, out, match):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    before = out.copy()
    with pytest.raises(dml.ValidationError, match="TileOperatorDesc." + match):
        dml.compile_operator(_tile_desc(), device)(x, out=out)
    np.testing.assert_array_equal(out, before)


def test_out_overlapping_input_refused_nothing_written(device):
    buf = np.arange(20, dtype=np.float32)
    x, out = buf[:6].reshape(2, 3), buf[4:16].reshape(4, 3)
    before = buf.copy()
    with pytest.raises(
        dml.ValidationError, match="TileOperatorDesc.out: an array overlapping input 0"
    ):
        dml.compile_operator(_tile_desc(), device)(x, out=out)
    np.testing.assert_array_equal(buf, before)


def test_disjoint_views_of_one_buffer_are_fine(device):
    buf = np.arange(20, dtype=np.float32)
    x, out = buf[:6].reshape(2, 3), buf[8:20].reshape(4, 3)
    dml.compile_operator(_tile_desc(), device)(x, out=out)
    assert_exact(out, np.tile(np.arange(6, dtype=np.float32).reshape(2, 3), (2, 1)))


def test_output_strides_that_alias_refused(device):
    with pytest.raises(dml.ValidationError, match=r"out: strides \(0, 1\) are invalid for an "
                                                  r"output; expected strides that give every "
                                                  r"element its own address$"):
        dml.compile_operator(_tile_desc(out_strides=(0, 1)), device)(
            np.zeros((2, 3), np.float32), out=np.zeros(16, np.float32))


def test_wrong_input_count(device):
    d = dml.ConvolutionOperatorDesc(dml.TensorDesc(F32, (1, 1, 3)), dml.TensorDesc(F32, (1, 1, 2)),
                                    None, dml.TensorDesc(F32, (1, 1, 2)), 1, 0, (1,), (1,), (0,),
                                    (0,), (0,), 1)
    with pytest.raises(
        dml.ValidationError,
        match=r"ConvolutionOperatorDesc: 1 inputs are invalid; expected 2 "
              r"\(input_tensor, filter_tensor\)",
    ):
        dml.compile_operator(d, device)(np.zeros((1, 1, 3), np.float32))


@pytest.mark.parametrize("device", HOST_DEVICES)
def test_stream_refused_on_host(device):
    with pytest.raises(dml.ValidationError, match="stream"):
        dml.compile_operator(_tile_desc(), device)(np.zeros((2, 3), np.float32), stream=object())


# -- the overlap rule, as a class: the same array, views, 1-D buffers, reversed reads ----------

def _slice_reverse(n):
    t = dml.TensorDesc(F32, (n,))
    return dml.Slice1OperatorDesc(t, t, (0,), (n,), (-1,))


def _overlaps():
    """(name, make() -> (input, out, base buffer)) for every way an out can overlap an input."""
    def same():
        buf = np.arange(12, dtype=np.float32)
        return buf, buf, buf

    def full_view():
        buf = np.arange(12, dtype=np.float32)
        return buf, buf[:], buf

    def reshaped_view():
        buf = np.arange(12, dtype=np.float32)
        return buf.reshape(3, 4).ravel(), buf, buf

    def partial_views():
        base = np.arange(20, dtype=np.float32)
        return base[:12], base[8:20], base

    def interleaved():  # the same bytes, one read backwards: no element in common, but shared
        base = np.arange(24, dtype=np.float32)
        return base[::2], base[22::-2], base

    return {"same array": same, "full view": full_view, "reshaped view": reshaped_view,
            "partial views": partial_views, "reversed view": interleaved}


@pytest.mark.parametrize("make", list(_overlaps().values()), ids=list(_overlaps()))
def test_every_kind_of_overlap_is_refused_and_nothing_written(device, make):
    x, out, base = make()
    before = base.copy()
    with pytest.raises(dml.ValidationError, match=r"Slice1OperatorDesc.out: an array overlapping "
                                                  r"input 0 is invalid"):
        dml.compile_operator(_slice_reverse(12), device)(x, out=out)
    np.testing.assert_array_equal(base, before)


def test_functional_out_overlapping_its_input_is_refused(device):
    buf = np.arange(12, dtype=np.float32)
    with pytest.raises(dml.ValidationError, match="overlapping input 0"):
        dml.slice1(buf, (0,), (12,), (-1,), out=buf[:], device=device)
    np.testing.assert_array_equal(buf, np.arange(12, dtype=np.float32))


def _in_place_cases():
    """(operator call on (inputs, out), inputs, the input that is also the output, oracle)."""
    rng = np.random.default_rng(5)
    a, b = (rng.standard_normal((3, 8)).astype(np.float32) for _ in range(2))
    h = rng.standard_normal((3, 8)).astype(np.float16)
    return {
        "relu": (lambda xs, out, d: dml.activation(xs[0], "relu", device=d, out=out), [a], 0,
                 lambda xs: np.maximum(xs[0], 0)),
        "add, out = a": (lambda xs, out, d: dml.element_wise_add(*xs, device=d, out=out), [a, b],
                         0, lambda xs: xs[0] + xs[1]),
        "add + sigmoid, out = b": (lambda xs, out, d: dml.element_wise_add(
            *xs, dml.ActivationSigmoidOperatorDesc(), device=d, out=out), [a, b], 1,
            lambda xs: 1 / (1 + np.exp(-(xs[0].astype(np.float64) + xs[1])))),
        "multiply by itself": (lambda xs, out, d: dml.element_wise_multiply(
            xs[0], xs[0], device=d, out=out), [a], 0, lambda xs: xs[0] * xs[0]),
        "elu, float16": (lambda xs, out, d: dml.activation(xs[0], "elu", device=d, out=out), [h],
                         0, lambda xs: np.where(xs[0] >= 0, xs[0], np.expm1(
                             xs[0].astype(np.float64)))),
    }


@pytest.mark.parametrize("case", list(_in_place_cases()))
@pytest.mark.parametrize("view", ["array", "strided view", "an equal view"])
def test_element_wise_operators_run_in_place(device, case, view):
    """DirectML lets its element-wise operators (addition, multiplication, the activations)
    write their output over an input: the same array, a strided view of one, or another view
    object of the very same memory, each element read before it is written."""
    call, inputs, k, oracle = _in_place_cases()[case]
    base = [np.repeat(x, 2, axis=1) if view != "array" else x.copy() for x in inputs]
    xs = [x[:, ::2] if view != "array" else x for x in base]
    ref = oracle([x.copy() for x in xs])
    out = base[k][:, ::2] if view == "an equal view" else xs[k]
    assert out is not xs[k] or view != "an equal view"
    result = call(xs, out, device)
    assert result is out
    np.testing.assert_allclose(xs[k].astype(np.float64), ref,
                               rtol=2e-3 if xs[k].dtype == np.float16 else 1e-6, atol=1e-6)
    if view != "array":  # the elements between the view's are untouched
        np.testing.assert_array_equal(base[k][:, 1::2], inputs[k])


def test_in_place_is_only_the_very_same_view(device):
    """A partial overlap of the output and an input stays refused for an element-wise operator
    (shifted by one element, the same memory read with other strides) and every overlap for an
    operator that does not run in place; nothing is written."""
    buf = np.arange(16, dtype=np.float32) - 8
    before = buf.copy()
    for x, out in ((buf[1:9], buf[:8]), (buf[:8], buf[:16:2])):
        with pytest.raises(dml.ValidationError, match=r"activation.out: an array overlapping "
                                                      r"input 0 is invalid; expected an output "
                                                      r"that shares no memory with the inputs "
                                                      r"\(or is one of them, in place\)"):
            dml.activation(x, "relu", device=device, out=out)
    with pytest.raises(dml.ValidationError, match="tile.out: an array overlapping input 0"):
        dml.tile(buf[:8], (1,), device=device, out=buf[:8])
    np.testing.assert_array_equal(buf, before)


def test_overlap_through_one_dimensional_buffers_is_refused(device):
    """Input and output bound as 1-D buffers through strides: the bytes they reach overlap."""
    buf = np.zeros(32, np.float32)
    d = dml.TileOperatorDesc(dml.TensorDesc(F32, (2, 3), (4, 1)),
                             dml.TensorDesc(F32, (4, 3), (4, 1)), (2, 1))
    with pytest.raises(dml.ValidationError, match="overlapping input 0"):
        dml.compile_operator(d, device)(buf[:7], out=buf[4:20])
    d2 = dml.compile_operator(d, device)(buf[:7], out=buf[8:24])  # disjoint: fine
    assert d2.shape == (16,)


def test_overlap_with_a_later_input_is_refused(device):
    """The filter (input 1) overlaps the output while the input (input 0) is its own array."""
    d = dml.ConvolutionOperatorDesc(dml.TensorDesc(F32, (1, 1, 4)), dml.TensorDesc(F32, (1, 1, 2)),
                                    None, dml.TensorDesc(F32, (1, 1, 3)), 1, 0, (1,), (1,), (0,),
                                    (0,), (0,), 1)
    buf = np.arange(8, dtype=np.float32)
    x = np.ones((1, 1, 4), np.float32)
    with pytest.raises(dml.ValidationError, match="out: an array overlapping input 1 is invalid; "
                                                  "expected an output that shares no memory with "
                                                  "the inputs"):
        dml.compile_operator(d, device)(x, buf[:2].reshape(1, 1, 2), out=buf[1:4].reshape(1, 1, 3))


def test_overlap_too_hard_to_decide_is_refused(monkeypatch):
    """When NumPy's exact overlap test gives up (TooHardError past its work bound), the output
    is refused as if it overlapped. NumPy's solver did not give up on any of 6,000 random 3-D to
    8-D strided pairs tried, so the exception is raised here by hand."""
    from dml_numba import _binding

    def too_hard(a, b, max_work=None):
        raise np.exceptions.TooHardError("Exceeded max_work")

    buf = np.zeros(24, np.float32)
    x, out = buf[:12:2], buf[1:12:2]  # disjoint views: the exact test would accept them
    _binding.check_no_overlap(out, [x], "tile")
    monkeypatch.setattr(_binding.np, "shares_memory", too_hard)
    with pytest.raises(dml.ValidationError, match="tile.out: an array overlapping input 0"):
        _binding.check_no_overlap(out, [x], "tile")


def test_descriptor_path_messages_in_full():
    """The host binding's refusals name the argument and say what to do, word for word: a masked
    array, a CUDA device array (anything exporting ``__cuda_array_interface__``, as CuPy and
    numba-cuda arrays do on a GPU; the simulator's arrays do not, so a minimal exporter stands
    in), a non-native byte order."""

    class DeviceArray:  # the interface's required keys, pointing nowhere (never dereferenced)
        __cuda_array_interface__ = {"shape": (2, 3), "typestr": "<f4", "data": (0, False),
                                    "version": 3}

    op = dml.compile_operator(_tile_desc(), "cpu")
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(dml.ValidationError) as e:
        op(np.ma.array(x, mask=x > 0))
    assert str(e.value) == (
        "TileOperatorDesc.input_tensor: a masked array is invalid; expected a plain "
        "numpy.ndarray (the mask would be ignored: use .filled() or .data)"
    )
    with pytest.raises(dml.ValidationError) as e:
        op(DeviceArray())
    assert str(e.value) == (
        "TileOperatorDesc.input_tensor: a CUDA device array is invalid on a host device; "
        "expected a numpy.ndarray (use device='cuda')"
    )
    with pytest.raises(dml.ValidationError) as e:
        op(x.astype(">f4"))
    assert str(e.value) == (
        "TileOperatorDesc.input_tensor: dtype >f4 is invalid (non-native byte order: convert "
        "with .astype(a.dtype.newbyteorder('='))); expected float32 (FLOAT32)"
    )


def test_overlap_with_a_later_input_after_a_separate_one_is_refused():
    """The first input and the output are separate allocations (nothing to test between them);
    the filter, a view of the output, must still be checked."""
    d = dml.ConvolutionOperatorDesc(dml.TensorDesc(F32, (1, 1, 4)), dml.TensorDesc(F32, (1, 1, 2)),
                                    None, dml.TensorDesc(F32, (1, 1, 3)), 1, 0, (1,), (1,), (0,),
                                    (0,), (0,), 1)
    out = np.zeros((1, 1, 3), np.float32)
    x = np.ones((1, 1, 4), np.float32)
    with pytest.raises(dml.ValidationError, match="out: an array overlapping input 1 is invalid"):
        dml.compile_operator(d, "cpu")(x, out[:, :, :2], out=out)


def test_functional_layer_converts_byte_order_and_passes_device_arrays_on():
    """A non-native array keeps its type (int32 stays int32, converted to native order); an
    array exporting ``__cuda_array_interface__`` reaches the device's binding unconverted (a host
    device then refuses it by name, not as an object array)."""
    y = dml.tile(np.arange(4, dtype=">i4"), (2,))
    assert y.dtype == np.int32 and y.dtype.isnative
    assert_exact(y, np.tile(np.arange(4, dtype=np.int32), 2))

    class DeviceArray:
        __cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": (0, False),
                                    "version": 3}
        shape, dtype = (4,), np.dtype(np.float32)

    with pytest.raises(dml.ValidationError, match="a CUDA device array is invalid on a host "
                                                  r"device; expected a numpy.ndarray \(use "
                                                  r"device='cuda'\)"):
        dml.tile(DeviceArray(), (2,), device="cpu")


def test_functional_layer_refuses_non_numeric_arrays_in_full():
    with pytest.raises(dml.ValidationError) as e:
        dml.tile(["a", "b"], (2,))  # a list: converted by the functional layer, then refused
    assert str(e.value) == ("tile.x: dtype <U1 is invalid; expected a numeric array (one of "
                            "float32, float16, float64, int8..int64, uint8..uint64)")
