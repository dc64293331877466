"""Max pooling's element body: the largest tap inside the input (the padding never wins; a NaN
tap wins and stays, as ``numpy.max``'s does); with the indices output, also the flat input
index of the first such tap (``docs/SEMANTICS.md`` §7)."""
from __future__ import annotations

from contextlib import ExitStack

import numpy as np

from .._codegen import SourceWriter, flat_index, index
from ..ops.max_pooling import no_position
from . import open_pool_window


def pool_element(w: SourceWriter, desc, o, *, acc: str, load=lambda e: e) -> None:
    """``y[n, c, o...] =`` the window's maximum, in the type ``acc`` (exact: a float16 input is
    compared as float32, which holds it exactly; integers in their own type); with the
    descriptor's indices output, ``yi[n, c, o...] =`` its flat input index."""
    nd = len(o)
    a = [f"a{i}" for i in range(nd)]
    kind = np.dtype(acc).kind
    w(f"acc = -numba.{acc}(math.inf)" if kind == "f" else
      f"acc = numba.{acc}({int(np.iinfo(np.dtype(acc)).min)})")
    indices = getattr(desc, "output_indices_tensor", None)
    if indices is not None:
        it = indices.dtype.name
        w(f"none = numba.{it}({no_position(indices.dtype)})")
        w("at = none")
        # the first tap inside sets the position (an integer window of the type's least
        # values never compares greater); a NaN replaces a number, never an earlier NaN
        take = "at == none or v > acc" + (" or (v != v and acc == acc)" if kind == "f" else "")
    else:
        take = "v > acc or v != v" if kind == "f" else "v > acc"
    with ExitStack() as stack:
        open_pool_window(w, stack, desc, o, a)
        w(f"v = numba.{acc}({load('x[' + index('n', 'c', *a) + ']')})")
        with w.block(f"if {take}:"):
            w("acc = v")
            if indices is not None:
                w(f"at = numba.{it}({flat_index(['n', 'c'] + a, desc.input_tensor.sizes)})")
    w(f"y[{index('n', 'c', *o)}] = acc")
    if indices is not None:
        w(f"yi[{index('n', 'c', *o)}] = at")
