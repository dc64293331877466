"""The generated sources are the golden ones (``tests/golden``): every kernel of the test
catalogue and of the blocked kernels' cases by digest, a handful of representative kernels in
full. A change to an emitter that changes generated code fails here until the golden files are
regenerated (``python3 -m tests.golden --write``) and the diff reviewed."""
import difflib

import pytest

from tests import golden


@pytest.fixture(scope="module")
def generated():
    return golden.generate()


@pytest.mark.cuda  # it builds (does not run) CUDA kernels too
def test_every_catalogue_kernel_is_generated_as_before(generated):
    new, old = generated[0], golden.stored()[0]
    assert set(new) == set(old), sorted(set(new) ^ set(old))
    changed = sorted(k for k in new if new[k] != old[k])
    # the representative kernels too (their own tests below show the diff): a tool that maps
    # each test to the code it runs credits the shared fixture's generation to this test only
    changed += sorted(k for k, src in generated[1].items() if src != golden.stored()[1][k])
    assert not changed, f"{len(changed)} generated sources changed: {changed[:20]}"


@pytest.mark.cuda
@pytest.mark.parametrize("name", sorted(golden.representative()))
def test_representative_kernels_are_generated_as_before(generated, name):
    new, old = generated[1][name], golden.stored()[1][name]
    assert new == old, "\n".join(difflib.unified_diff(old.splitlines(), new.splitlines(),
                                                     "golden", "generated", lineterm="", n=1))


def test_the_golden_host_is_not_this_one_by_accident():
    """Generated for a fixed host whatever this machine is: the blocked tiles in the golden
    dense kernel are 16 lanes wide."""
    dense = (golden.HERE / "cpu_dense_3x3_flat_staged.py").read_text()
    assert "convolution_blocked-staged 16 " in dense
