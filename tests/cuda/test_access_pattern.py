"""Memory access of the data-movement kernels, checked on the simulator: the 32 threads of a
warp store 32 consecutive output elements per request (coalesced: the minimum number of
32-byte sectors), and their loads stay within a few sectors per request.

The simulator runs each CUDA thread as a Python thread; recording the index each thread
writes, in order, gives exactly what one store instruction of a warp touches."""
import threading
from collections import defaultdict

import numpy as np
import pytest

import dml_numba as dml


def _simulated() -> bool:
    from numba import config

    return bool(config.ENABLE_CUDASIM)


pytestmark = [pytest.mark.cuda, pytest.mark.skipif(
    not _simulated(), reason="a warp's accesses are recorded through the simulator's arrays; "
                             "on a GPU they are a profiler's (ncu) to read")]
F32 = dml.DataType.FLOAT32


def _record(kernel, x, y_shape):
    """Run ``kernel`` as one warp; returns its store requests and the loads feeding them, each
    keyed by the store instruction instance a warp executes in lockstep: for the flat kernel the
    iteration of its uniform grid-stride loop (each thread's store count), for the row-wise one
    the (row, 32-output group) of the inner loop (a lane with no output in it is masked off)."""
    from numba import cuda
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    stores, loads = defaultdict(list), defaultdict(list)
    counts, last_load = defaultdict(int), {}
    original_set, original_get = FakeCUDAArray.__setitem__, FakeCUDAArray.__getitem__
    d_x, d_y = cuda.to_device(x), cuda.device_array(y_shape, x.dtype)
    lock = threading.Lock()

    def coords(idx):
        return tuple(int(i) for i in (idx if isinstance(idx, tuple) else (idx,)))

    def setitem(self, idx, val):
        if self is d_y:
            t = threading.current_thread().threadIdx.x
            c = coords(idx)
            key = ((int(np.ravel_multi_index(c[:-1], y_shape[:-1])), c[-1] // 32)
                   if kernel.warps else counts[t])
            with lock:
                stores[key].append(int(np.ravel_multi_index(c, y_shape)) * x.itemsize)
                if t in last_load:
                    loads[key].append(last_load.pop(t))
                counts[t] += 1
        return original_set(self, idx, val)

    def getitem(self, idx):
        if self is d_x and not isinstance(idx, slice):
            t = threading.current_thread().threadIdx.x
            with lock:
                last_load[t] = int(np.ravel_multi_index(coords(idx), x.shape)) * x.itemsize
        return original_get(self, idx)

    FakeCUDAArray.__setitem__, FakeCUDAArray.__getitem__ = setitem, getitem
    try:
        kernel.fn[1, 32](d_x, d_y)  # one warp
    finally:
        FakeCUDAArray.__setitem__, FakeCUDAArray.__getitem__ = original_set, original_get
    return stores, loads, d_y.copy_to_host()


def _sectors(addresses):
    return len({a // 32 for a in addresses})


@pytest.mark.parametrize("make, rows", [
    (lambda t: dml.PaddingOperatorDesc(t((2, 3, 10)), t((2, 5, 21)), dml.PaddingMode.REFLECTION,
                                       0.0, (0, 1, 5), (0, 1, 6)), False),
    (lambda t: dml.PaddingOperatorDesc(t((2, 3, 10)), t((3, 3, 16)), dml.PaddingMode.CONSTANT,
                                       1.5, (1, 0, 3), (0, 0, 3)), False),
    (lambda t: dml.PaddingOperatorDesc(t((1, 2, 300)), t((1, 4, 311)), dml.PaddingMode.SYMMETRIC,
                                       0.0, (0, 1, 5), (0, 1, 6)), True),
    (lambda t: dml.PaddingOperatorDesc(t((1, 2, 40)), t((2, 4, 45)), dml.PaddingMode.CONSTANT,
                                       -2.0, (1, 1, 2), (0, 1, 3)), True),
    (lambda t: dml.TileOperatorDesc(t((2, 3, 8)), t((2, 6, 32)), (1, 2, 4)), True),
    (lambda t: dml.Slice1OperatorDesc(t((4, 6, 40)), t((2, 3, 40)), (0, 0, 0), (4, 6, 40),
                                      (2, -2, 1)), True),
], ids=["reflection", "constant", "symmetric-rows", "constant-rows", "tile", "slice"])
def test_a_warp_stores_consecutive_elements(make, rows):
    from dml_numba.cuda import kernel_for

    t = lambda s: dml.TensorDesc(F32, s)  # noqa: E731
    desc = make(t)
    kernel = kernel_for(desc)
    # rows of 32 or more outputs: a warp per row chunk, the outer axes' maps once per chunk
    assert kernel.warps == rows and ("lane" in kernel.source) == rows
    x = np.arange(desc.input_tensor.element_count, dtype=np.float32).reshape(
        desc.input_tensor.sizes)
    stores, loads, y = _record(kernel, x, desc.output_tensor.sizes)
    np.testing.assert_array_equal(y, dml.compile_operator(desc, "numpy")(x))  # it ran for real
    full = [r for r in stores.values() if len(r) == 32]
    assert full, "no full-warp store request recorded"
    for request in full:  # 32 consecutive float32: 128 bytes, at most 5 sectors if unaligned
        assert sorted(request) == list(range(min(request), min(request) + 128, 4))
        assert _sectors(request) <= 5
    for request in stores.values():  # a row's tail: still consecutive
        assert sorted(request) == list(range(min(request), max(request) + 4, 4))
    for request in loads.values():  # reads follow the index maps: a few rows at most
        assert _sectors(request) <= 8, sorted(request)


@pytest.mark.parametrize("shape, offsets, sizes, rowwise", [
    ((4, 80), (1, 0), (3, 63), True),    # rows of exactly a warp (32 outputs of stride 2)
    ((4, 80), (1, 0), (3, 61), False),   # 31 outputs: one thread per output
    ((200,), (0,), (199,), False),       # one long row is the whole output: flat
])
def test_rows_of_a_warp_or_more_are_gathered_row_wise(shape, offsets, sizes, rowwise):
    """A warp per row chunk where a row holds at least a warp's outputs and there is more than
    one row; the flat grid-stride loop otherwise."""
    from dml_numba.cuda import _emit

    x = np.zeros(shape, np.float32)
    plan = dml.functional.slice1_desc(x, offsets, sizes, (1,) * (len(shape) - 1) + (2,)
                                      ).gather_plan()
    assert plan.maps[-1].size == (sizes[-1] + 1) // 2
    assert _emit.rowwise(plan) is rowwise
