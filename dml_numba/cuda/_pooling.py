"""What CUDA's max and average pooling share: one thread per output element (grid-stride) with
the operator's element body."""
from __future__ import annotations

from ._emit import CudaKernel, emit_reduction, make_key


def pooling_lowering(element):
    """The lowering ``(desc, options) -> CudaKernel`` of a pooling whose element body is
    ``element`` (``elements/<op>.py``)."""

    def lower(desc, options):
        key = make_key(desc, options)
        dt, rank = desc.input_tensor.dtype, desc.input_tensor.rank
        extra = [(t.dtype, rank) for _, t in desc.bound_outputs()[1:]]  # max pooling's indices
        args = "x, y" + ", yi" * len(extra)
        return CudaKernel(key, emit_reduction(key, args, "c", element), [(dt, rank)] * 2 + extra,
                          desc.output_tensor.element_count)

    return lower
