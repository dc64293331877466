"""Phase 1 of the blocked kernels (``dml_numba/cpu/convolution/blocked/padding.py``): the padded
row stored by stride phases, run as plain Python over every row geometry of a grid (the
generated lines executed with NumPy stand-ins for the vector intrinsics, which read and write
exactly the lanes they name), against the definition: padded element ``j`` of a row at
``(j % split) * q + j // split``. The compiled kernels that use it are checked against brute
force in tests/ops/test_convolution_blocked.py."""
import numpy as np
import pytest

from dml_numba._codegen import SourceWriter
from dml_numba.cpu.convolution.blocked import padding


def _intrinsics(reads: list) -> dict:
    """The vector intrinsics a padded row's lines call, on NumPy arrays; each read of ``x``
    recorded as the (first, last) elements it spans."""
    def vload(a, i, lanes):
        reads.append((i, i + lanes - 1))
        return a[i:i + lanes].copy()

    def vload_stride(a, i, stride, lanes):
        reads.append((i, i + (lanes - 1) * stride))
        return a[i:i + (lanes - 1) * stride + 1:stride].copy()

    def vstore(a, i, v):
        a[i:i + len(v)] = v

    def vshuffle(a, b, picks):
        return np.concatenate([a, b])[[int(p) for p in picks.split(",")]]

    return {"vload": vload, "vload_stride": vload_stride, "vstore": vstore,
            "vstore_raw": vstore, "vshuffle": vshuffle, "vzero": lambda n: np.zeros(n)}


def _row(lanes, width, split, lo, n_copy):
    """The row ``_emit_split_row`` writes from ``x`` (NaN where nothing was written) and the
    spans of ``x`` it read."""
    w = SourceWriter()
    with w.block("def row(x, xp, src, dst):"):
        padding._emit_split_row(w, lanes, width, split, lo, n_copy)
    reads = []
    scope = _intrinsics(reads)
    exec(w.text(), scope)
    x = np.arange(1.0, n_copy + 1.0)
    xp = np.full(width, np.nan)
    scope["row"](np.concatenate([[np.nan] * 3, x, [np.nan] * 40]), xp, 3, 0)
    return xp, [(a - 3, b - 3) for a, b in reads], w.text()


def _expected(width, split, lo, n_copy):
    q = width // split
    padded = np.zeros(width)
    padded[lo:lo + n_copy] = np.arange(1.0, n_copy + 1.0)
    out = np.zeros(width)
    for j in range(split * q):
        out[(j % split) * q + j // split] = padded[j]
    return out


@pytest.mark.parametrize("split", [2, 3])
@pytest.mark.parametrize("lanes", [4, 8, 16])
def test_rows_stored_by_phase_are_the_definition(split, lanes):
    """Every row of widths 2..60 with 0..2 leading padding elements and a copied run that ends
    0..3 elements before the row: each element written (nothing left NaN), the values of the
    definition, and no read outside the run copied. Stride 2 takes pairs of vectors where
    both phases have a vector's worth; where one phase has one more element than the other
    and a vector's worth is left after the pairs, that phase's vector runs on its own."""
    seen_pairs = seen_single = 0
    for width in range(2 * split, 61):
        for lo in range(3):
            for tail in range(4):
                n_copy = width - (width % split) - lo - tail
                if n_copy < 1:
                    continue
                xp, reads, src = _row(lanes, width, split, lo, n_copy)
                assert not np.isnan(xp).any(), (width, lo, tail)
                np.testing.assert_array_equal(xp, _expected(width, split, lo, n_copy),
                                              err_msg=str((width, lo, tail)))
                assert all(0 <= a <= b < n_copy for a, b in reads), (width, lo, tail)
                seen_pairs += "vshuffle" in src
                seen_single += "vshuffle" in src and src.count("vload_stride") > 0
    if split == 2:
        assert seen_pairs and seen_single
    else:
        assert not seen_pairs
