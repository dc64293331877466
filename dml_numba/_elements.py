"""The per-element bodies of the arithmetic operators, shared by the CPU and CUDA backends:
the window loops (forward gather and the transposed adjoint in gather form), LP pooling's
``|x|**p`` sum and root, convolution's multiply-add, and the epilogue (bias, fused activation).

Each writes source through a :class:`~dml_numba._codegen.SourceWriter`; ``load`` wraps an
input read (CUDA converts half to float there) and ``acc`` names the accumulator type.
"""
from __future__ import annotations

from contextlib import ExitStack

from ._codegen import SourceWriter, affine, index
from ._dtypes import DataType
from .ops.convolution import ConvolutionDirection, ConvolutionMode


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


# -- the per-output-element computation of the reduction operators, shared by cpu/ and cuda/ --
# Each writes the value of output element (n, channel, o0..o{nd-1}) into ``y``. ``load`` wraps an
# input read (CUDA converts half to float there); ``acc`` is the accumulator type's name.

def pool_element(w: SourceWriter, desc, o, *, load=lambda e: e) -> None:
    """LP pooling at output (n, c, o...): ``(sum over the window of |x|**p) ** (1/p)``.

    float64 tensors, and p = 1, 2, 4 (whose roots are exact and whose loops vectorise in double
    as fast as in single precision), are summed in float64. For other p, float32/float16
    tensors are summed in float32 (twice as fast) and, when that sum is not a normal float32
    (it overflowed, or underflowed into subnormals or zero, as ``|1e20|**3`` or ``|1e-25|**3``
    do), summed again in float64. Either way the result is right whenever it is representable
    in the output type; the branch is rarely taken and predictable."""
    nd = len(o)
    a = [f"a{i}" for i in range(nd)]
    narrow = desc.output_tensor.data_type != DataType.FLOAT64
    target = f"y[{index('n', 'c', *o)}]"

    def window_sum(acc_type):
        w(f"acc = numba.{acc_type}(0.0)")
        with ExitStack() as stack:
            open_window_loops(w, stack, [f"k{i}" for i in range(nd)], a,
                              desc.input_tensor.sizes[2:],
                              starts={"o": o, "k": desc.window_size, "pad": desc.start_padding},
                              steps=desc.strides, dilations=desc.dilations, transposed=False,
                              flip=False)
            xin = "x[" + index("n", "c", *a) + "]"
            w(f"v = abs(numba.{acc_type}({load(xin)}))")
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
