"""GEMM on the CPU. B transposed (a linear layer's weights, as ONNX's Gemm with transB and
PyTorch's Linear hold them) with few output rows (a classifier head at batch 1 to 16): the
``rows`` kernel, parallel over blocks of output columns, each tile of ``rows`` x ``cols`` dot
products held in vector accumulators over K (each B row read once a block of A rows, from
memory once in all: at 8 rows the product through BLAS read it eight times over and took 1.1
ms for a 1280 -> 1000 head, the rows kernel 0.15). Otherwise, up to :data:`LOOP_MACS`
multiply-adds: a generated loop nest, parallel over the output's rows and blocks of its
columns, each K sum a contiguous dot product summed in vectors where the operands allow (B
transposed) or row updates (B as it is), alpha, beta * C and the fused activation on the way
out. Larger: per batch the product through BLAS (``np.dot`` inside the kernel: Numba calls
SciPy's BLAS), then the epilogue, all in the calling thread (:func:`dml_numba._blas.one_thread`):
BLAS's pool spinning after a product would take the cores from the parallel kernels after it."""
from __future__ import annotations

import dataclasses
import functools
from contextlib import nullcontext

import numpy as np

from .. import _blas
from .._codegen import SourceWriter
from .._dims import prod
from .._dtypes import accumulator
from .._registry import register
from ..ops.gemm import GemmOperatorDesc
from ._emit import (
    CpuKernel,
    Host,
    bound_contiguous,
    header,
    helper_header,
    make_key,
    run_in_accumulator,
)

#: products up to this many multiply-adds run as a generated loop nest, not through BLAS
LOOP_MACS = 1 << 23


def _epilogue(w, d, v, c, at, flat: bool = False):
    """``y[at] =`` alpha * ``v`` + beta * C, then the fused activation (``flat``: the arrays
    flat, else viewed as (batch, rows, columns))."""
    cc, yy = ("c", "y") if flat else ("c3", "y3")
    v = v if d.alpha == 1.0 else f"{d.alpha!r} * {v}"
    if c and d.beta != 0.0:
        v += " + " + (f"{cc}[{at}]" if d.beta == 1.0 else f"{d.beta!r} * {cc}[{at}]")
    w(f"v = {v}")
    if d.fused_activation is not None:
        w(f"v = {d.fused_activation.expression('v')}")
    w(f"{yy}[{at}] = v")


def _prelude(w, d, c: bool, nb: int, m: int, n: int) -> None:
    """Every tensor viewed as (batch, rows, columns)."""
    a_s, b_s = d.a_tensor.sizes[-2:], d.b_tensor.sizes[-2:]
    w(f"a3 = a.reshape(({nb}, {a_s[0]}, {a_s[1]}))")
    w(f"b3 = b.reshape(({nb}, {b_s[0]}, {b_s[1]}))")
    w(f"y3 = y.reshape(({nb}, {m}, {n}))")
    if c:
        w(f"c3 = c.reshape(({nb}, {m}, {n}))")


def emit(key) -> str:
    d = key.desc
    if key.kernel == "loops":
        return emit_loops(key)
    if key.kernel == "rows":
        return emit_rows(key)
    *batch, m, n = d.output_tensor.sizes
    nb = prod(batch)
    c = d.c_tensor is not None
    w = SourceWriter()
    header(w, key)  # serial: BLAS has the threads
    with w.block(f"def kernel(a, b, {'c, ' if c else ''}y):"):
        _prelude(w, d, c, nb, m, n)
        with w.block(f"for g in range({nb}):"):
            w(f"p = np.dot(a3[g]{'.T' if d.trans_a else ''}, b3[g]{'.T' if d.trans_b else ''})")
            with w.block(f"for i in range({m}):"):
                with w.block(f"for j in range({n}):"):
                    _epilogue(w, d, "p[i, j]", c, "g, i, j")
    return w.text()


#: the loop nest's parallel items: (batch, row, column block), the columns cut into blocks
#: until there are this many items (a classifier at batch 1 is one row: 1,000 columns)
ITEMS = 16


def column_blocks(items: int, n: int) -> int:
    """Blocks the ``n`` columns are cut into so that ``items`` (batch x rows) x blocks reaches
    :data:`ITEMS` (no block under 16 columns)."""
    return max(1, min(-(-ITEMS // items), n // 16))


def emit_loops(key) -> str:
    """The loop nest: a (parallel) loop over (batch, row, column block). B transposed: each
    output the dot product of two contiguous rows (``dot``: reassociated, so LLVM sums it in
    vectors); else the block of the row accumulated as K scaled runs of B's rows (contiguous
    updates); in the accumulator type."""
    d = key.desc
    *batch, m, n = d.output_tensor.sizes
    nb = prod(batch)
    k = d.k
    c = d.c_tensor is not None
    acc = accumulator(d.a_tensor.data_type).name
    blocks = column_blocks(nb * m, n)
    width = -(-n // blocks)
    w = SourceWriter()
    loop = header(w, key)
    with w.block(f"def kernel(a, b, {'c, ' if c else ''}y):"):
        _prelude(w, d, c, nb, m, n)
        with w.block(f"for f in {loop}({nb * m * blocks}):"):
            w(f"g = f // {m * blocks}")
            w(f"i = f // {blocks} % {m}")
            w(f"j0 = f % {blocks} * {width}")
            w(f"j1 = min(j0 + {width}, {n})")
            if d.trans_b:
                if d.trans_a:  # A's row i is a column: copied once for contiguous dot products
                    w(f"ai = np.empty({k}, np.{acc})")
                    with w.block(f"for kk in range({k}):"):
                        w("ai[kk] = a3[g, kk, i]")
                else:
                    w("ai = a3[g, i]")
                with w.block("for j in range(j0, j1):"):
                    w("s = dot(ai, b3[g, j])")
                    _epilogue(w, d, "s", c, "g, i, j")
            else:
                arow = (lambda kk: f"a3[g, {kk}, i]") if d.trans_a else (
                    lambda kk: f"a3[g, i, {kk}]")
                w(f"row = np.zeros({width}, np.{acc})")
                with w.block(f"for kk in range({k}):"):
                    w(f"t = {arow('kk')}")
                    with w.block("for j in range(j0, j1):"):
                        w("row[j - j0] += t * b3[g, kk, j]")
                with w.block("for j in range(j0, j1):"):
                    _epilogue(w, d, "row[j - j0]", c, "g, i, j")
    if d.trans_b:  # the sum reassociated (no other IEEE rule relaxed): LLVM sums in vectors
        helper_header(w, fastmath=("reassoc", "contract"))
        with w.block("def dot(u, v):"):
            w(f"s = numba.{acc}(0.0)")
            with w.block(f"for kk in range({k}):"):
                w("s += u[kk] * v[kk]")
            w("return s")
    return w.text()


#: the rows kernel takes B transposed with at least ROWS_MIN and at most ROWS_MAX output rows
#: a batch (more: the loop nest or BLAS, which reuse B across rows in their own ways). AVX2,
#: 1280 -> 1000 with B out of the caches: at two rows 0.176 ms against the loop nest's 0.192,
#: at four 0.365 against 0.412; at one row (tiles of one B row, K in four partial sums) 0.10-0.12
#: against 0.17-0.20 (the loop nest's dot products: one sum LLVM vectorises; tiles of two B rows
#: read two streams at once: 0.18)
ROWS_MIN, ROWS_MAX = 1, 16


@dataclasses.dataclass(frozen=True)
class RowsPlan:
    """The rows kernel's tile: ``rows`` rows of A x ``cols`` rows of B, their dot products in
    vectors of ``lanes`` float32 (``rows x cols`` accumulators, ``cols`` B vectors and one A
    vector live: 4 x 2 in AVX2's 16 registers, 8 x 2 in AVX-512's 32), each dot product in
    ``splits`` partial sums over K (consecutive vectors of K in turn), so that a tile has
    four independent chains of fused multiply-adds: one row of A takes tiles of one B row (B
    read as one stream a thread, the fastest out of the caches) in four partial sums."""

    lanes: int
    rows: int
    cols: int
    splits: int = 1

    @property
    def label(self) -> str:
        return f"{self.lanes} {self.rows}x{self.cols}" + (
            f" /{self.splits}" if self.splits > 1 else "")

    @classmethod
    def for_host(cls, m: int, n: int, host: Host | None = None) -> RowsPlan:
        host = host or Host.current()
        rows = min(m, 8 if host.lanes >= 16 else 4)
        cols = 1 if m == 1 else min(n, 2)
        return cls(host.lanes, rows, cols, max(1, 4 // (rows * cols)))


def takes_rows(desc) -> bool:
    """Whether the rows kernel runs ``desc``: B transposed, :data:`ROWS_MIN` to
    :data:`ROWS_MAX` output rows, float32 or float16 (summed in float32: the vectors' type)."""
    return (desc.trans_b and ROWS_MIN <= desc.output_tensor.sizes[-2] <= ROWS_MAX
            and accumulator(desc.a_tensor.data_type) == np.float32)


def emit_rows(key) -> str:
    """The rows kernel (every tensor flat): A made row-major first where it is transposed, then
    a (parallel) loop over (batch, block of output columns); in a block, tiles of ``rows`` A
    rows x ``cols`` B rows (the last row and column tiles narrower where they do not divide),
    each a function of its own: ``rows x cols`` vector sums over K's whole vectors, each
    summed across its lanes (:func:`~dml_numba.cpu._simd.vsum`), K's last elements added one
    by one, then alpha, beta * C and the fused activation, stored."""
    d, plan = key.desc, key.plan
    *batch, m, n = d.output_tensor.sizes
    nb, k, L = prod(batch), d.k, plan.lanes
    c = d.c_tensor is not None
    blocks = column_blocks(nb, -(-n // plan.cols))
    width = -(-n // blocks)
    width += -width % plan.cols  # whole column tiles in every block but the last
    blocks = -(-n // width)
    w = SourceWriter()
    loop = header(w, key,
                  imports=("from dml_numba.cpu._simd import vadd, vfma, vload, vsum, vzero",))
    args = f"a, b, {'c, ' if c else ''}y"
    row_tiles = [(i, plan.rows) for i in range(0, m - plan.rows + 1, plan.rows)]
    if m % plan.rows:
        row_tiles.append((m - m % plan.rows, m % plan.rows))
    # every block but the last holds whole column tiles (its width a multiple of them): the
    # last block's last columns, where n is not, take tiles of one column
    tail = n % plan.cols > 0
    with w.block(f"def kernel({args}):"):
        if d.trans_a:  # A row-major once (its rows are what the tiles read whole)
            w(f"ar = np.empty({nb * m * k}, np.float32)")
            with w.block(f"for gi in range({nb * m}):"):
                w(f"g = gi // {m}")
                w(f"i = gi % {m}")
                with w.block(f"for kk in range({k}):"):
                    w(f"ar[gi * {k} + kk] = a[(g * {k} + kk) * {m} + i]")
        else:
            w("ar = a")
        w(f"# {blocks} blocks of {width} output columns a batch, tiles of up to "
          f"{plan.rows} x {plan.cols}")
        with w.block(f"for f in {loop}({nb * blocks}):"):
            w(f"g = f // {blocks}")
            w(f"j0 = f % {blocks} * {width}")
            w(f"j1 = min(j0 + {width}, {n})")
            w(f"full = j0 + (j1 - j0) // {plan.cols} * {plan.cols}")
            call = f"(ar, b, {'c, ' if c else ''}y, g, {{i}}, j)"
            with w.block(f"for j in range(j0, full, {plan.cols}):"):
                for i, r in row_tiles:
                    w(f"tile{r}x{plan.cols}" + call.format(i=i))
            if tail:
                with w.block("for j in range(full, j1):"):  # the block's last columns
                    for i, r in row_tiles:
                        w(f"tile{r}x1" + call.format(i=i))
    for r, q in sorted({(r, q) for _, r in row_tiles
                        for q in (plan.cols, 1) if q == plan.cols or tail}):
        _emit_rows_tile(w, d, r, q, L, plan.splits, m, n, k, c)
    return w.text()


def _emit_rows_tile(w, d, r: int, q: int, L: int, S: int, m: int, n: int, k: int,
                    c: bool) -> None:
    """``tile{r}x{q}``: A rows ``i..i+r`` x B rows ``j..j+q`` of batch ``g``, each dot product
    in ``S`` partial sums (vector ``t`` of K into sum ``t % S``), added before the lanes are."""
    helper_header(w)
    with w.block(f"def tile{r}x{q}(a, b, {'c, ' if c else ''}y, g, i, j):"):
        for u in range(r):
            w(f"ao{u} = (g * {m} + i + {u}) * {k}")
        for v in range(q):
            w(f"bo{v} = (g * {n} + j + {v}) * {k}")

        def acc(u, v, p):
            return f"s{u}_{v}" + (f"_{p}" if S > 1 else "")

        def step(at, sums):  # one vector of K at ``at`` into partial sums ``sums``
            for v in range(q):
                w(f"b{v} = vload(b, bo{v} + {at}, {L})")
            for u in range(r):
                w(f"a_ = vload(a, ao{u} + {at}, {L})")
                for v in range(q):
                    w(f"{acc(u, v, sums)} = vfma(a_, b{v}, {acc(u, v, sums)})")

        whole = k // (L * S) * (L * S)  # K's vectors in runs of S
        rest = (k - whole) // L  # whole vectors after the runs: the first partial sums
        for u in range(r):
            for v in range(q):
                for p in range(S):
                    w(f"{acc(u, v, p)} = vzero({L})")
        if whole:
            with w.block(f"for kk in range(0, {whole}, {L * S}):"):
                for p in range(S):
                    step(f"kk + {p * L}" if p else "kk", p)
        for p in range(rest):
            step(str(whole + p * L), p)
        for u in range(r):
            for v in range(q):
                sums = [acc(u, v, p) for p in range(S)]
                while len(sums) > 1:  # pairwise: (s0 + s1) + (s2 + s3)
                    sums = [f"vadd({x}, {y})" for x, y in zip(sums[::2], sums[1::2])] + (
                        sums[-1:] if len(sums) % 2 else [])
                w(f"t{u}_{v} = vsum({sums[0]})")
        if k % L:
            with w.block(f"for kk in range({k // L * L}, {k}):"):
                for u in range(r):
                    for v in range(q):
                        w(f"t{u}_{v} += a[ao{u} + kk] * b[bo{v} + kk]")
        for u in range(r):
            for v in range(q):
                at = f"(g * {m} + i + {u}) * {n} + j + {v}"
                _epilogue(w, d, f"t{u}_{v}", c, at, flat=True)


@register(GemmOperatorDesc, "cpu")
class GemmKernel(CpuKernel):
    def __init__(self, desc, options):
        self.acc = accumulator(desc.a_tensor.data_type)
        rank = desc.a_tensor.rank
        count = 4 if desc.c_tensor is not None else 3
        macs = desc.flops() // 2
        if takes_rows(desc):
            *_, m, n = desc.output_tensor.sizes
            key = dataclasses.replace(make_key(desc, options, "rows", work=macs),
                                      plan=RowsPlan.for_host(m, n))
            rank = 1  # the rows kernel reads every tensor flat
        else:
            key = make_key(desc, options, "loops" if macs <= LOOP_MACS else "main", work=macs)
        if key.kernel == "main":  # BLAS in the calling thread, the kernel around it serial
            key = dataclasses.replace(key, parallel=False)
        super().__init__(key, emit, [(self.acc, rank)] * count, options)

    def bound(self, inputs, out):
        """A compiled graph's step: the generated kernel itself on the arrays (flat views for
        the rows kernel), where they are C-contiguous and no BLAS runs (BLAS's thread count is
        set around each call)."""
        if self.key.kernel == "rows" and all(a.flags.c_contiguous for a in inputs):
            return functools.partial(self.fn, *(a.reshape(-1) for a in inputs), out.reshape(-1))
        if self.key.kernel == "main":
            return functools.partial(self, inputs, out)
        return bound_contiguous(self, inputs, out)

    def __call__(self, inputs, out):
        flat = self.key.kernel == "rows"
        with _blas.one_thread() if self.key.kernel == "main" else nullcontext():
            run_in_accumulator(self.acc, lambda xs, y: self.fn(
                *[np.ascontiguousarray(a).reshape(-1) if flat else np.ascontiguousarray(a)
                  for a in xs], y.reshape(-1) if flat else y), inputs, out)
