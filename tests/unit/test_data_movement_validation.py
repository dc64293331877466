"""Every rule of the padding, slice and LP pooling descriptors with its complete message
(operator, field, value, what was expected), the boundaries on both sides, and the normalised
fields a valid descriptor stores. Written from the rules in each operator's documentation; a
mutation run of the validation code pointed at each gap."""
import numpy as np
import pytest

import dml_numba as dml
from dml_numba import DataType, PaddingMode
from tests.helpers import invalid, tensor

F32, I8 = DataType.FLOAT32, DataType.INT8


t = tensor


X = t(2, 3, 5)
SLICE1 = (dml.Slice1OperatorDesc, dict(
    input_tensor=X, output_tensor=t(1, 2, 3), input_window_offsets=(1, 0, 0),
    input_window_sizes=(1, 3, 5), input_window_strides=(1, -2, 2)))
SLICE = (dml.SliceOperatorDesc, dict(input_tensor=X, output_tensor=t(1, 2, 3), offsets=(1, 0, 0),
                                     sizes=(1, 2, 3), strides=(1, 2, 2)))
PAD1 = (dml.Padding1OperatorDesc, dict(
    input_tensor=X, output_tensor=t(2, 4, 8), padding_mode=PaddingMode.CONSTANT,
    padding_value_data_type=F32, padding_value=1.5, start_padding=(0, 1, 2),
    end_padding=(0, 0, 1)))
PAD = (dml.PaddingOperatorDesc, dict(
    input_tensor=X, output_tensor=t(2, 4, 8), padding_mode=PaddingMode.REFLECTION,
    padding_value=0.0, start_padding=(0, 1, 2), end_padding=(0, 0, 1)))
# (2, 3, 9, 8) pooled 3x2, stride (2, 1), dilation (1, 2), padding (1, 0) / (0, 1):
# H: (9 + 1 - 3) // 2 + 1 = 4 (ceil 5), W: (8 + 1 - 3) // 1 + 1 = 7
POOL1 = (dml.LpPooling1OperatorDesc, dict(
    input_tensor=t(2, 3, 9, 8), output_tensor=t(2, 3, 4, 7), strides=(2, 1), window_size=(3, 2),
    start_padding=(1, 0), end_padding=(0, 1), dilations=(1, 2), p=3))
POOL = (dml.LpPoolingOperatorDesc, dict(
    input_tensor=t(2, 3, 9, 8), output_tensor=t(2, 3, 4, 8), strides=(2, 1), window_size=(3, 2),
    start_padding=(1, 0), end_padding=(0, 1), p=2))


def make(spec, **over):
    cls, fields = spec
    return cls(**dict(fields, **over))


def msg(spec, field, value, expected):
    return invalid(spec[0].__name__, field, value, expected)


WRONG_COUNT = "expected 3 entries (one per dimension), got {}"
CASES = [
    # Slice1: the window inside the input, strides non-zero, outputs within what the window holds
    (SLICE1, dict(input_window_offsets=(1, 0)), "input_window_offsets", (1, 0), WRONG_COUNT.format(2)),
    (SLICE1, dict(input_window_offsets=(1, -1, 0)), "input_window_offsets[1]", -1,
     "expected an integer >= 0"),
    (SLICE1, dict(input_window_sizes=(1, 3)), "input_window_sizes", (1, 3), WRONG_COUNT.format(2)),
    (SLICE1, dict(input_window_sizes=(1, 0, 5)), "input_window_sizes[1]", 0,
     "expected an integer >= 1"),
    (SLICE1, dict(input_window_strides=(1, 1, 1, 1)), "input_window_strides", (1, 1, 1, 1),
     WRONG_COUNT.format(4)),
    (SLICE1, dict(input_window_strides=(1, 0, 2)), "input_window_strides[1]", 0,
     "strides must be non-zero"),
    (SLICE1, dict(input_window_offsets=(1, 1, 0)), "input_window_sizes[1]", 3,
     "the window [1, 4) must lie inside input dimension 1 of size 3"),
    (SLICE1, dict(output_tensor=t(1, 3, 3)), "output_tensor.sizes[1]", 3,
     "expected 1 to 2 = 1 + (window - 1) // |stride| elements"),
    # Slice (v1): non-negative strides, sizes equal to the output's, last read inside
    (SLICE, dict(offsets=(1, 0)), "offsets", (1, 0), WRONG_COUNT.format(2)),
    (SLICE, dict(offsets=(-1, 0, 0)), "offsets[0]", -1, "expected an integer >= 0"),
    (SLICE, dict(sizes=(1, 2)), "sizes", (1, 2), WRONG_COUNT.format(2)),
    (SLICE, dict(sizes=(1, 0, 3)), "sizes[1]", 0, "expected an integer >= 1"),
    (SLICE, dict(strides=(1, 2)), "strides", (1, 2), WRONG_COUNT.format(2)),
    (SLICE, dict(strides=(1, -2, 2)), "strides[1]", -2, "expected an integer >= 0"),
    (SLICE, dict(strides=(1, 0, 2)), "strides[1]", 0, "strides must be non-zero"),
    (SLICE, dict(sizes=(1, 2, 2)), "sizes", (1, 2, 2), "expected the output tensor's sizes (1, 2, 3)"),
    (SLICE, dict(offsets=(1, 0, 1)), "offsets[2]", 1,
     "the last read, offset + (size-1)*stride = 5, must be inside input dimension 2 of size 5"),
    # Padding: paddings per axis, non-negative, the output size, the value's type
    (PAD1, dict(start_padding=(0, 1)), "start_padding", (0, 1), WRONG_COUNT.format(2)),
    (PAD1, dict(start_padding=(0, -1, 2)), "start_padding[1]", -1, "expected an integer >= 0"),
    (PAD1, dict(end_padding=(0, 0, 1, 0)), "end_padding", (0, 0, 1, 0), WRONG_COUNT.format(4)),
    (PAD1, dict(end_padding=(0, 0, -1)), "end_padding[2]", -1, "expected an integer >= 0"),
    (PAD1, dict(output_tensor=t(2, 4, 9)), "output_tensor.sizes", (2, 4, 9),
     "expected (2, 4, 8) (input_tensor.sizes + start_padding + end_padding)"),
    (PAD1, dict(padding_value_data_type=I8), "padding_value_data_type", "INT8",
     "expected FLOAT32, the output's data type"),
    (PAD1, dict(padding_value="1.5"), "padding_value", "1.5", "expected a real number"),
    (PAD1, dict(input_tensor=t(2, 3, 5, dtype=I8), output_tensor=t(2, 4, 8, dtype=I8),
                padding_value_data_type=I8, padding_value=-129), "padding_value", -129,
     "expected an integer >= -128"),
    (PAD1, dict(input_tensor=t(2, 3, 5, dtype=I8), output_tensor=t(2, 4, 8, dtype=I8),
                padding_value_data_type=I8, padding_value=128), "padding_value", 128,
     "expected an integer <= 127"),
    (PAD1, dict(padding_mode=9), "padding_mode", 9,
     "expected a PaddingMode (CONSTANT=0, EDGE=1, REFLECTION=2, SYMMETRIC=3, WRAP=4)"),
    (PAD, dict(output_tensor=t(2, 3, 8)), "output_tensor.sizes", (2, 3, 8),
     "expected (2, 4, 8) (input_tensor.sizes + start_padding + end_padding)"),
    # LP pooling: window, paddings and dilations per spatial axis; the window fits; output sizes
    (POOL1, dict(window_size=(3,)), "window_size", (3,),
     "expected 2 entries (one per dimension), got 1"),
    (POOL1, dict(window_size=(3, 0)), "window_size[1]", 0, "expected an integer >= 1"),
    (POOL1, dict(start_padding=(1, 0, 0)), "start_padding", (1, 0, 0),
     "expected 2 entries (one per dimension), got 3"),
    (POOL1, dict(start_padding=(-1, 0)), "start_padding[0]", -1, "expected an integer >= 0"),
    (POOL1, dict(end_padding=(0,)), "end_padding", (0,),
     "expected 2 entries (one per dimension), got 1"),
    (POOL1, dict(end_padding=(0, -3)), "end_padding[1]", -3, "expected an integer >= 0"),
    (POOL1, dict(dilations=(1, 2, 1)), "dilations", (1, 2, 1),
     "expected 2 entries (one per dimension), got 3"),
    (POOL1, dict(dilations=(1, 0)), "dilations[1]", 0, "expected an integer >= 1"),
    (POOL1, dict(window_size=(3, 6)), "window_size[1]", 6,
     "the dilated window (11) must fit the padded input (8 + 0 + 1)"),
    (POOL1, dict(output_tensor=t(2, 4, 4, 7)), "output_tensor.sizes", (2, 4, 4, 7),
     "expected batch and channel sizes (2, 3) equal to the input's"),
    (POOL1, dict(output_tensor=t(2, 3, 6, 7)), "output_tensor.sizes[2]", 6,
     "expected 4 to 5 (floor to ceil mode) = (in + start + end - ((window-1)*dilation+1)) // "
     "stride + 1"),
    (POOL1, dict(output_tensor=t(2, 3, 4, 8)), "output_tensor.sizes[3]", 8,
     "expected 7 = (in + start + end - ((window-1)*dilation+1)) // stride + 1"),
    (POOL1, dict(p=0), "p", 0, "expected an integer >= 1"),
    (POOL1, dict(input_tensor=t(1, 1, 1, 1, 1, 1), output_tensor=t(1, 1, 1, 1, 1, 1)),
     "input_tensor.sizes", (1, 1, 1, 1, 1, 1), "expected 3 to 5 dimensions"),
]


@pytest.mark.parametrize("spec, over, field, value, expected", CASES,
                         ids=[f"{s[0].__name__}-{f}-{i}" for i, (s, _, f, _, _) in
                              enumerate(CASES)])
def test_each_rule_refuses_with_its_complete_message(spec, over, field, value, expected):
    with pytest.raises(dml.ValidationError) as err:
        make(spec, **over)
    assert str(err.value) == msg(spec, field, value, expected)


@pytest.mark.parametrize("spec, over", [
    (SLICE1, dict(input_window_offsets=(0, 0, 0), input_window_sizes=(2, 3, 5),
                  output_tensor=t(2, 2, 3))),                    # window == the whole input
    (SLICE1, dict(output_tensor=t(1, 1, 1))),                     # 1 output: the smallest
    (SLICE, dict(offsets=(1, 0, 0), sizes=(1, 2, 3), strides=(1, 2, 2))),  # last read at 4 of 5
    (POOL1, dict(window_size=(3, 5), output_tensor=t(2, 3, 4, 1))),  # dilated 9 == 8 + 0 + 1
    (POOL1, dict(window_size=(10, 2), strides=(1, 1), output_tensor=t(2, 3, 1, 7))),  # 10 == 9+1
    (POOL1, dict(output_tensor=t(2, 3, 5, 7))),                   # ceil mode's size
])
def test_boundaries_of_each_rule_are_valid(spec, over):
    make(spec, **over)


def test_valid_descriptors_store_plain_ints_and_enums():
    s = make(SLICE1, input_window_offsets=(np.int64(1), 0, 0), input_window_strides=[1, -2, 2])
    assert s.input_window_offsets == (1, 0, 0) and type(s.input_window_offsets[0]) is int
    assert s.input_window_strides == (1, -2, 2) and s.starts() == (1, 2, 0)
    v = make(SLICE, offsets=[np.int32(1), 0, 0], sizes=[1, 2, 3], strides=[1, 2, 2])
    assert (v.offsets, v.sizes, v.strides) == ((1, 0, 0), (1, 2, 3), (1, 2, 2))
    assert all(type(a) is int for a in v.offsets + v.sizes + v.strides)
    p = make(PAD1, padding_mode=4, padding_value_data_type=1, start_padding=[0, np.int8(1), 2],
             end_padding=[0, 0, 1])
    assert p.padding_mode is PaddingMode.WRAP and p.padding_value_data_type is F32
    assert p.start_padding == (0, 1, 2) and type(p.start_padding[1]) is int
    assert p.end_padding == (0, 0, 1) and type(p.end_padding) is tuple
    h = make(PAD1, input_tensor=t(2, 3, 5, dtype=DataType.FLOAT16),
             output_tensor=t(2, 4, 8, dtype=DataType.FLOAT16),
             padding_value_data_type=DataType.FLOAT16, padding_value=0.1)
    assert h.padding_value == float(np.float16(0.1)) and type(h.padding_value) is float
    f = make(PAD1, padding_value=np.float64(0.1))  # stored as the FLOAT32 the union holds
    assert f.padding_value == float(np.float32(0.1)) and type(f.padding_value) is float
    i = make(PAD1, input_tensor=t(2, 3, 5, dtype=I8), output_tensor=t(2, 4, 8, dtype=I8),
             padding_value_data_type=I8, padding_value=np.int64(-128))
    assert i.padding_value == -128 and type(i.padding_value) is int
    v1 = make(PAD, padding_value=np.float32(2.5))
    assert v1.padding_value == 2.5 and type(v1.padding_value) is float
    q = make(POOL1, p=np.int64(3), strides=[2, 1], window_size=[3, np.int8(2)],
             start_padding=[1, 0], end_padding=[0, 1], dilations=[1, 2])
    assert q.p == 3 and type(q.p) is int and q.strides == (2, 1) and q.dilations == (1, 2)
    assert (q.window_size, q.start_padding, q.end_padding) == ((3, 2), (1, 0), (0, 1))
    assert all(type(a) is int for a in q.window_size + q.start_padding + q.end_padding)
