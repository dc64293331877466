"""Test helpers: independent oracles and comparison rules."""
from __future__ import annotations

import itertools
import os

import numpy as np
import pytest

DTYPES = [np.float32, np.float16, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8,
          np.uint16, np.uint32, np.uint64]


def assert_warned_at(warning, filename: str) -> None:
    """``warning`` names a line of ``filename`` (the caller's), not one inside the library. Not
    checked under mutation testing, whose trampolines stand between every caller and the
    library's functions."""
    if "MUTANT_UNDER_TEST" not in os.environ:
        assert warning.filename == filename


def sampled(runs, name, keep) -> list:
    """``runs`` as pytest parameters, each with the id ``name(run)``: those ``keep(run)``
    accepts run by default, the others only with ``--runslow`` (a product of cases and variants
    whose every cell compiles a kernel of its own: the default run takes a covering sample, the
    whole product is there for the slow run and for mutation testing)."""
    return [pytest.param(*run, id=name(run), marks=() if keep(run) else pytest.mark.slow)
            for run in runs]


def random_array(shape, dtype, rng=None, lo=-50, hi=50):
    rng = rng or np.random.default_rng(0)
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return rng.uniform(-2, 2, size=shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(lo, info.min), min(hi, info.max), size=shape,
                        endpoint=True).astype(dtype)


#: (rtol, atol) for comparing convolution and pooling results with a float64 reference
TOLERANCES = {
    np.dtype(np.float16): (1e-2, 1e-2),
    np.dtype(np.float32): (1e-4, 1e-5),
    np.dtype(np.float64): (1e-10, 1e-12),
}


def assert_close(actual, expected, dtype):
    """One tolerance table (TOLERANCES) for convolution and pooling."""
    rtol, atol = TOLERANCES[np.dtype(dtype)]
    assert actual.dtype == np.dtype(dtype)
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64),
                               rtol=rtol, atol=atol)


def assert_exact(actual, expected):
    assert actual.shape == expected.shape
    assert actual.dtype == expected.dtype
    if actual.dtype.kind == "f":  # bit-exact, NaN-aware
        np.testing.assert_array_equal(actual.view(f"u{actual.itemsize}"),
                                      expected.view(f"u{expected.itemsize}"))
    else:
        np.testing.assert_array_equal(actual, expected)


# -- brute-force oracles: plain loops straight from SEMANTICS' pseudo-code -------------------

def brute_conv_forward(x, w, b, strides, dilations, start, flip=False, groups=1, out_spatial=None):
    n_, cin = x.shape[:2]
    cout = w.shape[0]
    k = w.shape[2:]
    cg, mg = cin // groups, cout // groups
    y = np.zeros((n_, cout) + tuple(out_spatial))
    for n, m in itertools.product(range(n_), range(cout)):
        g = m // mg
        for o in itertools.product(*(range(s) for s in out_spatial)):
            acc = 0.0
            for c in range(cg):
                for t in itertools.product(*(range(kk) for kk in k)):
                    xi = tuple(oo * s + tt * d - p for oo, s, tt, d, p in
                               zip(o, strides, t, dilations, start))
                    if all(0 <= v < S for v, S in zip(xi, x.shape[2:])):
                        ft = tuple(kk - 1 - tt for kk, tt in zip(k, t)) if flip else t
                        acc += float(x[(n, g * cg + c) + xi]) * float(w[(m, c) + ft])
            y[(n, m) + o] = acc + (float(b.reshape(-1)[m]) if b is not None else 0.0)
    return y


def brute_conv_backward(x, w, b, strides, dilations, start, out_spatial, flip=False, groups=1):
    """Scatter form of the transposed convolution (docs/SEMANTICS.md §2)."""
    n_, cin = x.shape[:2]
    cog = w.shape[1]
    k = w.shape[2:]
    cig = cin // groups
    y = np.zeros((n_, cog * groups) + tuple(out_spatial))
    for n, ci in itertools.product(range(n_), range(cin)):
        g = ci // cig
        for xi in itertools.product(*(range(s) for s in x.shape[2:])):
            for col in range(cog):
                for t in itertools.product(*(range(kk) for kk in k)):
                    o = tuple(v * s + tt * d - p for v, s, tt, d, p in
                              zip(xi, strides, t, dilations, start))
                    if all(0 <= v < S for v, S in zip(o, out_spatial)):
                        ft = tuple(kk - 1 - tt for kk, tt in zip(k, t)) if flip else t
                        contribution = float(x[(n, ci) + xi]) * float(w[(ci, col) + ft])
                        y[(n, g * cog + col) + o] += contribution
    if b is not None:
        y += b.reshape((1, -1) + (1,) * len(out_spatial)).astype(np.float64)
    return y


def brute_conv(desc, inputs):
    """The convolution of ``desc`` on ``inputs`` by its definition: the gather form, or the
    scatter form for a transposed one (in float64 whatever the operands' type)."""
    import dml_numba as dml

    x, w = inputs[:2]
    b = inputs[2] if len(inputs) > 2 else None
    out = desc.output_tensor.sizes[2:]
    flip = desc.mode == dml.ConvolutionMode.CONVOLUTION
    if desc.direction == dml.ConvolutionDirection.BACKWARD:
        return brute_conv_backward(x, w, b, desc.strides, desc.dilations, desc.start_padding,
                                   out, flip=flip, groups=desc.group_count)
    return brute_conv_forward(x, w, b, desc.strides, desc.dilations, desc.start_padding,
                              flip=flip, groups=desc.group_count, out_spatial=out)


def onnx_run(op_type, inputs, opset=18, **attrs):
    """Run one ONNX node with onnx.reference (an independent implementation) at ``opset``."""
    import onnx
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    names = [f"in{i}" for i in range(len(inputs))]
    node = helper.make_node(op_type, names, ["out"], **attrs)
    elem = helper.np_dtype_to_tensor_dtype(inputs[0].dtype)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, elem, None) for n in names],
        [helper.make_tensor_value_info("out", elem, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    del onnx, TensorProto
    return ReferenceEvaluator(model).run(None, dict(zip(names, inputs)))[0]


def tensor(*sizes, dtype=None):
    """A TensorDesc of ``sizes`` (FLOAT32 unless ``dtype`` says otherwise)."""
    import dml_numba as dml

    return dml.TensorDesc(dtype if dtype is not None else dml.DataType.FLOAT32, sizes)


def invalid(owner: str, field: str, value, expected: str) -> str:
    """The complete ValidationError message for ``owner.field`` holding ``value``."""
    return f"{owner}.{field}: {value!r} is invalid; {expected}"


def draw_window(draw, st, shape, steps):
    """A random slice window of ``shape`` (hypothesis's ``draw`` and strategies ``st``):
    offsets, sizes and strides (from ``steps``), one per axis."""
    offs, sizes, strides = [], [], []
    for n in shape:
        o = draw(st.integers(0, n - 1))
        offs.append(o)
        sizes.append(draw(st.integers(1, n - o)))
        strides.append(draw(st.sampled_from(steps)))
    return tuple(offs), tuple(sizes), tuple(strides)


def every_type_on_each_device(types, sample):
    """(device, dtype) parameters: every type on "numpy", the ``sample`` on "cpu" (each type
    there compiles a kernel of its own: the rest with --runslow)."""
    return [pytest.param("numpy", t, id=f"numpy-{np.dtype(t).name}") for t in types] + [
        pytest.param("cpu", t, id=f"cpu-{np.dtype(t).name}",
                     marks=() if t in sample else pytest.mark.slow) for t in types]
