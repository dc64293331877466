"""Shared fixtures: an isolated disk cache, the CUDA simulator when there is no GPU, devices, and
the grouping that lets the suite run on every core (pytest-xdist) with the PTX check last."""
import atexit
import os
import shutil
import tempfile

import pytest

# The run's generated modules go to a folder of its own, never to the user's cache (whatever
# DML_NUMBA_CACHE_DIR says): made once by the controlling process, shared by pytest-xdist's
# workers (they inherit the environment, so a kernel compiled by one is loaded by the others),
# removed when the run ends. Tests about the default location set their own environment.
_SESSION = "DML_NUMBA_TEST_SESSION_DIR"
_OWN_CACHE = None
if _SESSION not in os.environ:
    _OWN_CACHE = os.environ[_SESSION] = tempfile.mkdtemp(prefix="dml_numba_test_cache_")
os.environ["DML_NUMBA_CACHE_DIR"] = os.environ[_SESSION]
# The static algorithm choice, not the tuner's timing: the suite is deterministic (the tuner's
# own tests pass tune=... or set the variable themselves).
os.environ["DML_NUMBA_TUNE"] = "off"
# The automatic variant decides on its own calls' times, not on the machine's load: the suite's
# workers load each other, which would have every operator build its serial variant (the
# load watch's own tests give it a load of their choosing).
os.environ["DML_NUMBA_LOAD_WATCH"] = "0"
# A compiled graph's steps one by one: a native run's function is built in a background thread
# that would outlive the test whose graph started it (tests/test_native_steps.py turns it on
# and builds in the calling thread).
os.environ["DML_NUMBA_NATIVE_STEPS"] = "0"
# Numba's CUDA simulator must be chosen before numba.cuda is first imported.
if "NUMBA_ENABLE_CUDASIM" not in os.environ and not shutil.which("nvidia-smi"):
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"


# The CUDA kernels the group's tests build are also written down here (one file a process), so
# the PTX check sees them whatever process it runs in.
_RECORD = "DML_NUMBA_TEST_CUDA_KERNELS_DIR"
_OWN_RECORD = None
if _RECORD not in os.environ:
    _OWN_RECORD = os.environ[_RECORD] = tempfile.mkdtemp(prefix="dml_numba_test_cuda_")


@atexit.register
def _remove_own_folders():
    """The folders made above, removed when the process ends (not when a pytest session does:
    a tool that runs pytest twice in one process, as mutation testing does, finds them still
    there the second time, where the environment still names them)."""
    for own in (_OWN_CACHE, _OWN_RECORD):
        if own:
            shutil.rmtree(own, ignore_errors=True)


def recording_processes() -> set:
    """The process ids that wrote down CUDA kernels in this run."""
    from pathlib import Path

    return {int(path.stem) for path in Path(os.environ[_RECORD]).glob("*.pkl")}


def recorded_cuda_keys() -> set:
    """The keys of every CUDA kernel a test of the group built, in any process."""
    import pickle
    from pathlib import Path

    keys = set()
    for path in Path(os.environ[_RECORD]).glob("*.pkl"):
        with open(path, "rb") as f:
            while True:
                try:
                    keys.update(pickle.load(f))
                except EOFError:
                    break
    return keys


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", help="run tests marked slow")


#: tests that build CUDA kernels run in one pytest-xdist worker, in collection order, so the
#: PTX check (last) sees every kernel the run created
CUDA_GROUP = "cuda-kernels"


def _builds_cuda_kernels(item) -> bool:
    if item.get_closest_marker("subprocess") is not None:
        return False
    params = getattr(getattr(item, "callspec", None), "params", {})
    return (item.get_closest_marker("cuda") is not None or item.get_closest_marker("ptx")
            is not None or "/cuda/" in item.nodeid.replace("\\", "/") or "cuda" in item.name
            or any(_names_cuda(v) for v in params.values()))


def _names_cuda(value) -> bool:
    if isinstance(value, str):
        return value == "cuda"
    return isinstance(value, tuple) and any(isinstance(v, str) and v == "cuda" for v in value)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    # before pytest-xdist's own hook, which reads the group markers added here (a plugin's
    # hook registered after this file runs first unless this one asks to: without it no test
    # had a group and the CUDA tests ran in any worker, some after the PTX check)
    # the PTX check compiles every CUDA kernel the other tests created: run it last; under
    # mutation testing the golden sources first (a mutant that changes a generated kernel fails
    # there in a second, before anything is compiled)
    mutation = "MUTANT_UNDER_TEST" in os.environ
    items.sort(key=lambda item: (mutation and "test_golden.py" not in item.nodeid,
                                 "ptx" in item.keywords))
    for item in items:
        if _builds_cuda_kernels(item):
            item.add_marker(pytest.mark.xdist_group(CUDA_GROUP))
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: opt in with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def _cuda_keys() -> set:
    """The CUDA kernel keys this process has built (kept kernels and the memory cache)."""
    import sys

    if "dml_numba.cuda" not in sys.modules:
        return set()
    import dml_numba
    from dml_numba._cache import KernelKey

    table = dml_numba.cache
    return {k for k in list(table._kept) + list(table._table)
            if isinstance(k, KernelKey) and k.backend == "cuda"}


@pytest.fixture(autouse=True)
def _cuda_kernels_stay_in_their_group(request):
    """A test outside the CUDA group must not build CUDA kernels: under pytest-xdist it could
    run in another worker, after the PTX check, and its kernels would escape it."""
    if _builds_cuda_kernels(request.node):
        before = _cuda_keys()
        yield
        new = _cuda_keys() - before
        if new:  # written down for the PTX check (this run's own private folder)
            import pickle

            with open(os.path.join(os.environ[_RECORD], f"{os.getpid()}.pkl"), "ab") as f:
                pickle.dump(sorted(new, key=repr), f)
        return
    before = _cuda_keys()
    yield
    if _cuda_keys() - before:
        pytest.fail("this test built CUDA kernels but is not in the CUDA group: mark it "
                    "@pytest.mark.cuda (tests/conftest.py)", pytrace=False)


HOST_DEVICES = ["numpy", "cpu"]
ALL_DEVICES = HOST_DEVICES + ["cuda"]


@pytest.fixture(params=HOST_DEVICES)
def device(request):
    """Every host device; the CUDA device has its own tests in tests/cuda (tiny shapes)."""
    return request.param


if "MUTANT_UNDER_TEST" in os.environ:  # mutation testing (docs/TESTING.md)
    # the Dask cases' blocks on the vectorised device: the Dask layer's own arithmetic judged
    # without compiling kernels again for every mutant
    os.environ.setdefault("DML_NUMBA_TEST_DASK_DEVICE", "numpy")
    # a loaded ONNX model is kept under a key of the model and the package's source, which
    # mutants (switched by this variable, not by the source) share: each mutant loads its own
    os.environ["DML_NUMBA_MODEL_CACHE"] = "0"

    #: the disk cache the mutants share: an entry is keyed by its generated source, and the
    #: only machine code a kernel's source does not name is the SIMD intrinsics it imports
    _SHARED_CACHE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                 ".mutation-cache")

    def pytest_sessionstart(session):
        """Each mutant's run gets a CUDA record of its own (the tool may fork every mutant's
        process from one server that imported this file once) and a disk cache: the one the
        clean run filled, shared (a mutant that changes a kernel's source compiles it under
        another name, one that leaves every source as it was loads what the clean run
        compiled), except for a mutant of the SIMD intrinsics, whose kernels keep their source
        and change their machine code: a cache of its own."""
        for name, prefix in ((_SESSION, "dml_numba_test_cache_"),
                             (_RECORD, "dml_numba_test_cuda_")):
            os.environ[name] = tempfile.mkdtemp(prefix=prefix)
        cache = os.environ[_SESSION]
        if not os.environ["MUTANT_UNDER_TEST"].startswith("dml_numba.cpu._simd."):
            os.makedirs(_SHARED_CACHE, mode=0o700, exist_ok=True)
            os.chmod(_SHARED_CACHE, 0o700)
            cache = _SHARED_CACHE
        os.environ["DML_NUMBA_CACHE_DIR"] = cache

    def pytest_sessionfinish(session):
        # removed here: the tool ends its forked processes without running exit handlers
        for name in (_SESSION, _RECORD):
            shutil.rmtree(os.environ[name], ignore_errors=True)

    @pytest.fixture(autouse=True)
    def _fresh_memory_cache():
        """Every test builds its operators again: a compiled operator memoised by an earlier
        test would hide a mutant in the code that builds it."""
        import sys

        import dml_numba

        dml_numba.cache.clear()
        # the tool forks each mutant's process from one that may have run Dask's threaded
        # scheduler: the pool it inherits has no threads here, and a compute would wait forever
        threaded = sys.modules.get("dask.threaded")
        if threaded is not None:
            threaded.default_pool = None
            threaded.pools.clear()
        yield


def pytest_make_parametrize_id(config, val, argname):
    """Test ids without backslashes (regex escapes in expected messages): pytest prints a
    backslash in an id doubled, so such a test could not be selected by its printed id."""
    if isinstance(val, str) and "\\" in val:
        return val.replace("\\", "")
    return None
