"""The kernel cache: identity, counters, the lock, the disk cache across processes, corrupt
entries, the switch-off, inspectable sources, and the parallel / serial variants."""
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import dml_numba as dml

F32 = dml.DataType.FLOAT32


def _pad_desc(n):
    return dml.PaddingOperatorDesc(dml.TensorDesc(F32, (2, n)), dml.TensorDesc(F32, (3, n + 3)),
                                   dml.PaddingMode.REFLECTION, 0.0, (1, 2), (0, 1))


def test_same_desc_returns_same_object_and_counts_a_hit():
    d = _pad_desc(5)
    a = dml.compile_operator(d, "cpu")
    hits = dml.cache.hits
    b = dml.compile_operator(_pad_desc(5), "cpu")  # an equal, separately built desc
    assert b is a and dml.cache.hits == hits + 1


def test_second_call_with_new_data_does_not_compile():
    op = dml.compile_operator(_pad_desc(6), "cpu")
    op(np.zeros((2, 6), np.float32))
    misses, sigs = dml.cache.misses, len(op.kernel.fn.signatures)
    y = op(np.ones((2, 6), np.float32))
    assert dml.cache.misses == misses and len(op.kernel.fn.signatures) == sigs
    assert (y == 1).all()


def test_sixteen_threads_one_compile():
    d = _pad_desc(11)
    x = np.arange(22, dtype=np.float32).reshape(2, 11)
    expected = np.pad(x, [(1, 0), (2, 1)], mode="reflect")
    misses = dml.cache.misses
    results, ops, errors = [], [], []
    barrier = threading.Barrier(16)

    def work():
        try:
            barrier.wait()
            op = dml.compile_operator(d, "cpu")
            ops.append(op)
            results.append(op(x))
        except Exception as exc:  # pragma: no cover  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(16)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors
    assert len(results) == 16 and all(np.array_equal(r, expected) for r in results)
    # one build: every thread got the same operator and kernel (a second build would have
    # handed some threads another object), and the cache counted at least its two entries
    # (the counter is the process's: a thread an earlier test left running, a Dask task still
    # computing after its graph raised, may add its own builds meanwhile)
    assert len({id(op) for op in ops}) == 1 and len({id(op.kernel) for op in ops}) == 1
    assert dml.cache.misses >= misses + 2  # one operator entry + one kernel entry


def test_clear_empties_everything():
    dml.compile_operator(_pad_desc(7), "cpu")
    assert len(dml.cache) > 0
    saved = dml.cache._table.copy()
    dml.cache.clear()
    try:
        assert len(dml.cache) == 0 and dml.cache.hits == dml.cache.misses == 0
    finally:
        dml.cache._table.update(saved)


def test_generated_source_is_kept_and_parallel_variant_uses_prange():
    d = _pad_desc(8)
    serial = dml.compile_operator(d, "cpu", parallel=False)
    par = dml.compile_operator(d, "cpu", parallel=True)
    assert "numba.prange" in par.source and "numba.prange" not in serial.source
    assert "def kernel(x, y):" in par.source and "REFLECTION" in par.source
    x = np.arange(16, dtype=np.float32).reshape(2, 8)
    np.testing.assert_array_equal(serial(x), par(x))
    assert any(src == par.source for src in dml.cache.sources().values())


def test_unknown_cpu_option_refused():
    with pytest.raises(dml.ValidationError, match="compile_operator.options"):
        dml.compile_operator(_pad_desc(9), "cpu", fastmath=True)


SCRIPT = textwrap.dedent("""
    import numpy as np, dml_numba as dml
    F32 = dml.DataType.FLOAT32
    d = dml.PaddingOperatorDesc(dml.TensorDesc(F32, (2, 4)), dml.TensorDesc(F32, (3, 9)),
                                dml.PaddingMode.SYMMETRIC, 0.0, (1, 2), (0, 3))
    op = dml.compile_operator(d, "cpu")
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    assert np.array_equal(op(x), np.pad(x, [(1, 0), (2, 3)], mode="symmetric"))
    stats = op.kernel.fn.stats
    print("hits", len(stats.cache_hits), "misses", len(stats.cache_misses))
""")


def _run(env_extra):
    env = dict(os.environ, **env_extra)
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_disk_cache_survives_the_process(tmp_path):
    env = {"DML_NUMBA_CACHE_DIR": str(tmp_path)}
    assert "hits 0 misses 1" in _run(env)
    assert list(tmp_path.rglob("dml_numba_gen_cpu_padding_*.py"))
    assert "hits 1 misses 0" in _run(env)  # machine code loaded, not recompiled


def test_corrupt_entries_are_rebuilt_not_trusted(tmp_path):
    env = {"DML_NUMBA_CACHE_DIR": str(tmp_path)}
    _run(env)
    files = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix in (".py", ".nbi", ".nbc")]
    assert {p.suffix for p in files} == {".py", ".nbi", ".nbc"}
    for p in files:
        p.write_bytes(b"\x00garbage" * 3)
    assert "hits 0 misses 1" in _run(env)  # results still right (asserted in the script)
    assert "hits 1 misses 0" in _run(env)  # and the rebuilt entry is good again


def test_disk_cache_can_be_switched_off(tmp_path):
    out = _run({"DML_NUMBA_CACHE_DIR": str(tmp_path), "DML_NUMBA_DISK_CACHE": "0",
                "DML_NUMBA_DEBUG": "1"})
    assert "cache=__dml_disk_cache__" in out and "hits 0" in out
    assert not [p for p in Path(tmp_path).rglob("*") if p.is_file()]


def test_debug_prints_generated_source(tmp_path):
    out = _run({"DML_NUMBA_CACHE_DIR": str(tmp_path), "DML_NUMBA_DEBUG": "1"})
    assert "dml_numba generated source" in out and "def kernel(x, y):" in out


def test_functional_memo_keys_on_every_parameter(device):
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    a = dml.padding(x, (0, 1), (1, 0), "constant", 1, device=device)
    b = dml.padding(x, (0, 1), (1, 0), "constant", 2, device=device)
    c = dml.padding(x, (0, 1), (1, 0), "edge", 2, device=device)
    d = dml.padding(x.astype(np.int64), (0, 1), (1, 0), "constant", 2, device=device)
    assert a[0, 0] == 1 and b[0, 0] == 2 and c[0, 0] == 0 and d.dtype == np.int64
    np.testing.assert_array_equal(dml.padding(x, [0, 1], np.array([1, 0]), device=device),
                                  np.pad(x, [(0, 1), (1, 0)]))  # unhashable arguments still work


def test_repeated_functional_call_builds_no_descriptor(monkeypatch):
    x = np.ones((2, 2), np.float32)
    dml.tile(x, (2, 3))
    monkeypatch.setattr(dml.TileOperatorDesc, "__post_init__",
                        lambda self: (_ for _ in ()).throw(AssertionError("desc rebuilt")))
    assert dml.tile(x, (2, 3)).shape == (4, 6)
