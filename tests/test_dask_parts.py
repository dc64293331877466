"""dml_numba.dask's own corners, on the synchronous scheduler and (but for the shared cases,
which run on theirs) the vectorised device: what a lazy result advertises (chunks, names)
against what its blocks compute, operands given as Dask arrays, types other than float32,
defaults, the device passed through, and the refusals."""
import sys

import dask
import dask.array as da
import numpy as np
import pytest

import dml_numba as dml
import dml_numba.dask as dd
from tests.test_dask import BLOCKWISE, CASES, DASK_GRAPHS, B, W, X


def _blocks_match(y):
    """Every block computes to the shape its chunks advertise (one pass over the graph)."""
    delayed = y.to_delayed()
    blocks = dask.compute(*delayed.ravel(), scheduler="sync")
    for index, block in zip(np.ndindex(*delayed.shape), blocks):
        assert block.shape == tuple(c[i] for c, i in zip(y.chunks, index)), index


@pytest.mark.parametrize("name,lazy,eager,exact", [
    pytest.param(*c, id=c[0], marks=pytest.mark.slow if c[0] in BLOCKWISE else ()) for c in CASES])
def test_every_block_is_the_shape_its_chunks_say(name, lazy, eager, exact):
    _blocks_match(lazy(da.from_array(X, chunks=(1, 2, 4, 3))))


@pytest.mark.parametrize("name", list(DASK_GRAPHS))
def test_every_graph_block_is_the_shape_its_chunks_say(name):
    g, x, params, _ = DASK_GRAPHS[name]
    _blocks_match(dd.graph(g, da.from_array(x, chunks=(1, 1, 3, 4)), *params, device="numpy"))


def test_the_names_say_the_operator_and_cover_every_operand():
    x = da.from_array(X, chunks=(1, 3, 4, 4))
    other = da.from_array(X + 1, chunks=(1, 3, 4, 4))  # same shape and chunks, other values
    rechunked = da.from_array(X, chunks=(1, 3, 5, 5))
    calls = {
        "padding": lambda a: dd.padding(a, (0, 0, 1, 1), (0, 0, 1, 1), device="numpy"),
        "tile": lambda a: dd.tile(a, (1, 1, 2, 1), device="numpy"),
        "slice": lambda a: dd.slice1(a, (0, 0, 1, 1), (2, 3, 5, 5), device="numpy"),
        "lp_pooling": lambda a: dd.lp_pooling(a, (2, 2), device="numpy"),
        "convolution": lambda a: dd.convolution(a, W, device="numpy"),
    }
    for op, call in calls.items():
        y = call(x)
        assert y.name.startswith(f"dml-{op}-"), y.name
        names = {y.name, call(other).name, call(rechunked).name}
        assert len(names) == 3 and call(x).name == y.name  # deterministic
    g, gx, params, _ = DASK_GRAPHS["pipeline"]
    base = da.from_array(gx, chunks=(1, 2, 4, 5))
    y = dd.graph(g, base, *params, device="numpy")
    assert y.name.startswith("dml-graph-")
    variants = [dd.graph(g, da.from_array(gx + 1, chunks=(1, 2, 4, 5)), *params, device="numpy"),
                dd.graph(g, base, *[2 * p for p in params], device="numpy"),
                dd.graph(g, base, *params, device="cpu"),
                dd.graph(g, base, *params, device="numpy", chunks=(1, 2, 3, 3))]
    assert len({y.name} | {v.name for v in variants}) == 5
    other_graph = DASK_GRAPHS["chain"]
    assert dd.graph(other_graph[0], da.from_array(other_graph[1], chunks=(1, 2, 4, 5)),
                    device="numpy").name != y.name


def test_operands_given_as_dask_arrays_and_every_bias_shape():
    x = da.from_array(X, chunks=(1, 2, 4, 3))
    ref = dml.convolution(X, W, B, start_padding=(1, 0), end_padding=(1, 1), device="numpy")
    for w, b in ((da.from_array(W), da.from_array(B)), (W, B.reshape(1, 4, 1, 1)),
                 (da.from_array(W), da.from_array(B.reshape(1, 4, 1, 1)))):
        y = dd.convolution(x, w, b, start_padding=(1, 0), end_padding=(1, 1), device="numpy")
        np.testing.assert_allclose(y.compute(scheduler="sync"), ref, rtol=1e-5, atol=1e-5)
    g, gx, params, _ = DASK_GRAPHS["pipeline"]
    ref = dml.compile_graph(g, "numpy")(gx, *params)
    lazy = [da.from_array(p) for p in params]
    got = dd.graph(g, da.from_array(gx, chunks=(1, 2, 4, 5)), *lazy, device="numpy")
    np.testing.assert_allclose(got.compute(scheduler="sync"), ref, rtol=1e-5, atol=1e-5)


def test_a_graph_bias_given_as_the_node_binds_it_or_flat_whichever_input_it_is():
    """A bias as (C,), as (1, C, 1, 1) or as a Dask array, bound as graph input 2 after the
    filter, and (flat) as input 1 before it."""
    from tests.test_graph import IN, OUT, N, conv, rand

    c = conv((2, 4, 13, 15), (4, 4, 3, 3), pads=(1, 1), bias=True)
    x, w, b = rand((2, 4, 13, 15), seed=3), rand((4, 4, 3, 3), seed=4), rand((4,), seed=5)
    ref = dml.convolution(x, w, b, start_padding=(1, 1), end_padding=(1, 1), device="numpy")
    filter_first = dml.GraphDesc(3, 1, (N(c),), (IN(0, 0, 0), IN(1, 0, 1), IN(2, 0, 2)),
                                 (OUT(0, 0, 0),))
    bias_first = dml.GraphDesc(3, 1, (N(c),), (IN(0, 0, 0), IN(1, 0, 2), IN(2, 0, 1)),
                               (OUT(0, 0, 0),))
    calls = [(filter_first, (w, bias)) for bias in (b, b.reshape(1, 4, 1, 1), da.from_array(b))]
    for g, params in calls + [(bias_first, (b, w))]:
        got = dd.graph(g, da.from_array(x, chunks=(1, 2, 5, 6)), *params, device="numpy")
        np.testing.assert_allclose(got.compute(scheduler="sync"), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float16, np.int32, np.uint8])
def test_data_movement_keeps_the_input_type(dtype):
    x = (np.arange(2 * 3 * 7 * 5) % 200).astype(dtype).reshape(2, 3, 7, 5)
    lazy = da.from_array(x, chunks=(1, 2, 3, 2))
    value = 0.1 if dtype == np.float16 else 7
    for got, ref in (
            (dd.padding(lazy, (0, 0, 2, 1), (0, 1, 0, 3), "constant", value, device="numpy"),
             dml.padding(x, (0, 0, 2, 1), (0, 1, 0, 3), "constant", value, device="numpy")),
            (dd.padding(lazy, (0, 0, 4, 2), (0, 0, 1, 3), "reflection", device="numpy"),
             dml.padding(x, (0, 0, 4, 2), (0, 0, 1, 3), "reflection", device="numpy")),
            (dd.tile(lazy, (1, 2, 1, 3), device="numpy"),
             dml.tile(x, (1, 2, 1, 3), device="numpy")),
            (dd.slice1(lazy, (0, 1, 0, 0), (2, 2, 7, 5), (1, -1, -2, 2), device="numpy"),
             dml.slice1(x, (0, 1, 0, 0), (2, 2, 7, 5), (1, -1, -2, 2), device="numpy"))):
        assert got.dtype == ref.dtype == dtype
        out = got.compute(scheduler="sync")
        assert out.dtype == dtype
        np.testing.assert_array_equal(out, ref)


def test_lp_pooling_defaults_and_the_device_passed_through():
    from dml_numba._cache import cache

    x = da.from_array(X, chunks=(1, 3, 4, 4))
    ref = dml.lp_pooling(X, (2, 2), p=2, device="numpy")
    np.testing.assert_allclose(dd.lp_pooling(x, (2, 2), device="numpy").compute(
        scheduler="sync"), ref, rtol=1e-5)
    for device in ("numpy", "cpu"):
        before = set(cache._table)
        dd.lp_pooling(x, (3, 2), (2, 1), (1, 0), (0, 1), device=device).compute(scheduler="sync")
        new = [k for k in set(cache._table) - before
               if isinstance(k, tuple) and k[:2] == ("functional", "lp_pooling")]
        assert new and all(k[-1] == device for k in new), new


def test_a_lazy_result_depends_on_its_input_alone():
    """The output layer's one dependency is the input's (a graph tool walking dependencies, or
    Dask's optimiser culling, finds the input through it)."""
    x = da.from_array(X, chunks=(1, 3, 4, 4))
    for y in (dd.padding(x, (0, 0, 1, 1), (0, 0, 1, 1), device="numpy"),
              dd.convolution(x, W, device="numpy")):
        layers = y.__dask_graph__().dependencies
        assert layers[y.name] == {x.name}


def test_refusals_name_the_function_and_the_field():
    ragged = [[1.0, 2.0], [3.0]]  # no array: NumPy refuses it
    g = DASK_GRAPHS["pipeline"][0]
    calls = {
        "padding": lambda: dd.padding(ragged, (0,), (0,)),
        "tile": lambda: dd.tile(ragged, (1,)),
        "slice1": lambda: dd.slice1(ragged, (0,), (1,)),
        "lp_pooling": lambda: dd.lp_pooling(ragged, (1,)),
        "convolution": lambda: dd.convolution(ragged, W),
        "dml_numba.dask.graph": lambda: dd.graph(g, ragged),
    }
    for owner, call in calls.items():
        with pytest.raises(dml.ValidationError) as err:
            call()
        assert str(err.value).startswith(
            f"{owner}.x: list is invalid; expected a dask.array.Array or an array ("), err.value
    with pytest.raises(dml.ValidationError) as err:
        dd.graph("not a graph", da.from_array(X))
    assert str(err.value) == ("dml_numba.dask.graph.graph: str is invalid; expected a "
                              "GraphDesc")


def test_without_dask_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "dask.array", None)  # import dask.array fails
    with pytest.raises(ImportError) as err:
        dd.padding(X, (0, 0, 1, 1), (0, 0, 1, 1))
    assert str(err.value) == "dml_numba.dask needs Dask: pip install 'dml_numba[dask]'"


def test_two_results_of_one_input_computed_together():
    """Two windows over one input, and a window over a data-movement result, in one compute."""
    x = da.from_array(X, chunks=(1, 2, 4, 3))
    padded = dd.padding(x, (0, 0, 1, 1), (0, 0, 1, 1), "edge", device="numpy")
    got = dask.compute(dd.lp_pooling(x, (2, 2), p=1, device="numpy"),
                       dd.lp_pooling(padded, (2, 2), p=1, device="numpy"), scheduler="sync")
    ref = dml.padding(X, (0, 0, 1, 1), (0, 0, 1, 1), "edge", device="numpy")
    np.testing.assert_allclose(got[0], dml.lp_pooling(X, (2, 2), p=1, device="numpy"),
                               rtol=1e-5)
    np.testing.assert_allclose(got[1], dml.lp_pooling(ref, (2, 2), p=1, device="numpy"),
                               rtol=1e-5)


def test_the_defaults_and_every_convolution_field_reach_the_blocks():
    """A padding's default constant (zero); a grouped convolution in CONVOLUTION mode (the
    flipped filter, the groups): every field of the descriptor reaches each block."""
    x = da.from_array(X, chunks=(1, 2, 4, 3))
    np.testing.assert_array_equal(
        dd.padding(x, (0, 0, 2, 1), (0, 0, 1, 2), device="numpy").compute(scheduler="sync"),
        np.pad(X, ((0, 0), (0, 0), (2, 1), (1, 2))))
    wg = np.random.default_rng(5).standard_normal((6, 1, 3, 2)).astype(np.float32)
    kw = dict(group_count=3, mode="CONVOLUTION", strides=(1, 2), start_padding=(1, 0),
              end_padding=(0, 1))
    got = dd.convolution(x, wg, **kw, device="numpy").compute(scheduler="sync")
    ref = dml.convolution(X, wg, **kw, device="numpy")
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    flipped = dml.convolution(X, wg[:, :, ::-1, ::-1].copy(), **{**kw, "mode": "CROSS_CORRELATION"},
                              device="numpy")
    np.testing.assert_allclose(got, flipped, rtol=1e-5, atol=1e-5)


def test_window_outputs_are_chunked_from_their_own_axis():
    """Each spatial axis's output chunks follow that axis's input chunks (scaled by the
    stride), not another axis's."""
    x = da.from_array(X, chunks=(1, 2, 4, 3))  # (2, 3, 11, 7)
    assert dd.lp_pooling(x, (2, 2), device="numpy").chunks == ((1, 1), (3,), (4, 4, 2), (3, 3))
    assert dd.convolution(x, W, device="numpy").chunks == ((1, 1), (4,), (4, 4, 1), (3, 3))


def test_a_graph_name_covers_the_graph_and_its_layer_depends_on_the_input():
    from tests.test_graph import IN, MID, OUT, N, conv, pad, rand

    x = rand((2, 4, 13, 15), seed=3)
    w = rand((4, 4, 3, 3), seed=4)

    def graph(mode):
        p = pad((2, 4, 13, 15), (0, 0, 1, 1), (0, 0, 1, 1), mode)
        c = conv((2, 4, 15, 17), (4, 4, 3, 3))
        return dml.GraphDesc(2, 1, (N(p), N(c)), (IN(0, 0, 0), IN(1, 1, 1)), (OUT(1, 0, 0),),
                             (MID(0, 0, 1, 0),))

    lazy = da.from_array(x, chunks=(1, 2, 5, 6))
    a = dd.graph(graph(dml.PaddingMode.REFLECTION), lazy, w, device="numpy")
    b = dd.graph(graph(dml.PaddingMode.EDGE), lazy, w, device="numpy")
    assert a.name != b.name
    assert a.__dask_graph__().dependencies[a.name] == {lazy.name}


def test_in_memory_inputs_are_wrapped():
    """An in-memory array (not a Dask one) is taken as one chunk."""
    y = dd.padding(X, (0, 0, 1, 1), (0, 0, 1, 1), "edge", device="numpy")
    assert isinstance(y, da.Array) and y.numblocks == (1, 1, 1, 1)
    np.testing.assert_array_equal(y.compute(scheduler="sync"),
                                  np.pad(X, ((0, 0), (0, 0), (1, 1), (1, 1)), mode="edge"))


def _scaled(size, like, num, den):
    """The documented output chunking: the input's chunk size times the axis's size ratio
    (rounded up), regular, one chunk where the input has one."""
    if len(like) == 1:
        return (size,)
    step = max(1, -(-like[0] * num // den))
    return (step,) * (size // step) + ((size % step,) if size % step else ())


def test_output_chunks_are_the_input_chunk_scaled_by_the_size_ratio():
    x = da.from_array(X, chunks=(1, 2, 4, 3))  # (2, 3, 11, 7)
    # a slice: 11 -> 5 and 7 -> 3 (strided), 3 -> 2 channels
    sliced = dd.slice1(x, (0, 1, 1, 0), (2, 2, 9, 6), (1, 1, 2, 2), device="numpy")
    assert sliced.shape == (2, 2, 5, 3)
    assert sliced.chunks == ((1, 1), _scaled(2, (2, 1), 2, 3), _scaled(5, (4, 4, 3), 5, 11),
                             _scaled(3, (3, 3, 1), 3, 7))
    _blocks_match(sliced)
    # a window at stride 2: output per input element one half
    y = dd.lp_pooling(x, (3, 3), (2, 2), device="numpy")
    assert y.chunks[2:] == (_scaled(5, (4, 4, 3), 1, 2), _scaled(3, (3, 3, 1), 1, 2))
    # transposed at stride 2: two outputs per input element
    y = dd.convolution(x, np.ones((3, 2, 3, 3), np.float32), strides=(2, 2), direction=1,
                       device="numpy")
    assert y.chunks[2:] == (_scaled(23, (4, 4, 3), 2, 1), _scaled(15, (3, 3, 1), 2, 1))
    # a graph that changes the sizes: scaled by output over input size
    g, gx, params, _ = DASK_GRAPHS["pipeline"]  # (2, 4, 13, 15) -> (2, 4, 4, 8)
    y = dd.graph(g, da.from_array(gx, chunks=(1, 2, 5, 6)), *params, device="numpy")
    assert y.chunks[2:] == (_scaled(y.shape[2], (5, 5, 3), y.shape[2], 13),
                            _scaled(y.shape[3], (6, 6, 3), y.shape[3], 15))


def _same_shape_pairs(x):
    """Pairs of data-movement results over ``x`` with the same output shape and chunks that
    differ in their operator or its parameters."""
    return {
        "padding modes": (dd.padding(x, (0, 0, 1, 1), (0, 0, 1, 1), "reflection"),
                          dd.padding(x, (0, 0, 1, 1), (0, 0, 1, 1), "edge"),
                          lambda a: np.pad(a, [(0, 0), (0, 0), (1, 1), (1, 1)], "reflect"),
                          lambda a: np.pad(a, [(0, 0), (0, 0), (1, 1), (1, 1)], "edge")),
        "padding values": (dd.padding(x, (0, 0, 1, 0), (0, 0, 0, 1), "constant", 1.0),
                           dd.padding(x, (0, 0, 1, 0), (0, 0, 0, 1), "constant", 2.0),
                           lambda a: np.pad(a, [(0, 0), (0, 0), (1, 0), (0, 1)],
                                            constant_values=1.0),
                           lambda a: np.pad(a, [(0, 0), (0, 0), (1, 0), (0, 1)],
                                            constant_values=2.0)),
        "slice and its reverse": (dd.slice1(x, (0, 0, 0, 0), X.shape, (1, 1, 1, 1)),
                                  dd.slice1(x, (0, 0, 0, 0), X.shape, (1, 1, -1, 1)),
                                  lambda a: a, lambda a: a[:, :, ::-1]),
        "tile and padding": (dd.tile(x, (1, 1, 1, 2)),
                             dd.padding(x, (0, 0, 0, 2), (0, 0, 0, X.shape[3] - 2), "wrap"),
                             lambda a: np.tile(a, (1, 1, 1, 2)),
                             lambda a: np.pad(a, [(0, 0), (0, 0), (0, 0),
                                                  (2, X.shape[3] - 2)], "wrap")),
    }


@pytest.mark.parametrize("pair", ["padding modes", "padding values", "slice and its reverse",
                                  "tile and padding"])
def test_two_data_movements_of_one_input_computed_together_keep_their_own_keys(pair):
    """Same input, same output shape and chunks, other operator or parameters: distinct graph
    keys, so computing both together gives each its own result (a name that left the
    descriptor out would merge them)."""
    x = da.from_array(X, chunks=(1, 2, 4, 3))
    a, b, oracle_a, oracle_b = _same_shape_pairs(x)[pair]
    assert a.shape == b.shape and a.chunks == b.chunks and a.name != b.name
    got_a, got_b = dask.compute(a, b, scheduler="sync")
    np.testing.assert_array_equal(got_a, oracle_a(X))
    np.testing.assert_array_equal(got_b, oracle_b(X))


def test_output_blocks_are_bounded_so_a_slice_of_a_huge_tile_computes_its_blocks_only():
    """A one-chunk input tiled 2**20 x 2**20 (4 TiB of float32): blocks no larger than Dask's
    array.chunk-size, the graph built in a second, and a corner computed from its one block
    (it used to be one block of the whole output: MemoryError). The same with a small limit,
    every block under it."""
    y = dd.tile(da.ones((1, 1, 1, 1), dtype=np.float32), (1, 1, 2 ** 20, 2 ** 20))
    limit = dask.utils.parse_bytes(dask.config.get("array.chunk-size"))
    assert np.prod(y.chunksize) * 4 <= limit and y.numblocks[2] > 1
    np.testing.assert_array_equal(y[0, 0, :2, :2].compute(), np.ones((2, 2), np.float32))
    with dask.config.set({"array.chunk-size": "64KiB"}):
        x = np.arange(12, dtype=np.float64).reshape(1, 1, 3, 4)
        z = dd.padding(da.from_array(x), (0, 0, 40, 50), (0, 0, 60, 70), "wrap")
        assert np.prod([max(c) for c in z.chunks]) * 8 <= 64 * 1024
        np.testing.assert_array_equal(z.compute(), np.pad(x, [(0, 0), (0, 0), (40, 60),
                                                              (50, 70)], "wrap"))
