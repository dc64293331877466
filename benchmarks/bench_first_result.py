"""A new process's first convolution result with the kernel cache warm, on an idle machine and
beside two processes spinning parallel Numba kernels: what tuning costs a user who did not ask
for it. One dense 3x3 layer, (1, 64, 56, 56); a cache folder of its own, filled by a first
process (not timed); then three new processes, each timed from before ``import dml_numba`` to
its first result.

    python3 -m benchmarks.bench_first_result [--against DIR]

``--against DIR`` runs the same processes on another checkout, alternating with this one.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
import time

from benchmarks._harness import Table
from benchmarks.bench_threading import NEIGHBOUR

CHILD = textwrap.dedent("""
    import time
    t0 = time.perf_counter()
    import numpy as np
    import dml_numba as dml
    x = np.random.default_rng(0).standard_normal((1, 64, 56, 56)).astype(np.float32)
    w = np.random.default_rng(1).standard_normal((64, 64, 3, 3)).astype(np.float32)
    y = dml.convolution(x, w, start_padding=1, end_padding=1)
    print(time.perf_counter() - t0)
""")


def _process(root: str, cache: str) -> float:
    env = {k: v for k, v in os.environ.items() if k != "DML_NUMBA_TUNE"}
    env.update(PYTHONPATH=root, DML_NUMBA_CACHE_DIR=cache)
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                         text=True, timeout=600, cwd=root, check=True)
    return float(out.stdout.split()[-1])


def run(against: str | None = None, processes: int = 3) -> Table:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = [("this tree", here)] + ([("--against", os.path.abspath(against))]
                                     if against else [])
    table = Table("A new process's first convolution result, kernel cache warm (seconds, "
                  "import included)", ["machine", "tree", "filling process"] +
                  [f"process {k + 1}" for k in range(processes)])
    for busy in (False, True):
        for name, root in trees:
            spinners = []
            if busy:
                spinners = [subprocess.Popen([sys.executable, "-c", NEIGHBOUR, "900"])
                            for _ in range(2)]
                time.sleep(1.5)
            try:
                with tempfile.TemporaryDirectory() as cache:
                    first = _process(root, cache)
                    times = [_process(root, cache) for _ in range(processes)]
            finally:
                for p in spinners:
                    p.kill()
                    p.wait()
            table.add("busy (two spinning processes)" if busy else "idle", name,
                      f"{first:.2f}", *(f"{t:.2f}" for t in times))
    return table


if __name__ == "__main__":
    args = sys.argv[1:]
    t = run(args[args.index("--against") + 1] if "--against" in args else None)
    print(t.markdown())
