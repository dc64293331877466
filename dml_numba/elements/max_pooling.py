"""Max pooling's element body: the largest tap inside the input (the padding never wins; a NaN
tap wins and stays, as ``numpy.max``'s does)."""
from __future__ import annotations

from contextlib import ExitStack

from .._codegen import SourceWriter, index
from . import open_pool_window


def pool_element(w: SourceWriter, desc, o, *, acc: str, load=lambda e: e) -> None:
    """``y[n, c, o...] =`` the window's maximum, in the type ``acc`` (exact: a float16 input is
    compared as float32, which holds it exactly; integers in their own type)."""
    nd = len(o)
    a = [f"a{i}" for i in range(nd)]
    import numpy as np

    kind = np.dtype(acc).kind
    w(f"acc = -numba.{acc}(math.inf)" if kind == "f" else
      f"acc = numba.{acc}({int(np.iinfo(np.dtype(acc)).min)})")
    with ExitStack() as stack:
        open_pool_window(w, stack, desc, o, a)
        w(f"v = numba.{acc}({load('x[' + index('n', 'c', *a) + ']')})")
        with w.block("if v > acc or v != v:" if kind == "f" else "if v > acc:"):
            w("acc = v")
    w(f"y[{index('n', 'c', *o)}] = acc")
