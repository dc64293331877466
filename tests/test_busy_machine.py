"""The cpu device in a new process and under concurrency: the threading policy loads and can be
overridden, many Python threads calling parallel kernels at once get right answers, and a
process whose kernels are on disk loads them without Numba's compiler start-up."""
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import dml_numba as dml

PROBE = textwrap.dedent("""
    import os, numpy as np, dml_numba as dml, numba
    x = np.arange(70000, dtype=np.float32).reshape(7, 10000)
    d = dml.PaddingOperatorDesc(dml.TensorDesc.like(x), dml.TensorDesc(dml.DataType.FLOAT32,
                                (11, 10006)), 2, 0.0, (1, 2), (3, 4))
    y = dml.compile_operator(d, "cpu", parallel=True)(x)
    assert np.array_equal(y, np.pad(x, [(1, 3), (2, 4)], mode="reflect"))
    print(numba.threading_layer(), os.environ.get("OMP_WAIT_POLICY"))
""")


def _probe(**env):
    base = {k: v for k, v in os.environ.items()
            if k not in ("OMP_WAIT_POLICY", "NUMBA_THREADING_LAYER", "DML_NUMBA_THREADING")}
    out = subprocess.run([sys.executable, "-c", PROBE], env={**base, **env},
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_the_default_policy_loads_numbas_pool_untouched():
    layer, wait = _probe()
    assert wait == "None"
    assert layer in ("omp", "tbb")  # Numba's first choice that loads (tbb only if installed)


def test_the_passive_policy_and_users_own_settings():
    assert _probe(DML_NUMBA_THREADING="passive", NUMBA_THREADING_LAYER="omp") == [
        "omp", "PASSIVE"]
    assert _probe(DML_NUMBA_THREADING="passive", OMP_WAIT_POLICY="ACTIVE",
                  NUMBA_THREADING_LAYER="omp") == ["omp", "ACTIVE"]
    assert _probe(DML_NUMBA_THREADING="passive", NUMBA_THREADING_LAYER="workqueue") == [
        "workqueue", "None"]


def test_the_automatic_variant_measures_and_switches():
    """A fake clock-free check of the chooser: a parallel call that is slow relative to its
    best makes the serial variant run, and the faster average wins."""
    from dml_numba.cpu._adaptive import AdaptiveKernel

    calls, delays = [], {"p": [0.001, 0.02, 0.02, 0.02, 0.02], "s": [0.002, 0.002, 0.002]}
    import time as _t

    def parallel():
        calls.append("p")
        _t.sleep(delays["p"].pop(0) if delays["p"] else 0.02)

    def serial():
        calls.append("s")
        _t.sleep(delays["s"].pop(0) if delays["s"] else 0.002)

    from dml_numba.cpu._adaptive import LoadWatch

    quiet = LoadWatch(meter=lambda: type("Quiet", (), {"others": lambda self: 0.0})())
    k = AdaptiveKernel(parallel, lambda: serial, start_build=lambda run: run(), load=quiet)
    for _ in range(7):
        k()
    assert calls[:4] == ["p"] * 4 and "s" in calls and k.variant() == "serial"


def test_four_threads_calling_parallel_kernels_at_once():
    """Including the convolution kernels that pad into per-thread buffers (depthwise plane by
    plane; grouped, each image and group just before its tiles)."""
    x = np.random.default_rng(0).standard_normal((4, 8, 64, 64)).astype(np.float32)
    w = np.random.default_rng(1).standard_normal((8, 8, 3, 3)).astype(np.float32)
    pads = {"start_padding": (1, 1), "end_padding": (1, 1)}
    # the blocked kernels forced: the automatic choice may take the direct one for these
    blocked = {k: dml.compile_operator(dml.functional.convolution_desc(x, wk, group_count=g,
                                                                       **pads),
                                       "cpu", algorithm="blocked")
               for k, wk, g in (("depthwise", w[:, :1], 8), ("grouped", w[:, :4], 2))}
    jobs = {
        "pad": lambda: dml.padding(x, (0, 0, 3, 3), (0, 0, 3, 3), "symmetric"),
        "tile": lambda: dml.tile(x, (1, 1, 2, 2)),
        "pool": lambda: dml.lp_pooling(x, (3, 3), (2, 2), p=2),
        "conv": lambda: dml.convolution(x, w, **pads),
        "depthwise": lambda: blocked["depthwise"](x, w[:, :1]),
        "grouped": lambda: blocked["grouped"](x, w[:, :4]),
    }
    kinds = {k: op.kernel.key.kernel for k, op in blocked.items()}
    assert kinds == {"depthwise": "blocked-depthwise", "grouped": "blocked-staged"}
    expected = {k: f() for k, f in jobs.items()}
    errors, barrier = [], threading.Barrier(len(jobs))

    def work(name):
        try:
            barrier.wait()
            for _ in range(5):
                for k in (name, *jobs):
                    np.testing.assert_array_equal(jobs[k](), expected[k])
        except Exception as exc:  # pragma: no cover  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in jobs]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors


WARM = textwrap.dedent("""
    import sys, numpy as np, dml_numba as dml
    x = np.arange(48, dtype=np.float32).reshape(1, 3, 4, 4)
    w = np.ones((2, 3, 3, 3), np.float32)
    y = dml.padding(x, (0, 0, 1, 2), (0, 0, 2, 1), "symmetric")
    z = dml.convolution(x, w, start_padding=(1, 1), end_padding=(1, 1))
    assert np.array_equal(y, np.pad(x, [(0, 0), (0, 0), (1, 2), (2, 1)], mode="symmetric"))
    assert np.allclose(z[0, 0, 1, 1], x[0, :, 0:3, 0:3].sum())
    w.flags.writeable = False  # read-only weights (a model's): another Numba type, a miss
    assert np.array_equal(dml.convolution(x, w, start_padding=(1, 1), end_padding=(1, 1)), z)
    fn = [v for k, v in dml.cache._table.items() if getattr(k, "backend", None) == "cpu"]
    hits = sum(sum(f.stats.cache_hits.values()) for f in fn)  # overloads loaded from disk
    print("hits", hits, "of", sum(len(f.overloads) for f in fn), "linalg",
          "scipy.linalg" in sys.modules)
    # a new specialisation still compiles in the same process
    assert dml.tile(x, (1, 1, 2, 3)).shape == (1, 3, 8, 12)
""")


@pytest.mark.parametrize("fast", ["1", "0"])
def test_a_warm_process_loads_its_kernels(tmp_path, fast):
    env = dict(os.environ, DML_NUMBA_CACHE_DIR=str(tmp_path), DML_NUMBA_FAST_LOAD=fast)
    first = subprocess.run([sys.executable, "-c", WARM], env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    again = subprocess.run([sys.executable, "-c", WARM], env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    hits, _, total, _, linalg = again.stdout.split()[1:]
    assert hits == total != "0"
    # the fast path loads without Numba's registries (and the scipy.linalg they import), the
    # kernel's overload for read-only weights too
    assert linalg == ("False" if fast == "1" else "True")
