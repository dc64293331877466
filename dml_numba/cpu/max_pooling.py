"""Max pooling on the CPU: the shared pooling loop nest (:mod:`._pooling`) with max pooling's
element body (:func:`dml_numba.elements.max_pooling.pool_element`); 2-D float pooling without
the indices output in vectors of output columns (:func:`emit_rows`)."""
from __future__ import annotations

import dataclasses
from contextlib import ExitStack

import numpy as np

from .._codegen import SourceWriter
from .._registry import register
from ..elements.max_pooling import pool_element
from ..ops.max_pooling import MaxPooling2OperatorDesc
from ._emit import Host, header, helper_header
from ._pooling import PoolingKernel, compute_type


@dataclasses.dataclass(frozen=True)
class PoolRows:
    """The vector kernel's plan: float32 lanes a vector of output columns."""

    lanes: int

    @property
    def label(self) -> str:
        return f"{self.lanes} lanes"


def inside(n: int, out: int, k: int, s: int, d: int, p: int, past: int = 0) -> tuple:
    """``(lo, hi)``: the outputs along one axis whose every tap lies inside the input, with
    ``past`` more elements after the last tap's (a strided vector load's whole last stride)."""
    lo = -(-p // s)
    hi = min(out, (n - 1 - past + p - (k - 1) * d) // s + 1)
    return lo, max(lo, hi)


def emit_rows(key) -> str:
    """Per plane (in parallel), each output row whose taps all lie inside the input in vectors
    of ``lanes`` output columns: per tap in window order (rows, then columns), the columns'
    inputs in one strided load (``vload_every``) taken into the maximum by the scalar rule
    lane by lane (``vmax``: the same bits as the loop); the last vector overlaps the one
    before. The rows and columns whose windows reach into the padding run the scalar element
    body (:func:`pool_element`). ResNet-18's 3 x 3 stride-2 pooling of 64 x 112 x 112: 0.47 ms
    scalar."""
    d, lanes = key.desc, key.plan.lanes
    n_, c_, h, w_ = d.input_tensor.sizes
    oh, ow = d.output_tensor.sizes[2:]
    (kh, kw), (sh, sw), (dh, dw) = d.window_size, d.strides, d.dilations
    pt, pl = d.start_padding
    rows = inside(h, oh, kh, sh, dh, pt)
    cols = inside(w_, ow, kw, sw, dw, pl, past=sw - 1)  # vload_every reads a stride on
    vector = rows[1] > rows[0] and cols[1] - cols[0] >= lanes
    w = SourceWriter()
    loop = header(w, key, imports=("from dml_numba.cpu._simd import vload_every, vmax, vsplat, "
                                   "vstore",))
    with w.block("def kernel(x, y):"):
        w("xf = x.reshape(-1)")
        w("yf = y.reshape(-1)")
        with w.block(f"for f in {loop}({n_ * c_}):"):
            w("plane(x, y, xf, yf, f)")
    helper_header(w)
    with w.block("def plane(x, y, xf, yf, f):"):
        w(f"n = f // {c_}")
        w(f"c = f % {c_}")
        w(f"xo = f * {h * w_}")
        w(f"yo = f * {oh * ow}")
        edge_rows = [r for r in range(oh) if not (vector and rows[0] <= r < rows[1])]
        if edge_rows:
            with w.block(f"for o0 in ({', '.join(map(str, edge_rows))},):"):
                with w.block(f"for o1 in range({ow}):"):
                    pool_element(w, d, ["o0", "o1"], acc="float32")
        if vector:
            with w.block(f"for o0 in range({rows[0]}, {rows[1]}):"):
                edge_cols = [c for c in range(ow) if not cols[0] <= c < cols[1]]
                if edge_cols:
                    with w.block(f"for o1 in ({', '.join(map(str, edge_cols))},):"):
                        pool_element(w, d, ["o0", "o1"], acc="float32")
                _emit_vectors(w, d, lanes, cols, (h, w_), (oh, ow))
    return w.text()


def _emit_vectors(w, d, lanes, cols, size, out) -> None:
    """One interior row's vectors of output columns (``o0`` the row)."""
    (kh, kw), (sh, sw), (dh, dw) = d.window_size, d.strides, d.dilations
    pt, pl = d.start_padding
    w_, ow = size[-1], out[-1]
    span = cols[1] - cols[0]
    with ExitStack() as stack:
        stack.enter_context(w.block(f"for jt in range({-(-span // lanes)}):"))
        w(f"j = min({cols[0]} + jt * {lanes}, {cols[1] - lanes})")
        w(f"acc = vsplat(-numba.float32(math.inf), {lanes})")
        for kr in range(kh):
            w(f"xr = xo + (o0 * {sh} + {kr * dh - pt}) * {w_} + j * {sw}")
            for kc in range(kw):
                w(f"acc = vmax(acc, vload_every(xf, xr + {kc * dw - pl}, {sw}, {lanes}))")
        w(f"vstore(yf, yo + o0 * {ow} + j, acc)")


def takes_rows(desc) -> bool:
    """2-D float pooling (float32, or float16 computed in float32) with no indices output."""
    return (desc.input_tensor.rank == 4 and getattr(desc, "output_indices_tensor", None) is None
            and desc.input_tensor.data_type.is_float
            and compute_type(desc.input_tensor.data_type) == np.float32)


@register(MaxPooling2OperatorDesc, "cpu")
class MaxPoolingKernel(PoolingKernel):
    element = staticmethod(pool_element)

    def vector_kernel(self, desc):
        if not takes_rows(desc):
            return None
        return ("rows", emit_rows, desc.output_tensor.element_count * len(desc.window_size),
                PoolRows(Host.current().lanes))
