"""The registry: every operator is found on every device without a list, unknown kinds and
options are refused the same way everywhere."""
import numpy as np
import pytest

import dml_numba as dml
from dml_numba._codegen import SourceWriter
from dml_numba._gather import emit_map
from dml_numba._registry import lowering_for
from dml_numba.ops._base import DESCRIPTOR_TYPES, AxisMap, OperatorDesc


def canonical_types():
    """Descriptor classes that are their own canonical form (the ones backends implement)."""
    return sorted((t for t in DESCRIPTOR_TYPES if t.canonical is OperatorDesc.canonical),
                  key=lambda t: t.__name__)


def test_every_descriptor_class_is_exported_and_canonicalises_to_an_implemented_one():
    assert {t.__name__ for t in DESCRIPTOR_TYPES} <= set(dml.__all__)
    assert len(canonical_types()) == 5


@pytest.mark.parametrize("device", ["numpy", "cpu", "cuda"])
@pytest.mark.parametrize("desc_type", canonical_types(), ids=lambda t: t.__name__)
def test_every_descriptor_has_a_lowering_on_every_device(desc_type, device):
    assert callable(lowering_for(desc_type, device))


def test_unknown_index_map_kind_raises():
    with pytest.raises(AssertionError, match="unknown AxisMap kind 'mirror'"):
        emit_map(SourceWriter(), AxisMap("mirror", 3, 5), "o", "i")


def _tile():
    t = dml.TensorDesc(dml.DataType.FLOAT32, (2,))
    return dml.TileOperatorDesc(t, dml.TensorDesc(dml.DataType.FLOAT32, (4,)), (2,))


@pytest.mark.parametrize("device", ["numpy", "cpu", "cuda"])
def test_unknown_options_are_refused_on_every_device(device):
    with pytest.raises(dml.ValidationError, match=rf"compile_operator.options: 'bogus' is "
                                                  rf"invalid; .* on the '{device}' device"):
        dml.compile_operator(_tile(), device, bogus=1)


def test_option_values_are_checked():
    with pytest.raises(dml.ValidationError, match="compile_operator.parallel: 'yes' is invalid"):
        dml.compile_operator(_tile(), "cpu", parallel="yes")
    with pytest.raises(dml.ValidationError, match="algorithm.*on the 'cpu' device for Tile"):
        dml.compile_operator(_tile(), "cpu", algorithm="gemm")  # a convolution option only


def test_functional_enums_go_through_the_same_checker():
    x, w = np.ones((1, 1, 3), np.float32), np.ones((1, 1, 2), np.float32)
    with pytest.raises(dml.ValidationError, match=r"convolution.mode: 7 is invalid; expected a "
                                                  r"ConvolutionMode"):
        dml.convolution(x, w, mode=7)
    with pytest.raises(dml.ValidationError, match="convolution.direction: 'sideways'"):
        dml.convolution(x, w, direction="sideways")
    np.testing.assert_array_equal(dml.convolution(x, w, mode="convolution", device="numpy"),
                                  [[[2.0, 2.0]]])
