"""``algorithm="gemm"``: the work goes to BLAS, in the calling threads
(:func:`dml_numba._blas.one_thread`: BLAS's own thread pool would fight Numba's for the cores),
with generated kernels (parallel or not) around it. FORWARD: a batched im2col (skipped for
unpadded stride-1 1x1 convolutions, whose input already is the matrix), then the ``product``
kernel: Numba's parallel loop over (image, group, slab of output channels), each item BLAS's
product of its slab of filter rows with the image's columns (``np.dot``, written straight into
the output) and then the slab's bias and activation while it is in cache: both cores run BLAS
where one image and group would leave one idle. BACKWARD: ``matmul`` of the transposed filter
with the input gives every tap's contribution ("columns"), then col2im gathers them per output
element (race-free) with bias and activation fused in. CONVOLUTION mode flips the filter once
per call.
"""
from __future__ import annotations

from contextlib import ExitStack

import numba
import numpy as np

from ... import _blas
from ..._cache import KernelKey
from ..._codegen import SourceWriter, affine, decompose, flat_index, index
from ..._dims import prod
from ..._dtypes import accumulator
from ...elements import open_window_loops
from ...elements.convolution import conv_epilogue
from ...ops.convolution import ConvolutionDirection, ConvolutionMode, geometry
from .._emit import build_variants, header, resolve_parallel
from .base import ConvolutionKernel, conv_work

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


def emit_product(key) -> str:
    """y[nn, g, m, :] = act(w[g, m, :] @ cols[nn, g] + b[g*Mg + m]) for a chunk of images: the
    items (image, group, slab of ``slabs`` of the group's output channels) in the parallel loop,
    each one BLAS call (``np.dot`` into its rows of y) and its rows' epilogue."""
    d = key.desc
    g = d.group_count
    mg = d.output_tensor.sizes[1] // g
    inner = prod(d.output_tensor.sizes[2:])
    nd = d.input_tensor.rank - 2
    epilogue = d.bias_tensor is not None or d.fused_activation is not None
    w = SourceWriter()
    loop = header(w, key)
    args = "w, cols, b, y, slabs" if d.bias_tensor is not None else "w, cols, y, slabs"
    with w.block(f"def kernel({args}):"):
        w(f"step = ({mg} + slabs - 1) // slabs")
        with w.block(f"for q in {loop}(cols.shape[0] * {g} * slabs):"):
            w(f"nn = q // ({g} * slabs)")
            w(f"r = q - nn * ({g} * slabs)")
            w("g = r // slabs")
            w("s = r - g * slabs")
            w("m0 = s * step")
            w(f"m1 = min({mg}, m0 + step)")
            with w.block("if m0 < m1:"):
                w("np.dot(w[g, m0:m1], cols[nn, g], y[nn, g, m0:m1])")
                if epilogue:
                    with w.block("for mm in range(m0, m1):"):
                        if d.bias_tensor is not None:
                            w(f"bm = b[{index(0, f'g * {mg} + mm', *([0] * nd))}]")
                        with w.block(f"for j in range({inner}):"):
                            conv_epilogue(w, d, "y[nn, g, mm, j]", "y[nn, g, mm, j]",
                                          bias="bm")
    return w.text()


class GemmKernel(ConvolutionKernel):
    """BLAS with the generated helpers around it (:meth:`run` drives them; their keys are its
    :meth:`compiled_keys`). BLAS runs in the threads that call it (:mod:`dml_numba._blas`):
    two thread pools handing the cores back and forth cost more than either gains
    (``benchmarks/HISTORY.md``); the FORWARD product's items spread its calls over Numba's
    threads (parallel by the convolution's work, as the other algorithms' kernels), im2col and
    col2im are serial unless forced (``parallel=True``)."""

    algorithm = "gemm"
    emitters = {"im2col": emit_im2col, "col2im": emit_col2im, "product": emit_product}

    def __init__(self, desc, options, plan=None):  # BLAS chooses its own blocking: no plan
        d, geo = desc, geometry(desc)
        self.desc = desc
        self.acc = accumulator(d.input_tensor.data_type)
        self.parallel = bool(options.get("parallel"))
        self.product_parallel = resolve_parallel(options.get("parallel"), conv_work(d))
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
        self.im2col = self.product = self.col2im = None
        if geo.forward:
            if not self.skip_im2col:
                self.im2col = self._helper("im2col", [(acc, rank), (i64, 0), (acc, 4)])
            self.product = self._helper("product", [(acc, 3), (acc, 4)] + bias_arg + [
                (acc, 4), (i64, 0)], self.product_parallel)
        else:
            self.col2im = self._helper("col2im", [(acc, 4), (i64, 0)] + bias_arg + [(acc, rank)])
        self.source = "\n".join(self._sources)

    def _helper(self, name, arg_types, parallel=None):
        key = KernelKey("cpu", self.desc, name, self.parallel if parallel is None else parallel)
        source = emit(key)
        self._keys.append(key)
        self._sources.append(source)
        return build_variants(key, source, emit, arg_types, automatic=False)

    def variant(self) -> str:
        return "gemm"

    def compiled_keys(self) -> tuple:
        return tuple(self._keys)

    def _columns(self, images: int) -> tuple:
        """The shape of ``images`` images' columns (images, groups, rows, positions): forward,
        each output position's window of a group's input channels; backward, each input
        position's taps of a group's output channels."""
        d = self.desc
        g, taps = d.group_count, prod(d.filter_tensor.sizes[2:])
        if d.direction == ConvolutionDirection.FORWARD:
            return (images, g, d.input_tensor.sizes[1] // g * taps,
                    prod(d.output_tensor.sizes[2:]))
        return (images, g, d.output_tensor.sizes[1] // g * taps, prod(d.input_tensor.sizes[2:]))

    def scratch_bytes(self) -> int:
        """The columns of a chunk of images (none where the input is its own columns)."""
        if self.desc.direction == ConvolutionDirection.FORWARD and self.skip_im2col:
            return 0
        images = min(self.desc.input_tensor.sizes[0], self.chunk)
        return prod(self._columns(images)) * self.acc.itemsize

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
        bias = (b,) if b is not None else ()
        if self.skip_im2col:
            self.product(wg, x.reshape(n_, g, cin // g, size_in), *bias, yv,
                         self._slabs(n_ * g, cout // g))
        else:
            for n0 in range(0, n_, self.chunk):
                n1 = min(n_, n0 + self.chunk)
                cols = self.buffer(self._columns(n1 - n0))
                self.im2col(x, n0, cols)
                self.product(wg, cols, *bias, yv[n0:n1], self._slabs((n1 - n0) * g, cout // g))

    def _slabs(self, items: int, rows: int) -> int:
        """How many slabs of its output channels each (image, group) is cut into: enough for
        every thread of the parallel product to have an item (one slab where the images and
        groups already give every thread one)."""
        threads = numba.get_num_threads() if self.product_parallel else 1
        return 1 if items >= threads else max(1, min(rows, -(-threads // items)))

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
            cols = self.buffer(self._columns(n1 - n0))
            np.matmul(wt, xg[n0:n1], out=cols)
            self.col2im(*((cols, n0, b, y) if b is not None else (cols, n0, y)))
