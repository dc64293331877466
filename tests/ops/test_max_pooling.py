"""Max pooling against onnx.reference MaxPool (ceil mode, dilations, padding) and a brute-force
loop; every float type; INFERRED choices pinned."""
import itertools

import numpy as np
import pytest

import dml_numba as dml
from dml_numba._dims import pooled_size, pooled_size_ceil
from tests.helpers import assert_exact, every_type_on_each_device, onnx_run, random_array

CASES = [  # shape, window, strides, start, end, dilations, ceil
    ((2, 3, 9, 10), (3, 2), (2, 3), (1, 0), (1, 1), (1, 1), False),
    ((1, 2, 7, 5), (2, 2), (1, 1), (0, 1), (1, 0), (2, 2), False),
    ((2, 1, 4, 5, 6), (2, 3, 2), (1, 2, 2), (1, 1, 0), (0, 1, 1), (1, 1, 2), False),
    ((1, 2, 8, 7), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), True),
    ((1, 1, 6, 6), (2, 2), (3, 3), (0, 0), (0, 0), (1, 1), True),
]


def _desc(x, window, strides, start, end, dil, ceil=False, out=None, indices=None):
    t = dml.DataType.from_numpy(x.dtype)
    size = pooled_size_ceil if ceil else pooled_size
    if out is None:
        out = [size(n, a, b, w, s, d) for n, a, b, w, s, d in
               zip(x.shape[2:], start, end, window, strides, dil)]
        if ceil:  # ONNX's rule: the last window starts inside the input or its start padding
            out = [o - 1 if (o - 1) * s >= n + a else o for o, s, n, a in
                   zip(out, strides, x.shape[2:], start)]
    sizes = x.shape[:2] + tuple(out)
    return dml.MaxPooling2OperatorDesc(dml.TensorDesc(t, x.shape), dml.TensorDesc(t, sizes),
                                       None if indices is None else dml.TensorDesc(indices, sizes),
                                       strides, window, start, end, dil)


def brute(x, window, strides, start, dil, out):
    """Python's max over the taps inside the input (Python numbers: exact for every type)."""
    y = np.empty(x.shape[:2] + tuple(out), x.dtype)
    for idx in np.ndindex(*y.shape):
        n, c, o = idx[0], idx[1], idx[2:]
        taps = []
        for k in itertools.product(*(range(w) for w in window)):
            xi = tuple(oo * s + kk * d - a for oo, s, kk, d, a in zip(o, strides, k, dil, start))
            if all(0 <= v < S for v, S in zip(xi, x.shape[2:])):
                taps.append(x[(n, c) + xi].item())
        y[idx] = max(taps)
    return y


@pytest.mark.parametrize("case", CASES, ids=str)
def test_matches_onnx_reference(device, case):
    shape, window, strides, start, end, dil, ceil = case
    x = random_array(shape, np.float32)
    y = dml.compile_operator(_desc(x, window, strides, start, end, dil, ceil), device)(x)
    ref = onnx_run("MaxPool", [x], kernel_shape=list(window), strides=list(strides),
                   pads=list(start) + list(end), dilations=list(dil), ceil_mode=int(ceil))
    assert_exact(y, ref)


@pytest.mark.parametrize("device, dtype", every_type_on_each_device(
    [np.float16, np.float32, np.float64, np.int8, np.uint8, np.int16, np.uint16, np.int32,
     np.uint32, np.int64, np.uint64], {np.float16, np.float32, np.int64, np.uint8}))
def test_brute_force_every_type(device, dtype):
    x = random_array((2, 3, 6, 7), dtype)
    d = _desc(x, (3, 2), (2, 1), (1, 1), (0, 1), (1, 2))
    assert_exact(dml.compile_operator(d, device)(x),
                 brute(x, (3, 2), (2, 1), (1, 1), (1, 2), d.output_tensor.sizes[2:]))


def test_against_pytorch(device):
    torch = pytest.importorskip("torch", reason="PyTorch is optional: not installed")
    x = random_array((2, 4, 11, 9), np.float32)
    y = dml.max_pooling(x, (3, 2), (2, 2), (1, 0), (1, 0), (1, 2), device=device)
    ref = torch.nn.functional.max_pool2d(torch.from_numpy(x), (3, 2), (2, 2), (1, 0), (1, 2))
    assert_exact(y, ref.numpy())


#: 2-D float pooling in vectors of output columns (the CPU's rows kernel): ResNet's 3 x 3
#: stride 2 with padding, the U-Net's 2 x 2 stride 2, stride 1 with dilation and asymmetric
#: padding, stride 3 with a ceil-mode row, rows too short for a vector (all scalar), a wide
#: row whose last vector overlaps the one before
ROWS = [  # shape, window, strides, start, end, dilations, ceil
    ((1, 3, 23, 29), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), False),
    ((2, 2, 16, 40), (2, 2), (2, 2), (0, 0), (0, 0), (1, 1), False),
    ((1, 2, 9, 37), (3, 2), (1, 1), (2, 0), (0, 1), (2, 3), False),
    ((1, 2, 10, 61), (2, 3), (3, 3), (0, 1), (1, 1), (1, 1), True),
    ((1, 2, 6, 7), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), False),
    ((1, 1, 5, 70), (1, 3), (1, 1), (0, 1), (0, 1), (1, 1), False),
]


@pytest.mark.parametrize("lanes", [4, 8, 16])
@pytest.mark.parametrize("case", ROWS, ids=str)
def test_the_rows_kernel_is_the_scalar_loop_bit_for_bit(case, lanes):
    """The rows kernel (planned for 4, 8 and 16 lanes) against the scalar loop nest, bit for
    bit (ties of -0.0 and +0.0: the first in window order stays; NaNs, infinities), and
    against the brute-force loop without the NaNs; float16 through float32."""
    from dml_numba._host import Host, planned_for
    from dml_numba.cpu import max_pooling as cpu_max

    shape, window, strides, start, end, dil, ceil = case
    rng = np.random.default_rng(lanes)
    x = rng.choice(np.array([-0.0, 0.0, -1.5, 2.0, np.inf, -np.inf, np.nan, 0.25],
                            np.float32), size=shape, p=[.3, .3, .1, .1, .02, .05, .03, .1])
    for dtype in (np.float32, np.float16):
        xt = x.astype(dtype)
        d = _desc(xt, window, strides, start, end, dil, ceil)
        with planned_for(Host(lanes, 2)):
            rows = cpu_max.MaxPoolingKernel(d, {"parallel": True})
        assert rows.key.kernel == "rows" and rows.key.plan.lanes == lanes
        scalar = cpu_max.MaxPoolingKernel(d, {"parallel": False}, loop_nest=True)
        assert scalar.key.kernel == "main"
        for xs in (xt, np.where(np.isnan(xt), dtype(0.5), xt)):  # (the brute force: no NaN)
            y, ref = (np.full(d.output_tensor.sizes, 7, dtype) for _ in range(2))
            rows([xs], y)
            scalar([xs], ref)
            assert y.tobytes() == ref.tobytes()
        assert_exact(y, brute(xs, window, strides, start, dil, d.output_tensor.sizes[2:]))
    # a strided view of the same values through the operator: read flat, the same result
    view = np.ascontiguousarray(np.swapaxes(x, -1, -2)).swapaxes(-1, -2)
    op = dml.compile_operator(_desc(x, window, strides, start, end, dil, ceil), "cpu")
    assert op(view).tobytes() == op(x).tobytes()
    # vectors wherever a row holds a vector's worth of columns whose windows lie inside
    (kw, sw, dw, pl) = window[1], strides[1], dil[1], start[1]
    lo, hi = cpu_max.inside(shape[3], d.output_tensor.sizes[3], kw, sw, dw, pl, past=sw - 1)
    assert ("vmax(acc, vload_every(" in rows.source) == (hi - lo >= lanes)


def test_inferred_padding_never_wins_even_against_negative_values(device):
    """DirectML: the padding is not a value. A window of negative numbers over the padding
    gives the largest negative number, not 0."""
    x = -np.arange(1, 10, dtype=np.float32).reshape(1, 1, 3, 3)
    y = dml.max_pooling(x, (2, 2), 1, 1, 1, device=device)
    assert y[0, 0, 0, 0] == -1 and y.max() < 0


def test_inferred_nan_propagates(device):
    """INFERRED (as numpy.max and PyTorch): a NaN in a window gives NaN, wherever it sits."""
    x = np.zeros((1, 1, 2, 4), np.float32)
    x[0, 0, 0, 1] = np.nan
    x[0, 0, 1, 3] = 5
    y = dml.max_pooling(x, (2, 2), 2, device=device)
    assert np.isnan(y[0, 0, 0, 0]) and y[0, 0, 0, 1] == 5


@pytest.mark.parametrize("dtype, least", [(np.float32, -np.inf), (np.int16, -2**15),
                                          (np.uint32, 0)], ids=["float32", "int16", "uint32"])
def test_inferred_an_all_padding_window_is_the_least_value(device, dtype, least):
    """INFERRED: in ceil mode a declared output may hold a window that reads only padding
    (the descriptor accepts sizes up to the ceil size): -infinity, the maximum of nothing (an
    integer type's least value)."""
    x = random_array((1, 1, 3), dtype)
    d = _desc(x, (1,), (2,), (0,), (2,), (1,), out=(3,))  # window 2 reads x[4]: end padding
    y = dml.compile_operator(d, device)(x)
    assert y[0, 0, 2] == least and y[0, 0, 0] == x[0, 0, 0]


def test_earlier_versions_canonicalise_to_max_pooling2(device):
    x = random_array((1, 2, 5, 6), np.float32)
    t, o = dml.TensorDesc(1, x.shape), dml.TensorDesc(1, (1, 2, 2, 3))
    v0 = dml.MaxPoolingOperatorDesc(t, o, (2, 2), (2, 2), (0, 0), (0, 0))
    v1 = dml.MaxPooling1OperatorDesc(t, o, None, (2, 2), (2, 2), (0, 0), (0, 0))
    ref = dml.compile_operator(v0.canonical(), device)(x)
    assert type(v0.canonical()) is type(v1.canonical()) is dml.MaxPooling2OperatorDesc
    for d in (v0, v1):
        assert_exact(dml.compile_operator(d, device)(x), ref)


@pytest.mark.parametrize("field, value, message", [
    ("output_indices_tensor", dml.TensorDesc(dml.DataType.INT64, (1, 2, 2, 3)),
     "output_indices_tensor.data_type: 'INT64' is invalid; expected UINT32 or UINT64"),
    ("output_indices_tensor", dml.TensorDesc(dml.DataType.UINT64, (1, 2, 3, 3)),
     r"output_indices_tensor.sizes: \(1, 2, 3, 3\) is invalid; expected \(1, 2, 2, 3\)"),
    ("output_indices_tensor", (1, 2, 2, 3),
     r"output_indices_tensor: \(1, 2, 2, 3\) is invalid; expected None or a TensorDesc"),
    ("window_size", (2, 9), r"window_size\[1\]: 9 is invalid; the dilated window \(9\) must fit"),
    ("strides", (0, 1), r"strides\[0\]: 0 is invalid; expected an integer >= 1"),
    ("output_tensor", dml.TensorDesc(1, (1, 2, 4, 3)),
     r"output_tensor.sizes\[2\]: 4 is invalid; expected 2 to 3 \(floor to ceil mode\)"),
    ("output_tensor", dml.TensorDesc(dml.DataType.INT32, (1, 2, 2, 3)),
     "output_tensor.data_type: 'INT32' is invalid; expected FLOAT32"),
])
def test_invalid_fields_are_named(field, value, message):
    fields = dict(input_tensor=dml.TensorDesc(1, (1, 2, 5, 6)),
                  output_tensor=dml.TensorDesc(1, (1, 2, 2, 3)), output_indices_tensor=None,
                  strides=(2, 2), window_size=(2, 2), start_padding=(0, 0), end_padding=(0, 0),
                  dilations=(1, 1))
    fields[field] = value
    with pytest.raises(dml.ValidationError, match="MaxPooling2OperatorDesc." + message):
        dml.MaxPooling2OperatorDesc(**fields)


# -- the indices output (MAX_POOLING1/2's OutputIndicesTensor) ----------------------------------

U32, U64 = dml.DataType.UINT32, dml.DataType.UINT64


def brute_indices(x, window, strides, start, dil, out):
    """Python's first maximum over the taps inside the input, in window order (row-major over
    the taps), as the flat index of the whole input; a NaN beats a number; no tap: None."""
    idx_out = np.empty(x.shape[:2] + tuple(out), object)
    for idx in np.ndindex(*idx_out.shape):
        n, c, o = idx[0], idx[1], idx[2:]
        best = None
        for k in itertools.product(*(range(w) for w in window)):
            xi = tuple(oo * s + kk * d - a for oo, s, kk, d, a in zip(o, strides, k, dil, start))
            if not all(0 <= v < S for v, S in zip(xi, x.shape[2:])):
                continue
            v = x[(n, c) + xi].item()
            if best is None or v > best[0] or (v != v and best[0] == best[0]):
                best = (v, int(np.ravel_multi_index((n, c) + xi, x.shape)))
        idx_out[idx] = None if best is None else best[1]
    return idx_out


def _ties(shape, dtype, seed=0):
    """Values drawn from three, so most windows hold a tie for their maximum."""
    return np.random.default_rng(seed).integers(0, 3, shape).astype(dtype)


def _onnx_indices(x, window, strides, start, end, dil, ceil):
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    node = helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=list(window),
                            strides=list(strides), pads=list(start) + list(end),
                            dilations=list(dil), ceil_mode=int(ceil))
    elem = helper.np_dtype_to_tensor_dtype(x.dtype)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", elem, None)],
                              [helper.make_tensor_value_info("y", elem, None),
                               helper.make_tensor_value_info("i", 7, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return ReferenceEvaluator(model).run(None, {"x": x})


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("itype", [U32, U64], ids=["uint32", "uint64"])
def test_indices_match_onnx_reference_and_brute_force(device, case, itype):
    """Ties in most windows: the first maximum in window order, flat over the whole input
    (batch and channel included), as onnx.reference's MaxPool Indices and a Python loop."""
    shape, window, strides, start, end, dil, ceil = case
    x = _ties(shape, np.float32)
    d = _desc(x, window, strides, start, end, dil, ceil, indices=itype)
    y, yi = dml.compile_operator(d, device)(x)
    assert yi.dtype == itype.numpy and yi.shape == y.shape
    ref_y, ref_i = _onnx_indices(x, window, strides, start, end, dil, ceil)
    assert_exact(y, ref_y)
    np.testing.assert_array_equal(yi.astype(np.int64), ref_i)
    expected = brute_indices(x, window, strides, start, dil, d.output_tensor.sizes[2:])
    np.testing.assert_array_equal(yi, expected.astype(itype.numpy))


@pytest.mark.parametrize("device, dtype", every_type_on_each_device(
    [np.float16, np.float64, np.int8, np.uint8, np.int32, np.uint64],
    {np.float16, np.int8}))
def test_indices_brute_force_every_type(device, dtype):
    x = _ties((2, 3, 6, 7), dtype, seed=1)
    d = _desc(x, (3, 2), (2, 1), (1, 1), (0, 1), (1, 2), indices=U64)
    y, yi = dml.compile_operator(d, device)(x)
    out = d.output_tensor.sizes[2:]
    assert_exact(y, brute(x, (3, 2), (2, 1), (1, 1), (1, 2), out))
    np.testing.assert_array_equal(yi, brute_indices(x, (3, 2), (2, 1), (1, 1), (1, 2), out)
                                  .astype(np.uint64))


def test_indices_against_pytorch(device):
    """PyTorch numbers a maximum within its (n, c) plane: the plane's offset added, the same."""
    torch = pytest.importorskip("torch", reason="PyTorch is optional: not installed")
    x = random_array((2, 4, 11, 9), np.float32)
    y, yi = dml.max_pooling(x, (3, 2), (2, 2), (1, 0), (1, 0), (1, 2), return_indices=True,
                            device=device)
    ref, ref_i = torch.nn.functional.max_pool2d(torch.from_numpy(x), (3, 2), (2, 2), (1, 0),
                                                (1, 2), return_indices=True)
    plane = np.arange(8).reshape(2, 4, 1, 1) * (11 * 9)
    assert_exact(y, ref.numpy())
    np.testing.assert_array_equal(yi, (ref_i.numpy() + plane).astype(np.uint64))


def test_inferred_indices_first_nan_stays(device):
    """INFERRED: a NaN wins against numbers (its value is NaN) and the first NaN of a window
    keeps the position; a window of equal numbers points at its first."""
    x = np.zeros((1, 1, 2, 4), np.float32)
    x[0, 0, 0, 1] = x[0, 0, 1, 0] = np.nan
    y, yi = dml.max_pooling(x, (2, 2), 2, return_indices=True, device=device)
    assert np.isnan(y[0, 0, 0, 0]) and yi[0, 0, 0, 0] == 1
    assert y[0, 0, 0, 1] == 0 and yi[0, 0, 0, 1] == 2


@pytest.mark.parametrize("itype", [U32, U64], ids=["uint32", "uint64"])
def test_inferred_an_all_padding_window_has_no_position(device, itype):
    """INFERRED: a window wholly in the padding (ceil mode) points nowhere: the index type's
    largest value (-1 as ONNX's signed index); a window of the integer type's least values
    still points at its first tap (no comparison is won there)."""
    x = np.full((1, 1, 3), -2**15, np.int16)
    d = _desc(x, (1,), (2,), (0,), (2,), (1,), out=(3,), indices=itype)
    y, yi = dml.compile_operator(d, device)(x)
    assert yi[0, 0, 2] == np.iinfo(itype.numpy).max and yi[0, 0, 0] == 0 and yi[0, 0, 1] == 2
    assert y[0, 0, 2] == -2**15


def test_indices_out_pairs_are_written_in_place_or_refused_unwritten(device):
    """``out=`` takes one array per output; one overlapping the input or the other output is
    refused before anything is written."""
    x = random_array((1, 2, 5, 6), np.float32)
    d = _desc(x, (2, 2), (2, 2), (0, 0), (0, 0), (1, 1), indices=U32)
    op = dml.compile_operator(d, device)
    ref = op(x)
    y, yi = np.empty(ref[0].shape, np.float32), np.empty(ref[1].shape, np.uint32)
    got = op(x, out=(y, yi))
    assert got[0] is y and got[1] is yi
    assert_exact(y, ref[0]) and np.testing.assert_array_equal(yi, ref[1])
    y2, yi_missing = op(x, out=[None, yi])  # None: made here
    assert_exact(y2, ref[0])
    shared = np.full(ref[0].size, 7, np.float32)  # both outputs over one buffer
    with pytest.raises(dml.ValidationError, match=r"out\[1\]: an array overlapping out\[0\]"):
        op(x, out=(shared.reshape(ref[0].shape), shared.view(np.uint32).reshape(ref[1].shape)))
    assert (shared == 7).all()
    x_as_out = x.reshape(-1)[:ref[0].size].view(np.uint32).reshape(ref[1].shape)
    before = x.copy()
    with pytest.raises(dml.ValidationError, match=r"out\[1\]: an array overlapping input 0"):
        op(x, out=(np.empty_like(ref[0]), x_as_out))
    assert_exact(x, before)
    with pytest.raises(dml.ValidationError, match="expected None or a sequence of 2 arrays"):
        op(x, out=y)


def test_indices_in_a_graph_as_output_and_intermediate(device):
    """A graph reads output 1 of a node: the indices as a graph output and through a Tile (its
    own buffer), the values through a padding, against the operator alone and numpy.tile."""
    from dml_numba.graph import (
        GraphDesc,
        InputGraphEdgeDesc,
        IntermediateGraphEdgeDesc,
        OperatorGraphNodeDesc,
        OutputGraphEdgeDesc,
    )

    x = _ties((1, 2, 6, 6), np.float32, seed=2)
    d = _desc(x, (2, 2), (2, 2), (1, 1), (1, 1), (1, 1), indices=U64)
    y, yi = dml.compile_operator(d, "numpy")(x)
    tile = dml.functional.tile_desc(yi, (1, 2, 1, 1))
    pad = dml.functional.padding_desc(y, (0, 0, 1, 0), (0, 0, 0, 1), value=-1.0)
    g = GraphDesc(1, 3, (OperatorGraphNodeDesc(d, "pool"), OperatorGraphNodeDesc(tile),
                         OperatorGraphNodeDesc(pad)),
                  (InputGraphEdgeDesc(0, 0, 0),),
                  (OutputGraphEdgeDesc(0, 1, 0), OutputGraphEdgeDesc(1, 0, 1),
                   OutputGraphEdgeDesc(2, 0, 2)),
                  (IntermediateGraphEdgeDesc(0, 1, 1, 0), IntermediateGraphEdgeDesc(0, 0, 2, 0)))
    cg = dml.compile_graph(g, device)
    got = cg(x)
    np.testing.assert_array_equal(got[0], yi)
    np.testing.assert_array_equal(got[1], np.tile(yi, (1, 2, 1, 1)))
    assert_exact(got[2], np.pad(y, ((0, 0), (0, 0), (1, 0), (0, 1)), constant_values=-1))
    assert "buffer 0 1" not in cg.plan  # output 1 is graph output 0: read from there
    g2 = GraphDesc(1, 2, g.nodes, g.input_edges,  # output 1 read by the Tile alone: a buffer
                   (OutputGraphEdgeDesc(1, 0, 0), OutputGraphEdgeDesc(2, 0, 1)),
                   g.intermediate_edges)
    cg2 = dml.compile_graph(g2, device)
    tiled, padded = cg2(x)
    np.testing.assert_array_equal(tiled, np.tile(yi, (1, 2, 1, 1)))
    assert_exact(padded, got[2])
    assert "-> buffer 0, buffer 0 1" in cg2.plan and (0, 1) in cg2.buffers()


def test_indices_of_torch_tensors_are_tensors_and_have_no_gradient():
    torch = pytest.importorskip("torch", reason="PyTorch is optional: not installed")
    x = torch.from_numpy(random_array((1, 2, 4, 4), np.float32))
    y, yi = dml.max_pooling(x, (2, 2), 2, return_indices=True)
    assert isinstance(y, torch.Tensor) and isinstance(yi, torch.Tensor)
    ref = dml.max_pooling(x.numpy(), (2, 2), 2, return_indices=True, device="numpy")
    np.testing.assert_array_equal(yi.numpy(), ref[1])
    with pytest.raises(dml.ValidationError, match="requires grad is invalid with several outputs"):
        dml.max_pooling(x.clone().requires_grad_(), (2, 2), 2, return_indices=True)
    with pytest.raises(dml.ValidationError, match="return_indices: 2 is invalid; expected a bool"):
        dml.max_pooling(x, (2, 2), 2, return_indices=2)
