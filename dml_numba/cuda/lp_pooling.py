"""LP pooling on CUDA: ``direct``, one thread per output element with the shared element body;
``tiled``, spatial tiles of a plane with their input region in shared memory (``_planes``),
the same element body reading its window from there. By default tiled where windows overlap
and the region fits in shared memory; ``compile_operator(desc, "cuda", algorithm=...)`` forces
one (``tiled`` falls back to ``direct`` where there is no tile). ``input_padding``: a padding
operator in front folded into the input reads, either kernel (:func:`fold_of`)."""
from __future__ import annotations

import dataclasses

from .._dtypes import accumulator
from .._registry import register
from ..elements.lp_pooling import fold_of, pool_element
from ..ops._base import FOLDS, Fold
from ..ops.lp_pooling import LpPooling1OperatorDesc
from ._emit import CudaKernel, emit_reduction, half_load, make_key
from ._planes import LAUNCH_BOUNDS, THREADS, plane_kernel, plane_plan, shared_taps


def plan_for(desc):
    """(the plane tile or None, the dtype held in shared memory: float32, float64 for FLOAT64)"""
    acc = accumulator(desc.input_tensor.data_type)
    return plane_plan(desc.output_tensor.sizes[2:], desc.window_size, desc.strides,
                      desc.dilations, acc.itemsize), acc


def emit_direct(key) -> str:
    return emit_reduction(key, "x, y", "c", lambda w, d, o, acc, load: pool_element(
        w, d, o, load=load, fold=fold_of(key)))


def emit_tiled(key) -> str:
    d = key.desc
    plan, acc = plan_for(d)
    with plane_kernel(key, "x, y", plan, channels=d.output_tensor.sizes[1], in_channel="c",
                      pads=d.start_padding, strides=d.strides, acc=acc.name,
                      load=half_load(d.input_tensor.data_type), fold=fold_of(key)) as (w, o):
        pool_element(w, d, o, window=lambda w, stack: shared_taps(
            w, stack, plan, d.window_size, d.strides, d.dilations))
    return w.text()


@register(LpPooling1OperatorDesc, "cuda", options={"algorithm": (None, "direct", "tiled"),
                                                  "input_padding": (None,) + tuple(FOLDS)})
def lower(desc, options):
    tiled = options.get("algorithm") != "direct" and plan_for(desc)[0] is not None
    key = make_key(desc, options, "tiled" if tiled else "main")
    if options.get("input_padding") is not None:
        key = dataclasses.replace(key, plan=Fold(FOLDS[options["input_padding"]]))
    dt, rank = desc.input_tensor.dtype, desc.input_tensor.rank
    if tiled:
        plan = plan_for(desc)[0]
        return CudaKernel(key, emit_tiled(key), [(dt, rank)] * 2,
                          desc.output_tensor.sizes[0] * desc.output_tensor.sizes[1] * plan.jobs,
                          block=THREADS,
                          launch_bounds=LAUNCH_BOUNDS)
    return CudaKernel(key, emit_direct(key), [(dt, rank)] * 2, desc.output_tensor.element_count)
