"""What the CPU's max and average pooling share: a parallel loop over (n, c, outer spatial), one
pass per output element over its window with the operator's element body."""
from __future__ import annotations

import dataclasses

import numpy as np

from .._codegen import SourceWriter, decompose
from .._dims import prod
from .._dtypes import accumulator
from ._emit import (
    CpuKernel,
    bound_contiguous,
    bound_first,
    header,
    helper_header,
    make_key,
    run_in_accumulator,
)


def emit_pooling(key, element) -> str:
    """The kernel ``kernel(x, y)`` of a pooling descriptor; ``element(w, desc, o, acc=...)``
    writes one output element (``elements/<op>.py``)."""
    d = key.desc
    n_, c_ = d.input_tensor.sizes[:2]
    out = d.output_tensor.sizes[2:]
    o = [f"o{i}" for i in range(len(out))]
    w = SourceWriter()
    loop = header(w, key)
    acc = compute_type(d.input_tensor.data_type).name
    args = "x, y, yi" if len(d.bound_outputs()) > 1 else "x, y"
    with w.block(f"def kernel({args}):"):
        with w.block(f"for f in {loop}({n_ * c_ * prod(out[:-1])}):"):
            w(f"row({args}, f)")
    # the loop body in a function of its own: inline in the parallel loop, Numba compiled it
    # 4x slower than the serial loop (a 3x3 max pooling of 64 x 112 x 112: 2.75 ms against
    # 0.68 serial; 0.37 with the body apart)
    helper_header(w)
    with w.block(f"def row({args}, f):"):
        decompose(w, "f", ["n", "c"] + o[:-1], [n_, c_] + list(out[:-1]))
        with w.block(f"for {o[-1]} in range({out[-1]}):"):
            element(w, d, o, acc=acc)
    return w.text()


def compute_type(data_type):
    """The accumulator of a float type (float16 in float32); an integer type itself (a maximum
    of integers computes nothing)."""
    return accumulator(data_type) if data_type.is_float else data_type.numpy


class PoolingKernel(CpuKernel):
    """A pooling kernel on the CPU: float16 computed in float32 (:func:`run_in_accumulator`);
    with a second output (max pooling's indices), ``out`` is the pair of arrays. Where the
    operator's :meth:`vector_kernel` applies, that kernel instead of the loop nest."""

    element = None  # the operator's element body

    def vector_kernel(self, desc):
        """``(kernel name, emitter, work, plan or None)`` of the operator's vector kernel where
        one applies to ``desc`` (it reads its input flat: :attr:`flat_input`); ``None`` for the
        loop nest of :func:`emit_pooling`."""
        return None

    def __init__(self, desc, options, *, loop_nest: bool = False):
        """``loop_nest``: the loop nest even where a vector kernel applies (the tests compare
        the two bit for bit)."""
        self.acc = compute_type(desc.input_tensor.data_type)
        rank = desc.input_tensor.rank
        vector = None if loop_nest else self.vector_kernel(desc)
        if vector is not None:
            name, emit, work, plan = vector
            key = make_key(desc, options, name, work=work)
            if plan is not None:
                key = dataclasses.replace(key, plan=plan)
            super().__init__(key, emit, [(self.acc, rank)] * 2, options)
            self.flat_input = True
            self.bound = lambda inputs, out: bound_contiguous(self, inputs, out)
            return
        key = make_key(desc, options,
                       work=desc.output_tensor.element_count * prod(desc.window_size))
        extra = [(t.dtype, rank) for _, t in desc.bound_outputs()[1:]]
        super().__init__(key, lambda k: emit_pooling(k, type(self).element),
                         [(self.acc, rank), (self.acc, rank)] + extra, options)

    bound = bound_first

    #: a kernel that reads its input flat (the vector kernels): handed a C-contiguous copy
    #: where the input is a strided view, made at each call (a bound step re-reads the view)
    flat_input = False

    def __call__(self, inputs, out):
        if self.flat_input:
            inputs = [np.ascontiguousarray(inputs[0])]
        if isinstance(out, tuple):  # (values, indices): the indices written as they are
            y, more = out[0], out[1:]
            run_in_accumulator(self.acc, lambda xs, y: self.fn(xs[0], y, *more), inputs, y)
        else:
            run_in_accumulator(self.acc, lambda xs, y: self.fn(xs[0], y), inputs, out)
