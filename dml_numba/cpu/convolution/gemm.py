"""``algorithm="gemm"``: the work goes to BLAS (NumPy's ``matmul``, in the calling thread:
:func:`dml_numba._blas.one_thread`), with generated kernels (parallel or not) around it.
FORWARD: a batched im2col (skipped for unpadded stride-1 1x1 convolutions, whose input already
is the matrix), one ``matmul`` per image and group written straight into the output,
then a fused bias + activation pass. BACKWARD: ``matmul`` of the transposed filter with the input
gives every tap's contribution ("columns"), then col2im gathers them per output element
(race-free) with bias and activation fused in. CONVOLUTION mode flips the filter once per call.
"""
from __future__ import annotations

from contextlib import ExitStack

import numpy as np

from ... import _blas
from ..._cache import KernelKey
from ..._codegen import SourceWriter, affine, decompose, flat_index, index
from ..._dims import prod
from ..._dtypes import accumulator
from ...elements import open_window_loops
from ...elements.convolution import conv_epilogue
from ...ops.convolution import ConvolutionDirection, ConvolutionMode, geometry
from .._emit import build_variants, header
from .base import ConvolutionKernel

#: bound on the im2col / columns buffer of one call; larger batches are processed in chunks
#: (one 3x3 64-channel 56x56 image: cache-friendly)
COLUMNS_BUDGET_BYTES = 8 << 20


def emit(key) -> str:
    """A GEMM helper kernel: ``im2col``, ``col2im`` or ``epilogue``."""
    return GemmKernel.emitters[key.kernel](key)


def emit_im2col(key) -> str:
    """cols[nn, g, c*K + k, flat(o)] = x[n0 + nn, g*Cg + c, o*s + k*d - start] (0 outside)."""
    d = key.desc
    g = d.group_count
    cg = d.input_tensor.sizes[1] // g
    sizes_in = d.input_tensor.sizes[2:]
    ksz = d.filter_tensor.sizes[2:]
    out = d.output_tensor.sizes[2:]
    nd = len(out)
    rows = g * cg * prod(ksz)
    k = [f"k{i}" for i in range(nd)]
    o = [f"o{i}" for i in range(nd)]
    w = SourceWriter()
    loop = header(w, key)
    with w.block("def kernel(x, n0, cols):"):
        w("nb = cols.shape[0]")
        with w.block(f"for q in {loop}(nb * {rows}):"):
            decompose(w, "q", ["nn", "g", "c"] + k, [1 << 62, g, cg] + list(ksz))
            w("n = n0 + nn")
            w(f"ci = g * {cg} + c")
            w(f"r = {flat_index(['c'] + k, [cg] + list(ksz))}")

            def level(i, base):
                inner = prod(out[i + 1:])
                s, dil, p, n = d.strides[i], d.dilations[i], d.start_padding[i], sizes_in[i]
                if i == nd - 1:
                    # the valid range of o along the last axis, where 0 <= o*s + k*d - p < n
                    w(f"lo = min(max(0, -(({k[i]} * {dil} - {p}) // {s})), {out[i]})")
                    w(f"hi = min({out[i]}, max(lo, ({n - 1 + p} - {k[i]} * {dil}) // {s} + 1))")
                    w(f"base = {base} * {out[i]}" if base else "base = 0")
                    with w.block("for j in range(lo):"):
                        w("cols[nn, g, r, base + j] = 0")
                    with w.block("for j in range(lo, hi):"):
                        xi = index("n", "ci", *[f"a{t}" for t in range(i)],
                                   f"j * {s} + {k[i]} * {dil} - {p}")
                        w(f"cols[nn, g, r, base + j] = x[{xi}]")
                    with w.block(f"for j in range(hi, {out[i]}):"):
                        w("cols[nn, g, r, base + j] = 0")
                    return
                with w.block(f"for {o[i]} in range({out[i]}):"):
                    w(f"a{i} = {affine([(o[i], s), (k[i], dil)], -p)}")
                    b = f"b{i}"
                    w(f"{b} = {base} * {out[i]} + {o[i]}" if base else f"{b} = {o[i]}")
                    with w.block(f"if a{i} < 0 or a{i} >= {n}:"):
                        with w.block(f"for j in range({b} * {inner}, ({b} + 1) * {inner}):"):
                            w("cols[nn, g, r, j] = 0")
                    with w.block("else:"):
                        level(i + 1, b)

            level(0, "")
    return w.text()


def emit_col2im(key) -> str:
    """y[n, m, o] = act(sum over taps of cols[nn, g, col*K + k, flat(a)] + b[m]) (gather)."""
    d = key.desc
    g = d.group_count
    cout = d.output_tensor.sizes[1]
    cog = cout // g
    sizes_in = d.input_tensor.sizes[2:]
    ksz = d.filter_tensor.sizes[2:]
    out = d.output_tensor.sizes[2:]
    nd = len(out)
    acc = accumulator(d.input_tensor.data_type).name
    o = [f"o{i}" for i in range(nd)]
    a = [f"a{i}" for i in range(nd)]
    w = SourceWriter()
    loop = header(w, key)
    args = "cols, n0, b, y" if d.bias_tensor is not None else "cols, n0, y"
    with w.block(f"def kernel({args}):"):
        w("nb = cols.shape[0]")
        with w.block(f"for f in {loop}(nb * {cout * prod(out[:-1])}):"):
            decompose(w, "f", ["nn", "m"] + o[:-1], [1 << 62, cout] + list(out[:-1]))
            w("n = n0 + nn")
            w(f"g = m // {cog}")
            w(f"col = m - g * {cog}")
            with w.block(f"for {o[-1]} in range({out[-1]}):"):
                w(f"acc = numba.{acc}(0.0)")
                with ExitStack() as stack:
                    fidx = open_window_loops(
                        w, stack, [f"k{i}" for i in range(nd)], a, sizes_in,
                        starts={"o": o, "k": ksz, "pad": d.start_padding}, steps=d.strides,
                        dilations=d.dilations, transposed=True, flip=False)
                    row = f"col * {prod(ksz)} + {flat_index(fidx, list(ksz))}"
                    w(f"acc += cols[nn, g, {row}, {flat_index(a, list(sizes_in))}]")
                conv_epilogue(w, d, "acc", f"y[{index('n', 'm', *o)}]")
    return w.text()


def emit_epilogue(key) -> str:
    """In place on y viewed (N, M, spatial): v = act(y + b[m])."""
    d = key.desc
    n_, cout = d.output_tensor.sizes[:2]
    inner = prod(d.output_tensor.sizes[2:])
    nd = d.input_tensor.rank - 2
    w = SourceWriter()
    loop = header(w, key)
    args = "b, y" if d.bias_tensor is not None else "y"
    with w.block(f"def kernel({args}):"):
        with w.block(f"for f in {loop}({n_ * cout}):"):
            decompose(w, "f", ["n", "m"], [n_, cout])
            if d.bias_tensor is not None:
                w(f"bm = b[{index(0, 'm', *([0] * nd))}]")
            with w.block(f"for j in range({inner}):"):
                conv_epilogue(w, d, "y[n, m, j]", "y[n, m, j]", bias="bm")
    return w.text()


class GemmKernel(ConvolutionKernel):
    """BLAS with the generated helpers around it (:meth:`run` drives them; their keys are its
    :meth:`compiled_keys`); the helpers are serial unless forced (``parallel=True``), BLAS
    runs in the calling thread (:mod:`dml_numba._blas`): two thread pools handing the cores
    back and forth cost more than either gains (``benchmarks/HISTORY.md``)."""

    algorithm = "gemm"
    emitters = {"im2col": emit_im2col, "col2im": emit_col2im, "epilogue": emit_epilogue}

    def __init__(self, desc, options, plan=None):  # BLAS chooses its own blocking: no plan
        d, geo = desc, geometry(desc)
        self.desc = desc
        self.acc = accumulator(d.input_tensor.data_type)
        self.parallel = bool(options.get("parallel"))
        self._keys = []
        self.skip_im2col = geo.forward and geo.taps == 1 and all(
            s == 1 for s in d.strides) and not any(d.start_padding + d.end_padding)
        n_ = d.input_tensor.sizes[0]
        cin, cout = d.input_tensor.sizes[1], d.output_tensor.sizes[1]
        per_image = (cin * geo.taps * d.output_tensor.element_count // (n_ * cout) if geo.forward
                     else cout * geo.taps * d.input_tensor.element_count // (n_ * cin)
                     ) * self.acc.itemsize
        self.chunk = max(1, min(n_, COLUMNS_BUDGET_BYTES // max(per_image, 1)))
        self._sources = []
        acc, i64, rank = self.acc, np.dtype(np.int64), d.input_tensor.rank
        bias_arg = [(acc, rank)] if d.bias_tensor is not None else []
        self.im2col = self.epilogue = self.col2im = None
        if geo.forward:
            if not self.skip_im2col:
                self.im2col = self._helper("im2col", [(acc, rank), (i64, 0), (acc, 4)])
            if d.bias_tensor is not None or d.fused_activation is not None:
                self.epilogue = self._helper("epilogue", bias_arg + [(acc, 3)])
        else:
            self.col2im = self._helper("col2im", [(acc, 4), (i64, 0)] + bias_arg + [(acc, rank)])
        self.source = "\n".join(self._sources)

    def _helper(self, name, arg_types):
        key = KernelKey("cpu", self.desc, name, self.parallel)
        source = emit(key)
        self._keys.append(key)
        self._sources.append(source)
        return build_variants(key, source, emit, arg_types, automatic=False)

    def variant(self) -> str:
        return "gemm"

    def compiled_keys(self) -> tuple:
        return tuple(self._keys)

    def run(self, inputs, y):
        x, w = np.ascontiguousarray(inputs[0]), inputs[1]
        b = inputs[2] if len(inputs) > 2 else None
        if self.desc.mode == ConvolutionMode.CONVOLUTION:
            w = w[(Ellipsis,) + (slice(None, None, -1),) * (x.ndim - 2)]
        w = np.ascontiguousarray(w)
        with _blas.one_thread():  # one thread pool at a time: Numba's around BLAS's product
            if self.desc.direction == ConvolutionDirection.FORWARD:
                self._forward(x, w, b, y)
            else:
                self._backward(x, w, b, y)

    def _forward(self, x, w, b, y):
        g = self.desc.group_count
        n_, cin = x.shape[:2]
        cout = y.shape[1]
        taps = prod(w.shape[2:])
        size_in, size_out = prod(x.shape[2:]), prod(y.shape[2:])
        wg = w.reshape(g, cout // g, cin // g * taps)
        yv = y.reshape(n_, g, cout // g, size_out)
        if self.skip_im2col:
            np.matmul(wg, x.reshape(n_, g, cin // g, size_in), out=yv)
        else:
            for n0 in range(0, n_, self.chunk):
                n1 = min(n_, n0 + self.chunk)
                cols = self.buffer((n1 - n0, g, cin // g * taps, size_out))
                self.im2col(x, n0, cols)
                np.matmul(wg, cols, out=yv[n0:n1])
        if self.epilogue is not None:
            flat = y.reshape(n_, cout, size_out)
            self.epilogue(*((b, flat) if b is not None else (flat,)))

    def _backward(self, x, w, b, y):
        g = self.desc.group_count
        n_, cin = x.shape[:2]
        cig, cog = cin // g, y.shape[1] // g
        taps = prod(w.shape[2:])
        size_in = prod(x.shape[2:])
        wt = w.reshape(g, cig, cog * taps).transpose(0, 2, 1)
        xg = x.reshape(n_, g, cig, size_in)
        for n0 in range(0, n_, self.chunk):
            n1 = min(n_, n0 + self.chunk)
            cols = self.buffer((n1 - n0, g, cog * taps, size_in))
            np.matmul(wt, xg[n0:n1], out=cols)
            self.col2im(*((cols, n0, b, y) if b is not None else (cols, n0, y)))
