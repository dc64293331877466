"""What kernels keep between calls: derived only from arrays the library froze (a model's own
weights); a caller's array, even read-only, is derived again on every call, so writing it
between calls is seen."""
import numpy as np
import pytest

import dml_numba as dml
from dml_numba._frozen import Derived, freeze, is_frozen


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
