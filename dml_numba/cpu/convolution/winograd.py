"""``algorithm="winograd"``: a 3x3 stride-1 convolution as Winograd's minimal filtering
F(4x4, 3x3) (Lavin and Gray, 2016, with interpolation points 0, +-1, +-2): each 4 x 4 block of
output takes 36 multiplies per input channel where the direct sum takes 144.

For a 2-D FORWARD convolution of float32 with a 3x3 filter, unit strides and dilations, one
group (:func:`takes`), with any zero padding. The output is cut into tiles of 4 x 4 (the last
row and column of tiles cropped); the input tile behind each is 6 x 6, read as zeros outside the
input. Three generated kernels, each over plain arrays, and a blocked tile for the products:

* ``winograd-filter``: ``u[p, k, c] = (G g G^T)[i, j]`` for ``p = 6 i + j``, ``g`` the 3x3
  filter of (k, c) (flipped for CONVOLUTION mode), the input channels in vectors; a model's own
  (frozen) filter is transformed once and kept;
* ``winograd-input``: ``v[p, c, n, t] = (B^T d B)[i, j]``, ``d`` the 6 x 6 input tile ``t`` of
  channel ``c``; per (image, channel) and row of tiles: the six input rows split by phase
  (x mod 4), so that both passes of the transform run along contiguous arrays (in vectors);
* the products: for each of the 36 positions, ``m[p] = u[p] @ v[p]`` (K x C by C x tiles),
  all 36 as one 1x1 convolution of 36 groups (:func:`products_desc`) run by the blocked tile
  the static choice takes for it (the host's widest vectors: BLAS's kernels may be narrower,
  as OpenBLAS's Haswell kernels on a 512-bit core, which ran these products 1.4 to 2.4 times
  slower), its packed filter kept with a frozen filter's transform;
* ``winograd-output``: ``y = act(A^T m A + bias)`` per (image, output channel) and row of
  tiles, the same two passes, cropped to the output.

The transformed input and output hold each position's matrix whole, one row (a channel's
tiles of the chunk) after another, a row a column longer where the positions would otherwise
lie a multiple of a page apart (:func:`width`; the products read that column as zeros).

The input and output kernels' threads claim their items (:mod:`dml_numba.cpu._share`:
each its own share of the even split first, then what the others left).

The transforms' constants are exact in float32 but for G's (1/6, 1/12, 1/24); the result
differs from the direct sum's by rounding: a few units in the 6th digit relative to the
output's magnitude on random data (the tests bound it against a float64 oracle). The output
transform flags a sum that is not finite (an infinity or NaN in the data, or an overflow of the
transforms, which would turn the direct sum's infinity into NaN or a large number into an
infinity): such a call is computed again by the direct sum (:meth:`WinogradKernel.direct_sum`).
The images go through in chunks whose transformed input and output take at most
:data:`CHUNK_BYTES` (whole images, or one image's bands of rows of tiles), so that the three
steps meet in the caches.
"""
from __future__ import annotations

import dataclasses
import functools
from fractions import Fraction as F

import numpy as np

from ... import _pages
from ..._cache import KernelKey
from ..._codegen import SourceWriter
from ..._frozen import Derived, freeze, is_frozen
from ...elements.convolution import conv_epilogue
from ...ops.convolution import ConvolutionDirection, ConvolutionMode
from ...tensor import TensorDesc
from .._emit import Host, build_variants, header, outer_loop, resolve_parallel
from .._share import IMPORT as SHARE_IMPORT
from .._share import shares
from .base import ConvolutionKernel, conv_work, scratch

#: output tile (M) and input tile (M + 2) of F(4x4, 3x3)
M, A = 4, 6
#: positions of the transformed tile
P = A * A
#: B^T (input), G (filter) and A^T (output) of F(4x4, 3x3), points 0, 1, -1, 2, -2
BT = ((4, 0, -5, 0, 1, 0), (0, -4, -4, 1, 1, 0), (0, 4, -4, -1, 1, 0),
      (0, -2, -1, 2, 1, 0), (0, 2, -1, -2, 1, 0), (0, 4, 0, -5, 0, 1))
G = ((F(1, 4), 0, 0), (F(-1, 6), F(-1, 6), F(-1, 6)), (F(-1, 6), F(1, 6), F(-1, 6)),
     (F(1, 24), F(1, 12), F(1, 6)), (F(1, 24), F(-1, 12), F(1, 6)), (0, 0, 1))
AT = ((1, 1, 1, 1, 1, 0), (0, 1, -1, 2, -2, 0), (0, 1, 1, 4, 4, 0), (0, 1, -1, 8, -8, 1))

@dataclasses.dataclass(frozen=True)
class WinogradPlan:
    """The transforms' vector lanes (0: element by element), in the kernels' keys;
    ``addend``: the output transform adds an addend before the activation (its key alone)."""

    lanes: int
    addend: bool = False

    @property
    def label(self) -> str:
        return f"f4x3 L{self.lanes}" + (" +r" if self.addend else "")


#: bound on one chunk's transformed input and output together (a chunk: images, or one image's
#: band of rows of tiles), unless the transformed filter is larger (:func:`chunk_bytes`)
CHUNK_BYTES = 4 << 20
#: a chunk may take this many times the transformed filter's bytes
FILTER_SHARE = 2


def chunk_bytes(cin: int, cout: int) -> int:
    """The bound on a chunk's transformed input and output: CHUNK_BYTES (the three steps
    meet in the caches), or, where the transformed filter (36 x K x C) is itself larger than
    that, FILTER_SHARE times the filter: every chunk's products read the whole transformed
    filter, so that a layer of many channels on a small plane cut into chunks read more filter
    than data (512 -> 512 on 7 x 7 at batch 8: a 38 MB filter for 4.7 MB of tiles, read twice
    in chunks of 4 MB: 10.6 ms, 7.6 in one chunk; 256 -> 256 on 14 x 14, a 9.4 MB filter read
    three times: 6.3 ms, 5.9 in one). Smaller filters keep the bound: 128 -> 128 on 32 x 32 at
    batch 8 ran 0.92x in chunks of two images instead of one."""
    filter_bytes = P * cin * cout * 4
    return CHUNK_BYTES if filter_bytes <= CHUNK_BYTES else FILTER_SHARE * filter_bytes


def takes(desc) -> bool:
    """Whether F(4x4, 3x3) runs ``desc``: 2-D FORWARD float32, a 3x3 filter, unit strides and
    dilations, one group."""
    return (desc.direction == ConvolutionDirection.FORWARD and desc.input_tensor.rank == 4
            and desc.input_tensor.data_type.name == "FLOAT32"
            and tuple(desc.filter_tensor.sizes[2:]) == (3, 3) and desc.group_count == 1
            and tuple(desc.strides) == (1, 1) and tuple(desc.dilations) == (1, 1))


def tiles(desc) -> tuple[int, int]:
    """Rows and columns of 4 x 4 output tiles."""
    oh, ow = desc.output_tensor.sizes[2:]
    return -(-oh // M), -(-ow // M)


class Lanes:
    """How one loop body is written: in vectors of ``lanes`` (``_simd``'s intrinsics over flat
    float32 arrays) or one element at a time (``lanes`` 0), the same expressions either way; the
    constants of the combinations are locals named by :meth:`const`."""

    def __init__(self, lanes: int, consts: dict):
        self.lanes, self.consts = lanes, consts
        consts.setdefault("lanes", set()).add(lanes)

    def const(self, value) -> str:
        return self.consts.setdefault(F(value), f"q{len(self.consts) - 1}")

    def load(self, arr: str, at: str) -> str:
        return f"vload({arr}, {at}, {self.lanes})" if self.lanes else f"{arr}[{at}]"

    def store(self, arr: str, at: str, value: str) -> str:
        return f"vstore({arr}, {at}, {value})" if self.lanes else f"{arr}[{at}] = {value}"

    def combination(self, coeffs, names) -> str:
        """``sum(c * name)``, zero terms left out: a chain of FMAs in vectors."""
        terms = [(F(c), n) for c, n in zip(coeffs, names) if c != 0]
        if not self.lanes:
            out = ""
            for c, n in terms:
                term = n if abs(c) == 1 else f"{n} * {self.const(abs(c))}"
                out += (" - " if c < 0 else " + ") + term if out else ("-" if c < 0 else "") + term
            return out
        acc = None
        for c, n in terms:
            if acc is None:
                acc = n if c == 1 else f"vfma({n}, V{self.lanes}{self.const(c)}, vz{self.lanes})"
            else:
                acc = (f"vadd({acc}, {n})" if c == 1
                       else f"vfma({n}, V{self.lanes}{self.const(c)}, {acc})")
        return acc


def constants(w: SourceWriter, consts: dict) -> None:
    """The locals :class:`Lanes` named: each constant in float32, splat for each vector width
    used (with ``vz<lanes>``, the zero vector)."""
    widths = sorted(n for n in consts.get("lanes", ()) if n)
    for n in widths:
        w(f"vz{n} = vzero({n})")
    for value, name in consts.items():
        if value == "lanes":
            continue
        w(f"{name} = numba.float32({float(value)!r})")
        for n in widths:
            w(f"V{n}{name} = vsplat({name}, {n})")


def vector_loop(w: SourceWriter, var: str, lo: int, hi: int, lanes: int, consts: dict, body):
    """``for var in range(lo, hi)`` where each step's results depend on ``var`` alone (so a
    step done twice writes the same values): whole vectors, the last one ending at ``hi``
    (overlapping the one before); half vectors where the range is shorter than a vector, one
    by one where it is shorter than a half. ``body(ln)`` writes one step's statements with a
    :class:`Lanes`."""
    while lanes > 4 and hi - lo < lanes:
        lanes //= 2
    if lanes < 4 or hi - lo < lanes:
        with w.block(f"for {var} in range({lo}, {hi}):"):
            body(Lanes(0, consts))
        return
    last = hi - lanes
    with w.block(f"for {var}0 in range({lo}, {hi}, {lanes}):"):
        w(f"{var} = min({var}0, {last})" if (hi - lo) % lanes else f"{var} = {var}0")
        body(Lanes(lanes, consts))


def transform_pass(w: SourceWriter, ln: Lanes, matrix, name: str, src, dst) -> None:
    """One pass of a transform over a step: ``name<i> =`` the array element (or vector)
    ``src(i) = (array, index)`` for each of the matrix's columns, then each row's combination
    of them stored at ``dst(row) = (array, index)``."""
    names = [f"{name}{i}" for i in range(len(matrix[0]))]
    for i, n in enumerate(names):
        w(f"{n} = {ln.load(*src(i))}")
    for j, row in enumerate(matrix):
        w(ln.store(*dst(j), ln.combination(row, names)))


def _module(key, emit_body) -> str:
    """A kernel's module: the body written first (it names the constants), the constants
    hoisted above the loop that ``emit_body(w, lanes, consts, loop)`` opens (``loop``: the
    outer loop's constructor, :func:`outer_loop`)."""
    consts: dict = {}
    body = SourceWriter()
    signature = emit_body(body, key.plan.lanes, consts, outer_loop(key))
    w = SourceWriter()
    header(w, key, imports=(SIMD, SHARE_IMPORT))
    with w.block(f"def kernel({signature}):"):
        constants(w, consts)
        for line in body.text().splitlines():
            w(line)
    return w.text()


SIMD = "from dml_numba.cpu._simd import vadd, vfma, vload, vsplat, vstore, vzero"


def emit_filter(key) -> str:
    """u[(p K + k) C + c] = (G g G^T)[p // 6, p % 6], ``g`` = w[k, c] (flipped for CONVOLUTION
    mode); an item an output channel, its input channels in vectors."""
    d = key.desc
    cout, cin = d.filter_tensor.sizes[:2]
    flip = d.mode == ConvolutionMode.CONVOLUTION

    def body(w, lanes, consts, loop):
        with w.block(f"for k in {loop}({cout}):"):
            # the taps of the output channel, a row each (so the loop below runs in vectors)
            w(f"gs = np.empty({9 * cin}, np.float32)")
            with w.block(f"for c in range({cin}):"):
                for a in range(3):
                    for b in range(3):
                        src = (2 - a, 2 - b) if flip else (a, b)
                        w(f"gs[{(3 * a + b) * cin} + c] = wt[k, c, {src[0]}, {src[1]}]")

            def step(ln):
                for a in range(3):
                    for b in range(3):
                        w(f"g{a}{b} = {ln.load('gs', f'{(3 * a + b) * cin} + c')}")
                for i in range(A):  # G g: 6 x 3
                    for b in range(3):
                        w(f"t{i}{b} = {ln.combination(G[i], [f'g{a}{b}' for a in range(3)])}")
                for i in range(A):
                    for j in range(A):
                        expr = ln.combination(G[j], [f"t{i}{b}" for b in range(3)])
                        w(ln.store("u", f"{(i * A + j) * cout * cin} + k * {cin} + c",
                                   expr))

            vector_loop(w, "c", 0, cin, lanes, consts, step)
        return "wt, u"

    return _module(key, body)


def _phase_ranges(size: int, pad: int, count: int):
    """Per phase f (0..3): the range of t with 0 <= 4 t + f - pad < size, t < count."""
    out = []
    for f in range(M):
        lo = max(0, -(-(pad - f) // M))
        hi = min(count, max(lo, (size - 1 + pad - f) // M + 1))
        out.append((lo, hi))
    return out


def emit_input(key) -> str:
    """v[p ps + ((c nb + nn) rows + tr) tw + t] = (B^T d B)[p // 6, p % 6] for the input tile
    (ty0 + tr, t) of image n0 + nn; an item (image of the chunk, channel), its band's rows of
    tiles in turn."""
    d = key.desc
    cin, h, wd = d.input_tensor.sizes[1:]
    th, tw = tiles(d)
    pt, pl = d.start_padding
    tw1 = tw + 1  # the phases read one tile further (offsets 4 and 5)
    run = M * tw1

    def body(w, lanes, consts, loop):
        with shares(w, loop, f"nb * {cin}", var="q"):
            w(f"nn = q // {cin}")
            w(f"c = q - nn * {cin}")
            w(f"xb = ((n0 + nn) * {cin} + c) * {h * wd}")
            w(f"ds = np.empty({A * run}, np.float32)")
            w(f"e = np.empty({A * run}, np.float32)")
            body_rows(w, lanes, consts)
        return "x, n0, nb, ty0, rows, v, ps, cs"

    def body_rows(w, lanes, consts):
        with w.block("for tr in range(rows):"):
            w("ty = ty0 + tr")
            # the six input rows of the tiles, split by phase: ds[(rr 4 + f) tw1 + t]
            w("ds[:] = 0.0")
            with w.block(f"for rr in range({A}):"):
                w(f"iy = ty * {M} - {pt} + rr")
                with w.block(f"if iy >= 0 and iy < {h}:"):
                    w(f"xr = xb + iy * {wd} - {pl}")
                    for f, (lo, hi) in enumerate(_phase_ranges(wd, pl, tw1)):
                        if hi > lo:
                            with w.block(f"for t in range({lo}, {hi}):"):
                                w(f"ds[rr * {run} + {f * tw1} + t] = x[xr + t * {M} + {f}]")
            # down the rows (B^T d)

            def down(ln):
                transform_pass(w, ln, BT, "d", lambda rr: ("ds", f"{rr * run} + s"),
                               lambda i: ("e", f"{i * run} + s"))

            vector_loop(w, "s", 0, run, lanes, consts, down)
            # along the row (e B): offsets 0..5 of tile t are phases 0..3 at t, 0..1 at t + 1
            w(f"vb = c * cs + (nn * rows + tr) * {tw}")
            for i in range(A):
                def across(ln, i=i):
                    transform_pass(w, ln, BT, "h",
                                   lambda q: ("e", f"{(i * M + q % M) * tw1 + q // M} + t"),
                                   lambda j: ("v", f"{i * A + j} * ps + vb + t"))

                vector_loop(w, "t", 0, tw, lanes, consts, across)

    return _module(key, body)


def emit_output(key) -> str:
    """y[n0 + nn, k, 4 ty + a, 4 t + b] = act((A^T m A)[a, b] + bias[k]), cropped to the
    output; an item (image of the chunk, output channel), its band's rows of tiles in turn."""
    d = key.desc
    cout, oh, ow = d.output_tensor.sizes[1:]
    th, tw = tiles(d)
    bias = d.bias_tensor is not None
    addend = key.plan.addend

    def body(w, lanes, consts, loop):
        with shares(w, loop, f"nb * {cout}", var="q"):
            w(f"nn = q // {cout}")
            w(f"k = q - nn * {cout}")
            w(f"yb = ((n0 + nn) * {cout} + k) * {oh * ow}")
            if bias:
                w("bm = b[k]")
            w(f"z = np.empty({M * A * tw}, np.float32)")
            w(f"o = np.empty({M * tw}, np.float32)")
            w("fine = True")
            body_rows(w, lanes, consts)
            # a sum that is not finite: the transforms may have overflowed, or turned the
            # direct sum's infinity into NaN; the caller computes the call by the direct sum
            with w.block("if not fine:"):
                w("bad[0] = 1")
        return ("m, ps, cs, n0, nb, ty0, rows, " + ("b, " if bias else "") +
                ("ad, " if addend else "") + "y, bad")

    def body_rows(w, lanes, consts):
        with w.block("for tr in range(rows):"):
            w("ty = ty0 + tr")
            w(f"mb = k * cs + (nn * rows + tr) * {tw}")
            # down the rows (A^T m): z[(a 6 + j) tw + t]
            for j in range(A):
                def down(ln, j=j):
                    transform_pass(w, ln, AT, "m", lambda i: ("m", f"{i * A + j} * ps + mb + t"),
                                   lambda a: ("z", f"{(a * A + j) * tw} + t"))

                vector_loop(w, "t", 0, tw, lanes, consts, down)
            # along the row (z A) into the row's four phases, then the epilogue, stored cropped
            with w.block(f"for a in range({M}):"):
                w(f"oy = ty * {M} + a")
                with w.block(f"if oy < {oh}:"):
                    def across(ln):
                        transform_pass(w, ln, AT, "s",
                                       lambda j: ("z", f"(a * {A} + {j}) * {tw} + t"),
                                       lambda b: ("o", f"{b * tw} + t"))

                    vector_loop(w, "t", 0, tw, lanes, consts, across)
                    w(f"yr = yb + oy * {ow}")
                    with w.block(f"for ox in range({ow}):"):
                        w(f"sm = o[(ox % {M}) * {tw} + ox // {M}]")
                        w("fine = fine and abs(sm) < math.inf")
                        conv_epilogue(w, d, "sm", "y[yr + ox]", bias="bm",
                                      addend="ad[yr + ox]" if addend else None)

    return _module(key, body)


#: bytes of a page: two addresses this far apart (or a multiple) share their set of the
#: first-level cache, and a load there waits on a store to the other
PAGE = 4096


def width(cols: int, cin: int, cout: int) -> int:
    """A row's length in the transformed input and output for ``cols`` tiles: ``cols``, or a
    column more where the 36 positions' matrices (``cin`` or ``cout`` rows apart) would lie a
    multiple of a page apart: the transforms' 36 streams in one cache set (measured alone,
    the padded layer against the unpadded on this 2-core Zen 5: 256 -> 256 on 14 x 14 at batch
    8, 128 columns, 0.77x the time; 128 -> 128 on 32 x 32, 64 columns, 0.81x; 64 -> 64 on
    64 x 64, 256 columns, 0.90x; where the positions already spread, 196 and 98 columns, a
    column more took 1-2% longer)."""
    def apart(rows: int) -> bool:  # (rows of a page or more: no column count helps)
        return (rows * cols * 4) % PAGE == 0 and (rows * 4) % PAGE != 0

    return cols + 1 if apart(cin) or apart(cout) else cols


def products_desc(desc, cols: int):
    """The 36 products of a chunk of ``cols`` tiles as one convolution: 1x1, 1-D, of 36 groups
    (position p's group: input channels ``p C ..``, output channels ``p K ..``), the transformed
    input ``v`` (1, 36 C, cols) its input, the transformed filter ``u`` (36 K, C, 1) its
    filter, ``m`` (1, 36 K, cols) its output."""
    cin, cout = desc.input_tensor.sizes[1], desc.output_tensor.sizes[1]
    t = desc.input_tensor.data_type
    return dataclasses.replace(
        desc, input_tensor=TensorDesc(t, (1, P * cin, cols)),
        filter_tensor=TensorDesc(t, (P * cout, cin, 1)), bias_tensor=None,
        output_tensor=TensorDesc(t, (1, P * cout, cols)),
        mode=ConvolutionMode.CROSS_CORRELATION, strides=(1,), dilations=(1,), start_padding=(0,),
        end_padding=(0,), output_padding=(0,), group_count=P, fused_activation=None)


class WinogradKernel(ConvolutionKernel):
    """F(4x4, 3x3) (see the module's docstring): the filter transformed (a frozen filter once),
    then per chunk (images, or an image's band of rows of tiles) the input transform, the 36
    products (a blocked tile's kernel, one per chunk column count) and the output transform with
    bias and activation, in the calling thread's scratch (:func:`.base.scratch`, shared by every
    kernel it calls). Parallel by the convolution's work, as the other algorithms' kernels."""

    algorithm = "winograd"
    emitters = {"winograd-filter": emit_filter, "winograd-input": emit_input,
                "winograd-output": emit_output}

    def __init__(self, desc, options, plan: WinogradPlan | None = None):
        if not takes(desc):
            raise ValueError(f"the winograd kernel does not run {desc!r}")
        self.desc = desc
        self.parallel = resolve_parallel(options.get("parallel"), conv_work(desc))
        self.plan = plan or WinogradPlan(Host.current().lanes)
        n_, cin = desc.input_tensor.sizes[:2]
        cout = desc.output_tensor.sizes[1]
        th, tw = tiles(desc)
        self.th, self.tw, self.tiles = th, tw, th * tw
        # per chunk: whole images while their transformed input and output fit the bound,
        # else one image in bands of rows of tiles (:func:`chunk_bytes`)
        row_bytes = P * (cin + cout) * tw * 4
        bound = chunk_bytes(cin, cout)
        self.chunk = max(1, min(n_, bound // (row_bytes * th)))
        self.band = th if self.chunk > 1 else max(1, min(th, bound // row_bytes))
        self._keys, self._sources = [], []
        f32, i64 = np.dtype(np.float32), np.dtype(np.int64)
        bias_arg = [(f32, 1)] * ((desc.bias_tensor is not None) + self.plan.addend)
        self.filter = self._helper("winograd-filter", [(f32, 4), (f32, 1)])
        self.input = self._helper("winograd-input",
                                  [(f32, 1)] + [(i64, 0)] * 4 + [(f32, 1), (i64, 0), (i64, 0)])
        self.output = self._helper("winograd-output", [(f32, 1)] + [(i64, 0)] * 6 + bias_arg
                                   + [(f32, 1), (np.dtype(np.uint8), 1)])
        self.options = {k: v for k, v in options.items() if k != "algorithm"}
        # the products' kernel per chunk column count: the tile the static choice takes for
        # them (the direct loop nest where no tile applies); a 1x1 convolution of unit stride
        # with no padding, read in place: no padded copy in the thread's scratch, where v and
        # m lie
        self.widths = {cols: width(cols, cin, cout) for cols in self.column_counts()}
        self.products = {cols: self._direct_kernel(products_desc(desc, w))
                         for cols, w in self.widths.items()}
        for kernel in self.products.values():
            self._keys.extend(kernel.compiled_keys())
        self._direct = None  # the direct sum's kernel, built when a call needs it
        self.source = "\n".join(self._sources + [k.source for k in self.products.values()])
        self._transformed = Derived()  # the transformed filter of a frozen (a model's) filter

    def column_counts(self) -> set:
        """The chunks' column counts (tiles): a full chunk's, the last images' and the last
        band's."""
        n_ = self.desc.input_tensor.sizes[0]
        return {(min(n_, n0 + self.chunk) - n0) * min(self.band, self.th - ty0) * self.tw
                for n0 in range(0, n_, self.chunk) for ty0 in range(0, self.th, self.band)}

    def _helper(self, name, arg_types):
        plan = self.plan if name == "winograd-output" else dataclasses.replace(self.plan,
                                                                               addend=False)
        key = KernelKey("cpu", self.desc, name, self.parallel, plan=plan)
        source = self.emitters[name](key)
        self._keys.append(key)
        self._sources.append(source)
        return build_variants(key, source, lambda k: self.emitters[k.kernel](k), arg_types,
                              automatic=False)

    def _direct_kernel(self, desc):
        """The kernel of the direct sum of ``desc``: the blocked tile the static choice would
        take, else the direct loop nest."""
        from .choice import choose
        from .variants import build

        algorithm, plan = choose(desc, among="blocked")
        return build(desc, self.options, "direct" if plan is None else algorithm, plan)

    def variant(self) -> str:
        return "winograd"

    def compiled_keys(self) -> tuple:
        return tuple(self._keys)

    def with_addend(self, desc):
        """The same kernels with the addend added in the output transform's epilogue (the
        filter's, input's and products' kernels are this kernel's own)."""
        return WinogradKernel(desc, self.options, dataclasses.replace(self.plan, addend=True))

    def transformed(self, wt) -> np.ndarray:
        """``u`` of the filter ``wt``: 36 matrices (K, C) one after another, flat."""
        k, c = wt.shape[:2]
        u = _pages.empty(P * k * c, np.float32)  # 38 MiB for 512 -> 512
        self.filter(np.ascontiguousarray(wt), u)
        return u

    def _filter_of(self, wt):
        """The products' filter (36 K, C, 1) from ``wt``: frozen where ``wt`` is (a model's),
        so that the products' kernels pack it once."""
        u = self.transformed(wt).reshape(-1, wt.shape[1], 1)
        return freeze(u) if is_frozen(wt) else u

    def scratch_bytes(self) -> int:
        """The largest chunk's transformed input and output."""
        cin, cout = self.desc.input_tensor.sizes[1], self.desc.output_tensor.sizes[1]
        return P * (cin + cout) * max(self.widths.values()) * 4

    def bound(self, inputs, y):
        """The kernel's call on these arrays (a compiled graph's step), what they decide
        settled now where the input is C-contiguous and the filter frozen (a model's): the
        flat views, the filter's transform and its tiles' packing, each chunk's arguments, its
        views of this thread's scratch and its products' bound call; each call then runs the
        kernels alone (ResNet-18 at batch 1 spent 0.24-0.27 ms of its ~9 in its ten Winograd
        steps' Python between their kernels, settling these each call). Else each call
        settles them, as :meth:`run` does."""
        if not (inputs[0].flags.c_contiguous and is_frozen(inputs[1])):
            return functools.partial(self.run, inputs, y)
        return self._call_on(inputs, y)

    def run(self, inputs, y):
        self._call_on(inputs, y)()

    def _call_on(self, inputs, y):
        """The call on these arrays as one of no arguments: per chunk (images, or an image's
        band of rows of tiles), the input transform, the products and the output transform,
        then the direct sum where a sum was not finite."""
        x = np.ascontiguousarray(inputs[0]).reshape(-1)
        u = self._transformed.get(inputs[1], self._filter_of)
        bias = (np.ascontiguousarray(inputs[2]).reshape(-1),) if (
            self.desc.bias_tensor is not None) else ()
        if self.plan.addend:
            bias += (np.ascontiguousarray(inputs[-1]).reshape(-1),)
        n_, cin = inputs[0].shape[:2]
        cout = y.shape[1]
        yf = y.reshape(-1)
        bad = np.zeros(1, np.uint8)
        buf = scratch((self.scratch_bytes() // 4,), np.float32)
        chunks = []
        for n0 in range(0, n_, self.chunk):
            nb = min(n_, n0 + self.chunk) - n0
            for ty0 in range(0, self.th, self.band):
                rows = min(self.band, self.th - ty0)
                cols = nb * rows * self.tw
                cs = self.widths[cols]
                vs, ms = cin * cs, cout * cs
                v, m = buf[:P * vs], buf[P * vs:P * (vs + ms)]
                # the rows' padding read by the products: zeros, not whatever was there (a
                # denormal is slow), written each call (the scratch is every kernel's)
                pad = v.reshape(P * cin, cs)[:, cols:] if cs > cols else None
                products = self.products[cols].bind([v.reshape(1, P * cin, cs), u],
                                                    m.reshape(1, P * cout, cs))
                chunks.append((pad, (x, n0, nb, ty0, rows, v, vs, cs), products,
                               (m, ms, cs, n0, nb, ty0, rows, *bias, yf, bad)))
        transform_input, transform_output = self.input, self.output

        def call():
            bad[0] = 0
            for pad, at_input, products, at_output in chunks:
                if pad is not None:
                    pad[...] = 0.0
                transform_input(*at_input)
                products()
                transform_output(*at_output)
            if bad[0]:  # infinities, NaN or overflow: the direct sum's result, as every
                self.direct_sum()(inputs, y)  # kernel's

        return call

    def direct_sum(self):
        """The kernel of the direct sum for this descriptor (the blocked tile the static choice
        would take, else the direct loop nest), for the calls whose sums are not all finite;
        with the addend, that kernel taking it (:meth:`FusedAddKernel.around
        <dml_numba.cpu.fused_add.FusedAddKernel.around>`: the tile's own epilogue, else the
        addition in place after it)."""
        if self._direct is None:
            from ...ops.fused_add import FusedAddDesc
            from ..fused_add import FusedAddKernel

            desc = dataclasses.replace(self.desc, fused_activation=None) if self.plan.addend \
                else self.desc
            self._direct = self._direct_kernel(desc)
            if self.plan.addend:
                out = self.desc.output
                self._direct = FusedAddKernel.around(FusedAddDesc(
                    self.desc, TensorDesc(out.data_type, out.sizes)), self._direct, self.parallel)
        return self._direct
