"""TensorDesc, DMLCalcBufferTensorSize and the size arithmetic (no Numba needed)."""
import subprocess
import sys

import pytest

import dml_numba as dml
from dml_numba import _dims

F16, F32, U8 = dml.DataType.FLOAT16, dml.DataType.FLOAT32, dml.DataType.UINT8


@pytest.mark.parametrize("dtype,sizes,strides,expected", [  # docs/SEMANTICS.md §1 worked values
    (F16, (1, 1, 3, 5), None, 32),
    (F32, (1, 1, 2, 3), (0, 0, 5, 1), 32),
    (F32, (2, 3), (0, 1), 12),
    (U8, (5,), None, 8),
    (F16, (1,), None, 4),
    (dml.DataType.INT64, (2, 3), None, 48),
])
def test_total_tensor_size_in_bytes(dtype, sizes, strides, expected):
    assert dml.TensorDesc(dtype, sizes, strides).total_tensor_size_in_bytes == expected


def test_enum_values_are_directml_values():
    assert [int(t) for t in dml.DataType] == list(range(1, 12))
    assert dml.DataType.FLOAT64 == 9 and dml.DataType.INT64 == 11
    assert [int(m) for m in dml.PaddingMode] == [0, 1, 2, 3, 4]
    assert dml.ConvolutionMode.CROSS_CORRELATION == 1 and dml.ConvolutionDirection.BACKWARD == 1


@pytest.mark.parametrize("kwargs,field", [
    (dict(data_type=0, sizes=(1,)), "data_type"),
    (dict(data_type=12, sizes=(1,)), "data_type"),
    (dict(data_type=1, sizes=(2, 0)), r"sizes\[1\]"),
    (dict(data_type=1, sizes=()), "sizes"),
    (dict(data_type=1, sizes=(1,) * 9), "sizes"),
    (dict(data_type=1, sizes=(2, 2), strides=(1,)), "strides"),
    (dict(data_type=1, sizes=(2, 2), strides=(1, -1)), r"strides\[1\]"),
    (dict(data_type=1, sizes=(2.5,)), r"sizes\[0\]"),
])
def test_invalid_tensor_desc(kwargs, field):
    with pytest.raises(dml.ValidationError, match=rf"TensorDesc\.{field}: .* is invalid"):
        dml.TensorDesc(**kwargs)


def test_sizes_become_tuples_and_desc_is_hashable():
    d = dml.TensorDesc(1, [2, 3])
    assert d.sizes == (2, 3) and d.data_type is F32 and hash(d) == hash(dml.TensorDesc(F32, (2, 3)))


def test_output_overlap_detection():
    assert dml.TensorDesc(F32, (2, 3), (0, 1)).has_overlapping_elements()
    assert not dml.TensorDesc(F32, (2, 3), (5, 1)).has_overlapping_elements()
    assert not dml.TensorDesc(F32, (2, 3, 4), (1, 8, 2)).has_overlapping_elements()


@pytest.mark.parametrize("n,a,b,k,s,d,expected", [(5, 1, 1, 3, 2, 1, 3), (9, 0, 0, 2, 2, 2, 4),
                                                  (4, 0, 0, 2, 1, 2, 2)])
def test_pooled_size(n, a, b, k, s, d, expected):
    assert _dims.pooled_size(n, a, b, k, s, d) == expected


def test_transposed_size():
    assert _dims.transposed_size(3, 0, 0, 3, 2, 1) == 7
    assert _dims.transposed_size(3, 1, 1, 3, 2, 1) == 5


def test_importing_the_package_imports_only_what_the_first_call_needs():
    """Numba is imported with the package (the default device's first call needs it, and a
    warm process should get its first result without waiting for it); nothing else heavy is:
    no backend package, no CUDA, no scipy.linalg, Dask, ONNX or plotting."""
    code = ("import sys, dml_numba; heavy = [m for m in ('numba.cuda', 'dml_numba.cpu', "
            "'dml_numba.cuda', 'scipy.linalg', 'dask', 'onnx', 'matplotlib', 'torch') "
            "if m in sys.modules]; assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_validation_and_shape_rules_are_pure_python():
    """ops/ imports no backend, code generation or dispatch module (checked on the source)."""
    import ast
    from pathlib import Path

    import dml_numba

    bad = []
    for path in (Path(dml_numba.__file__).parent / "ops").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and any(
                    node.module.lstrip(".").startswith(m) for m in (
                        "cpu", "cuda", "vectorized", "_api", "_codegen", "_gather", "elements",
                        "_registry", "functional", "numba")):
                bad.append(f"{path.name}: from {node.module}")
    assert not bad
