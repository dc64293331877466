"""The generated CPU loop nest in both variants (prange-parallel and serial) on every catalogue
case agrees with the vectorised device (tiny shapes would otherwise always pick serial)."""
import pytest

import dml_numba as dml
from tests.cases import catalogue, compare

CASES = catalogue()


@pytest.mark.parametrize("parallel", [True, False], ids=["parallel", "serial"])
@pytest.mark.parametrize("name", list(CASES))
def test_cpu_variants_agree_with_numpy(name, parallel):
    desc, inputs = CASES[name]
    ref = dml.compile_operator(desc, "numpy")(*inputs)
    op = dml.compile_operator(desc, "cpu", parallel=parallel)
    assert ("numba.prange" in op.source) == parallel
    compare(desc, op(*inputs), ref)
