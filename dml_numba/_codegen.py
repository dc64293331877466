"""Shared pieces of source generation: an indentation-aware writer, literals, index arithmetic.

Generated modules are plain Python that Numba compiles (CPU) or numba-cuda compiles (CUDA), so
the same helpers serve both backends.
"""
from __future__ import annotations

import math
from contextlib import contextmanager

import numpy as np


class SourceWriter:
    """``w("line")`` at the current depth; ``with w.block("for i in range(n):")`` indents."""

    def __init__(self):
        self._lines: list[str] = []
        self._depth = 0

    def __call__(self, text: str = "") -> None:
        self._lines.append("    " * self._depth + text if text else "")

    @contextmanager
    def block(self, header: str):
        self(header)
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1

    def text(self) -> str:
        return "\n".join(self._lines) + "\n"


def literal(value, dtype) -> str:
    """Source for a scalar of numpy ``dtype`` (exact for 64-bit integers, inf/nan for floats)."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        v = float(value)
        body = ("np.nan" if math.isnan(v) else "np.inf" if v == math.inf
                else "-np.inf" if v == -math.inf else repr(v))
    else:
        body = str(int(value))
    return f"np.{dt.name}({body})"


def decompose(w: SourceWriter, flat: str, names, sizes) -> None:
    """Unflatten row-major ``flat`` into coordinates ``names`` of constant ``sizes``."""
    live = [(n, s) for n, s in zip(names, sizes) if s > 1]
    for name, size in zip(names, sizes):
        if size == 1:
            w(f"{name} = 0")
    if not live:
        return
    if len(live) == 1:
        w(f"{live[0][0]} = {flat}")
        return
    src = flat  # fresh names each step: prange forbids reassigning its index or an alias of it
    for step, (name, size) in enumerate(reversed(live[1:])):
        w(f"{name} = {src} % {size}")
        w(f"t{step} = {src} // {size}")
        src = f"t{step}"
    w(f"{live[0][0]} = {src}")


def describe(desc) -> list[str]:
    """One readable line per field of a descriptor (tensors as TYPE sizes)."""
    from dataclasses import fields

    lines = [type(desc).__name__]
    for f in fields(desc):
        v = getattr(desc, f.name)
        if hasattr(v, "data_type") and hasattr(v, "sizes"):
            v = f"{v.data_type.name} {v.sizes}"
        elif hasattr(v, "name") and hasattr(v, "value"):
            v = v.name
        lines.append(f"  {f.name} = {v}")
    return lines


def index(*parts) -> str:
    return ", ".join(str(p) for p in parts)


def open_window_loops(w: SourceWriter, stack, taps, coords, sizes, *, starts, steps, dilations,
                      transposed: bool, flip: bool):
    """Open nested loops over window taps ``taps`` (one per spatial dim) whose input coordinate
    ``coords[d]`` is inside ``[0, sizes[d])``; returns the filter index expressions.

    Forward (gather): ``a = o*step + k*dilation - start``. Transposed (the adjoint, gathered):
    ``t = o + start - k*dilation``; tap valid when ``t >= 0``, ``t % step == 0`` and
    ``a = t // step < size`` (``t >= 0`` is checked before ``%``). ``stack`` is an ExitStack
    that owns the opened blocks. ``flip`` reverses the filter index (CONVOLUTION mode).
    """
    outs, kernel = starts["o"], starts["k"]
    findex = []
    for d, (k, a) in enumerate(zip(taps, coords)):
        n, s, dil, p = sizes[d], steps[d], dilations[d], starts["pad"][d]
        stack.enter_context(w.block(f"for {k} in range({kernel[d]}):"))
        o = outs[d]
        if not transposed:
            w(f"{a} = {o} * {s} + {k} * {dil} - {p}" if s != 1 or p else f"{a} = {o} + {k} * {dil}")
            stack.enter_context(w.block(f"if {a} >= 0 and {a} < {n}:"))
        else:
            w(f"{a} = {o} + {p} - {k} * {dil}")
            cond = f"{a} >= 0" + (f" and {a} % {s} == 0" if s != 1 else "")
            stack.enter_context(w.block(f"if {cond}:"))
            if s != 1:
                w(f"{a} = {a} // {s}")
            stack.enter_context(w.block(f"if {a} < {n}:"))
        findex.append(f"{kernel[d] - 1} - {k}" if flip else k)
    return findex


def accumulate_power(v: str, p: int) -> str:
    """``v ** p`` for a small integer p as products (exact, and what the vectoriser likes)."""
    return " * ".join([v] * p) if p <= 8 else f"{v} ** {p}"


def lp_root(acc: str, p: int, acc_type: str) -> str:
    """The p-th root in the accumulator's precision (float32 pow is ~2.6x faster than double)."""
    if p == 1:
        return acc
    if p == 2:
        return f"math.sqrt({acc})"
    return f"{acc} ** numba.{acc_type}({1.0 / p!r})"


# -- the per-output-element computation of the reduction operators, shared by cpu/ and cuda/ --
# Each writes the value of output element (n, channel, o0..o{nd-1}) into ``y``. ``load`` wraps an
# input read (CUDA converts half to float there); ``acc`` is the accumulator type's name.

def pool_element(w: SourceWriter, desc, o, *, acc: str, load=lambda e: e) -> None:
    from contextlib import ExitStack

    nd = len(o)
    a = [f"a{i}" for i in range(nd)]
    w(f"acc = numba.{acc}(0.0)")
    with ExitStack() as stack:
        open_window_loops(w, stack, [f"k{i}" for i in range(nd)], a, desc.input_tensor.sizes[2:],
                          starts={"o": o, "k": desc.window_size, "pad": desc.start_padding},
                          steps=desc.strides, dilations=desc.dilations, transposed=False,
                          flip=False)
        xin = "x[" + index("n", "c", *a) + "]"
        w(f"v = abs({load(xin)})")
        w(f"acc += {accumulate_power('v', desc.p)}")
    w(f"y[{index('n', 'c', *o)}] = {lp_root('acc', desc.p, acc)}")


def conv_element(w: SourceWriter, desc, o, *, acc: str, load=lambda e: e) -> None:
    """Convolution at output (n, m, o...): FORWARD gathers input taps; BACKWARD is the adjoint
    in gather form (race-free). Bias and the fused activation form the epilogue."""
    from contextlib import ExitStack

    from .ops.convolution import ConvolutionDirection, ConvolutionMode

    nd = len(o)
    a = [f"a{i}" for i in range(nd)]
    cin = desc.input_tensor.sizes[1]
    cout = desc.output_tensor.sizes[1]
    g = desc.group_count
    forward = desc.direction == ConvolutionDirection.FORWARD
    cg, mg = cin // g, cout // g
    w(f"g = m // {mg}")
    if not forward:
        w(f"col = m - g * {mg}")
    w(f"acc = numba.{acc}(0.0)")
    with ExitStack() as stack:
        stack.enter_context(w.block(f"for c in range({cg}):"))
        w(f"ci = g * {cg} + c")
        fidx = open_window_loops(
            w, stack, [f"k{i}" for i in range(nd)], a, desc.input_tensor.sizes[2:],
            starts={"o": o, "k": desc.filter_tensor.sizes[2:], "pad": desc.start_padding},
            steps=desc.strides, dilations=desc.dilations, transposed=not forward,
            flip=desc.mode == ConvolutionMode.CONVOLUTION)
        widx = index("m", "c", *fidx) if forward else index("ci", "col", *fidx)
        xin, win = "x[" + index("n", "ci", *a) + "]", "w[" + widx + "]"
        w(f"acc += {load(xin)} * {load(win)}")
    # the epilogue has its own variable so the accumulator's type stays narrow
    bin_ = "b[" + index(0, "m", *([0] * nd)) + "]"
    bias = f" + {load(bin_)}" if desc.bias_tensor is not None else ""
    w(f"v = acc{bias}")
    if desc.fused_activation is not None:
        w(f"v = {desc.fused_activation.expression('v')}")
    w(f"y[{index('n', 'm', *o)}] = v")
