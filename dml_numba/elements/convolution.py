"""Convolution's element body (multiply-add over the window) and its epilogue (bias, fused
activation)."""
from __future__ import annotations

from contextlib import ExitStack

from .._codegen import SourceWriter, index
from ..ops.convolution import ConvolutionDirection, ConvolutionMode
from . import open_window_loops


def conv_element(w: SourceWriter, desc, o, *, acc: str, load=lambda e: e) -> None:
    """Convolution at output (n, m, o...): FORWARD gathers input taps; BACKWARD is the adjoint
    in gather form (race-free). Bias and the fused activation form the epilogue."""
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
    conv_epilogue(w, desc, "acc", f"y[{index('n', 'm', *o)}]", load=load)


def conv_epilogue(w: SourceWriter, desc, value: str, target: str, *, load=lambda e: e,
                  bias: str | None = None) -> None:
    """``target = act(value + bias[m])``; ``v`` is its own variable, so the accumulator's
    type stays narrow. ``bias`` overrides the default read of ``b[0, m, 0...]``."""
    if desc.bias_tensor is not None and bias is None:
        bias = load("b[" + index(0, "m", *([0] * (desc.input_tensor.rank - 2))) + "]")
    w(f"v = {value}" + (f" + {bias}" if desc.bias_tensor is not None else ""))
    if desc.fused_activation is not None:
        w(f"v = {desc.fused_activation.expression('v')}")
    w(f"{target} = v")
