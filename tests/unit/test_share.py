"""How the blocked kernels' parallel loops share their items (``dml_numba.cpu._share``): the
atomic claim, every item run exactly once for any count of items and slots (serial and
parallel, one item a claim and runs of them), and a slot whose share is slow relieved by the
others. A real kernel's items run by another slot than their share's (with that slot's own
scratch): ``tests/ops/test_convolution_blocked.py``, three slots on two threads."""
import numba
import numpy as np
import pytest

from dml_numba._codegen import SourceWriter
from dml_numba.cpu import _share
from dml_numba.cpu._share import claim


@numba.njit(parallel=True)
def _claim_many(counters, n):
    got = np.empty(n, np.int64)
    for i in numba.prange(n):
        got[i] = claim(counters, 8)
    return got


def test_claim_hands_out_each_value_once_under_contention():
    n = 2_000_000  # milliseconds of claims: the threads overlap
    counters = np.zeros(16, np.int64)
    got = _claim_many(counters, n)
    np.testing.assert_array_equal(np.sort(got), np.arange(n))  # none twice, none lost
    assert counters[8] == n and not counters[:8].any() and not counters[9:].any()


def _kernel(loop: str, items: int, slow: int = 0):
    """``kernel(who, slots)``: ``who[f] = s`` and ``hits[f] += 1`` for each item ``f`` run by
    slot ``s``; the first ``slow`` items spin for a while first."""
    w = SourceWriter()
    w("import numba")
    w("import numpy as np")
    w("from dml_numba.cpu._share import claim")
    w("@numba.njit(parallel=True)")
    with w.block("def kernel(who, hits, slots):"):
        with _share.shares(w, loop, items, "slots"):
            with w.block(f"if f < {slow}:"):
                w("t = 0.0")
                with w.block("for k in range(3_000_000):"):
                    w("t += math.sqrt(k + f)")
                w("hits[f] += t * 0.0")  # the spin kept
            w("who[f] = s")
            w("hits[f] += 1")
    ns = {"math": __import__("math")}
    exec(w.text(), ns)
    return ns["kernel"]


@pytest.mark.parametrize("loop", ["range", "numba.prange"])
@pytest.mark.parametrize("items, slots", [(1, 1), (1, 2), (2, 3), (7, 2), (16, 2), (33, 2),
                                          (100, 3), (257, 4)])
def test_every_item_runs_once(loop, items, slots):
    kernel = _kernel(loop, items)
    who = np.full(items, -1, np.int64)
    hits = np.zeros(items)
    kernel(who, hits, slots)
    np.testing.assert_array_equal(hits, 1.0)  # 257 // 4 // 16 = 5 items a claim, tail included
    assert ((who >= 0) & (who < slots)).all()
    if loop == "range":  # serial: each slot walks its own share, in order
        expected = [next(s for s in range(slots) if f < (s + 1) * items // slots)
                    for f in range(items)]
        np.testing.assert_array_equal(who, expected)


def test_a_slow_share_is_relieved_by_the_other_slot():
    if numba.get_num_threads() < 2:
        pytest.skip("one thread: the other slot runs after the first, nothing to relieve")
    kernel = _kernel("numba.prange", 16, slow=8)  # slot 0's share (items 0-7) is all slow
    who = np.full(16, -1, np.int64)
    hits = np.zeros(16)
    kernel(who, hits, 2)
    np.testing.assert_array_equal(hits, 1.0)
    # slot 1 finished its fast share at once and took items of slot 0's slow share
    assert (who[:8] == 1).any(), who
