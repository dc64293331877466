"""dml_numba.dask: every operator on Dask arrays equals the in-memory functional result (bit for
bit for data movement, within the tolerance table for arithmetic) on several chunkings, chunks
smaller than the halo included, on the threaded and process schedulers and on a distributed
LocalCluster of two worker processes."""
import os

import dask
import dask.array as da
import numpy as np
import pytest

import dml_numba as dml
import dml_numba.dask as dd
from tests.helpers import assert_close, assert_exact

X = np.random.default_rng(0).standard_normal((2, 3, 11, 7)).astype(np.float32)
W = np.random.default_rng(1).standard_normal((4, 3, 3, 2)).astype(np.float32)
WT = np.random.default_rng(2).standard_normal((3, 2, 3, 3)).astype(np.float32)
B = np.array([0.5, -1.0, 0.25, 2.0], np.float32)
M2 = np.random.default_rng(3).standard_normal((2, 3, 7, 5)).astype(np.float32)  # a GEMM's B
M2T = np.random.default_rng(4).standard_normal((2, 3, 5, 11)).astype(np.float32)  # transposed
RELU = dml.ActivationReluOperatorDesc()
#: the device the cases run on, in blocks and in memory (the mutation runs of the Dask layer set
#: "numpy": the layer's arithmetic of blocks and halos is the same, and nothing is compiled per
#: mutant)
DEVICE = os.environ.get("DML_NUMBA_TEST_DASK_DEVICE", "cpu")
CHUNKINGS = {"one chunk": X.shape, "ragged": (1, 2, 4, 3), "smaller than the halo": (1, 1, 1, 1)}

# (name, lazy call, in-memory call, exact?)
CASES = [
    ("reflection wider than the array",
     lambda x: dd.padding(x, (0, 1, 13, 9), (1, 0, 2, 20), "reflection", device=DEVICE),
     lambda x: dml.padding(x, (0, 1, 13, 9), (1, 0, 2, 20), "reflection", device=DEVICE), True),
    ("symmetric", lambda x: dd.padding(x, (0, 0, 5, 3), (0, 0, 12, 1), "symmetric", device=DEVICE),
     lambda x: dml.padding(x, (0, 0, 5, 3), (0, 0, 12, 1), "symmetric", device=DEVICE), True),
    ("wrap", lambda x: dd.padding(x, (1, 0, 25, 0), (0, 2, 0, 8), "wrap", device=DEVICE),
     lambda x: dml.padding(x, (1, 0, 25, 0), (0, 2, 0, 8), "wrap", device=DEVICE), True),
    ("edge", lambda x: dd.padding(x, (0, 0, 4, 4), (0, 0, 4, 4), "edge", device=DEVICE),
     lambda x: dml.padding(x, (0, 0, 4, 4), (0, 0, 4, 4), "edge", device=DEVICE), True),
    ("constant -0.0",
     lambda x: dd.padding(x, (1, 0, 2, 0), (0, 1, 0, 3), "constant", -0.0, device=DEVICE),
     lambda x: dml.padding(x, (1, 0, 2, 0), (0, 1, 0, 3), "constant", -0.0, device=DEVICE), True),
    ("tile", lambda x: dd.tile(x, (2, 1, 3, 2), device=DEVICE),
     lambda x: dml.tile(x, (2, 1, 3, 2), device=DEVICE), True),
    ("slice negative strides",
     lambda x: dd.slice1(x, (0, 1, 2, 1), (2, 2, 9, 6), (1, -1, -2, 3), device=DEVICE),
     lambda x: dml.slice1(x, (0, 1, 2, 1), (2, 2, 9, 6), (1, -1, -2, 3), device=DEVICE), True),
    ("lp pooling p=3 dilated",
     lambda x: dd.lp_pooling(x, (3, 2), (2, 1), (1, 0), (1, 1), (1, 2), p=3, device=DEVICE),
     lambda x: dml.lp_pooling(x, (3, 2), (2, 1), (1, 0), (1, 1), (1, 2), p=3, device=DEVICE),
     False),
    ("convolution strided, dilated, bias, relu",
     lambda x: dd.convolution(x, W, B, strides=(2, 1), dilations=(1, 2), start_padding=(1, 0),
                              end_padding=(1, 1), fused_activation=dml.ActivationReluOperatorDesc(),
                              device=DEVICE),
     lambda x: dml.convolution(x, W, B, strides=(2, 1), dilations=(1, 2), start_padding=(1, 0),
                               end_padding=(1, 1),
                               fused_activation=dml.ActivationReluOperatorDesc(), device=DEVICE),
     False),
    ("convolution padding wider than the kernel (blocks of padding only)",
     lambda x: dd.convolution(x, W, B, start_padding=(4, 3), end_padding=(5, 2),
                              fused_activation=dml.ActivationReluOperatorDesc(), device=DEVICE),
     lambda x: dml.convolution(x, W, B, start_padding=(4, 3), end_padding=(5, 2),
                               fused_activation=dml.ActivationReluOperatorDesc(), device=DEVICE),
     False),
    ("lp pooling padding wider than the window",
     lambda x: dd.lp_pooling(x, (2, 2), (1, 2), (3, 3), (4, 2), p=2, device=DEVICE),
     lambda x: dml.lp_pooling(x, (2, 2), (1, 2), (3, 3), (4, 2), p=2, device=DEVICE), False),
    ("transposed stride above the kernel, dilated, output padding",
     lambda x: dd.convolution(x, WT, B[:2], strides=(3, 2), dilations=(1, 2),
                              start_padding=(0, 2), end_padding=(1, 0), output_padding=(2, 1),
                              direction=1, device=DEVICE),
     lambda x: dml.convolution(x, WT, B[:2], strides=(3, 2), dilations=(1, 2),
                               start_padding=(0, 2), end_padding=(1, 0), output_padding=(2, 1),
                               direction=1, device=DEVICE), False),
    ("transposed stride 8 with a 1x1 kernel (blocks no input reaches)",
     lambda x: dd.convolution(x, WT[:, :, :1, :1], strides=(8, 1), start_padding=(7, 0),
                              direction=1, device=DEVICE),
     lambda x: dml.convolution(x, WT[:, :, :1, :1], strides=(8, 1), start_padding=(7, 0),
                               direction=1, device=DEVICE), False),
    ("max pooling padded, dilated, ceil-size windows",
     lambda x: dd.max_pooling(x, (3, 2), (2, 1), (1, 0), (2, 1), (1, 2), device=DEVICE),
     lambda x: dml.max_pooling(x, (3, 2), (2, 1), (1, 0), (2, 1), (1, 2), device=DEVICE), True),
    ("max pooling padding wider than the window",
     lambda x: dd.max_pooling(x, (2, 2), (1, 2), (3, 3), (4, 2), device=DEVICE),
     lambda x: dml.max_pooling(x, (2, 2), (1, 2), (3, 3), (4, 2), device=DEVICE), True),
    ("average pooling, padding counted",
     lambda x: dd.average_pooling(x, (3, 3), (2, 1), 1, 1, include_padding=True, device=DEVICE),
     lambda x: dml.average_pooling(x, (3, 3), (2, 1), 1, 1, include_padding=True,
                                   device=DEVICE), False),
    ("average pooling, padding not counted, wider than the window",
     lambda x: dd.average_pooling(x, (2, 2), (1, 2), (3, 3), (4, 2), device=DEVICE),
     lambda x: dml.average_pooling(x, (2, 2), (1, 2), (3, 3), (4, 2), device=DEVICE), False),
    ("element-wise add of a broadcast bias, relu",
     lambda x: dd.element_wise_add(x, B[:3, None, None], RELU, device=DEVICE),
     lambda x: dml.element_wise_add(x, B[:3, None, None], RELU, device=DEVICE), False),
    ("element-wise multiply of two chunked arrays",
     lambda x: dd.element_wise_multiply(x, da.from_array(X[:, :, ::-1], chunks=(1, 3, 5, 2)),
                                        device=DEVICE),
     lambda x: dml.element_wise_multiply(x, np.ascontiguousarray(X[:, :, ::-1]), device=DEVICE),
     False),
    ("batch normalization, relu",
     lambda x: dd.batch_normalization(x, B[:3], B[1:] ** 2, B[:3], B[1:], 0.1, RELU,
                                      device=DEVICE),
     lambda x: dml.batch_normalization(x, B[:3], B[1:] ** 2, B[:3], B[1:], 0.1, RELU,
                                       device=DEVICE), False),
    ("activation by its name",
     lambda x: dd.activation(x, "elu", [0.5], device=DEVICE),
     lambda x: np.where(X >= 0, X, 0.5 * np.expm1(X.astype(np.float64))).astype(np.float32),
     False),
    ("gemm with c", lambda x: dd.gemm(x, M2, B[:1], False, False, 0.5, 2.0, device=DEVICE),
     lambda x: dml.gemm(x, M2, B[:1], False, False, 0.5, 2.0, device=DEVICE), False),
    ("gemm transposed a and b",
     lambda x: dd.gemm(x, M2T, None, True, True, device=DEVICE),
     lambda x: dml.gemm(x, M2T, None, True, True, device=DEVICE), False),
    ("join along the channels", lambda x: dd.join([x, x[:, :2]], 1, device=DEVICE),
     lambda x: dml.join([x, x[:, :2]], 1, device=DEVICE), True),
    ("transposed convolution",
     lambda x: dd.convolution(x, WT, strides=(2, 2), start_padding=(1, 1), direction=1,
                              device=DEVICE),
     lambda x: dml.convolution(x, WT, strides=(2, 2), start_padding=(1, 1), direction=1,
                               device=DEVICE), False),
]


#: cases computed block by block with no halo (the chunks' arithmetic is Dask's own): one
#: chunking by default, every chunking and scheduler with --runslow
BLOCKWISE = {"element-wise add of a broadcast bias, relu",
             "element-wise multiply of two chunked arrays", "batch normalization, relu",
             "activation by its name",
             "gemm with c", "gemm transposed a and b", "join along the channels"}


def _sampled(chunkings):
    """(case, chunking) parameters: a blockwise case on its first chunking only by default."""
    return [pytest.param(*case, chunking, id=f"{case[0]}-{chunking}",
                         marks=pytest.mark.slow if case[0] in BLOCKWISE and chunking !=
                         chunkings[0] else ()) for case in CASES for chunking in chunkings]


def _check(lazy, eager, exact, chunks, **compute):
    y = lazy(da.from_array(X, chunks=chunks))
    assert isinstance(y, da.Array)
    got, ref = y.compute(**compute), eager(X)
    (assert_exact if exact else lambda a, b: assert_close(a, b, np.float32))(got, ref)


@pytest.mark.parametrize("name,lazy,eager,exact,chunking", _sampled(["ragged", "one chunk",
                                                                     "smaller than the halo"]))
def test_threaded_scheduler(name, lazy, eager, exact, chunking):
    _check(lazy, eager, exact, CHUNKINGS[chunking], scheduler="threads")


@pytest.fixture(scope="module")
def process_pool():
    """Two worker processes for every case (started once: each imports the library and loads
    its kernels, as a real pool's workers do, but not once per case)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield pool


@pytest.mark.parametrize("name,lazy,eager,exact", [
    pytest.param(*c, id=c[0], marks=pytest.mark.slow if c[0] in BLOCKWISE else ()) for c in CASES])
def test_process_scheduler(name, lazy, eager, exact, process_pool):
    _check(lazy, eager, exact, CHUNKINGS["ragged"], scheduler="processes", pool=process_pool)


def test_distributed_local_cluster():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=40) as cluster, Client(cluster) as client:
        for name, lazy, eager, exact in CASES:  # chunk corners: the threaded tests above
            if name not in BLOCKWISE or name == "gemm with c":
                _check(lazy, eager, exact, CHUNKINGS["ragged"])
        g, x, params, _ = DASK_GRAPHS["pipeline"]  # a graph, block by block on the workers
        got = dd.graph(g, da.from_array(x, chunks=(1, 2, 4, 5)), *params).compute()
        assert_close(got, dml.compile_graph(g, "numpy")(x, *params), np.float32)
        assert len(client.scheduler_info()["workers"]) == 2


def test_lazy_until_computed_and_errors_name_the_field():
    x = da.from_array(X, chunks=(1, 3, 4, 4))
    y = dd.padding(x, (0, 0, 3, 3), (0, 0, 3, 3), "reflection")
    assert y.shape == (2, 3, 17, 13) and y.chunks[2] == (4, 4, 4, 4, 1)  # regular
    with pytest.raises(dml.ValidationError, match=r"padding.start_padding: \(1,\) is invalid"):
        dd.padding(x, (1,), (1,))
    with pytest.raises(dml.ValidationError, match=r"tile.repeats\[1\]: 0 is invalid"):
        dd.tile(x, (1, 0, 1, 1))


@pytest.mark.parametrize("device", ["numpy", "cpu"])
def test_blocks_share_few_specialisations_on_the_device_asked_for(device):
    """A convolution over a 4 x 5 grid of spatial chunks (40 blocks with the batch), padded at
    both ends of one axis, runs every block on one kernel (edge blocks padded to the interior's
    shape), on the device passed through, and equals the in-memory result."""
    from dml_numba._cache import cache

    x = np.random.default_rng(3).standard_normal((2, 3, 32, 40)).astype(np.float32)
    before = set(cache._table)
    y = dd.convolution(da.from_array(x, chunks=(1, 3, 8, 8)), W[:, :, :, :1], B,
                       start_padding=(1, 0), end_padding=(1, 0), device=device)
    assert y.numblocks == (2, 1, 4, 5)
    got = y.compute(scheduler="sync")
    new = [k for k in set(cache._table) - before
           if isinstance(k, tuple) and k[:2] == ("functional", "convolution")]
    assert len(new) == 1 and all(k[-1] == device for k in new), new
    assert_close(got, dml.convolution(x, W[:, :, :, :1], B, start_padding=(1, 0),
                                      end_padding=(1, 0), device="numpy"), np.float32)


@pytest.mark.cuda
def test_blocks_run_on_the_cuda_device_when_asked():
    """device="cuda" passes through to every block (Numba's simulator without a GPU): NumPy
    chunks in, NumPy blocks out, equal to the in-memory result."""
    from dml_numba._cache import cache

    assert dml.device_status()["cuda"] == "available", dml.device_status()["cuda"]
    x = X[:1, :, :6, :5]
    before = set(cache._table)
    got = dd.convolution(da.from_array(x, chunks=(1, 3, 3, 3)), W, B, start_padding=(1, 0),
                         end_padding=(1, 1), device="cuda").compute(scheduler="sync")
    new = [k for k in set(cache._table) - before
           if isinstance(k, tuple) and k[:2] == ("functional", "convolution")]
    assert new and all(k[-1] == "cuda" for k in new), new
    assert_close(got, dml.convolution(x, W, B, start_padding=(1, 0), end_padding=(1, 1),
                                      device="numpy"), np.float32)


def test_calls_differing_only_in_their_operands_are_not_merged():
    """Two lazy results computed together stay two: the graph's name covers the filter, the
    bias, the descriptor's parameters and the device, not only the input and the geometry."""
    x = da.from_array(X, chunks=(1, 3, 4, 4))
    convs = [dd.convolution(x, W), dd.convolution(x, 2 * W), dd.convolution(x, W, B),
             dd.convolution(x, W, device="numpy")]
    pools = [dd.lp_pooling(x, (2, 2), p=1), dd.lp_pooling(x, (2, 2), p=2)]
    assert len({y.name for y in convs + pools}) == len(convs + pools)
    got = dask.compute(*convs, *pools, scheduler="sync")
    refs = [dml.convolution(X, W), dml.convolution(X, 2 * W), dml.convolution(X, W, B),
            dml.convolution(X, W, device="numpy"), dml.lp_pooling(X, (2, 2), p=1),
            dml.lp_pooling(X, (2, 2), p=2)]
    for y, ref in zip(got, refs):
        assert_close(y, ref, np.float32)


def _regular(chunks) -> bool:
    """Zarr's rule: every chunk of an axis the same size but the last, which may be smaller."""
    return all(len(set(c[:-1])) <= 1 and c[-1] <= c[0] for c in chunks)


@pytest.mark.parametrize("name,lazy,eager,exact", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("chunking", ["ragged", "smaller than the halo"])
def test_every_result_has_regular_chunks(name, lazy, eager, exact, chunking):
    """Outputs are chunked regularly whatever the padding, tiling, slicing or window, so they
    store to Zarr as they are (and equal blocks share their kernel)."""
    x = da.from_array(X, chunks=(1, 3, 4, 4) if chunking == "ragged" else (1, 1, 2, 2))
    assert _regular(lazy(x).chunks), lazy(x).chunks


def test_the_readme_pipeline_writes_zarr_without_rechunking(tmp_path):
    zarr = pytest.importorskip("zarr")
    x = da.from_array(np.random.default_rng(4).standard_normal((2, 3, 40, 36)).astype(np.float32),
                      chunks=(1, 3, 16, 16))
    y = dd.padding(x, (0, 0, 5, 5), (0, 0, 5, 5), "reflection")
    z = dd.convolution(y, W, B, start_padding=(1, 0), end_padding=(1, 1))
    assert z.chunks[2:] == ((16, 16, 16, 2), (16, 16, 14))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a rechunking warning would fail here
        z.to_zarr(str(tmp_path / "z.zarr"))
    ref = dml.convolution(dml.padding(x.compute(), (0, 0, 5, 5), (0, 0, 5, 5), "reflection"), W,
                          B, start_padding=(1, 0), end_padding=(1, 1))
    assert_close(np.asarray(zarr.open(str(tmp_path / "z.zarr"))[...]), ref, np.float32)


@pytest.mark.parametrize("call", [
    lambda d: dd.padding(da.from_array(X), (0, 0, 1, 1), (0, 0, 1, 1), device=d),
    lambda d: dd.tile(da.from_array(X), (1, 1, 2, 1), device=d),
    lambda d: dd.slice1(da.from_array(X), (0, 0, 0, 0), (1, 1, 2, 2), device=d),
    lambda d: dd.lp_pooling(da.from_array(X), (2, 2), device=d),
    lambda d: dd.convolution(da.from_array(X), W, device=d),
], ids=["padding", "tile", "slice1", "lp_pooling", "convolution"])
def test_the_device_is_checked_when_the_graph_is_built(call):
    with pytest.raises(dml.ValidationError, match="compile_operator.device: 'cpuu' is invalid"):
        call("cpuu")
    with pytest.raises(dml.ValidationError, match="compile_operator.device: None is invalid"):
        call(None)


# -- graphs: one task per output block ----------------------------------------------------------

def _dask_graphs():
    from tests.test_graph import IN, MID, OUT, N, R, conv, pad, pool, rand, slice1, tile

    x = rand((2, 4, 13, 15), seed=7)
    w = rand((4, 1, 3, 3), seed=8)
    p = pad((2, 4, 13, 15), (0, 0, 2, 1), (0, 0, 1, 2), R)
    c = conv((2, 4, 16, 18), (4, 1, 3, 3), groups=4, act=dml.ActivationReluOperatorDesc())
    lp = pool((2, 4, 14, 16), (2, 2), (2, 2))
    s = slice1((2, 4, 7, 8), (0, 0, 0, 0), (2, 4, 7, 8), (1, 1, 2, 1))
    pipeline = dml.GraphDesc(2, 1, (N(p), N(c), N(lp), N(s)), (IN(0, 0, 0), IN(1, 1, 1)),
                             (OUT(3, 0, 0),), (MID(0, 0, 1, 0), MID(1, 0, 2, 0),
                                               MID(2, 0, 3, 0)))
    chain = dml.GraphDesc(1, 1, (N(pad((2, 4, 13, 15), (0, 0, 9, 1), (0, 0, 3, 16),
                                       dml.PaddingMode.SYMMETRIC)),
                                 N(slice1((2, 4, 25, 32), (0, 0, 1, 0), (2, 4, 24, 32),
                                          (1, 1, 3, -2))),
                                 N(tile((2, 4, 8, 16), (1, 1, 2, 1))),
                                 N(pad((2, 4, 16, 16), (0, 0, 4, 0), (0, 0, 0, 5), value=3.0))),
                             (IN(0, 0, 0),), (OUT(3, 0, 0),),
                             (MID(0, 0, 1, 0), MID(1, 0, 2, 0), MID(2, 0, 3, 0)))
    # a node read by two: the padding feeds a convolution and a tile, joined by... a second
    # output is not blockable; the fan-out joins through the padding read twice instead
    zc = conv((2, 4, 13, 15), (4, 4, 3, 3), pads=(1, 1))
    wt = rand((4, 4, 3, 3), seed=9)
    tr = dml.functional.convolution_desc(np.zeros((2, 4, 13, 15), np.float32),
                                         np.zeros((4, 2, 2, 2), np.float32), strides=(2, 2),
                                         direction=dml.ConvolutionDirection.BACKWARD)
    wtr = rand((4, 2, 2, 2), seed=10)
    mixed = dml.GraphDesc(3, 1, (N(zc), N(tr)), (IN(0, 0, 0), IN(1, 0, 1), IN(2, 1, 1)),
                          (OUT(1, 0, 0),), (MID(0, 0, 1, 0),))
    # activations of their own: one after a convolution (fused into it where the plan runs
    # fused), one after an LP pooling (nothing to fuse into)
    za = dml.functional.activation_desc(np.zeros((2, 4, 13, 15), np.float32), "elu", [0.5])
    lpa = pool((2, 4, 13, 15), (2, 2), (2, 2))
    sg = dml.functional.activation_desc(np.zeros((2, 4, 6, 7), np.float32), "sigmoid")
    activations = dml.GraphDesc(2, 1, (N(zc), N(za), N(lpa), N(sg)), (IN(0, 0, 0), IN(1, 0, 1)),
                                (OUT(3, 0, 0),), (MID(0, 0, 1, 0), MID(1, 0, 2, 0),
                                                  MID(2, 0, 3, 0)))
    return {"pipeline": (pipeline, x, (w,), False), "chain": (chain, x, (), True),
            "conv-transposed": (mixed, x, (wt, wtr), False),
            "activations": (activations, x, (wt,), False)}


DASK_GRAPHS = _dask_graphs()


@pytest.mark.parametrize("name", list(DASK_GRAPHS))
@pytest.mark.parametrize("chunks", [(1, 2, 5, 6), (1, 1, 2, 3)])  # ragged; smaller than halos
def test_graph_per_block_equals_the_whole_graph(name, chunks):
    g, x, params, exact = DASK_GRAPHS[name]
    y = dd.graph(g, da.from_array(x, chunks=chunks), *params)
    ref = dml.compile_graph(g, "numpy")(x, *params)
    layer = [k for k in dict(y.dask) if k[0] == y.name]
    assert len(layer) == y.npartitions  # one task per output block
    got = y.compute(scheduler="threads")
    (assert_exact(got, ref) if exact else assert_close(got, ref, np.float32))


def test_graph_errors():
    """(A graph on a LocalCluster: test_distributed_local_cluster.)"""
    g, x, params, _ = DASK_GRAPHS["pipeline"]
    with pytest.raises(dml.ValidationError, match="1 params are invalid; expected 0"):
        dd.graph(DASK_GRAPHS["chain"][0], da.from_array(x), params[0])
    with pytest.raises(dml.ValidationError, match="x: float64"):
        dd.graph(g, da.from_array(x.astype(np.float64)), *params)
    two = dml.GraphDesc(1, 2, g.nodes[:1], (dml.InputGraphEdgeDesc(0, 0, 0),),
                        (dml.OutputGraphEdgeDesc(0, 0, 0), dml.OutputGraphEdgeDesc(0, 0, 1)))
    with pytest.raises(dml.ValidationError, match="output_count 2 is invalid"):
        dd.graph(two, da.from_array(x))


@pytest.mark.parametrize("chunking", ["ragged", "smaller than the halo"])
@pytest.mark.parametrize("args", [((3, 2), (2, 1), (1, 0), (2, 1), (1, 2)),
                                  ((2, 2), (1, 2), (3, 3), (4, 2))],
                         ids=["padded dilated", "padding wider than the window"])
def test_max_pooling_indices_index_the_whole_array(args, chunking):
    """Each block's maxima numbered in the whole input (its region's offset added), ties in
    most windows; a block of padding alone points nowhere; values and indices from one task
    a block."""
    x = np.random.default_rng(5).integers(0, 3, X.shape).astype(np.float32)
    lazy = dd.max_pooling(da.from_array(x, chunks=CHUNKINGS[chunking]), *args,
                          return_indices=True, device=DEVICE)
    values, indices = dask.compute(*lazy, scheduler="threads")
    ref = dml.max_pooling(x, *args, return_indices=True, device=DEVICE)
    assert_exact(values, ref[0])
    assert_exact(indices, ref[1])
    graph = dict(lazy[0].__dask_graph__()) | dict(lazy[1].__dask_graph__())
    pairs = [k for k in graph if isinstance(k, tuple) and k[0].startswith("dml-max_pooling")]
    assert len(pairs) == np.prod(lazy[0].numblocks)
    if args[2] == (3, 3):
        assert (indices == np.iinfo(np.uint64).max).any()
