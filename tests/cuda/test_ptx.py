"""Every CUDA kernel specialisation the test run created (and the whole case catalogue) compiled
to PTX for compute capability 8.0 and 9.0 with NVIDIA's compiler, in a process without the
simulator: the simulator runs plain Python and accepts code the real compiler rejects."""
import os
import pickle
import subprocess
import sys

import pytest

import dml_numba as dml
from tests.cases import catalogue

SCRIPT = """
import pickle, sys
import dml_numba.cuda as dc
descs = pickle.load(open(sys.argv[1], "rb"))
for desc in descs:
    k = dc.kernel_for(desc)
    for cc in ((8, 0), (9, 0)):
        ptx = k.ptx(cc)
        assert f".target sm_{cc[0]}{cc[1]}" in ptx, (desc, cc)
print("compiled", len(descs))
"""


@pytest.mark.ptx
def test_every_cuda_kernel_compiles_to_ptx(tmp_path):
    pytest.importorskip("numba.cuda")
    from dml_numba._cache import KernelKey

    created = {k.desc for k in list(dml.cache._table)
               if isinstance(k, KernelKey) and k.backend == "cuda"}
    descs = created | {dml._api.packed(d.canonical()) for d, _ in catalogue().values()}
    path = tmp_path / "descs.pkl"
    path.write_bytes(pickle.dumps(sorted(descs, key=repr)))
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(path)], env=env, capture_output=True,
                         text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-4000:]
    assert f"compiled {len(descs)}" in out.stdout
    assert len(descs) >= len(catalogue())
