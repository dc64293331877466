"""The runnable examples in the public docstrings hold (doctest)."""
import doctest
import importlib

import pytest

MODULES = ["dml_numba", "dml_numba.tensor", "dml_numba.ops.padding", "dml_numba.ops.lp_pooling",
           "dml_numba.ops.convolution", "dml_numba.ops.tile", "dml_numba.ops.slice"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0
