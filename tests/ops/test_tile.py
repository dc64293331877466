"""Tile against numpy.tile, every dtype, ranks 1-8."""
import numpy as np
import pytest

import dml_numba as dml
from tests.helpers import DTYPES, assert_exact, random_array


@pytest.mark.parametrize("shape,repeats", [
    ((2, 3), (3, 2)), ((1, 1, 2, 3), (1, 1, 3, 3)), ((4,), (5,)), ((3, 1, 2), (1, 4, 1)),
    ((2, 1, 2, 1, 2, 1, 2, 1), (1, 2, 1, 2, 1, 2, 1, 2)),
], ids=str)
def test_matches_numpy_tile(device, shape, repeats):
    x = random_array(shape, np.int16)
    assert_exact(dml.tile(x, repeats, device=device), np.tile(x, repeats))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_every_dtype(device, dtype):
    x = random_array((2, 3, 2), dtype)
    assert_exact(dml.tile(x, (2, 1, 3), device=device), np.tile(x, (2, 1, 3)))
