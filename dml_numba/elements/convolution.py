"""Convolution's element body (multiply-add over the window) and its epilogue (bias, fused
activation)."""
from __future__ import annotations

from contextlib import ExitStack

from .._codegen import SourceWriter, index
from ..ops.convolution import ConvolutionDirection, ConvolutionMode
from . import open_window_loops


def channel_block(desc, limit: int = 4) -> int:
    """Output channels one element computes together: the largest of ``limit``, 2, 1 that
    divides the channels of a group (so a block never straddles two groups)."""
    mg = desc.output_tensor.sizes[1] // desc.group_count
    return next(b for b in (limit, 2, 1) if mg % b == 0)


def conv_element(w: SourceWriter, desc, o, *, acc: str, load=lambda e: e,
                 channels: int = 1, fold=None) -> None:
    """Convolution at output (n, m, o...) and, with ``channels`` > 1, at the next channels
    (m .. m + channels - 1, one group): each input tap is read once for all of them, into
    ``channels`` accumulators. FORWARD gathers input taps; BACKWARD is the adjoint in gather
    form (race-free). Bias and the fused activation form the epilogue. ``fold`` (FORWARD):
    ``(kind, padded extent)``, a padding operator in front read through its map (taps in the
    padding read the mapped input instead of zeros)."""
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
    accs = [f"acc{j}" if channels > 1 else "acc" for j in range(channels)]
    for name in accs:
        w(f"{name} = numba.{acc}(0.0)")
    with ExitStack() as stack:
        stack.enter_context(w.block(f"for c in range({cg}):"))
        w(f"ci = g * {cg} + c")
        fidx = open_window_loops(
            w, stack, [f"k{i}" for i in range(nd)], a, desc.input_tensor.sizes[2:],
            starts={"o": o, "k": desc.filter_tensor.sizes[2:], "pad": desc.start_padding},
            steps=desc.strides, dilations=desc.dilations, transposed=not forward,
            flip=desc.mode == ConvolutionMode.CONVOLUTION, fold=fold)
        xin = load("x[" + index("n", "ci", *a) + "]")
        if channels > 1:
            w(f"xv = {xin}")
            xin = "xv"
        for j, name in enumerate(accs):
            chan = f"m + {j}" if j else "m"
            widx = (index(chan, "c", *fidx) if forward
                    else index("ci", f"col + {j}" if j else "col", *fidx))
            w(f"{name} += {xin} * {load('w[' + widx + ']')}")
    for j, name in enumerate(accs):
        chan = f"m + {j}" if j else "m"
        conv_epilogue(w, desc, name, f"y[{index('n', chan, *o)}]", load=load, channel=chan)


def bias_element(desc, channel: str = "m") -> str:
    """The bias of output channel ``channel``: ``b[0, channel, 0...]``."""
    return "b[" + index(0, channel, *([0] * (desc.input_tensor.rank - 2))) + "]"


def conv_epilogue(w: SourceWriter, desc, value: str, target: str, *, load=lambda e: e,
                  bias: str | None = None, channel: str = "m", addend: str | None = None) -> None:
    """``target = act(value + bias[channel] (+ addend))``; ``v`` is its own variable, so the
    accumulator's type stays narrow. ``bias`` overrides the default read of
    :func:`bias_element`; ``addend``: an element added after the bias, before the activation
    (a residual connection's)."""
    if desc.bias_tensor is not None and bias is None:
        bias = load(bias_element(desc, channel))
    w(f"v = {value}" + (f" + {bias}" if desc.bias_tensor is not None else ""))
    if addend is not None:
        w(f"v = v + {addend}")
    if desc.fused_activation is not None:
        w(f"v = {desc.fused_activation.expression('v')}")
    w(f"{target} = v")
