"""The fused data-movement chain (padding, slice, tile in any order and number): every device
against the chain run with NumPy's own functions (numpy.pad, slicing, numpy.tile), bit for bit;
validation; the generated source is one pass with no intermediate."""
import dataclasses
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dml_numba as dml
from dml_numba.ops.gather_chain import GatherChainDesc
from tests.helpers import draw_window

SETTINGS = settings(max_examples=20, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])
NP_MODE = {dml.PaddingMode.CONSTANT: "constant", dml.PaddingMode.EDGE: "edge",
           dml.PaddingMode.REFLECTION: "reflect", dml.PaddingMode.SYMMETRIC: "symmetric",
           dml.PaddingMode.WRAP: "wrap"}


def T(dtype, shape):
    return dml.TensorDesc(dml.DataType.from_numpy(dtype), shape)


def pad(dtype, shape, start, end, mode=dml.PaddingMode.CONSTANT, value=0):
    out = tuple(n + a + b for n, a, b in zip(shape, start, end))
    dt = dml.DataType.from_numpy(dtype)
    desc = dml.Padding1OperatorDesc(T(dtype, shape), T(dtype, out), mode, dt, value, start, end)

    def oracle(x):
        kw = {"constant_values": value} if mode == dml.PaddingMode.CONSTANT else {}
        return np.pad(x, list(zip(start, end)), mode=NP_MODE[mode], **kw)
    return desc, oracle


def slice1(dtype, shape, offsets, sizes, strides):
    out = tuple(1 + (n - 1) // abs(s) for n, s in zip(sizes, strides))
    desc = dml.Slice1OperatorDesc(T(dtype, shape), T(dtype, out), offsets, sizes, strides)

    def oracle(x):
        idx = tuple(slice(o, o + n, s) if s > 0 else slice(o + n - 1, o - 1 if o else None, s)
                    for o, n, s in zip(offsets, sizes, strides))
        return x[idx]
    return desc, oracle


def tile(dtype, shape, reps):
    out = tuple(n * r for n, r in zip(shape, reps))
    return dml.TileOperatorDesc(T(dtype, shape), T(dtype, out), reps), lambda x: np.tile(x, reps)


def chain(links, dtype, shape):
    descs = [d for d, _ in links]
    return GatherChainDesc(T(dtype, shape), descs[-1].output_tensor, descs)


def run_oracles(links, x):
    for _, oracle in links:
        x = oracle(x)
    return x


@st.composite
def chains(draw, dtypes=(np.float32, np.float16, np.int8, np.uint64, np.float64, np.int32)):
    """A random chain of 1-5 data-movement operators on a random small tensor."""
    dtype = draw(st.sampled_from(dtypes))
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank)))
    links, cur = [], shape
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["pad", "slice", "tile"]))
        if kind == "pad":
            mode = draw(st.sampled_from(list(dml.PaddingMode)))
            pads = st.lists(st.integers(0, 4), min_size=rank, max_size=rank)
            value = draw(st.integers(-9, 9)) if np.dtype(dtype).kind == "i" else \
                draw(st.integers(0, 9))
            link = pad(dtype, cur, tuple(draw(pads)), tuple(draw(pads)), mode, value)
        elif kind == "slice":
            link = slice1(dtype, cur, *draw_window(draw, st, cur, [1, 1, 2, 3, -1, -2]))
        else:
            link = tile(dtype, cur, tuple(draw(st.lists(st.integers(1, 3), min_size=rank,
                                                        max_size=rank))))
        links.append(link)
        cur = link[0].output_tensor.sizes
    return dtype, shape, links


def _input(dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(0, 100, size=shape).astype(dtype)


@SETTINGS
@given(case=chains(), device=st.sampled_from(["numpy", "cpu"]))
def test_chain_equals_numpy_functions_one_by_one(case, device):
    dtype, shape, links = case
    x = _input(dtype, shape)
    y = dml.compile_operator(chain(links, dtype, shape), device)(x)
    np.testing.assert_array_equal(y, run_oracles(links, x))


@settings(max_examples=5, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(case=chains(dtypes=(np.float32, np.int16)))
def test_parallel_chain_equals_numpy_functions(case):
    dtype, shape, links = case
    x = _input(dtype, shape, 1)
    y = dml.compile_operator(chain(links, dtype, shape), "cpu", parallel=True)(x)
    np.testing.assert_array_equal(y, run_oracles(links, x))


def test_nearest_constant_wins_where_two_paddings_fall_outside():
    """Output corner (0, 0) lies outside the last padding (constant 7); (1, 1) lies inside it
    but outside the first (constant -1); the later padding writes over the earlier."""
    f = np.float32
    links = [pad(f, (2, 2), (1, 1), (0, 0), value=-1), pad(f, (3, 3), (1, 0), (0, 1), value=7)]
    x = np.array([[1, 2], [3, 4]], f)
    y = dml.compile_operator(chain(links, f, (2, 2)), "cpu")(x)
    np.testing.assert_array_equal(y, [[7, 7, 7, 7], [-1, -1, -1, 7], [-1, 1, 2, 7],
                                      [-1, 3, 4, 7]])


def test_long_tiled_row_maps_element_by_element():
    """A last axis tiled into more runs than a row is laid out in: the element-wise path."""
    from dml_numba.cpu.gather_chain import MAX_RUNS

    f = np.int32
    links = [tile(f, (2, 3), (1, MAX_RUNS + 3)), slice1(f, (2, 3 * (MAX_RUNS + 3)), (0, 1),
                                                         (2, 3 * (MAX_RUNS + 3) - 1), (1, 1))]
    d = chain(links, f, (2, 3))
    assert len(d.runs()) > MAX_RUNS
    x = np.arange(6, dtype=f).reshape(2, 3)
    np.testing.assert_array_equal(dml.compile_operator(d, "cpu")(x), run_oracles(links, x))


def test_source_is_one_pass_without_intermediate():
    f = np.float32
    links = [pad(f, (2, 3, 8, 8), (0, 0, 2, 2), (0, 0, 2, 2), dml.PaddingMode.REFLECTION),
             slice1(f, (2, 3, 12, 12), (0, 0, 0, 0), (2, 3, 12, 12), (1, 1, 2, 2)),
             tile(f, (2, 3, 6, 6), (1, 1, 2, 2))]
    src = dml.compile_operator(chain(links, f, (2, 3, 8, 8)), "cpu").source
    assert src.count("def kernel(x, y)") == 1 and src.count("def ") == 2  # kernel and where()
    assert "np.empty" not in src and "padding -> slice -> tile" in src
    assert src.count("= x[") >= 1 and "y[" in src


@pytest.mark.parametrize("bad, message", [
    (lambda f: GatherChainDesc(T(f, (2, 2)), T(f, (2, 2)), ()), "operators: () is invalid"),
    (lambda f: GatherChainDesc(T(f, (2, 2)), T(f, (4, 2)), (tile(f, (2, 2), (2, 1))[0],
                                                          "x")), "operators[1]"),
    (lambda f: GatherChainDesc(T(f, (2, 3)), T(f, (4, 2)), (tile(f, (2, 2), (2, 1))[0],)),
     "operators[0].input_tensor.sizes: (2, 2) is invalid; expected (2, 3)"),
    (lambda f: GatherChainDesc(T(f, (2, 2)), T(f, (4, 2)),
                               (tile(f, (2, 2), (2, 1))[0], tile(f, (2, 2), (1, 1))[0])),
     "operators[1].input_tensor.sizes: (2, 2) is invalid; expected (4, 2), the sizes of "
     "operators[0].output_tensor"),
    (lambda f: GatherChainDesc(T(np.int8, (2, 2)), T(f, (4, 2)), (tile(f, (2, 2), (2, 1))[0],)),
     "operators[0].input_tensor.data_type: 'FLOAT32' is invalid; expected INT8"),
    (lambda f: GatherChainDesc(T(f, (2, 2)), T(f, (4, 4)), (tile(f, (2, 2), (2, 1))[0],)),
     "output_tensor.sizes: (4, 4) is invalid; expected (4, 2)"),
])
def test_validation_names_the_link(bad, message):
    with pytest.raises(dml.ValidationError, match="GatherChainDesc") as e:
        bad(np.float32)
    assert message in str(e.value)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.float64])
@pytest.mark.parametrize("step", [1, -1, 2, -3, 4, 5])
def test_long_rows_move_a_vector_at_a_time(dtype, step):
    """Rows long enough for whole vectors: the copy runs of steps -4..4 are read with one load
    and a shuffle (an overlapping last vector for the remainder), other steps element by
    element; every dtype size (the lanes are the vector's bytes over the element's)."""
    shape = (3, 300)  # a step-4 run holds a 64-lane int8 vector too
    n = 300 + 7
    links = [pad(dtype, shape, (0, 3), (1, 4), dml.PaddingMode.REFLECTION),
             slice1(dtype, (4, n), (1, 1), (3, n - 2), (1, step)),
             tile(dtype, (3, 1 + (n - 3) // abs(step)), (1, 2))]
    d = chain(links, dtype, shape)
    x = _input(dtype, shape, 2)
    op = dml.compile_operator(d, "cpu")
    vectored = abs(step) <= 4
    assert ("vload_stride" in op.source) == vectored
    np.testing.assert_array_equal(op(x), run_oracles(links, x))


@pytest.mark.parametrize("dtype,parallel", [(np.float32, True), (np.int8, False),
                                            (np.float64, True)])
def test_a_trailing_tile_computes_each_row_once_and_copies_it(dtype, parallel):
    """A chain that ends in a tile computes each row of the tile's input once (the loop runs
    over those rows only) and copies it to every repeat: along the row (rows long enough for
    vectors, with a remainder, and short ones), and the whole row to the repeats of every
    outer axis; against numpy.pad, slicing and numpy.tile."""
    shape = (2, 3, 5, 70)
    links = [pad(dtype, shape, (0, 1, 0, 3), (1, 0, 2, 4), dml.PaddingMode.SYMMETRIC),
             slice1(dtype, (3, 4, 7, 77), (0, 1, 1, 0), (3, 3, 6, 77), (1, 1, 2, 1)),
             tile(dtype, (3, 3, 3, 77), (2, 1, 3, 2))]
    d = chain(links, dtype, shape)
    op = dml.compile_operator(d, "cpu", parallel=parallel)
    assert "copied to their repeats" in op.source
    assert f"range({3 * 3 * 3})" in op.source  # the tile input's rows, not the output's
    assert op.source.count("zr = y[") == 2 * 3 - 1  # every outer repeat but the first
    x = _input(dtype, shape, 4)
    np.testing.assert_array_equal(op(x), run_oracles(links, x))
    short = [pad(dtype, (2, 3), (1, 0), (0, 1), dml.PaddingMode.WRAP),
             tile(dtype, (3, 4), (3, 2))]  # a row shorter than any vector
    x = _input(dtype, (2, 3), 5)
    np.testing.assert_array_equal(
        dml.compile_operator(chain(short, dtype, (2, 3)), "cpu", parallel=parallel)(x),
        run_oracles(short, x))


def long_chain(dtype, shape, length):
    """``length`` operators cycling through every kind and mode (reversed and strided slices,
    tiles, paddings of every mode, CONSTANT ones of several values), ending in two CONSTANT
    paddings whose constants meet in the corners and a tile: a chain long enough to be read
    through tables, sizes kept small."""
    links, cur = [], shape
    modes = list(dml.PaddingMode)
    for k in range(length - 3):
        rank = len(cur)
        if k % 3 == 0:
            mode = modes[(k // 3) % len(modes)]
            link = pad(dtype, cur, (1,) * rank, (0,) + (1,) * (rank - 1), mode, k % 7)
        elif k % 3 == 1:
            step = (-1, 2, 1, -2)[(k // 3) % 4]
            sizes = tuple(n - 1 for n in cur)
            link = slice1(dtype, cur, (1,) * rank, sizes, (1,) * (rank - 1) + (step,))
        else:
            reps = (1,) * (rank - 1) + (2,) if cur[-1] < 6 else (1,) * rank
            link = tile(dtype, cur, reps)
        links.append(link)
        cur = link[0].output_tensor.sizes
    for start, end, value in (((1,) * len(cur), (0,) * len(cur), 7),
                              ((0,) * len(cur), (1,) * len(cur), 9)):
        links.append(pad(dtype, cur, start, end, dml.PaddingMode.CONSTANT, value))
        cur = links[-1][0].output_tensor.sizes
    links.append(tile(dtype, cur, (1,) * (len(cur) - 1) + (2,)))
    return links


def steady_chain(dtype, shape, blocks):
    """``blocks`` times a padding (each mode in turn) and the slice that takes it off again,
    then a CONSTANT padding: the same output whatever the length."""
    links, modes = [], list(dml.PaddingMode)
    rank = len(shape)
    padded = tuple(n + 2 for n in shape)
    for k in range(blocks):
        links.append(pad(dtype, shape, (1,) * rank, (1,) * rank, modes[k % len(modes)], k % 5))
        links.append(slice1(dtype, padded, (1,) * rank, shape, (1,) * rank))
    links.append(pad(dtype, shape, (1,) * rank, (0,) * rank, dml.PaddingMode.CONSTANT, 3))
    return links


@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 5), (7,)])
@pytest.mark.parametrize("length", [20, 60])
def test_a_long_chain_reads_tables_and_equals_numpy_functions(shape, length):
    """Past TABLE_CHAIN operators, every axis's composed map (and the level whose constant an
    element takes) is a table made at generation time: equal to the operators run one by one
    with NumPy's functions, bit for bit, serial and parallel."""
    from dml_numba._gather import TABLE_CHAIN

    assert length > TABLE_CHAIN
    f = np.float32
    links = long_chain(f, shape, length)
    d = chain(links, f, shape)
    x = _input(f, shape, 3)
    for parallel in (False, True):
        op = dml.compile_operator(d, "cpu", parallel=parallel)
        assert "A0 = np.array(" in op.source
        np.testing.assert_array_equal(op(x), run_oracles(links, x))


def test_a_long_chain_s_code_does_not_grow_with_it():
    """The kernel's code (its source less the tables and the descriptor's comment) is the same
    for 20 and 400 operators, on the CPU and on CUDA: a deep graph's compile time does not grow
    with its depth. (Generated without compiling.)"""
    from dml_numba.cpu._emit import RowReads, make_key
    from dml_numba.cpu.gather_chain import emit
    from dml_numba.cuda.gather_chain import emit as emit_cuda

    f = np.float32

    def code(n, make):
        """The kernel's lines less comments and tables, level numbers as N."""
        d = chain(steady_chain(f, (3, 4), n), f, (3, 4))
        return [re.sub(r"(C|!= )\d+", r"\1N", ln) for ln in make(d).splitlines()
                if not ln.lstrip().startswith(("#", "A", "V"))]

    def key(d):
        return dataclasses.replace(make_key(d, {"parallel": False}, work=1), plan=RowReads(0))

    cpu = lambda d: emit(key(d))  # noqa: E731
    cuda = lambda d: emit_cuda(dataclasses.replace(key(d), backend="cuda"))  # noqa: E731
    assert code(10, cpu) == code(200, cpu)
    assert code(10, cuda) == code(200, cuda)
