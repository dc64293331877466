"""A catalogue of invalid descriptors: each raises ValidationError naming operator and field,
before anything is compiled (no Numba is needed to run this file)."""
import numpy as np
import pytest

import dml_numba as dml

F32, F16, I32 = dml.DataType.FLOAT32, dml.DataType.FLOAT16, dml.DataType.INT32
T = dml.TensorDesc
CC, FWD, BWD = dml.ConvolutionMode.CROSS_CORRELATION, dml.ConvolutionDirection.FORWARD, dml.ConvolutionDirection.BACKWARD


def pad(**kw):
    args = dict(input_tensor=T(F32, (2, 3)), output_tensor=T(F32, (3, 6)),
                padding_mode=dml.PaddingMode.EDGE, padding_value=0.0, start_padding=(1, 1),
                end_padding=(0, 2))
    args.update(kw)
    return dml.PaddingOperatorDesc(**args)


def pad1(**kw):
    args = dict(input_tensor=T(I32, (2, 3)), output_tensor=T(I32, (3, 6)),
                padding_mode=dml.PaddingMode.CONSTANT, padding_value_data_type=I32,
                padding_value=4, start_padding=(1, 1), end_padding=(0, 2))
    args.update(kw)
    return dml.Padding1OperatorDesc(**args)


def pool(**kw):
    args = dict(input_tensor=T(F32, (2, 3, 5, 6)), output_tensor=T(F32, (2, 3, 2, 5)),
                strides=(2, 1), window_size=(2, 2), start_padding=(0, 0), end_padding=(0, 0),
                dilations=(1, 1), p=2)
    args.update(kw)
    return dml.LpPooling1OperatorDesc(**args)


def conv(**kw):
    args = dict(input_tensor=T(F32, (2, 4, 5, 6)), filter_tensor=T(F32, (6, 2, 3, 3)),
                bias_tensor=T(F32, (1, 6, 1, 1)), output_tensor=T(F32, (2, 6, 3, 4)), mode=CC,
                direction=FWD, strides=(1, 1), dilations=(1, 1), start_padding=(0, 0),
                end_padding=(0, 0), output_padding=(0, 0), group_count=2)
    args.update(kw)
    return dml.ConvolutionOperatorDesc(**args)


def tconv(**kw):  # backward: filter {C_in, C_out/G, k}
    args = dict(input_tensor=T(F32, (1, 4, 3, 3)), filter_tensor=T(F32, (4, 3, 2, 2)),
                bias_tensor=None, output_tensor=T(F32, (1, 6, 6, 6)), mode=CC, direction=BWD,
                strides=(2, 2), dilations=(1, 1), start_padding=(0, 0), end_padding=(0, 0),
                output_padding=(0, 0), group_count=2)
    args.update(kw)
    return dml.ConvolutionOperatorDesc(**args)


def tile(**kw):
    args = dict(input_tensor=T(F32, (2, 3)), output_tensor=T(F32, (4, 3)), repeats=(2, 1))
    args.update(kw)
    return dml.TileOperatorDesc(**args)


def slice1(**kw):
    args = dict(input_tensor=T(F32, (4, 4)), output_tensor=T(F32, (2, 2)),
                input_window_offsets=(0, 1), input_window_sizes=(4, 3),
                input_window_strides=(-2, 2))
    args.update(kw)
    return dml.Slice1OperatorDesc(**args)


def slice0(**kw):
    args = dict(input_tensor=T(F32, (4, 4)), output_tensor=T(F32, (2, 2)), offsets=(0, 1),
                sizes=(2, 2), strides=(2, 2))
    args.update(kw)
    return dml.SliceOperatorDesc(**args)


VALID = [pad, pad1, pool, conv, tconv, tile, slice1, slice0]

CATALOGUE = [  # (builder, overrides, expected "Owner.field" in the message)
    (pad, dict(input_tensor=(2, 3)), "PaddingOperatorDesc.input_tensor"),
    (pad, dict(output_tensor=T(F16, (3, 6))), "PaddingOperatorDesc.output_tensor.data_type"),
    (pad, dict(output_tensor=T(F32, (3, 6, 1))), "PaddingOperatorDesc.output_tensor.sizes"),
    (pad, dict(output_tensor=T(F32, (3, 7))), "PaddingOperatorDesc.output_tensor.sizes"),
    (pad, dict(padding_mode=5), "PaddingOperatorDesc.padding_mode"),
    (pad, dict(start_padding=(1,)), "PaddingOperatorDesc.start_padding"),
    (pad, dict(end_padding=(0, -2)), r"PaddingOperatorDesc.end_padding\[1\]"),
    (pad, dict(padding_value="nine"), "PaddingOperatorDesc.padding_value"),
    (pad1, dict(padding_value_data_type=F32), "Padding1OperatorDesc.padding_value_data_type"),
    (pad1, dict(padding_value=2**31), "Padding1OperatorDesc.padding_value"),
    (pad1, dict(padding_value=1.5), "Padding1OperatorDesc.padding_value"),
    (pool, dict(input_tensor=T(F32, (2, 3)), output_tensor=T(F32, (2, 3))), "LpPooling1OperatorDesc.input_tensor.sizes"),
    (pool, dict(input_tensor=T(I32, (2, 3, 5, 6)), output_tensor=T(I32, (2, 3, 2, 5))), "LpPooling1OperatorDesc.input_tensor.data_type"),
    (pool, dict(p=0), "LpPooling1OperatorDesc.p"),
    (pool, dict(strides=(0, 1)), r"LpPooling1OperatorDesc.strides\[0\]"),
    (pool, dict(dilations=(1, 0)), r"LpPooling1OperatorDesc.dilations\[1\]"),
    (pool, dict(window_size=(6, 2)), r"LpPooling1OperatorDesc.window_size\[0\]"),
    (pool, dict(window_size=(2,)), "LpPooling1OperatorDesc.window_size"),
    (pool, dict(output_tensor=T(F32, (2, 3, 4, 5))), r"LpPooling1OperatorDesc.output_tensor.sizes\[2\]"),
    (pool, dict(output_tensor=T(F32, (2, 2, 2, 5))), "LpPooling1OperatorDesc.output_tensor.sizes"),
    (conv, dict(group_count=3), "ConvolutionOperatorDesc.group_count"),
    (conv, dict(group_count=0), "ConvolutionOperatorDesc.group_count"),
    (conv, dict(filter_tensor=T(F32, (6, 4, 3, 3))), "ConvolutionOperatorDesc.filter_tensor.sizes"),
    (conv, dict(bias_tensor=T(F32, (1, 5, 1, 1))), "ConvolutionOperatorDesc.bias_tensor.sizes"),
    (conv, dict(bias_tensor=T(F16, (1, 6, 1, 1))), "ConvolutionOperatorDesc.bias_tensor.data_type"),
    (conv, dict(output_tensor=T(F32, (2, 6, 3, 3))), "ConvolutionOperatorDesc.output_tensor.sizes"),
    (conv, dict(strides=(1, 0)), r"ConvolutionOperatorDesc.strides\[1\]"),
    (conv, dict(dilations=(0, 1)), r"ConvolutionOperatorDesc.dilations\[0\]"),
    (conv, dict(mode=2), "ConvolutionOperatorDesc.mode"),
    (conv, dict(direction=7), "ConvolutionOperatorDesc.direction"),
    (conv, dict(output_padding=(1, 0)), "ConvolutionOperatorDesc.output_padding"),
    (conv, dict(filter_tensor=T(F32, (6, 2, 6, 3))), r"ConvolutionOperatorDesc.filter_tensor.sizes\[2\]"),
    (conv, dict(fused_activation=dml.TileOperatorDesc(T(F32, (1,)), T(F32, (1,)), (1,))), "ConvolutionOperatorDesc.fused_activation"),
    (conv, dict(input_tensor=T(F32, (4, 5)), output_tensor=T(F32, (4, 5))), "ConvolutionOperatorDesc.input_tensor.sizes"),
    (conv, dict(input_tensor=T(I32, (2, 4, 5, 6))), "ConvolutionOperatorDesc.input_tensor.data_type"),
    (tconv, dict(filter_tensor=T(F32, (2, 3, 2, 2))), "ConvolutionOperatorDesc.filter_tensor.sizes"),
    (tconv, dict(output_tensor=T(F32, (1, 3, 6, 6))), "ConvolutionOperatorDesc.output_tensor.sizes"),
    (tconv, dict(output_tensor=T(F32, (1, 6, 8, 6))), r"ConvolutionOperatorDesc.output_tensor.sizes\[2\]"),
    (tconv, dict(output_padding=(2, 0)), r"ConvolutionOperatorDesc.output_padding\[0\]"),
    (tconv, dict(output_padding=(1, 0)), r"ConvolutionOperatorDesc.output_tensor.sizes\[2\]"),
    (tconv, dict(start_padding=(4, 0), end_padding=(3, 0)), r"ConvolutionOperatorDesc.start_padding\[0\]"),
    (tile, dict(repeats=(0, 1)), r"TileOperatorDesc.repeats\[0\]"),
    (tile, dict(repeats=(2,)), "TileOperatorDesc.repeats"),
    (tile, dict(output_tensor=T(F32, (4, 4))), "TileOperatorDesc.output_tensor.sizes"),
    (slice1, dict(input_window_strides=(0, 2)), r"Slice1OperatorDesc.input_window_strides\[0\]"),
    (slice1, dict(input_window_offsets=(1, 1)), r"Slice1OperatorDesc.input_window_sizes\[0\]"),
    (slice1, dict(input_window_sizes=(0, 3)), r"Slice1OperatorDesc.input_window_sizes\[0\]"),
    (slice1, dict(output_tensor=T(F32, (3, 2))), r"Slice1OperatorDesc.output_tensor.sizes\[0\]"),
    (slice1, dict(output_tensor=T(I32, (2, 2))), "Slice1OperatorDesc.output_tensor.data_type"),
    (slice0, dict(sizes=(2, 3)), "SliceOperatorDesc.sizes"),
    (slice0, dict(offsets=(3, 1)), r"SliceOperatorDesc.offsets\[0\]"),
    (slice0, dict(strides=(2, 0)), r"SliceOperatorDesc.strides\[1\]"),
]


def _id(v) -> str:
    """A stable, selectable test id: short, without the regex escapes of ``where`` (pytest
    prints a backslash in an id doubled, so an id with one cannot be selected by name)."""
    return str(v).replace("\\", "")[:60]


@pytest.mark.parametrize("builder", VALID, ids=lambda b: b.__name__)
def test_catalogue_bases_are_valid(builder):
    builder()


@pytest.mark.parametrize("builder,overrides,where", CATALOGUE,
                         ids=lambda v: v.__name__ if callable(v) else _id(v))
def test_invalid_descriptor_names_operator_and_field(builder, overrides, where):
    with pytest.raises(dml.ValidationError, match=rf"^{where}.*: .* is invalid; "):
        builder(**overrides)


@pytest.mark.parametrize("cls,kwargs,field", [
    (dml.ActivationCeluOperatorDesc, dict(alpha=0.0), "alpha"),
    (dml.ActivationSoftplusOperatorDesc, dict(steepness=0.0), "steepness"),
    (dml.ElementWiseClipOperatorDesc, dict(min=1.0, max=0.0), "min"),
    (dml.ActivationLinearOperatorDesc, dict(alpha=float("nan"), beta=0.0), "alpha"),
    (dml.ActivationEluOperatorDesc, dict(alpha="x"), "alpha"),
])
def test_invalid_activation(cls, kwargs, field):
    with pytest.raises(dml.ValidationError, match=rf"^{cls.__name__}\.{field}: "):
        cls(**kwargs)


def test_message_names_value_and_expectation():
    with pytest.raises(dml.ValidationError) as info:
        slice1(input_window_strides=(1, 0))
    assert str(info.value) == ("Slice1OperatorDesc.input_window_strides[1]: 0 is invalid; "
                               "strides must be non-zero")


def test_validation_error_is_a_value_error():
    assert issubclass(dml.ValidationError, ValueError)


def test_unknown_device_and_non_descriptor():
    with pytest.raises(dml.ValidationError, match="compile_operator.device: 'tpu'"):
        dml.compile_operator(tile(), "tpu")
    with pytest.raises(dml.ValidationError, match="compile_operator.desc"):
        dml.compile_operator(np.zeros(3), "numpy")


def test_functional_layer_validates_too():
    # the functional layer's shape rules name the function and its parameter
    with pytest.raises(dml.ValidationError, match=r"padding.start_padding: \(1,\) is invalid"):
        dml.padding(np.zeros((2, 2), np.float32), (1,), (1,), device="numpy")
    with pytest.raises(dml.ValidationError, match=r"padding.mode: 'mirror'"):
        dml.padding(np.zeros(2, np.float32), (1,), (1,), "mirror", device="numpy")
    with pytest.raises(dml.ValidationError, match=r"tile.repeats\[0\]: 0 is invalid"):
        dml.tile(np.zeros(2, np.float32), (0,), device="numpy")


# -- complete messages: operator, field, the offending value, and the expectation in words ----

@pytest.mark.parametrize("make,message", [
    (lambda: dml.ElementWiseClipOperatorDesc(0.0, 1.0, 3.0),
     "ElementWiseClipOperatorDesc.scale_bias: 3.0 is invalid; expected None or (scale, bias)"),
    (lambda: dml.ElementWiseClipOperatorDesc(0.0, 1.0, (1.0, 2.0, 3.0)),
     "ElementWiseClipOperatorDesc.scale_bias: (1.0, 2.0, 3.0) is invalid; expected None or "
     "(scale, bias)"),
    (lambda: dml.ElementWiseClipOperatorDesc(0.0, 1.0, ("a", 1.0)),
     "ElementWiseClipOperatorDesc.scale_bias[0]: 'a' is invalid; expected a real number"),
    (lambda: dml.ElementWiseClipOperatorDesc(0.0, 1.0, (1.0, float("nan"))),
     "ElementWiseClipOperatorDesc.scale_bias[1]: nan is invalid; expected a finite real number"),
    (lambda: dml.ActivationCeluOperatorDesc(0.0),
     "ActivationCeluOperatorDesc.alpha: 0.0 is invalid; expected a non-zero alpha (x/alpha is "
     "taken)"),
    (lambda: dml.ActivationSoftplusOperatorDesc(0.0),
     "ActivationSoftplusOperatorDesc.steepness: 0.0 is invalid; expected steepness > 0"),
    (lambda: dml.ElementWiseClipOperatorDesc(2.0, 1.0),
     "ElementWiseClipOperatorDesc.min: 2.0 is invalid; expected min <= max (1.0)"),
    (lambda: tile(repeats=(0, 1)),
     "TileOperatorDesc.repeats[0]: 0 is invalid; expected an integer >= 1"),
    (lambda: T(F32, (2**32,)),
     "TensorDesc.sizes[0]: 4294967296 is invalid; expected an integer < 2**32 (4294967296), the "
     "range of DirectML's 32-bit fields"),
])
def test_complete_messages(make, message):
    with pytest.raises(dml.ValidationError) as info:
        make()
    assert str(info.value) == message


def test_scale_bias_is_stored_as_floats_and_steepness_below_one_is_valid():
    assert dml.ElementWiseClipOperatorDesc(0, 1, [2, 3]).scale_bias == (2.0, 3.0)
    assert dml.ActivationSoftplusOperatorDesc(0.5).steepness == 0.5  # allowed from FL6.4
    assert dml.ActivationCeluOperatorDesc(-0.5).alpha == -0.5


def test_lp_pooling_v1_canonicalises_with_unit_dilations():
    d = dml.LpPoolingOperatorDesc(T(F32, (1, 2, 5, 6, 7)), T(F32, (1, 2, 4, 5, 3)), (1, 1, 2),
                                  (2, 2, 2), (0, 0, 0), (0, 0, 0), 3)
    c = d.canonical()
    assert type(c) is dml.LpPooling1OperatorDesc and c.dilations == (1, 1, 1) and c.p == 3
    with pytest.raises(dml.ValidationError, match=r"LpPoolingOperatorDesc.strides: \(1, 1\)"):
        dml.LpPoolingOperatorDesc(T(F32, (1, 2, 5, 6, 7)), T(F32, (1, 2, 4, 5, 3)), (1, 1),
                                  (2, 2, 2), (0, 0, 0), (0, 0, 0), 3)


def test_metadata_flops_and_bytes_from_the_definitions():
    """Counted by hand: FORWARD 2 * outputs * (C_in/G * taps); BACKWARD 2 * inputs * (C_out/G *
    taps); pooling 2 * outputs * window; bytes = every input and the output, packed."""
    c = conv()  # x (2,4,5,6), w (6,2,3,3), bias, y (2,6,3,4), G = 2
    assert c.flops() == 2 * (2 * 6 * 3 * 4) * (2 * 9)
    assert c.bytes_moved() == 4 * (2 * 4 * 5 * 6 + 6 * 2 * 9 + 6 + 2 * 6 * 3 * 4)
    t = tconv()  # x (1,4,3,3), w (4,3,2,2)
    assert t.flops() == 2 * (1 * 4 * 3 * 3) * (3 * 4)
    assert pool().flops() == 2 * (2 * 3 * 2 * 5) * 4
    assert tile().flops() == 0 and tile().bytes_moved() == 4 * (6 + 12)
    assert conv().exact is False and pool().exact is False and tile().exact is True


def test_operator_names_come_from_their_modules():
    names = {t.op_name() for t in (dml.PaddingOperatorDesc, dml.Padding1OperatorDesc,
                                   dml.LpPooling1OperatorDesc, dml.ConvolutionOperatorDesc,
                                   dml.TileOperatorDesc, dml.Slice1OperatorDesc)}
    assert names == {"padding", "lp_pooling", "convolution", "tile", "slice"}


def test_output_size_message_in_full():
    with pytest.raises(dml.ValidationError) as info:
        tile(output_tensor=T(F32, (4, 4)))
    assert str(info.value) == ("TileOperatorDesc.output_tensor.sizes: (4, 4) is invalid; "
                               "expected (4, 3) (input_tensor.sizes * repeats)")


def _unary_descs():
    from dml_numba.functional import lp_pooling_desc, padding_desc, slice1_desc, tile_desc

    x = np.zeros((1, 2, 4, 4), np.float32)
    return [padding_desc(x, (0, 0, 1, 1), (0, 0, 1, 1)), tile_desc(x, (1, 1, 2, 1)),
            slice1_desc(x, (0, 0, 1, 1), (1, 2, 2, 2)), lp_pooling_desc(x, (2, 2))]


@pytest.mark.parametrize("desc", _unary_descs(), ids=lambda d: type(d).__name__)
def test_one_input_operators_name_the_output_rule_in_full(desc):
    """The output tensor of every one-input operator must match its input's data type and
    rank; the messages say so in full, naming the input tensor as the reference."""
    import dataclasses

    owner, out = type(desc).__name__, desc.output_tensor
    with pytest.raises(dml.ValidationError) as err:
        dataclasses.replace(desc, output_tensor=dml.TensorDesc(dml.DataType.FLOAT16, out.sizes))
    assert str(err.value) == (f"{owner}.output_tensor.data_type: 'FLOAT16' is invalid; expected "
                              "FLOAT32, the data type of input_tensor")
    with pytest.raises(dml.ValidationError) as err:
        dataclasses.replace(desc, output_tensor=dml.TensorDesc(out.data_type, out.sizes[1:]))
    assert str(err.value) == (f"{owner}.output_tensor.sizes: {out.sizes[1:]!r} is invalid; "
                              "expected 4 dimensions, the dimension count of input_tensor")


def test_lp_pooling_names_its_types_and_the_float64_extension():
    import dataclasses

    desc = _unary_descs()[-1]
    t = dml.TensorDesc(dml.DataType.INT32, desc.input_tensor.sizes)
    with pytest.raises(dml.ValidationError) as err:
        dataclasses.replace(desc, input_tensor=t, output_tensor=dml.TensorDesc(
            dml.DataType.INT32, desc.output_tensor.sizes))
    assert str(err.value) == ("LpPooling1OperatorDesc.input_tensor.data_type: 'INT32' is invalid; "
                              "expected one of FLOAT32, FLOAT16, FLOAT64 (FLOAT64 is a dml_numba "
                              "extension)")
