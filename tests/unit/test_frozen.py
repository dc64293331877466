"""What kernels keep between calls: derived only from arrays the library froze (a model's own
weights); a caller's array, even read-only, is derived again on every call, so writing it
between calls is seen."""
import numpy as np
import pytest

import dml_numba as dml
from dml_numba._frozen import Derived, as_argument, freeze, is_frozen


def test_only_arrays_the_library_froze_count():
    a = np.ones(3)
    assert not is_frozen(a)
    view = np.broadcast_to(a, (2, 3))  # read-only, over writable memory
    assert not view.flags.writeable and not is_frozen(view)
    b = freeze(np.ones(3))
    assert is_frozen(b) and not b.flags.writeable
    calls = []
    kept = Derived()
    for arr in (a, a, b, b):
        kept.get(arr, lambda x: calls.append(x) or x.sum())
    assert len(calls) == 3  # a twice, b once


def test_a_callers_filter_written_between_calls_is_seen():
    """The blocked kernel packs the caller's filter on every call: a filter written in place
    gives the new result."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 8, 6, 6)).astype(np.float32)
    w = rng.standard_normal((8, 8, 3, 3)).astype(np.float32)
    desc = dml.functional.convolution_desc(x, w)
    op = dml.compile_operator(desc, "cpu", algorithm="blocked", parallel=False)
    first = op(x, w)
    w *= 2
    np.testing.assert_allclose(op(x, w), 2 * first, rtol=1e-5, atol=1e-5)


def test_a_models_weights_are_frozen_and_its_results_unchanged_between_calls():
    pytest.importorskip("onnx", reason="the onnx package is in the [test] extra")
    from onnx import TensorProto, helper, numpy_helper

    from dml_numba.onnx import compile_model

    w = np.random.default_rng(1).standard_normal((8, 8, 3, 3)).astype(np.float32)
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 6, 6])],
                          [numpy_helper.from_array(w, "w")])
    m = compile_model(helper.make_model(g), "cpu", algorithm="blocked")
    assert all(is_frozen(c) for c in m._consts)
    x = np.random.default_rng(2).standard_normal((1, 8, 6, 6)).astype(np.float32)
    ref = dml.convolution(x, w, start_padding=1, end_padding=1, device="numpy")
    for _ in range(2):
        np.testing.assert_allclose(m(x), ref, rtol=1e-4, atol=1e-4)


def test_a_frozen_array_is_a_read_only_view_kernels_take_as_the_writable_array_below():
    """``freeze`` gives a read-only view; the kernels' argument for it is the writable array
    over the same memory, frozen too (what is derived from either is kept); a caller's array,
    read-only or not, is its own argument."""
    owner = np.arange(6.0)
    f = freeze(owner)
    assert not f.flags.writeable and is_frozen(f)
    arg = as_argument(f)
    assert arg is owner and arg.flags.writeable and is_frozen(arg)
    assert np.shares_memory(arg, f) and as_argument(arg) is arg
    ro = np.ones(3)
    ro.flags.writeable = False
    assert is_frozen(freeze(ro)) and as_argument(ro) is ro  # read-only already: itself
    mine, view = np.ones(3), np.ones(3).view()
    view.flags.writeable = False
    assert as_argument(mine) is mine and as_argument(view) is view


def test_a_models_first_call_loads_no_kernel_a_second_time(monkeypatch):
    """A model's weights and biases reach the kernels as the writable arrays below them: the
    first call runs the kernels loaded at compile time, none loaded again for read-only
    arguments (a blocked convolution's bias, a depthwise one's filter and bias, a GEMM's B
    and C), and the result is right."""
    pytest.importorskip("onnx", reason="the onnx package is in the [test] extra")
    from onnx import TensorProto, helper, numpy_helper

    from dml_numba.cpu import _warmstart
    from dml_numba.onnx import compile_model

    if not _warmstart.enabled():
        pytest.skip("the fast load path does not apply to this Numba version")
    rng = np.random.default_rng(3)
    w1, b1 = rng.standard_normal((16, 8, 3, 3)), rng.standard_normal(16)
    w2, b2 = rng.standard_normal((16, 1, 3, 3)), rng.standard_normal(16)
    wg, bg = rng.standard_normal((10, 16 * 36)), rng.standard_normal(10)
    consts = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in
              dict(w1=w1, b1=b1, w2=w2, b2=b2, wg=wg, bg=bg).items()]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], group=16),
             helper.make_node("Flatten", ["c2"], ["f"]),
             helper.make_node("Gemm", ["f", "wg", "bg"], ["y"], transB=1)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [1, 8, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
                          consts)
    m = compile_model(helper.make_model(g), "cpu", parallel=False)
    loads = []
    real = _warmstart.load_cached
    monkeypatch.setattr(_warmstart, "load_cached",
                        lambda d, sig: loads.append(sig) or real(d, sig))
    x = rng.standard_normal((1, 8, 6, 6)).astype(np.float32)
    y = m(x)
    assert loads == []
    c1 = dml.convolution(x, w1.astype(np.float32), b1.astype(np.float32).reshape(1, 16, 1, 1),
                         start_padding=1, end_padding=1, device="numpy")
    c2 = dml.convolution(np.maximum(c1, 0), w2.astype(np.float32),
                         b2.astype(np.float32).reshape(1, 16, 1, 1), start_padding=1,
                         end_padding=1, group_count=16, device="numpy")
    ref = c2.reshape(1, -1).astype(np.float64) @ wg.T + bg
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
