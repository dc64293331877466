"""Shared fixtures: an isolated disk cache, the CUDA simulator when there is no GPU, devices."""
import os
import shutil
import tempfile

import pytest

# Keep the test run's generated modules apart from the user's cache (unless asked otherwise);
# a folder made here is removed when the session ends.
_OWN_CACHE = None
if "DML_NUMBA_CACHE_DIR" not in os.environ:
    _OWN_CACHE = os.environ["DML_NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="dml_numba_test_cache_")
# Numba's CUDA simulator must be chosen before numba.cuda is first imported.
if "NUMBA_ENABLE_CUDASIM" not in os.environ and not shutil.which("nvidia-smi"):
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"


def pytest_unconfigure(config):
    if _OWN_CACHE:
        shutil.rmtree(_OWN_CACHE, ignore_errors=True)


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", help="run tests marked slow")


def pytest_collection_modifyitems(config, items):
    # the PTX check compiles every CUDA kernel the other tests created: run it last
    items.sort(key=lambda item: "ptx" in item.keywords)
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: opt in with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


HOST_DEVICES = ["numpy", "cpu"]
ALL_DEVICES = HOST_DEVICES + ["cuda"]


@pytest.fixture(params=HOST_DEVICES)
def device(request):
    """Every host device; the CUDA device has its own tests in tests/cuda (tiny shapes)."""
    return request.param


if "MUTANT_UNDER_TEST" in os.environ:  # mutation testing (docs/TESTING.md)
    @pytest.fixture(autouse=True)
    def _fresh_memory_cache():
        """Every test builds its operators again: a compiled operator memoised by an earlier
        test would hide a mutant in the code that builds it."""
        import dml_numba

        dml_numba.cache.clear()
        yield


def pytest_make_parametrize_id(config, val, argname):
    """Test ids without backslashes (regex escapes in expected messages): pytest prints a
    backslash in an id doubled, so such a test could not be selected by its printed id."""
    if isinstance(val, str) and "\\" in val:
        return val.replace("\\", "")
    return None
