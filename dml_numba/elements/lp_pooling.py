"""LP pooling's element body: ``|x|**p`` summed over the window, then the p-th root."""
from __future__ import annotations

from contextlib import ExitStack

from .._codegen import SourceWriter, index
from .._dtypes import DataType
from . import open_pool_window


def accumulate_power(v: str, p: int) -> str:
    """``v ** p`` for a small integer p as products (exact, and what the vectoriser likes)."""
    return " * ".join([v] * p) if p <= 8 else f"{v} ** {p}"


def lp_root(acc: str, p: int, acc_type: str) -> str:
    """The p-th root in the accumulator's precision (square roots through ``sqrt``)."""
    if p == 1:
        return acc
    if p == 2:
        return f"math.sqrt({acc})"
    if p == 4:
        return f"math.sqrt(math.sqrt({acc}))"
    return f"{acc} ** numba.{acc_type}({1.0 / p!r})"


def fold_of(key):
    """``(kind, padded extent)`` of the key's folded padding (its plan a
    :class:`~dml_numba.ops._base.Fold`), or None: the padding is zeros."""
    if key.plan is None:
        return None
    d = key.desc
    return key.plan.kind, tuple(n + a + b for n, a, b in zip(
        d.input_tensor.sizes[2:], d.start_padding, d.end_padding))


def pool_element(w: SourceWriter, desc, o, *, load=lambda e: e, window=None, fold=None) -> None:
    """LP pooling at output (n, c, o...): ``(sum over the window of |x|**p) ** (1/p)``.

    float64 tensors, and p = 1, 2, 4 (whose roots are exact and whose loops vectorise in double
    as fast as in single precision), are summed in float64. For other p, float32/float16
    tensors are summed in float32 (twice as fast) and, when that sum is not a normal float32
    (it overflowed, or underflowed into subnormals or zero, as ``|1e20|**3`` or ``|1e-25|**3``
    do), summed again in float64. Either way the result is right whenever it is representable
    in the output type; the branch is rarely taken and predictable.

    ``window(w, stack)``, if given, opens the loops over the window's taps and returns the
    tap's value (CUDA's shared-memory tiles); by default the taps are read from ``x`` (through
    ``fold``'s map where a padding in front is folded in: :func:`open_window_loops`)."""
    nd = len(o)
    a = [f"a{i}" for i in range(nd)]
    narrow = desc.output_tensor.data_type != DataType.FLOAT64
    target = f"y[{index('n', 'c', *o)}]"

    def window_sum(acc_type):
        w(f"acc = numba.{acc_type}(0.0)")
        with ExitStack() as stack:
            if window is None:
                open_pool_window(w, stack, desc, o, a, fold=fold)
                xin = load("x[" + index("n", "c", *a) + "]")
            else:
                xin = window(w, stack)
            w(f"v = abs(numba.{acc_type}({xin}))")
            w(f"acc += {accumulate_power('v', desc.p)}")

    if not narrow or desc.p in (1, 2, 4):  # measured: double keeps these loops vectorised
        window_sum("float64")
        w(f"{target} = {lp_root('acc', desc.p, 'float64')}")
        return
    window_sum("float32")
    with w.block("if acc >= numba.float32(1.1754944e-38) and acc <= numba.float32(3.4028235e38):"):
        w(f"{target} = {lp_root('acc', desc.p, 'float32')}")
    with w.block("else:  # outside float32's normal range: the same sum in float64"):
        window_sum("float64")
        w(f"{target} = {lp_root('acc', desc.p, 'float64')}")
