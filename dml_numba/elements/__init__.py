"""The per-element bodies of the reduction operators, shared by the CPU and CUDA backends.

This package holds what is common to every windowed reduction (the window loops: forward gather
and the transposed adjoint in gather form); each operator's own body lives in the module of its
name (``elements/<op>.py``), beside its other slices. Each writes source through a
:class:`~dml_numba._codegen.SourceWriter` and stores the value of one output element into ``y``;
``load`` wraps an input read (CUDA converts half to float there) and ``acc`` names the
accumulator type.
"""
from __future__ import annotations

from .._codegen import SourceWriter, affine
from .._gather import AxisMap, emit_map


def open_window_loops(w: SourceWriter, stack, taps, coords, sizes, *, starts, steps, dilations,
                      transposed: bool, flip: bool, fold=None):
    """Open nested loops over window taps ``taps`` (one per spatial dim) whose input coordinate
    ``coords[d]`` is inside ``[0, sizes[d])``; returns the filter index expressions.

    Forward (gather): ``a = o*step + k*dilation - start``. Transposed (the adjoint, gathered):
    ``t = o + start - k*dilation``; tap valid when ``t >= 0``, ``t % step == 0`` and
    ``a = t // step < size`` (``t >= 0`` is checked before ``%``). ``stack`` is an ExitStack
    that owns the opened blocks. ``flip`` reverses the filter index (CONVOLUTION mode).
    ``fold`` (forward only): ``(kind, extent)``, the padding is the input read through that
    AxisMap kind (a padding operator in front, folded): every tap inside the padded ``extent``
    reads ``a`` = the map of its padded coordinate ``p = o*step + k*dilation``; taps beyond it
    (a ceil-mode window's overhang) read nothing.
    """
    outs, kernel = starts["o"], starts["k"]
    findex = []
    for d, (k, a) in enumerate(zip(taps, coords)):
        n, s, dil, p = sizes[d], steps[d], dilations[d], starts["pad"][d]
        stack.enter_context(w.block(f"for {k} in range({kernel[d]}):"))
        o = outs[d]
        if fold is not None:
            kind, extent = fold
            w(f"p{d} = {affine([(o, s), (k, dil)])}")
            stack.enter_context(w.block(f"if p{d} < {extent[d]}:"))
            emit_map(w, AxisMap(kind, n, extent[d], p), f"p{d}", a)
        elif not transposed:
            w(f"{a} = {affine([(o, s), (k, dil)], -p)}")
            stack.enter_context(w.block(f"if {a} >= 0 and {a} < {n}:"))
        else:
            w(f"{a} = {affine([(o, 1), (k, -dil)], p)}")
            cond = f"{a} >= 0" + (f" and {a} % {s} == 0" if s != 1 else "")
            stack.enter_context(w.block(f"if {cond}:"))
            if s != 1:
                w(f"{a} = {a} // {s}")
            stack.enter_context(w.block(f"if {a} < {n}:"))
        findex.append(f"{kernel[d] - 1} - {k}" if flip else k)
    return findex


def open_pool_window(w: SourceWriter, stack, desc, o, a, fold=None) -> None:
    """The loops over a pooling's window taps (``desc``: window_size, strides, dilations,
    start_padding) inside its input, at output ``o``; ``a`` names the input coordinates."""
    open_window_loops(w, stack, [f"k{i}" for i in range(len(o))], a, desc.input_tensor.sizes[2:],
                      starts={"o": o, "k": desc.window_size, "pad": desc.start_padding},
                      steps=desc.strides, dilations=desc.dilations, transposed=False, flip=False,
                      fold=fold)
