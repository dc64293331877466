"""GEMM on the CPU. Up to :data:`LOOP_MACS` multiply-adds (a classifier head): a generated loop
nest, parallel over the output's rows and blocks of its columns, each K sum a contiguous dot
product summed in vectors where the operands allow (B transposed) or row updates (B as it is),
alpha, beta * C and the fused activation on the way out. Larger: per batch the product through
BLAS (``np.dot`` inside the kernel: Numba calls SciPy's BLAS), then the epilogue, all in the
calling thread (:func:`dml_numba._blas.one_thread`): BLAS's pool spinning after a product
would take the cores from the parallel kernels after it."""
from __future__ import annotations

import dataclasses
from contextlib import nullcontext

import numpy as np

from .. import _blas
from .._codegen import SourceWriter
from .._dims import prod
from .._dtypes import accumulator
from .._registry import register
from ..ops.gemm import GemmOperatorDesc
from ._emit import CpuKernel, header, helper_header, make_key, run_in_accumulator

#: products up to this many multiply-adds run as a generated loop nest, not through BLAS
LOOP_MACS = 1 << 23


def _epilogue(w, d, v, c, at):
    """``y[at] =`` alpha * ``v`` + beta * C, then the fused activation."""
    v = v if d.alpha == 1.0 else f"{d.alpha!r} * {v}"
    if c and d.beta != 0.0:
        v += " + " + (f"c3[{at}]" if d.beta == 1.0 else f"{d.beta!r} * c3[{at}]")
    w(f"v = {v}")
    if d.fused_activation is not None:
        w(f"v = {d.fused_activation.expression('v')}")
    w(f"y3[{at}] = v")


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


@register(GemmOperatorDesc, "cpu")
class GemmKernel(CpuKernel):
    def __init__(self, desc, options):
        self.acc = accumulator(desc.a_tensor.data_type)
        rank = desc.a_tensor.rank
        count = 4 if desc.c_tensor is not None else 3
        macs = desc.flops() // 2
        key = make_key(desc, options, "loops" if macs <= LOOP_MACS else "main", work=macs)
        if key.kernel == "main":  # BLAS in the calling thread, the kernel around it serial
            key = dataclasses.replace(key, parallel=False)
        super().__init__(key, emit, [(self.acc, rank)] * count, options)

    def __call__(self, inputs, out):
        with _blas.one_thread() if self.key.kernel == "main" else nullcontext():
            run_in_accumulator(self.acc, lambda xs, y: self.fn(
                *[np.ascontiguousarray(a) for a in xs], y), inputs, out)
