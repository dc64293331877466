"""Memory of a long-running process: what one distinct kernel costs (compiled, or loaded from
the disk cache), and whether memory stays flat while the memory cache evicts (more shapes in
rotation than ``DML_NUMBA_MEMORY_CACHE_SIZE`` holds).

Resident memory (RSS) from ``/proc/self/statm``, each measurement in a fresh process.

    python3 -m benchmarks.bench_memory
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap

from benchmarks._harness import Table

DISTINCT = textwrap.dedent("""
    import sys, numpy as np, dml_numba as dml
    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096 / 2**20
    dml.padding(np.ones((1, 1, 3, 3), np.float32), (0, 0, 1, 1), (0, 0, 1, 1), "reflection")
    n, before = int(sys.argv[1]), rss()
    for i in range(n):
        dml.padding(np.ones((1, 1, 4 + i, 5), np.float32), (0, 0, 1, 1), (0, 0, 1, 1),
                    "reflection")
    print((rss() - before) / n)
""")

ROTATION = textwrap.dedent("""
    import sys, numpy as np, dml_numba as dml
    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096 / 2**20
    xs = [np.ones((1, 1, 4 + i, 5), np.float32) for i in range(12)]
    for i in range(600):
        dml.padding(xs[i % 12], (0, 0, 1, 1), (0, 0, 1, 1), "reflection")
    before = rss()
    for i in range(4000):
        dml.padding(xs[i % 12], (0, 0, 1, 1), (0, 0, 1, 1), "reflection")
    print(rss() - before, dml.cache.stats()["evictions"])
""")


def _run(script, *args, **env) -> list[float]:
    out = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                         env=dict(os.environ, **env), timeout=1200)
    if out.returncode:
        raise RuntimeError(out.stderr)
    return [float(v) for v in out.stdout.split()]


def run(quick: bool = False) -> Table:
    n = 30 if quick else 100
    table = Table("Memory of a long-running process (RSS, data-movement kernels)",
                  ["measurement", "result"])
    with tempfile.TemporaryDirectory() as cache:
        compiled = _run(DISTINCT, str(n), DML_NUMBA_CACHE_DIR=cache)[0]
        loaded = _run(DISTINCT, str(n), DML_NUMBA_CACHE_DIR=cache)[0]
        table.add(f"one distinct kernel, compiled ({n} kernels)", f"{compiled:.2f} MiB")
        table.add(f"one distinct kernel, loaded from the disk cache ({n} kernels)",
                  f"{loaded:.2f} MiB")
        grown, evictions = _run(ROTATION, DML_NUMBA_CACHE_DIR=cache,
                                DML_NUMBA_MEMORY_CACHE_SIZE="4")
        table.add("12 shapes in rotation through a memory cache of 4 entries, 4,000 calls",
                  f"{grown:+.1f} MiB ({evictions:.0f} evictions)")
    return table


if __name__ == "__main__":
    run(quick="--quick" in sys.argv)
