"""The source-generation helpers the kernels are written with: generated code is read by people
(``compile_operator(...).source``), so its arithmetic is folded as documented, and literals
round-trip every float, infinities and NaN included."""
import math

import numpy as np
import pytest

from dml_numba._codegen import affine, literal


@pytest.mark.parametrize("terms, const, expected", [
    ([("o", 1), ("k", 2)], -1, "o + k * 2 - 1"),   # the docstring's example
    ([("a", 0), ("b", 3)], 2, "b * 3 + 2"),         # a zero term is dropped, not the rest
    ([("a", 0), ("b", 0), ("c", -1)], 0, "-c"),
    ([("x", -1), ("y", -1)], 0, "-x - y"),
    ([("x", 1), ("y", -3)], 4, "x + y * -3 + 4"),  # other scales are written as they are
    ([], 0, "0"),
    ([("a", 0)], -5, "-5"),
])
def test_affine_folds_unit_scales_zero_terms_and_the_constant(terms, const, expected):
    assert affine(terms, const) == expected
    values = {"o": 3, "k": 5, "a": 7, "b": 11, "c": 13, "x": 17, "y": 19}
    assert eval(expected, {}, values) == sum(values[n] * s for n, s in terms) + const


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, -0.0, 1.5e-45, 3.4e38, 0.1])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_float_literals_round_trip(value, dtype):
    src = literal(value, dtype)
    with np.errstate(over="ignore"):  # 3.4e38 is inf in float16, on both sides
        got = eval(src, {"np": np})
        expected = dtype(value)
    assert got.dtype == np.dtype(dtype)
    assert (np.isnan(got) and np.isnan(expected)) or (
        got == expected and np.signbit(got) == np.signbit(expected)), src


def test_the_descriptor_in_a_kernel_header_is_written_field_by_field():
    """Generated modules start with the descriptor, one line a field, from values (tensors as
    TYPE sizes [strides], enums by name, activations by their fields), never an object's repr."""
    import dml_numba as dml
    from dml_numba._codegen import describe

    t = dml.TensorDesc(dml.DataType.FLOAT32, (1, 2, 3, 3))
    desc = dml.ConvolutionOperatorDesc(
        t, dml.TensorDesc(dml.DataType.FLOAT32, (2, 2, 1, 1), (2, 1, 1, 1)), None, t,
        dml.ConvolutionMode.CROSS_CORRELATION, dml.ConvolutionDirection.FORWARD, (1, 1), (1, 1),
        (0, 0), (0, 0), (0, 0), 1, dml.ActivationLeakyReluOperatorDesc(0.25))
    lines = describe(desc)
    assert lines[0] == "ConvolutionOperatorDesc"
    assert "  input_tensor = FLOAT32 (1, 2, 3, 3)" in lines
    assert "  filter_tensor = FLOAT32 (2, 2, 1, 1) strides (2, 1, 1, 1)" in lines
    assert "  bias_tensor = None" in lines and "  mode = CROSS_CORRELATION" in lines
    assert "  strides = (1, 1)" in lines
    assert any(ln.startswith("  fused_activation = ActivationLeakyReluOperatorDesc(alpha=0.25")
               for ln in lines), lines
    assert not any("object at 0x" in ln or "TensorDesc(" in ln for ln in lines)
