"""Average pooling on the CPU: the shared pooling loop nest (:mod:`._pooling`) with average
pooling's element body (:func:`dml_numba.elements.average_pooling.pool_element`); a window
over the whole plane (ONNX's GlobalAveragePool) as one sum a plane (:func:`emit_global`)."""
from __future__ import annotations

from .._codegen import SourceWriter
from .._dims import prod
from .._dtypes import DataType
from .._registry import register
from ..elements.average_pooling import pool_element
from ..ops.average_pooling import AveragePooling1OperatorDesc
from ._emit import header, helper_header
from ._pooling import PoolingKernel


def is_global(desc) -> bool:
    """Whether each window is its whole input plane: the window the input's spatial sizes,
    no padding, no dilation (one output a plane)."""
    return (tuple(desc.window_size) == tuple(desc.input_tensor.sizes[2:])
            and not any(desc.start_padding) and not any(desc.end_padding)
            and all(d == 1 for d in desc.dilations))


#: a plane of at most this many elements is summed fully unrolled
UNROLL = 64
#: float32 planes are summed in vectors in chunks of this many elements
WIDE = 512


def emit_global(key) -> str:
    """``y[n, c] = sum(x[n, c]) / count``: per plane (in parallel) the plane's elements summed
    in float64, then one rounding to the output's type. float32: in vectors (runs of 8
    widened and added lane by lane, :func:`~dml_numba.cpu._simd.sum_wide`; a plane of more
    than WIDE elements in chunks of that many, their sums added in order); 1280 planes x 8
    images of 7 x 7: 0.115 -> 0.04 ms. Other types as four interleaved sums (element ``i``
    into sum ``i % 4``, added pairwise at the end: a fixed order, four independent chains of
    additions instead of one; unrolled for small planes): on a 7 x 7 plane the one chain of
    49 dependent additions was the whole cost (30% less time)."""
    d = key.desc
    planes, size = prod(d.input_tensor.sizes[:2]), prod(d.input_tensor.sizes[2:])
    wide = d.input_tensor.data_type == DataType.FLOAT32
    w = SourceWriter()
    loop = header(w, key, imports=("from dml_numba.cpu._simd import sum_wide",) if wide else ())
    with w.block("def kernel(x, y):"):
        w("xf = x.reshape(-1)")
        w("yf = y.reshape(-1)")
        with w.block(f"for f in {loop}({planes}):"):
            w(f"yf[f] = plane_sum(xf, f * {size}) / {size}")
    helper_header(w)
    with w.block("def plane_sum(x, o):"):
        if wide:
            whole = size // WIDE * WIDE
            if not whole:
                w(f"return sum_wide(x, o, {size})")
                return w.text()
            w("s = numba.float64(0.0)")
            with w.block(f"for i in range(0, {whole}, {WIDE}):"):
                w(f"s += sum_wide(x, o + i, {WIDE})")
            if size > whole:
                w(f"s += sum_wide(x, o + {whole}, {size - whole})")
            w("return s")
            return w.text()
        for j in range(4):
            w(f"s{j} = numba.float64(0.0)")
        if size <= UNROLL:
            for i in range(size):
                w(f"s{i % 4} += numba.float64(x[o + {i}])")
        else:
            with w.block(f"for i in range(0, {size - size % 4}, 4):"):
                for j in range(4):
                    w(f"s{j} += numba.float64(x[o + i + {j}])")
            for i in range(size - size % 4, size):
                w(f"s{i % 4} += numba.float64(x[o + {i}])")
        w("return (s0 + s1) + (s2 + s3)")
    return w.text()


@register(AveragePooling1OperatorDesc, "cpu")
class AveragePoolingKernel(PoolingKernel):
    element = staticmethod(pool_element)

    def vector_kernel(self, desc):
        if not is_global(desc):
            return None
        return "global", emit_global, desc.input_tensor.element_count, None
