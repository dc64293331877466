"""Every validation rule has a case: a rule is a place in the descriptor code that raises
ValidationError (a ``fail(...)`` call in ``dml_numba/ops``, ``tensor.py`` or the checks of
``_errors.py``). Each case of the catalogues is run, the rule that refused it is found from the
traceback, and the test fails naming any rule that no case reaches (so a new rule needs a case,
and a removed check is noticed by the case that expected it)."""
import ast
import os
import traceback
from pathlib import Path

import numpy as np
import pytest

import dml_numba as dml
from tests.unit.test_validation import CATALOGUE, T, conv, pool, tconv


def _pointwise():
    """A pointwise convolution of (2, 3, 4, 4) to 6 channels."""
    return dml.functional.convolution_desc(np.zeros((2, 3, 4, 4), np.float32),
                                           np.zeros((6, 3, 1, 1), np.float32))


def _depthwise(shape, dtype=np.float32):
    """A depthwise 3 x 3 convolution of ``shape``."""
    return dml.functional.convolution_desc(np.zeros(shape, dtype),
                                           np.zeros((shape[1], 1, 3, 3), dtype),
                                           start_padding=1, end_padding=1, group_count=shape[1])

PKG = Path(dml.__file__).resolve().parent
SOURCES = sorted(PKG.glob("ops/*.py")) + [PKG / "tensor.py", PKG / "_errors.py"]
F32, I32 = dml.DataType.FLOAT32, dml.DataType.INT32


def rule_sites() -> dict:
    """{(file name, line): source} of every call to ``fail`` / ``.fail``, except the one inside
    Checker.fail that forwards to the module-level function."""
    sites = {}
    for path in SOURCES:
        text = path.read_text()
        tree = ast.parse(text)
        lines = text.splitlines()
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef) and fn.name == "fail":
                continue
            for node in ast.walk(fn) if isinstance(fn, ast.FunctionDef) else []:
                if isinstance(node, ast.Call) and (
                        getattr(node.func, "attr", None) == "fail" or
                        getattr(node.func, "id", None) == "fail"):
                    sites[(str(path.relative_to(PKG)), node.lineno)] = lines[node.lineno - 1].strip()
    return sites


def _site_of(exc) -> tuple:
    """The rule that raised: the frame that called Checker.fail (or fail)."""
    frames = traceback.extract_tb(exc.__traceback__)
    for caller, callee in zip(frames, frames[1:]):
        if callee.name == "fail" and Path(caller.filename).resolve().is_relative_to(PKG) \
                and caller.name != "fail":
            return (str(Path(caller.filename).resolve().relative_to(PKG)), caller.lineno)
    raise AssertionError(f"no rule frame in {frames}")


class Sub(int):
    pass


# cases beyond the descriptor catalogue: tensors, the generic checks, activations
EXTRA = [  # (make, expected 'Owner.field' at the start of the message)
    (lambda: T(F32, ()), r"TensorDesc.sizes"),
    (lambda: T(F32, (2**32,)), r"TensorDesc.sizes\[0\]"),
    (lambda: T(dml.DataType.FLOAT64, (2**31, 2**31, 2)), r"TensorDesc.sizes"),
    (lambda: T(F32, (2, 3), (1,)), r"TensorDesc.strides"),
    (lambda: T(dml.DataType.FLOAT64, (2**31, 2), (2**32 - 1, 1)), r"TensorDesc.strides"),
    (lambda: T(F32, (3,), (2**32,)), r"TensorDesc.strides\[0\]"),
    (lambda: T(0, (3,)), r"TensorDesc.data_type"),
    (lambda: T(True, (3,)), r"TensorDesc.data_type"),
    (lambda: T(F32, "abc"), r"TensorDesc.sizes"),
    (lambda: T(F32, (2.5,)), r"TensorDesc.sizes\[0\]"),
    (lambda: T(F32, (0,)), r"TensorDesc.sizes\[0\]"),
    (lambda: dml.Slice1OperatorDesc(T(F32, (4,)), T(F32, (1,)), (0,), (4,), (-(2**32),)), r"Slice1OperatorDesc.input_window_strides\[0\]"),
    (lambda: dml.ActivationLinearOperatorDesc(float("inf"), 0.0), r"ActivationLinearOperatorDesc.alpha"),
    (lambda: dml.ActivationLinearOperatorDesc("a", 0.0), r"ActivationLinearOperatorDesc.alpha"),
    (lambda: dml.ElementWiseClipOperatorDesc(0.0, 1.0, (1.0,)), r"ElementWiseClipOperatorDesc.scale_bias"),
    (lambda: dml.ActivationCeluOperatorDesc(0.0), r"ActivationCeluOperatorDesc.alpha"),
    (lambda: dml.ActivationSoftplusOperatorDesc(-1.0), r"ActivationSoftplusOperatorDesc.steepness"),
    # the activations as operators of their own: both tensors or neither, sizes, type
    (lambda: dml.ActivationReluOperatorDesc(input_tensor=T(F32, (2, 3))), r"ActivationReluOperatorDesc.output_tensor"),
    (lambda: dml.ActivationReluOperatorDesc(output_tensor=T(F32, (2, 3))), r"ActivationReluOperatorDesc.input_tensor"),
    (lambda: dml.ActivationEluOperatorDesc(input_tensor=T(F32, (2, 3)), output_tensor=T(F32, (3, 2))), r"ActivationEluOperatorDesc.output_tensor.sizes"),
    (lambda: dml.ActivationReluOperatorDesc(input_tensor=T(dml.DataType.INT64, (2, 3)), output_tensor=T(dml.DataType.INT64, (2, 3))), r"ActivationReluOperatorDesc.input_tensor.data_type"),
    (lambda: dml.ElementWiseClipOperatorDesc(0.0, 1.0, input_tensor=T(F32, (2,)), output_tensor=T(dml.DataType.FLOAT16, (2,))), r"ElementWiseClipOperatorDesc.output_tensor.data_type"),
    (lambda: conv(fused_activation=dml.ActivationReluOperatorDesc(input_tensor=T(F32, (2,)), output_tensor=T(F32, (2,)))), r"ConvolutionOperatorDesc.fused_activation.input_tensor"),
    (lambda: dml.functional.activation_desc(np.zeros(2, np.float32), "swish"), r"activation.activation"),
    (lambda: dml.functional.activation_desc(np.zeros(2, np.float32), "elu", [1.0, 2.0]), r"activation.activation parameters"),
    (lambda: dml.functional.activation_desc(np.zeros(2, np.float32), "linear", [1.0]), r"activation.activation parameters"),
    (lambda: dml.ElementWiseClipOperatorDesc(2.0, 1.0), r"ElementWiseClipOperatorDesc.min"),
    (lambda: conv(filter_tensor=T(F32, (5, 2, 3, 3)), bias_tensor=None,
                 output_tensor=T(F32, (2, 5, 3, 4))), r"ConvolutionOperatorDesc.filter_tensor.sizes"),
    (lambda: conv(filter_tensor=T(F32, (6, 2, 3)), bias_tensor=None), r"ConvolutionOperatorDesc.filter_tensor.sizes"),
    (lambda: conv(group_count=2, input_tensor=T(F32, (2, 3, 5, 6))), r"ConvolutionOperatorDesc.group_count"),
    (lambda: tconv(group_count=3), r"ConvolutionOperatorDesc.group_count"),
    (lambda: tconv(filter_tensor=T(F32, (4, 3, 2))), r"ConvolutionOperatorDesc.filter_tensor.sizes"),
    (lambda: pool(output_tensor=T(F32, (2, 3, 2, 5, 1))), r"LpPooling1OperatorDesc.output_tensor.sizes"),
    (lambda: conv(output_tensor=T(F32, (2, 6, 3, 4, 1))), r"ConvolutionOperatorDesc.output_tensor.sizes"),
    (lambda: conv(input_tensor=T(F32, (2, 4, 5, 6)), filter_tensor=T(I32, (6, 2, 3, 3))), r"ConvolutionOperatorDesc.filter_tensor.data_type"),
    (lambda: dml.PaddingOperatorDesc(T(F32, (2,)), T(F32, (2,)), 0, float("nan"), (0,), (Sub(1),)), r"PaddingOperatorDesc.output_tensor.sizes"),
    (lambda: dml.Padding1OperatorDesc(T(I32, (2,)), T(I32, (3,)), 0, I32, True, (1,), (0,)), r"Padding1OperatorDesc.padding_value"),
    (lambda: dml.Padding1OperatorDesc(T(I32, (2,)), T(I32, (3,)), 0, 99, 1, (1,), (0,)), r"Padding1OperatorDesc.padding_value_data_type"),
    (lambda: dml.TileOperatorDesc(T(F32, (2,)), T(F32, (4,)), 2), r"TileOperatorDesc.repeats"),
    (lambda: dml.TileOperatorDesc(T(F32, (2,)), "not a tensor", (2,)), r"TileOperatorDesc.output_tensor"),
    # the fused data-movement chain
    (lambda: dml.GatherChainDesc(T(F32, (2,)), T(F32, (2,)), ()), r"GatherChainDesc.operators"),
    (lambda: dml.GatherChainDesc(T(F32, (2,)), T(F32, (2,)), ("tile",)),
     r"GatherChainDesc.operators\[0\]"),
    (lambda: dml.GatherChainDesc(T(I32, (2,)), T(F32, (4,)), (
        dml.TileOperatorDesc(T(F32, (2,)), T(F32, (4,)), (2,)),)),
     r"GatherChainDesc.operators\[0\].input_tensor.data_type"),
    (lambda: dml.GatherChainDesc(T(F32, (3,)), T(F32, (4,)), (
        dml.TileOperatorDesc(T(F32, (2,)), T(F32, (4,)), (2,)),)),
     r"GatherChainDesc.operators\[0\].input_tensor.sizes"),
    # an operator with an addend (a graph's residual rule)
    (lambda: dml.FusedAddDesc(dml.TileOperatorDesc(T(F32, (2,)), T(F32, (4,)), (2,)),
                              T(F32, (4,))), r"FusedAddDesc.operator"),
    (lambda: dml.FusedAddDesc(conv(), T(F32, (2, 6, 3, 5))), r"FusedAddDesc.addend_tensor.sizes"),
    (lambda: dml.FusedAddDesc(conv(), T(dml.DataType.FLOAT16, (2, 6, 3, 4))),
     r"FusedAddDesc.addend_tensor.data_type"),
    (lambda: dml.FusedAddDesc(conv(), "r"), r"FusedAddDesc.addend_tensor"),
    # a depthwise convolution of a pointwise one's result (a graph's pair rule)
    (lambda: dml.PointwiseDepthwiseDesc(conv(), _depthwise((2, 6, 3, 4))),
     r"PointwiseDepthwiseDesc.pointwise"),
    (lambda: dml.PointwiseDepthwiseDesc(_pointwise(), conv()),
     r"PointwiseDepthwiseDesc.depthwise"),
    (lambda: dml.PointwiseDepthwiseDesc(_pointwise(), _depthwise((2, 6, 5, 4))),
     r"PointwiseDepthwiseDesc.depthwise.input_tensor.sizes"),
    (lambda: dml.PointwiseDepthwiseDesc(_pointwise(), _depthwise((2, 6, 4, 4), np.float16)),
     r"PointwiseDepthwiseDesc.depthwise.input_tensor.data_type"),
    # the pooling, element-wise, normalization, matrix and join operators
    (lambda: dml.AveragePooling1OperatorDesc(T(F32, (1, 1, 4)), T(F32, (1, 1, 3)), (1,), (2,),
                                             (0,), (0,), (1,), "yes"),
     r"AveragePooling1OperatorDesc.include_padding"),
    (lambda: dml.MaxPooling2OperatorDesc(T(F32, (1, 1, 4)), T(F32, (1, 1, 3)), T(F32, (1, 1, 3)),
                                         (1,), (2,), (0,), (0,), (1,)),
     r"MaxPooling2OperatorDesc.output_indices_tensor.data_type"),
    (lambda: dml.MaxPooling2OperatorDesc(T(F32, (1, 1, 4)), T(F32, (1, 1, 3)),
                                         T(dml.DataType.UINT64, (1, 1, 4)),
                                         (1,), (2,), (0,), (0,), (1,)),
     r"MaxPooling2OperatorDesc.output_indices_tensor.sizes"),
    (lambda: dml.MaxPooling2OperatorDesc(T(F32, (1, 1, 2**16, 2**16 + 1)),
                                         T(F32, (1, 1, 2**16, 2**16)),
                                         T(dml.DataType.UINT32, (1, 1, 2**16, 2**16)),
                                         (1, 1), (1, 2), (0, 0), (0, 0), (1, 1)),
     r"MaxPooling2OperatorDesc.output_indices_tensor.data_type"),
    (lambda: _bn(spatial=2), r"BatchNormalizationOperatorDesc.spatial"),
    (lambda: _bn(epsilon=-1.0), r"BatchNormalizationOperatorDesc.epsilon"),
    (lambda: _bn(mean_tensor=T(F32, (1, 2, 1))), r"BatchNormalizationOperatorDesc.mean_tensor.sizes"),
    (lambda: dml.ElementWiseMultiplyOperatorDesc(T(F32, (2,)), T(F32, (3,)), T(F32, (2,))),
     r"ElementWiseMultiplyOperatorDesc.b_tensor.sizes"),
    (lambda: dml.GemmOperatorDesc(T(F32, (2, 3)), T(F32, (4, 2)), None, T(F32, (2, 2)), 0, 0, 1.0,
                                  0.0), r"GemmOperatorDesc.b_tensor.sizes"),
    (lambda: dml.GemmOperatorDesc(T(F32, (2, 2, 3)), T(F32, (1, 3, 2)), None, T(F32, (2, 2, 2)),
                                  0, 0, 1.0, 0.0), r"GemmOperatorDesc.b_tensor.sizes"),
    (lambda: dml.JoinOperatorDesc((), T(F32, (2,)), 0), r"JoinOperatorDesc.input_tensors"),
    (lambda: dml.JoinOperatorDesc((T(F32, (2, 3)), T(F32, (3, 3))), T(F32, (2, 6)), 1),
     r"JoinOperatorDesc.input_tensors\[1\].sizes"),
    # a rule only the functional layer reaches (a descriptor checks ranks first)
    (lambda: dml.convolution(np.ones((1, 1, 5), np.float32), np.ones((1, 1, 2, 2), np.float32),
                            device="numpy"), r"convolution.filter_tensor.sizes"),
]


def _bn(**fields):
    x, p = T(F32, (2, 3, 4)), T(F32, (1, 3, 1))
    values = dict(input_tensor=x, mean_tensor=p, variance_tensor=p, scale_tensor=p,
                  bias_tensor=p, output_tensor=x, spatial=True, epsilon=1e-5)
    values.update(fields)
    return dml.BatchNormalizationOperatorDesc(**values)


def _cases():
    for builder, overrides, _ in CATALOGUE:
        yield lambda b=builder, o=overrides: b(**o)
    yield from (make for make, _ in EXTRA)


@pytest.mark.skipif("MUTANT_UNDER_TEST" in os.environ,
                    reason="reads the package's source, which mutation testing rewrites")
def test_every_validation_rule_has_a_case():
    hit = set()
    for make in _cases():
        with pytest.raises(dml.ValidationError) as info:
            make()
        hit.add(_site_of(info.value))
    sites = rule_sites()
    missing = {k: v for k, v in sites.items() if k not in hit}
    assert not missing, "rules without a case:\n" + "\n".join(
        f"  {f}:{line}: {src}" for (f, line), src in sorted(missing.items()))
    assert len(sites) > 40


@pytest.mark.parametrize("make,where", EXTRA, ids=[w.replace("\\", "") for _, w in EXTRA])
def test_extra_cases_name_their_field(make, where):
    with pytest.raises(dml.ValidationError, match=rf"^{where}: .* is invalid; "):
        make()




@pytest.mark.parametrize("value, expected", [(np.bool_(True), True), (np.bool_(False), False),
                                             (1, True), (0, False), (True, True)])
def test_bool_fields_take_numpy_bools_and_0_or_1(value, expected):
    """DirectML's BOOL fields (batch normalization's spatial, average pooling's include_padding)
    take a NumPy bool as the bool it is (stored as Python's); 2 or 0.5 are refused (above)."""
    p = T(F32, (1, 3, 1) if expected else (1, 3, 4))  # per channel, or per position
    bn = _bn(spatial=value, mean_tensor=p, variance_tensor=p, scale_tensor=p, bias_tensor=p)
    assert bn.spatial is expected
    avg = dml.AveragePooling1OperatorDesc(T(F32, (1, 1, 4)), T(F32, (1, 1, 3)), (1,), (2,), (0,),
                                          (0,), (1,), value)
    assert avg.include_padding is expected
