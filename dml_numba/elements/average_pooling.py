"""Average pooling's element body: the taps inside the input summed in float64, divided by the
count of taps (inside the padded input with IncludePadding, else inside the input)."""
from __future__ import annotations

from contextlib import ExitStack

from .._codegen import SourceWriter, affine, index
from . import open_pool_window


def _counts(w: SourceWriter, desc, o) -> str:
    """Per spatial axis, the taps that count; returns their product's expression."""
    names = []
    for d, (n, k, s, dil, p, q) in enumerate(zip(
            desc.input_tensor.sizes[2:], desc.window_size, desc.strides, desc.dilations,
            desc.start_padding, desc.end_padding)):
        w(f"c{d} = 0")
        with w.block(f"for t{d} in range({k}):"):
            w(f"b{d} = {affine([(o[d], s), (f't{d}', dil)])}")  # in padded coordinates
            lo, hi = (0, n + p + q) if desc.include_padding else (p, p + n)
            with w.block(f"if b{d} >= {lo} and b{d} < {hi}:"):
                w(f"c{d} += 1")
        names.append(f"c{d}")
    return " * ".join(names)


def pool_element(w: SourceWriter, desc, o, *, load=lambda e: e, **_) -> None:
    """``y[n, c, o...] =`` the window's sum over its count (0/0, NaN, where nothing counts)."""
    nd = len(o)
    a = [f"a{i}" for i in range(nd)]
    count = _counts(w, desc, o)
    w("acc = numba.float64(0.0)")
    with ExitStack() as stack:
        open_pool_window(w, stack, desc, o, a)
        w(f"acc += numba.float64({load('x[' + index('n', 'c', *a) + ']')})")
    with w.block(f"if {count} > 0:"):
        w(f"y[{index('n', 'c', *o)}] = acc / ({count})")
    with w.block("else:"):
        w(f"y[{index('n', 'c', *o)}] = math.nan")
