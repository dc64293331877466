"""Mutation testing in parts: ``python3 -m tests.mutation PART DEST``.

The modules that compute answers are too many for one run on a small machine, and each needs its
own selection of tests. A part names the modules it mutates and the fast tests that judge them;
this command copies the repository's tracked files to ``DEST`` with the part's selection as the
``[tool.mutmut]`` configuration, so several parts can run side by side (each in its own folder)
and the repository's own configuration stays as it is. Then:

    cd DEST && python3 -m mutmut run --max-children 2 && python3 -m mutmut results

``python3 -m tests.mutation`` alone lists the parts; ``python3 -m tests.mutation recheck DEST``
runs the second stage below for every survivor of a finished run.

The emitters' tests run the golden sources first (``tests/golden``: a mutant of an emitter that
changes any generated kernel of the catalogue fails there in about a second, nothing compiled),
then the tests that compile and run kernels, for the code outside the generated text (buffers,
weight packing, drivers, the SIMD intrinsics, launches). Each mutant's process is forked from a
server that imported the tests and ran none (``process_isolation = "forkserver"``); the
mutants share the disk cache the clean run filled (entries are keyed by their generated source),
but a mutant of the SIMD intrinsics, whose kernels keep their source and change their machine
code, gets one of its own (``tests/conftest.py``). What the tool cannot see, tests reaching
the code in a subprocess or outside the selection, is the second stage (:data:`RECHECK`; by hand,
``MUTANT_UNDER_TEST=<name> python3 -m pytest -n 0 <tests>`` in ``DEST/mutants``).
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMON = ["-p", "no:cacheprovider"]

#: part -> (modules mutated, tests run for each mutant)
PARTS: dict[str, tuple[list[str], list[str]]] = {
    # every CPU and CUDA kernel writer: the catalogue's generated sources first (a mutant
    # that changes a generated kernel fails there, nothing compiled), then the tests that
    # compile and run kernels (the code outside the generated text: buffers, packing,
    # drivers, intrinsics, launches), with the slow ones (every tile and variant of a case)
    "emitters": (["dml_numba/cpu/_emit.py", "dml_numba/cpu/_simd.py", "dml_numba/cpu/_share.py",
                  "dml_numba/cpu/lp_pooling.py", "dml_numba/cpu/convolution/*",
                  "dml_numba/cpu/_pooling.py", "dml_numba/cpu/max_pooling.py",
                  "dml_numba/cpu/average_pooling.py", "dml_numba/cpu/element_wise.py",
                  "dml_numba/cpu/batch_normalization.py", "dml_numba/cpu/gemm.py",
                  "dml_numba/cpu/join.py", "dml_numba/elements/*",
                  "dml_numba/cuda/_emit.py", "dml_numba/cuda/_planes.py",
                  "dml_numba/cuda/lp_pooling.py", "dml_numba/cuda/convolution/*",
                  "dml_numba/cuda/_pooling.py", "dml_numba/cuda/element_wise.py",
                  "dml_numba/cuda/batch_normalization.py", "dml_numba/cuda/gemm.py",
                  "dml_numba/cuda/join.py"],
                 ["tests/test_golden.py", "tests/unit/test_simd.py", "tests/unit/test_share.py",
                  "tests/test_kernel_corners.py",
                  "tests/ops/test_convolution_blocked.py", "tests/unit/test_blocked_plan.py",
                  "tests/ops/test_convolution_algorithms.py", "tests/ops/test_lp_pooling.py",
                  "tests/ops/test_max_pooling.py", "tests/ops/test_average_pooling.py",
                  "tests/ops/test_element_wise.py", "tests/ops/test_batch_normalization.py",
                  "tests/ops/test_gemm.py", "tests/ops/test_join.py",
                  *(f"tests/test_graph.py::test_mode_padding_folds_into_{k}"
                    for k in ("the_blocked_convolution", "lp_pooling", "the_direct_kernel")),
                  "tests/test_tune.py::test_the_cost_model_is_the_documented_formula",
                  "tests/cuda", "-k", "not dask", "--runslow"]),
    # the serial/parallel policy and fork safety, with an injected clock
    "policy": (["dml_numba/cpu/_adaptive.py", "dml_numba/_threads.py"],
               ["tests/unit/test_threads_parts.py", "tests/test_real_program.py",
                "tests/ops/test_parallel.py", "-k",
                "not forked_children and not forked_before and not names_a_forked"]),
    # the disk cache: trust rules, entries, housekeeping (in-process tests; the subprocess ones
    # import the installed package, which the tool does not mutate)
    "cache": (["dml_numba/_diskcache.py", "dml_numba/_trust.py", "dml_numba/_housekeeping.py"],
              ["tests/unit/test_disk_cache_parts.py", "tests/test_cache_trust.py",
               "tests/test_cache_paths.py", "tests/test_cache.py",
               "-k", "not new_process and not racing"]),
    # the functional layer's argument forms and memo
    "functional": (["dml_numba/functional/*"],
                   ["tests/test_functional_parameters.py", "tests/ops/test_seeds.py",
                    "tests/test_interop.py", "-m", "not cuda", "-k", "not dask"]),
    # the tuner and its wisdom: a fake clock and fake kernels, and one real tuning
    "tune": (["dml_numba/cpu/convolution/tune.py", "dml_numba/_wisdom.py",
              "dml_numba/_machine.py"],
             ["tests/test_tune.py"]),
    # the ONNX loader: its mappings, the constant evaluation, the patterns, the views
    "onnx": (["dml_numba/onnx.py", "dml_numba/_onnx/*"],
             ["tests/test_onnx.py", "tests/test_onnx_cnn.py", "-m", "not cuda and not slow"]),
    # the gradients, through PyTorch's checks
    "grad": (["dml_numba/grad/*"], ["tests/test_torch_ops.py"]),
    # the Dask layer, on the threaded scheduler (forked schedulers hang under the tool), its
    # blocks on the vectorised device (tests/conftest.py sets it under mutation: nothing is
    # compiled again per mutant)
    "dask": (["dml_numba/dask/*"],
             ["tests/test_dask.py", "tests/test_dask_parts.py", "tests/test_kernel_corners.py",
              "-m", "not cuda",
              "-k", "dask and not process and not distributed and not cluster and not zarr"]),
}


#: second stage: a survivor of the part, or a mutant the tool found no test for, is run again
#: against tests that reach its code where the tool cannot see them: in a subprocess (NVIDIA's
#: compiler, which the simulator's process cannot load) or outside the part's selection (what the
#: profile and the tuner report, a graph's folded padding). The longest prefix of the mutant's
#: name that matches picks.
RECHECK: dict[str, list[str]] = {
    "dml_numba.cuda.": ["tests/cuda/test_ptx.py"],
    "dml_numba.cpu.": ["tests/ops/test_parallel.py", "tests/test_profile.py",
                       "tests/test_busy_machine.py", "-m", "not cuda"],
    # the convolution package's own functions: the padding-fold decision, the tuner's entry,
    # emit(key)
    "dml_numba.cpu.convolution.x_": [
        "tests/test_graph.py", "tests/test_tune.py", "tests/ops/test_convolution_algorithms.py",
        "-k", "fold or input_padding or mode_comes_from or forced_algorithm or another_host "
              "or fastest_candidate or emit"],
}


def recheck_tests(mutant: str) -> list[str] | None:
    best = max((p for p in RECHECK if mutant.startswith(p)), key=len, default=None)
    return None if best is None else RECHECK[best]


def tool_stats(dest: Path) -> dict:
    """The tool's record of which tests reach which function (``mutmut-stats.json``)."""
    import json

    return json.loads((dest / "mutants" / "mutmut-stats.json").read_text())


def mapped_tests(stats: dict, mutant: str) -> list[str]:
    """The tests the tool maps to ``mutant``'s function in ``stats``: what it ran for the
    mutant, or would run now."""
    function = re.sub(r"__mutmut_\d+$", "", mutant)
    return sorted(stats["tests_by_mangled_function_name"].get(function, []))


def _verdict(dest: Path, mutant: str, tests: list[str], timeout: float) -> str:
    import os

    env = {**os.environ, "MUTANT_UNDER_TEST": mutant}
    try:
        rc = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-n", "0",
                             "-p", "no:cacheprovider", *tests], cwd=dest / "mutants",
                            env=env, capture_output=True, timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    return "survived" if rc == 0 else "killed" if rc in (1, "timeout") else f"error {rc}"


def recheck(dest: Path, timeout: float = 900) -> int:
    """Run every survivor of ``dest``'s first stage against the tests the tool maps to it, as
    they are now (the tool keeps a verdict while its function's source is unchanged, even where
    tests were added since), then against its module's second-stage tests (:data:`RECHECK`);
    print each verdict and the totals."""
    out = subprocess.run([sys.executable, "-m", "mutmut", "results"], cwd=dest,
                         capture_output=True, text=True).stdout
    survivors = [line.split(":")[0].strip() for line in out.splitlines()
                 if line.strip().endswith(("survived", "no tests"))]
    stats = tool_stats(dest)
    killed = again = 0
    for name in survivors:
        verdict, stage = "survived", "mapped"
        tests = mapped_tests(stats, name)
        if tests:
            verdict = _verdict(dest, name, tests, timeout)
            again += verdict == "killed"
        if verdict != "killed":
            stage = "second"
            tests = recheck_tests(name)
            if tests is None:
                print(f"no tests  {name}", flush=True)
                continue
            verdict = _verdict(dest, name, tests, timeout)
        killed += verdict == "killed"
        print(f"{verdict:9s} {name} ({stage})", flush=True)
    print(f"{killed} of {len(survivors)} survivors killed ({again} by the tests the tool maps to "
          "them, run again; the rest by their module's second-stage tests)")
    return 0


#: parts whose mutants' processes are forked from a server that has imported the tests but run
#: none: kernels compiled and pools started by the tool's own runs must not be inherited
FORKSERVER = {"emitters"}


#: modules a part's patterns match that another part judges
EXCLUDE = {"emitters": ["dml_numba/cpu/convolution/tune.py"]}


def config(part: str) -> str:
    mutate, tests = PARTS[part]
    return "\n".join([
        "[tool.mutmut]",
        *(['process_isolation = "forkserver"'] if part in FORKSERVER else []),
        *([f"do_not_mutate = {EXCLUDE[part]!r}".replace("'", '"')] if part in EXCLUDE else []),
        'source_paths = ["dml_numba"]',
        f"only_mutate = {mutate!r}".replace("'", '"'),
        f"pytest_add_cli_args_test_selection = {tests + COMMON!r}".replace("'", '"'),
        'pytest_add_cli_args = ["-x", "-q", "-n", "0"]',
        'also_copy = ["docs", "README.md", "CONTRIBUTING.md", "benchmarks", "tests"]',
        "",
    ])


def prepare(part: str, dest: Path) -> None:
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    for f in files:
        target = dest / f
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, target)
    pyproject = (dest / "pyproject.toml").read_text()
    section = re.compile(r"^\[tool\.mutmut\]\n(?:(?!\[).*\n|\n)*", re.M)
    (dest / "pyproject.toml").write_text(section.sub(config(part) + "\n", pyproject, count=1))


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "recheck":
        return recheck(Path(argv[1]))
    if len(argv) != 2 or argv[0] not in PARTS:
        for name, (mutate, tests) in PARTS.items():
            print(f"{name:11s} mutates {', '.join(mutate)}\n{'':11s} tests   {' '.join(tests)}")
        return 0 if not argv else 2
    dest = Path(argv[1])
    if dest.exists() and any(dest.iterdir()):
        print(f"{dest} exists and is not empty", file=sys.stderr)
        return 2
    prepare(argv[0], dest)
    print(f"part {argv[0]!r} ready in {dest}: cd {dest} && python3 -m mutmut run --max-children 2")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
