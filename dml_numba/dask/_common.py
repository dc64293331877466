"""What the Dask functions share: Dask imported on first use, chunk boundaries and regular
chunks, the input region a block reads (its chunks' spans, stitched)."""
from __future__ import annotations

import itertools
import math
import operator
from fractions import Fraction

import numpy as np

from .._errors import ValidationError


def _da():
    try:
        import dask.array as da
    except ImportError as exc:  # pragma: no cover - the extra is not installed
        raise ImportError("dml_numba.dask needs Dask: pip install 'dml_numba[dask]'") from exc
    return da


def _as_dask(x, owner: str, field: str):
    da = _da()
    if isinstance(x, da.Array):
        return x
    try:
        return da.from_array(np.asarray(x))
    except Exception as exc:  # noqa: BLE001
        raise ValidationError(f"{owner}.{field}: {type(x).__name__} is invalid; expected a "
                              f"dask.array.Array or an array ({exc})") from None


def _boundaries(chunks) -> list[int]:
    out = [0]
    for c in chunks:
        out.append(out[-1] + c)
    return out


def _as_slice(idx):
    """``idx`` as a slice where it is an arithmetic progression with a non-zero step (in order,
    reversed as reflection reads, or strided as slice1 reads), else None."""
    if len(idx) == 1:
        return slice(int(idx[0]), int(idx[0]) + 1)
    step = int(idx[1] - idx[0])
    if step == 0 or np.any(np.diff(idx) != step):
        return None
    stop = int(idx[-1]) + step
    return slice(int(idx[0]), stop if stop >= 0 else None, step)


def _bounded(chunks, itemsize: int) -> tuple:
    """``chunks`` with no block over Dask's ``array.chunk-size`` (128 MiB by default): the
    largest block axis halved until a block fits, that axis then in regular chunks. A tile of a
    one-chunk array (or a wide padding) would otherwise be one block of its whole output, which
    computing any part of allocates."""
    import dask
    from dask.utils import parse_bytes

    limit = parse_bytes(dask.config.get("array.chunk-size"))
    steps = [max(c) for c in chunks]
    if math.prod(steps) * itemsize <= limit:
        return tuple(chunks)
    while math.prod(steps) * itemsize > limit and any(s > 1 for s in steps):
        d = max(range(len(steps)), key=lambda i: steps[i])
        steps[d] = (steps[d] + 1) // 2
    return tuple(tuple(c) if step >= max(c) else _steps(sum(c), step)
                 for c, step in zip(chunks, steps))


def _steps(size: int, step: int) -> tuple[int, ...]:
    """``size`` in chunks of ``step``, the last one smaller."""
    return (step,) * (size // step) + ((size % step,) if size % step else ())


def _regular(size: int, like, scale: Fraction = Fraction(1)) -> tuple[int, ...]:
    """Regular chunks for an output axis of ``size`` (all of one size, the last one smaller),
    the size being the input's chunk size ``like[0]`` times ``scale`` (the output's size per
    input element); one chunk where the input has one. Regular chunks are what Zarr stores
    and most of Dask expect (``to_zarr`` would otherwise rechunk), and blocks of one shape
    share one compiled kernel."""
    if len(like) == 1:
        return (size,)
    return _steps(size, max(1, math.ceil(like[0] * scale)))


def _check_device(device) -> None:
    """The device names a usable device (checked when the graph is built, not at compute)."""
    from .._registry import get_device

    get_device(device)


def _spans(bounds, lo, hi):
    """The input chunks ``[lo, hi)`` of one axis overlaps: (chunk index, slice within it)."""
    out = []
    for j, (a, b) in enumerate(itertools.pairwise(bounds)):
        if a < hi and b > lo:
            out.append((j, slice(max(lo, a) - a, min(hi, b) - a)))
    return out


def _region_task(x, spans_per_axis):
    """A task computing the input region ``spans_per_axis`` covers, from ``x``'s chunk keys."""
    keys = [(x.name,) + tuple(j for j, _ in combo)
            for combo in itertools.product(*spans_per_axis)]
    cuts = [[sl for _, sl in spans] for spans in spans_per_axis]
    if len(keys) == 1:
        return (operator.getitem, keys[0], tuple(c[0] for c in cuts))
    return (_stitch_region, keys, cuts)


def _stitch_region(pieces, cuts):
    """``pieces`` (C order over the per-axis ``cuts``) copied into one new array."""
    offsets = [_boundaries([sl.stop - sl.start for sl in c]) for c in cuts]
    out = np.empty(tuple(o[-1] for o in offsets), pieces[0].dtype)
    for piece, idx in zip(pieces, itertools.product(*(range(len(c)) for c in cuts))):
        at = tuple(slice(offsets[d][j], offsets[d][j + 1]) for d, j in enumerate(idx))
        out[at] = piece[tuple(cuts[d][j] for d, j in enumerate(idx))]
    return out


def _shape(x):
    """Shape and dtype only: what a descriptor builder reads (no array of that size made)."""
    from types import SimpleNamespace

    return SimpleNamespace(shape=tuple(x.shape), ndim=x.ndim, dtype=np.dtype(x.dtype))


def _lazy_operand(value):
    """A Dask array as it is, anything else as a NumPy array (a Dask array of one chunk)."""
    da = _da()
    if isinstance(value, da.Array):
        return value
    return da.from_array(np.asarray(value))


def _da_token(*args):
    import dask

    return dask.base.tokenize(*args)
