"""Numba CPU backend: the kernel key, module header, compiling generated source, and the loop
nest shared by the data-movement operators.

``emit(key) -> str`` functions read nothing but their key; compiling is a separate step
(:func:`build`), cached in :data:`dml_numba.cache` and on disk (:mod:`dml_numba._diskcache`).
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from .. import _diskcache
from .._cache import KernelKey
from .._codegen import SourceWriter, affine, decompose, index, preamble
from .._dims import prod
from .._dtypes import DataType
from .._gather import (
    PAD_KINDS,
    GatherPlan,
    constant_literal,
    emit_map,
    inside,
    storage_dtype,
)
from .._host import Host, planned_for, planning_elsewhere  # noqa: F401 - used by the kernels
from . import _affinity
from ._adaptive import AdaptiveKernel, ForkSafeKernel
from ._warmstart import load_cached, load_on_miss

#: below this many output elements (times window taps for reductions) a serial loop nest is
#: generated: waking the thread pool costs more than the work.
PARALLEL_MIN_WORK = 1 << 16


def resolve_parallel(option, work: int) -> bool:
    return bool(option) if option is not None else work >= PARALLEL_MIN_WORK


def make_key(desc, options, kernel: str = "main", *, work: int | None = None) -> KernelKey:
    """The key of a CPU kernel (options were checked by the registry; the same signature as
    the CUDA backend's): ``kernel`` names one of an operator's kernels; ``work`` (default: the
    output's elements) decides the parallel variant where ``options`` leaves it open."""
    work = desc.output_tensor.element_count if work is None else work
    return KernelKey("cpu", desc, kernel, resolve_parallel(options.get("parallel"), work))


def header(w: SourceWriter, key: KernelKey, imports=()) -> str:
    """Module preamble and the kernel's decorator; returns the outer loop's constructor. The
    caller opens ``def kernel(...)``. ``imports``: extra import lines of the module."""
    preamble(w, key, key.op, f"parallel={key.parallel}", "@numba.njit(inline='always')", imports)
    # __dml_disk_cache__ is set by the loader: True only for a module in the verified folder
    w(f"@numba.njit(parallel={key.parallel}, cache=__dml_disk_cache__, nogil=True, "
      "boundscheck=False, error_model='numpy')")
    return outer_loop(key)


def outer_loop(key: KernelKey) -> str:
    """The constructor of the kernel's outer loop: ``numba.prange`` in the parallel variant."""
    return "numba.prange" if key.parallel else "range"


def helper_header(w: SourceWriter, fastmath: tuple = ()) -> None:
    """The decorator of a function the kernel calls (after the kernel in the module): cached
    with it, serial, compiled once however often the kernel calls it; ``fastmath``: the LLVM
    flags it may relax (none by default)."""
    w()
    w()
    flags = f", fastmath={{{', '.join(map(repr, fastmath))}}}" if fastmath else ""
    w(f"@numba.njit(cache=__dml_disk_cache__, nogil=True, boundscheck=False, "
      f"error_model='numpy'{flags})")


class CpuKernel:
    """A compiled kernel plus the host-side adaptation of its arguments. ``emit(key)`` makes
    the source; when the parallel variant was chosen automatically (``options["parallel"]`` is
    None), calls go through :class:`AdaptiveKernel`, which also measures the serial variant."""

    def __init__(self, key: KernelKey, emit, arg_types, options=None):
        self.key = key
        self.source = emit(key)
        self.fn = build_variants(key, self.source, emit, arg_types,
                                 automatic=(options or {}).get("parallel") is None)

    def variant(self) -> str:
        """"parallel" or "serial": what the next call runs."""
        return self.fn.variant() if isinstance(self.fn, AdaptiveKernel) else (
            "parallel" if self.key.parallel else "serial")

    def __call__(self, inputs, out):  # pragma: no cover - every kernel overrides it
        raise NotImplementedError

    def scratch_bytes(self) -> int:
        """Bytes of the calling thread's scratch (:func:`dml_numba.cpu._scratch.scratch`) a
        call takes at most; 0 for a kernel that takes none."""
        return 0

    def bind(self, inputs, out):
        """``self(inputs, out)`` as a call of no arguments, for calls again on the same arrays
        (a compiled graph's steps). A kernel may settle in :meth:`bound` what the arrays'
        identities decide; only where they are already in its accumulator type and ``out`` is
        C-contiguous (:func:`in_accumulator`), else each call converts them as ``self`` does."""
        acc = getattr(self, "acc", None)  # the data-movement kernels have none
        if acc is not None and in_accumulator(acc, inputs, out):
            return self.bound(inputs, out)
        return functools.partial(self, inputs, out)

    def bound(self, inputs, out):
        """:meth:`bind` of arrays in the accumulator type (the call itself unless a kernel
        settles more: :func:`bound_contiguous`, :func:`bound_first`)."""
        return functools.partial(self, inputs, out)


def bound_contiguous(kernel, inputs, out):
    """``bound`` of a kernel that calls ``fn(*inputs, out)`` on C-contiguous inputs."""
    if all(a.flags.c_contiguous for a in inputs):
        return functools.partial(kernel.fn, *inputs, out)
    return functools.partial(kernel, inputs, out)


def bound_first(kernel, inputs, out):
    """``bound`` of a kernel that calls ``fn(inputs[0], out)`` (a pooling)."""
    return functools.partial(kernel.fn, inputs[0], out)


def in_accumulator(acc: np.dtype, inputs, out) -> bool:
    """Whether :func:`run_in_accumulator` hands ``inputs`` and ``out`` to its ``run`` as they
    are."""
    return out.dtype == acc and out.flags.c_contiguous and all(a.dtype == acc for a in inputs)


def run_in_accumulator(acc: np.dtype, run, inputs, out) -> None:
    """``run(inputs, y)`` with inputs and ``y`` in the accumulator type (float16 has no Numba
    CPU type: it is computed in float32 and stored as half). ``y`` is ``out`` itself when it
    already has that type and is C-contiguous."""
    if any(a.dtype != acc for a in inputs):
        inputs = [a.astype(acc) for a in inputs]
    direct = out.dtype == acc and out.flags.c_contiguous
    y = out if direct else np.empty(out.shape, acc)
    run(inputs, y)
    if not direct:
        out[...] = y


def _signature(arg_types):
    """Numba types for ``[(numpy dtype, ndim)]``; ndim 0 is a scalar."""
    import numba

    return tuple(numba.types.Array(numba.from_dtype(dt), nd, "C") if nd else
                 numba.from_dtype(dt) for dt, nd in arg_types)


#: keys of the kernels this process compiled (not loaded from the disk cache): a compiled copy
#: can run at another speed than the cached one later processes load (the tuner asks)
COMPILED_HERE: set = set()


def build(key: KernelKey, source: str, arg_types):
    """Compile (or load from the disk cache) ``source``; eager for C-contiguous arguments, so
    the compile happens here, under the cache lock, and not in the first call."""

    def finish(mod):
        from numba.core import event

        sig = _signature(arg_types)
        if not (mod.__dict__["__dml_disk_cache__"] and load_cached(mod.kernel, sig)):
            with event.install_recorder("numba:compile") as compiles:
                mod.kernel.compile(sig)  # compiles, or loads from the disk cache the normal way
            if compiles.buffer:
                COMPILED_HERE.add(key)
        if mod.__dict__["__dml_disk_cache__"]:  # read-only arguments (a model's weights)
            load_on_miss(mod.kernel)
        return mod.kernel

    return _diskcache.compile_kernel(key, source, finish)


def build_variants(key: KernelKey, source: str, emit, arg_types, *, automatic: bool):
    """The kernel of ``key`` (whose source is ``source``) ready to call. A parallel kernel
    comes with its serial variant (``emit`` of the serial key, built when first needed): chosen
    by measurement when the variant was ``automatic`` (:class:`AdaptiveKernel`), used only in a
    forked child where GNU OpenMP cannot run otherwise (:class:`ForkSafeKernel`)."""
    fn = build(key, source, arg_types)
    if not key.parallel or fn is None:  # serial, or only chosen (_diskcache.choosing)
        return fn
    _affinity.pin_workers()  # this thread's pool: once (see the module)
    serial = dataclasses.replace(key, parallel=False)
    build_serial = lambda: build(serial, emit(serial), arg_types)  # noqa: E731
    return AdaptiveKernel(fn, build_serial) if automatic else ForkSafeKernel(fn, build_serial)


#: last-axis strides read through vector loads and shuffles (``vload_stride``); wider ones
#: would load more than they keep
SHUFFLED_STRIDES = (-4, -3, -2, 2, 3, 4)


def strided_lanes(plan: GatherPlan, itemsize: int, host: Host | None = None) -> int:
    """Lanes of the vector reads of a strided last axis (0 where the row is read otherwise):
    one host vector's bytes of output per step, if the row holds at least one step."""
    m = plan.maps[-1]
    lanes = (host or Host.current()).lanes * 4 // itemsize
    return lanes if m.kind == "affine" and m.s in SHUFFLED_STRIDES and m.size >= lanes else 0


@dataclasses.dataclass(frozen=True)
class RowReads:
    """A data-movement kernel's plan: ``lanes`` of the vector reads of a strided last axis (0:
    the row is read otherwise). Its label is empty: the module names stay those of the op."""

    lanes: int
    label = ""


def gather_key(desc, options, host: Host | None = None) -> KernelKey:
    """The key of a data-movement kernel, its row reads planned for ``host`` (this one)."""
    key = make_key(desc, options)
    lanes = strided_lanes(desc.gather_plan(), storage_dtype(desc.input_tensor.data_type).itemsize,
                          host)
    return dataclasses.replace(key, plan=RowReads(lanes))


def emit_gather(key: KernelKey, plan: GatherPlan) -> str:
    """The loop nest of a data-movement operator: a flat (p)range over all output rows, the
    per-axis index maps, then the last axis split into contiguous runs where the map allows,
    or read through vector loads and shuffles where it is strided (``key.plan.lanes``)."""
    desc = key.desc
    lanes = key.plan.lanes
    w = SourceWriter()
    loop = header(w, key, imports=("from dml_numba.cpu._simd import vload_stride, vstore_raw",)
                  if lanes else ())
    with w.block("def kernel(x, y):"):
        _emit_gather_body(w, loop, plan, desc, lanes)
    return w.text()


def _emit_gather_body(w, loop, plan, desc, lanes: int = 0):
    maps = plan.maps
    rank = len(maps)
    if plan.constant is not None:
        w(f"v = {constant_literal(plan.constant, desc.output_tensor.data_type)}")
    outer = [f"o{d}" for d in range(rank - 1)]
    inner = [f"i{d}" for d in range(rank - 1)]
    last = maps[-1]

    def row(steps_loop="range"):
        _emit_row(w, outer, inner, last, plan.constant is not None, lanes, steps_loop)

    if rank == 1:
        if loop == "range" or lanes:
            row(loop)  # a strided 1-D row: its vector steps in parallel
            return
        with w.block(f"for o0 in {loop}({last.size}):"):  # parallel: one element per iteration
            emit_map(w, last, "o0", "i0")
            cond = inside(last, "o0") if plan.constant is not None else None
            if cond:
                with w.block(f"if {cond}:"):
                    w("y[o0] = x[i0]")
                with w.block("else:"):
                    w("y[o0] = v")
            else:
                w("y[o0] = x[i0]")
        return
    rows = prod(m.size for m in maps[:-1])
    with w.block(f"for f in {loop}({rows}):"):
        decompose(w, "f", outer, [m.size for m in maps[:-1]])
        for d in range(rank - 1):
            emit_map(w, maps[d], outer[d], inner[d])
        conds = [c for c in (inside(maps[d], outer[d]) for d in range(rank - 1)) if c]
        if plan.constant is not None and conds:
            with w.block(f"if {' and '.join(conds)}:"):
                row()
            with w.block("else:"):
                with w.block(f"for j in range({last.size}):"):
                    w(f"y[{index(*outer, 'j')}] = v")
        else:
            row()


def _emit_row(w, outer, inner, m, constant: bool, lanes: int = 0, steps_loop: str = "range"):
    """One output row along the last axis (``lanes``: read a strided row in vectors of that
    many elements, the steps in a ``steps_loop``)."""
    y = lambda j: f"y[{index(*outer, j)}]"  # noqa: E731
    x = lambda i: f"x[{index(*inner, i)}]"  # noqa: E731
    if lanes:  # row views (1-D, C-contiguous), whole vectors, then the scalar remainder
        w(f"xr = x[{index(*inner)}]" if inner else "xr = x")
        w(f"yr = y[{index(*outer)}]" if outer else "yr = y")
        steps = m.size // lanes
        with w.block(f"for t in {steps_loop}({steps}):"):
            w(f"vstore_raw(yr, t * {lanes}, vload_stride(xr, "
              f"{affine([('t', lanes * m.s)], m.a)}, {m.s}, {lanes}))")
        with w.block(f"for j in range({steps * lanes}, {m.size}):"):
            w(f"yr[j] = xr[{affine([('j', m.s)], m.a)}]")
        return
    if m.kind in PAD_KINDS:
        segments = ((0, min(m.a, m.size)), (m.a + m.n, m.size))
        with w.block(f"for j in range({m.n}):"):  # the interior: a contiguous copy
            w(f"{y(f'j + {m.a}' if m.a else 'j')} = {x('j')}")
        for lo, hi in segments:
            if hi <= lo:
                continue
            with w.block(f"for j in range({lo}, {hi}):"):
                if constant:
                    w(f"{y('j')} = v")
                else:
                    emit_map(w, m, "j", "k")
                    w(f"{y('j')} = {x('k')}")
    elif m.kind == "modulo":
        reps = m.size // m.n
        if reps == 1:
            with w.block(f"for j in range({m.n}):"):
                w(f"{y('j')} = {x('j')}")
        else:
            with w.block(f"for r in range({reps}):"):
                with w.block(f"for j in range({m.n}):"):
                    w(f"{y(f'r * {m.n} + j')} = {x('j')}")
    elif m.kind == "affine":
        with w.block(f"for j in range({m.size}):"):
            w(f"{y('j')} = {x(affine([('j', m.s)], m.a))}")
    else:
        raise AssertionError(f"unknown AxisMap kind {m.kind!r}")


class MoveKernel(CpuKernel):
    """A kernel moving elements of one input to the output (``kernel(x, y)``, float16 moved as
    its bits)."""

    def __init__(self, key: KernelKey, emit, desc, options):
        dt = storage_dtype(desc.input_tensor.data_type)
        rank = desc.input_tensor.rank
        super().__init__(key, emit, [(dt, rank), (dt, rank)], options)
        self._f16 = desc.input_tensor.data_type == DataType.FLOAT16

    def __call__(self, inputs, out):
        x = inputs[0]
        if self._f16:
            x, out = x.view(np.uint16), out.view(np.uint16)
        self.fn(x, out)


class GatherKernel(MoveKernel):
    """Data movement (an index map per axis) on the CPU."""

    def __init__(self, desc, options):
        plan = desc.gather_plan()
        super().__init__(gather_key(desc, options), lambda k: emit_gather(k, plan), desc, options)
