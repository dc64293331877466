"""Every CUDA kernel specialisation the test run created (and the whole case catalogue) compiled
to PTX for compute capability 8.0 and 9.0 with NVIDIA's compiler, then assembled by ptxas (through
nvJitLink) to check that no kernel spills registers and that the tiled kernels' launch bounds
reach the PTX, in a process without the simulator: the
simulator runs plain Python and accepts code the real compiler rejects."""
import os
import pickle
import subprocess
import sys

import pytest

import dml_numba as dml
from tests.cases import catalogue

SCRIPT = """
import os, pickle, sys
from concurrent.futures import ProcessPoolExecutor
import dml_numba.cuda as dc
from dml_numba.cuda._launch import block_size


def kernels(descs, built=None):
    \"\"\"Every kernel of every descriptor (convolution's direct and tiled too; with ``built``,
    the keys of the kernels a run built, those of its kernels only, or all of a descriptor's
    where none of them is among its variants), one of each that NVIDIA's compiler sees
    differently: its source, argument types, launch bounds and the block its shared memory is
    written for decide its PTX and resources (kernels of descriptors that differ only where the
    source does not are the same kernel).\"\"\"
    seen = {}
    for desc in descs:
        ks = [(opts, dc.kernel_for(desc, **opts)) for opts in dc.kernel_variants(desc)]
        if built is not None and any(k.key in built for _, k in ks):
            ks = [(opts, k) for opts, k in ks if k.key in built]
        for opts, k in ks:
            seen.setdefault((k.source, tuple(k.arg_types), k.launch_bounds, k.block),
                            (desc, opts, k.launch_bounds is not None))
    return list(seen.values())


def check(job):
    desc, opts, archs = job
    k = dc.kernel_for(desc, **opts)
    for cc in archs:
        ptx = k.ptx(cc)
        assert f".target sm_{cc[0]}{cc[1]}" in ptx, (desc, cc)
        if k.launch_bounds:  # the tiled kernels' bounds reach the PTX
            threads, blocks = k.launch_bounds
            assert f".maxntid {threads}, 1, 1" in ptx, (desc, opts, k.launch_bounds)
            assert f".minnctapersm {blocks}" in ptx, (desc, opts, k.launch_bounds)
        for r in dc.resource_usage(desc, cc, **opts):  # ptxas through nvJitLink: real registers
            assert r["spill_bytes"] == 0, (desc, opts, r)
            assert r["registers"] <= 255 and r["occupancy"] > 0, (desc, opts, r)
            # the block size reported is the one launched: the tiles' own, or from these
            # very resources
            assert r["threads_per_block"] == (
                k.block or block_size(r["registers"], r["shared_bytes"], cc)), (desc, opts, r)
            assert (r["shared_bytes"] > 0) == (k.block is not None), (desc, opts, r)
    return 1


if __name__ == "__main__":
    descs, built = pickle.load(open(sys.argv[1], "rb"))
    # sm_80 for every kernel; sm_90 too for every kernel ("both") or for those with launch
    # bounds, whose shared memory and bounds it checks
    jobs = [(desc, opts, ((8, 0), (9, 0)) if sys.argv[2] == "both" or bounded else ((8, 0),))
            for desc, opts, bounded in kernels(descs, built)]
    workers = min(4, os.cpu_count() or 1, max(1, len(jobs)))
    with ProcessPoolExecutor(workers) as pool:  # NVIDIA's compiler on every core
        done = sum(pool.map(check, jobs, chunksize=max(1, len(jobs) // (4 * workers))))
    print("descriptors", len(descs), "kernels", done)
"""


def _real_compiler_env() -> dict:
    """This environment without the simulator, importing the very package this run imports
    (not another copy installed elsewhere, such as the one a mutation-testing tool's copy was
    made from)."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    here = os.path.dirname(os.path.dirname(os.path.abspath(dml.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    return env


def _compile_all(descs, tmp_path, archs="both", built=None):
    """Every kernel of ``descs`` (or those of them whose keys are in ``built``) through NVIDIA's
    compiler for sm_80, and for sm_90 too (``archs`` "both"; otherwise only the kernels with
    launch bounds)."""
    path = tmp_path / "descs.pkl"
    path.write_bytes(pickle.dumps((sorted(descs, key=repr), built)))
    script = tmp_path / "ptx_check.py"
    script.write_text(SCRIPT)
    out = subprocess.run([sys.executable, str(script), str(path), archs], env=_real_compiler_env(),
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-4000:]
    kernels = int(out.stdout.split("kernels")[-1])
    assert f"descriptors {len(descs)} kernels" in out.stdout and kernels >= 1


def _catalogue_descs() -> set:
    return {dml._api.packed(d.canonical()) for d, _ in catalogue().values()}


@pytest.mark.subprocess
def test_the_case_catalogue_compiles_to_ptx(tmp_path):
    """The whole catalogue (every operator, mode and dtype class), in any worker, any time."""
    pytest.importorskip("numba.cuda")
    descs = _catalogue_descs()
    assert len(descs) >= len(catalogue()) - 1
    _compile_all(descs, tmp_path)


@pytest.mark.ptx
def test_every_cuda_kernel_the_run_created_compiles_to_ptx(tmp_path):
    """Every kernel the CUDA tests built (they run before this: the suite groups them, and
    each writes down the kernels it built, tests/conftest.py), beyond the catalogue checked
    above: for sm_80, and for sm_90 those with launch bounds (the catalogue has every kind of
    kernel on both). A descriptor none of whose built kernels its variants name (a test that
    built a kernel on a plan of its own) has all its variants compiled."""
    pytest.importorskip("numba.cuda")
    from tests.conftest import _cuda_keys, recorded_cuda_keys, recording_processes

    # every kernel was built in this process, before this test (the CUDA group is one
    # worker's, in order): one built in another worker could come after this check
    others = recording_processes() - {os.getpid()}
    assert not others, (
        f"processes {sorted(others)} built CUDA kernels beside this check's {os.getpid()}: "
        "the CUDA group (tests/conftest.py) was not kept to one pytest-xdist worker")
    built = _cuda_keys() | recorded_cuda_keys()
    descs = {k.desc for k in built} - _catalogue_descs()
    if not descs:
        pytest.skip("no CUDA test ran before this one (run the whole suite or tests/)")
    _compile_all(descs, tmp_path, archs="sm_80, and sm_90 where bounded", built=built)


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


def test_block_size_comes_from_the_kernels_resources():
    """The launch size follows the registers and shared memory (hand-computed, sm_80):
    40 registers: 256 threads give 6 blocks = 75%, 128 give 12 = 75% (tie: 256 preferred),
    512 give 3 = 75%, 1024 give 1 = 50%. 72 registers (2304 per warp, 28 warps of registers):
    128 threads 7 blocks = 43.75%, 256 threads 3 blocks = 37.5%, 512 one block = 25%: 128.
    168 registers (5376 per warp, 12 warps): only 128 (3 blocks, 18.75%) and 256 (1, 12.5%) fit."""
    from dml_numba.cuda._launch import block_size, occupancy

    assert block_size(40, 0, (8, 0)) == 256
    assert block_size(72, 0, (8, 0)) == 128 and occupancy(72, 0, 128, (8, 0)) == 0.4375
    assert block_size(168, 0, (8, 0)) == 128 and occupancy(168, 0, 1024, (8, 0)) == 0
    # shared memory bounds blocks per SM: 40 KiB a block fits 4 on sm_80 (164 KiB): 256
    # threads then give 4 x 8 warps = 50%, 512 give 4 x 16 = 100% (1024 ties it, later in order)
    assert block_size(32, 40 * 1024, (8, 0)) == 512



INFO_SCRIPT = """
import dml_numba.__main__ as cli
import dml_numba.workloads as wl
from dml_numba.workloads import convolution, padding
from dml_numba.ops.padding import PaddingMode
wl.suite = lambda quick: [
    wl.workload("convolution", "tiny conv", convolution.spec((1, 8, 6, 5), (8, 8, 3, 3), (1, 1),
                                                            (1, 1), 1), "flops", True),
    wl.workload("padding", "tiny pad", padding.spec((1, 2, 4, 40), (0, 0, 1, 1), (0, 0, 1, 1),
                                                    PaddingMode.REFLECTION), "bytes"),
]
cli._cuda_kernels()
"""


@pytest.mark.ptx
def test_info_lists_every_kernel_with_its_resources():
    """``info --cuda-kernels``: a line per kernel a workload can run and architecture, the
    default marked, from NVIDIA's compiler (no simulator)."""
    pytest.importorskip("numba.cuda")
    out = subprocess.run([sys.executable, "-c", INFO_SCRIPT], env=_real_compiler_env(),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("tiny")]
    kernels = [(ln[:40].strip(), ln[41:65].strip(), ln[66:72].strip()) for ln in lines]
    assert kernels == [("tiny conv", "convolution_tiled *", "sm_80"),
                       ("tiny conv", "convolution_tiled *", "sm_90"),
                       ("tiny conv", "convolution", "sm_80"),
                       ("tiny conv", "convolution", "sm_90"),
                       ("tiny pad", "padding *", "sm_80"),
                       ("tiny pad", "padding *", "sm_90")], out.stdout
    for ln in lines:  # registers, spills, shared bytes, threads, occupancy
        regs, spill, smem, threads, occ = ln[72:].split()
        assert 0 < int(regs) <= 255 and int(spill) == 0 and occ.endswith("%")
        assert (int(smem) > 0) == ("tiled" in ln) and int(threads) in (128, 256, 512, 1024)
