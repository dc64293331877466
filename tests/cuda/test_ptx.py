"""Every CUDA kernel specialisation the test run created (and the whole case catalogue) compiled
to PTX for compute capability 8.0 and 9.0 with NVIDIA's compiler, then assembled by ptxas (through
nvJitLink) to check that no kernel spills registers, in a process without the simulator: the
simulator runs plain Python and accepts code the real compiler rejects."""
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
        for r in dc.resource_usage(desc, cc):  # ptxas through nvJitLink: the real register use
            assert r["spill_bytes"] == 0, (desc, r)
            assert r["registers"] <= 255 and r["occupancy"] > 0, (desc, r)
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


def test_occupancy_calculator_and_log_parsing():
    from dml_numba.cuda._resources import occupancy, parse_ptxas

    log = ("ptxas info    : Function properties for k\n"
           "ptxas         .     8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
           "ptxas info    : Used 40 registers, used 0 barriers, 1024 bytes smem\n")
    assert parse_ptxas(log) == {"registers": 40, "spill_bytes": 8, "stack_bytes": 8,
                                "shared_bytes": 1024}
    # NVIDIA's calculator, sm_80, 256 threads: 32 regs -> 8 blocks, 64 warps = 100%;
    # 40 regs (1280 per warp) -> 51 warps of registers -> 6 blocks = 48 warps = 75%;
    # 64 regs -> 4 blocks = 50%; 128 regs -> 2 blocks = 25%
    assert occupancy(32, 0, 256, (8, 0)) == 1.0
    assert occupancy(40, 0, 256, (8, 0)) == 0.75
    assert occupancy(64, 0, 256, (8, 0)) == 0.5
    assert occupancy(128, 0, 256, (8, 0)) == 0.25
    assert occupancy(32, 100 * 1024, 256, (8, 0)) == 0.125  # one block fits the shared memory
