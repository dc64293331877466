"""Every rule of ConvolutionOperatorDesc, each with its complete message (operator, field, value
and what was expected), the boundaries of each size rule on both sides, and the normalisation
of the fields a valid descriptor stores (enums from values, plain ints). Written from the rules
in the operator's documentation; a mutation run of the validation code pointed at each gap."""
import numpy as np
import pytest

import dml_numba as dml
from dml_numba import ConvolutionDirection as Dir
from dml_numba import ConvolutionMode as Mode
from dml_numba import DataType
from tests.helpers import invalid, tensor

F32, F16, F64 = DataType.FLOAT32, DataType.FLOAT16, DataType.FLOAT64
OWNER = "ConvolutionOperatorDesc"


t = tensor


# forward: 4 -> 6 channels in 2 groups, 3x3, padding 1: (1, 4, 5, 6) -> (1, 6, 5, 6)
FORWARD = dict(input_tensor=t(1, 4, 5, 6), filter_tensor=t(6, 2, 3, 3), bias_tensor=t(1, 6, 1, 1),
               output_tensor=t(1, 6, 5, 6), mode=Mode.CROSS_CORRELATION, direction=Dir.FORWARD,
               strides=(1, 1), dilations=(1, 1), start_padding=(1, 1), end_padding=(1, 1),
               output_padding=(0, 0), group_count=2)
# transposed: 4 -> 3 channels, 3x3 stride 2: natural size (3-1)*2 + 3 = 7, up to 8 accepted
BACKWARD = dict(FORWARD, input_tensor=t(1, 4, 3, 3), filter_tensor=t(4, 3, 3, 3), bias_tensor=None,
                output_tensor=t(1, 3, 7, 7), direction=Dir.BACKWARD, strides=(2, 2),
                start_padding=(0, 0), end_padding=(0, 0), group_count=1)


def make(base, **over):
    return dml.ConvolutionOperatorDesc(**dict(base, **over))


def message(field, value, expected):
    return invalid(OWNER, field, value, expected)


FUSABLE = ("ActivationLinearOperatorDesc", "ActivationSigmoidOperatorDesc")

CASES = [
    (FORWARD, dict(input_tensor=None), "input_tensor", None, "expected a TensorDesc"),
    (FORWARD, dict(filter_tensor=(6, 2, 3, 3)), "filter_tensor", (6, 2, 3, 3),
     "expected a TensorDesc"),
    (FORWARD, dict(bias_tensor=[1, 6, 1, 1]), "bias_tensor", [1, 6, 1, 1], "expected None or a TensorDesc"),
    (FORWARD, dict(output_tensor="y"), "output_tensor", "y", "expected a TensorDesc"),
    (FORWARD, dict(input_tensor=t(4, 5)), "input_tensor.sizes", (4, 5),
     "expected 3 to 5 dimensions"),
    (FORWARD, dict(input_tensor=t(1, 1, 1, 1, 1, 1)), "input_tensor.sizes", (1, 1, 1, 1, 1, 1),
     "expected 3 to 5 dimensions"),
    (FORWARD, dict(input_tensor=t(1, 4, 5, 6, dtype=DataType.INT32)), "input_tensor.data_type",
     "INT32", "expected one of FLOAT32, FLOAT16, FLOAT64 (FLOAT64 is a dml_numba extension)"),
    (FORWARD, dict(filter_tensor=t(6, 2, 3, 3, dtype=F16)), "filter_tensor.data_type", "FLOAT16",
     "expected FLOAT32, the data type of input_tensor"),
    (FORWARD, dict(bias_tensor=t(1, 6, 1, 1, dtype=F64)), "bias_tensor.data_type", "FLOAT64",
     "expected FLOAT32, the data type of input_tensor"),
    (FORWARD, dict(output_tensor=t(1, 6, 5, 6, dtype=F16)), "output_tensor.data_type", "FLOAT16",
     "expected FLOAT32, the data type of input_tensor"),
    (FORWARD, dict(filter_tensor=t(6, 2, 9)), "filter_tensor.sizes", (6, 2, 9),
     "expected 4 dimensions, the dimension count of input_tensor"),
    (FORWARD, dict(bias_tensor=t(1, 6)), "bias_tensor.sizes", (1, 6),
     "expected 4 dimensions, the dimension count of input_tensor"),
    (FORWARD, dict(output_tensor=t(1, 6, 30)), "output_tensor.sizes", (1, 6, 30),
     "expected 4 dimensions, the dimension count of input_tensor"),
    (FORWARD, dict(mode=7), "mode", 7,
     "expected a ConvolutionMode (CONVOLUTION=0, CROSS_CORRELATION=1)"),
    (FORWARD, dict(direction="sideways"), "direction", "sideways",
     "expected a ConvolutionDirection (FORWARD=0, BACKWARD=1)"),
    (FORWARD, dict(fused_activation=dml.ActivationReluOperatorDesc), "fused_activation", "type",
     None),
    (FORWARD, dict(strides=(1,)), "strides", (1,), "expected 2 entries (one per dimension), got 1"),
    (FORWARD, dict(strides=(1, 0)), "strides[1]", 0, "expected an integer >= 1"),
    (FORWARD, dict(dilations=(1, 1, 1)), "dilations", (1, 1, 1),
     "expected 2 entries (one per dimension), got 3"),
    (FORWARD, dict(dilations=(0, 1)), "dilations[0]", 0, "expected an integer >= 1"),
    (FORWARD, dict(start_padding=(1,)), "start_padding", (1,),
     "expected 2 entries (one per dimension), got 1"),
    (FORWARD, dict(start_padding=(1, -1)), "start_padding[1]", -1, "expected an integer >= 0"),
    (FORWARD, dict(end_padding=(1, 1, 1)), "end_padding", (1, 1, 1),
     "expected 2 entries (one per dimension), got 3"),
    (FORWARD, dict(end_padding=(-2, 1)), "end_padding[0]", -2, "expected an integer >= 0"),
    (FORWARD, dict(output_padding=(0,)), "output_padding", (0,),
     "expected 2 entries (one per dimension), got 1"),
    (FORWARD, dict(output_padding=(0, -1)), "output_padding[1]", -1, "expected an integer >= 0"),
    (FORWARD, dict(output_padding=(0, 1)), "output_padding", (0, 1),
     "expected zeros for FORWARD (output padding only applies to BACKWARD convolution)"),
    (FORWARD, dict(filter_tensor=t(6, 2, 3)), "filter_tensor.sizes", (6, 2, 3),
     "expected 4 dimensions, the dimension count of input_tensor"),
    (FORWARD, dict(group_count=3, filter_tensor=t(6, 1, 3, 3)), "group_count", 3,
     "expected a divisor of the input channel count 4"),
    (FORWARD, dict(filter_tensor=t(6, 4, 3, 3)), "filter_tensor.sizes", (6, 4, 3, 3),
     "expected FilterChannelCount * group_count = 4 * 2 to equal the input channel count 4 "
     "(FORWARD filter: {C_out, C_in/G, k...})"),
    (FORWARD, dict(filter_tensor=t(5, 2, 3, 3), bias_tensor=None, output_tensor=t(1, 5, 5, 6)),
     "filter_tensor.sizes", (5, 2, 3, 3), "expected FilterBatchCount (5) divisible by group_count 2"),
    (FORWARD, dict(filter_tensor=t(6, 2, 8, 3)), "filter_tensor.sizes[2]", 8,
     "the dilated kernel (8) must fit the padded input (5 + 1 + 1)"),
    (FORWARD, dict(dilations=(1, 5)), "filter_tensor.sizes[3]", 3,
     "the dilated kernel (11) must fit the padded input (6 + 1 + 1)"),
    (FORWARD, dict(output_tensor=t(2, 6, 5, 6)), "output_tensor.sizes", (2, 6, 5, 6),
     "expected batch and channels (1, 6) = (N, FilterBatchCount)"),
    (FORWARD, dict(output_tensor=t(1, 6, 5, 7)), "output_tensor.sizes[3]", 7,
     "expected 6 ((in + start + end - ((k-1)*dilation+1)) // stride + 1)"),
    (FORWARD, dict(bias_tensor=t(1, 6, 1, 2)), "bias_tensor.sizes", (1, 6, 1, 2),
     "expected (1, 6, 1, 1) ({1, C_out, 1...})"),
    (BACKWARD, dict(filter_tensor=t(3, 3, 3, 3)), "filter_tensor.sizes", (3, 3, 3, 3),
     "expected FilterBatchCount to equal the input channel count 4 "
     "(BACKWARD filter: {C_in, C_out/G, k...})"),
    (BACKWARD, dict(output_padding=(0, 2)), "output_padding[1]", 2,
     "expected less than max(stride, dilation) = 2"),
    (BACKWARD, dict(input_tensor=t(1, 4, 1, 3), start_padding=(2, 0), end_padding=(1, 0)),
     "start_padding[0]", 2, "the natural transposed size (in-1)*stride + (k-1)*dilation + 1 - "
     "start - end = 0 must be >= 1"),
    (BACKWARD, dict(output_tensor=t(1, 4, 7, 7)), "output_tensor.sizes", (1, 4, 7, 7),
     "expected batch and channels (1, 3) = (N, FilterChannelCount * group_count)"),
    (BACKWARD, dict(output_tensor=t(1, 3, 9, 7)), "output_tensor.sizes[2]", 9,
     "expected 7 to 8 (natural size (in-1)*stride + (k-1)*dilation + 1 - start - end, up to "
     "stride-1 more)"),
    (BACKWARD, dict(output_tensor=t(1, 3, 6, 7)), "output_tensor.sizes[2]", 6,
     "expected 7 to 8 (natural size (in-1)*stride + (k-1)*dilation + 1 - start - end, up to "
     "stride-1 more)"),
    (BACKWARD, dict(output_padding=(1, 0), output_tensor=t(1, 3, 7, 7)), "output_tensor.sizes[2]",
     7, "expected 8 (natural size 7 + output_padding)"),
]


@pytest.mark.parametrize("base, over, field, value, expected", CASES,
                         ids=[f"{'fwd' if b is FORWARD else 'bwd'}-{f}-{i}"
                              for i, (b, _, f, _, _) in enumerate(CASES)])
def test_each_rule_refuses_with_its_complete_message(base, over, field, value, expected):
    with pytest.raises(dml.ValidationError) as err:
        make(base, **over)
    text = str(err.value)
    if field == "fused_activation":  # a class instead of an instance: named by its type
        assert text.startswith(f"{OWNER}.fused_activation: 'type' is invalid; expected None or "
                               "one of the fusable activation descs (not a subclass): "
                               + ", ".join(FUSABLE)), text
        assert "ActivationReluOperatorDesc" in text.split("(not a subclass): ")[1]
    else:
        assert text == message(field, value, expected)


@pytest.mark.parametrize("base, over", [
    (FORWARD, dict(filter_tensor=t(6, 2, 7, 3), output_tensor=t(1, 6, 1, 6))),  # kernel == 5+1+1
    (FORWARD, dict(filter_tensor=t(6, 2, 3, 8), output_tensor=t(1, 6, 5, 1))),  # kernel == 6+1+1
    (FORWARD, dict(input_tensor=t(1, 4, 5, 6, 2), filter_tensor=t(6, 2, 3, 3, 1),
                   bias_tensor=t(1, 6, 1, 1, 1), output_tensor=t(1, 6, 5, 6, 2), strides=(1, 1, 1),
                   dilations=(1, 1, 1), start_padding=(1, 1, 0), end_padding=(1, 1, 0),
                   output_padding=(0, 0, 0))),                        # rank 5 (3-D) is valid
    (BACKWARD, dict(input_tensor=t(1, 4, 1, 3), start_padding=(1, 0), end_padding=(1, 0),
                    output_tensor=t(1, 3, 1, 7))),                    # natural size exactly 1
    (BACKWARD, dict(output_tensor=t(1, 3, 8, 8))),                    # natural + stride - 1
    (BACKWARD, dict(output_padding=(1, 1), output_tensor=t(1, 3, 8, 8))),  # max(s, d) - 1
    (BACKWARD, dict(dilations=(3, 1), output_padding=(2, 0),
                    output_tensor=t(1, 3, 13, 7))),                   # (3-1)*2 + 7 = 11, + 2
])
def test_boundaries_of_each_size_rule_are_valid(base, over):
    make(base, **over)


def test_a_valid_descriptor_stores_enums_and_plain_ints():
    d = make(FORWARD, mode=0, direction=0, strides=(np.int64(1), 1),
             group_count=np.int32(2), fused_activation=dml.ActivationReluOperatorDesc())
    assert d.mode is Mode.CONVOLUTION and d.direction is Dir.FORWARD
    assert d.strides == (1, 1) and all(type(v) is int for v in d.strides)
    assert type(d.group_count) is int and d.group_count == 2
    assert isinstance(d.fused_activation, dml.ActivationReluOperatorDesc)
    b = make(BACKWARD, direction=1, mode=1)
    assert b.direction is Dir.BACKWARD and b.mode is Mode.CROSS_CORRELATION


def test_output_sizes_follow_the_formulas():
    """The output size each direction computes, from the formulas (not from the operator)."""
    from dml_numba.functional import convolution_desc

    x = np.zeros((2, 4, 9, 8), np.float32)
    d = convolution_desc(x, np.zeros((6, 2, 3, 2), np.float32), None, (2, 3), (2, 1), (1, 0),
                         (2, 1), None, 2, 0, 0, None)
    # (in + start + end - ((k-1)*d + 1)) // s + 1
    assert d.output_tensor.sizes == (2, 6, (9 + 1 + 2 - 5) // 2 + 1, (8 + 0 + 1 - 2) // 3 + 1)
    d = convolution_desc(x, np.zeros((4, 3, 3, 2), np.float32), None, (2, 3), (1, 2), (1, 0),
                         (0, 1), (1, 2), 1, 0, 1, None)
    # (in-1)*s + (k-1)*d + 1 - start - end + output_padding
    assert d.output_tensor.sizes == (2, 3, 8 * 2 + 3 - 1 - 0 + 1, 7 * 3 + 3 - 0 - 1 + 2)


def test_the_functional_layer_refuses_with_the_same_messages():
    """``dml.convolution`` works the output size out before it builds the descriptor: a filter
    of the wrong rank, or a 1-D kernel that does not fit, gets the descriptor's message, named
    after the function."""
    x = np.zeros((1, 4, 5, 6), np.float32)
    with pytest.raises(dml.ValidationError) as err:
        dml.convolution(x, np.zeros((6, 4, 3), np.float32))
    assert str(err.value) == "convolution." + message(
        "filter_tensor.sizes", (6, 4, 3),
        "expected 4 dimensions, the dimension count of input_tensor").split(".", 1)[1]
    with pytest.raises(dml.ValidationError) as err:  # 1-D: the input size is sizes[2]
        dml.convolution(np.zeros((1, 3, 4), np.float32), np.zeros((2, 3, 3), np.float32),
                        dilations=(2,), start_padding=(0,), end_padding=(0,))
    assert str(err.value) == "convolution." + message(
        "filter_tensor.sizes[2]", 3,
        "the dilated kernel (5) must fit the padded input (4 + 0 + 0)").split(".", 1)[1]


def test_transposed_output_defaults_to_the_natural_size():
    """Without output padding a transposed output may be up to stride-1 larger; the functional
    layer makes the natural size, (in-1)*stride + (k-1)*dilation + 1 - start - end."""
    y = dml.convolution(np.ones((1, 2, 3, 4), np.float32), np.ones((2, 1, 3, 2), np.float32),
                        strides=(2, 3), direction=1, device="numpy")
    assert y.shape == (1, 1, 2 * 2 + 2 + 1, 3 * 3 + 1 + 1)
