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

pytestmark = pytest.mark.cuda
F32 = dml.DataType.FLOAT32


def _record(kernel, x, y_shape):
    from numba import cuda
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    stores, loads = defaultdict(list), defaultdict(list)
    counts = defaultdict(int)
    original_set, original_get = FakeCUDAArray.__setitem__, FakeCUDAArray.__getitem__
    d_x, d_y = cuda.to_device(x), cuda.device_array(y_shape, x.dtype)
    lock = threading.Lock()

    def flat(a, idx):
        idx = idx if isinstance(idx, tuple) else (idx,)
        return int(np.ravel_multi_index(tuple(int(i) for i in idx), a.shape))

    def setitem(self, idx, val):
        if self is d_y:
            t = threading.current_thread().threadIdx.x
            with lock:
                stores[counts[t]].append(flat(self, idx) * x.itemsize)
                counts[t] += 1
        return original_set(self, idx, val)

    def getitem(self, idx):
        if self is d_x and not isinstance(idx, slice):
            t = threading.current_thread().threadIdx.x
            with lock:
                loads[counts[t]].append(flat(self, idx) * x.itemsize)
        return original_get(self, idx)

    FakeCUDAArray.__setitem__, FakeCUDAArray.__getitem__ = setitem, getitem
    try:
        kernel.fn[1, 32](d_x, d_y)  # one warp
    finally:
        FakeCUDAArray.__setitem__, FakeCUDAArray.__getitem__ = original_set, original_get
    return stores, loads, d_y.copy_to_host()


def _sectors(addresses):
    return len({a // 32 for a in addresses})


@pytest.mark.parametrize("make", [
    lambda t: dml.PaddingOperatorDesc(t((2, 3, 10)), t((2, 5, 21)), dml.PaddingMode.REFLECTION,
                                      0.0, (0, 1, 5), (0, 1, 6)),
    lambda t: dml.PaddingOperatorDesc(t((2, 3, 10)), t((3, 3, 16)), dml.PaddingMode.CONSTANT,
                                      1.5, (1, 0, 3), (0, 0, 3)),
    lambda t: dml.TileOperatorDesc(t((2, 3, 8)), t((2, 6, 32)), (1, 2, 4)),
    lambda t: dml.Slice1OperatorDesc(t((4, 6, 40)), t((2, 3, 40)), (0, 0, 0), (4, 6, 40),
                                     (2, -2, 1)),
], ids=["reflection", "constant", "tile", "slice"])
def test_a_warp_stores_consecutive_elements(make):
    from dml_numba.cuda import kernel_for

    t = lambda s: dml.TensorDesc(F32, s)  # noqa: E731
    desc = make(t)
    x = np.arange(desc.input_tensor.element_count, dtype=np.float32).reshape(
        desc.input_tensor.sizes)
    stores, loads, y = _record(kernel_for(desc), x, desc.output_tensor.sizes)
    np.testing.assert_array_equal(y, dml.compile_operator(desc, "numpy")(x))  # it ran for real
    full = [r for r in stores.values() if len(r) == 32]
    assert full, "no full-warp store request recorded"
    for request in full:  # 32 consecutive float32: 128 bytes, at most 5 sectors if unaligned
        assert sorted(request) == list(range(min(request), min(request) + 128, 4))
        assert _sectors(request) <= 5
    for request in loads.values():  # reads follow the index maps: a few rows at most
        assert _sectors(request) <= 8, sorted(request)
