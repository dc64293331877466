"""numba-cuda backend: the kernel key, module header, the grid-stride element loop, building,
launching, and compiling to PTX with NVIDIA's compiler (no GPU needed for that).

Most kernels are one grid-stride loop over the flat output index (:func:`element_loop`): each
iteration decomposes the index into coordinates and computes one output element, with the same
index maps (``dml_numba._gather``) and element bodies (``dml_numba.elements``) as the CPU
backend. The others are written for a fixed block: data movement row-wise, a warp to a chunk of
a row (:func:`emit_gather`); the shared-memory tiles of a plane (``cuda/_planes.py``: LP
pooling, depthwise convolution); the implicit GEMM (``cuda/convolution/implicit_gemm.py``).
"""
from __future__ import annotations

import functools
import math
from contextlib import contextmanager

import numpy as np

from .. import _diskcache
from .._cache import KernelKey
from .._codegen import SourceWriter, decompose, index, preamble
from .._dtypes import DataType, accumulator
from .._gather import GatherPlan, constant_literal, emit_map, inside, storage_dtype
from ._launch import THREADS_PER_BLOCK, block_size, geometry


def simulator() -> bool:
    from numba import config

    return bool(config.ENABLE_CUDASIM)


def make_key(desc, options, kernel: str = "main", *, work: int | None = None) -> KernelKey:
    """The key of a CUDA kernel (options were checked by the registry; the same signature as
    the CPU backend's): ``kernel`` names one of an operator's kernels (convolution's "tiled");
    ``work`` decides nothing here (a CUDA kernel has one variant)."""
    return KernelKey("cuda", desc, kernel)


def header(w: SourceWriter, key: KernelKey, module_lines=()) -> None:
    """The module's preamble; ``module_lines``: module-level lines after its imports (a
    chain's tables)."""
    preamble(w, key, f"{key.op} (CUDA)", "grid-stride",
             "@cuda.jit(device=True, inline=True)",
             imports=("from numba import cuda",) + tuple(module_lines))


def shared_memory_decorator(w: SourceWriter, launch_bounds: tuple) -> None:
    """The decorator of a shared-memory tiled kernel: ``launch_bounds`` (threads a block, blocks
    an SM) cap its registers so that many blocks are resident; the simulator takes none."""
    w(f"LAUNCH = {{}} if numba.config.ENABLE_CUDASIM else {{'launch_bounds': {launch_bounds}}}")
    w("@cuda.jit(cache=__dml_disk_cache__, **LAUNCH)")


@contextmanager
def element_loop(w: SourceWriter, key: KernelKey, args: str, total: int):
    """``@cuda.jit def kernel(args)`` with a grid-stride loop over ``total`` output elements."""
    # __dml_disk_cache__ is set by the loader: True only for a module in the verified folder
    w("@cuda.jit(cache=__dml_disk_cache__)")
    with w.block(f"def kernel({args}):"):
        with w.block(f"for f in range(cuda.grid(1), {total}, cuda.gridsize(1)):"):
            yield


def emit_reduction(key: KernelKey, args: str, channel: str, element, acc: str | None = None,
                   channels: int = 1) -> str:
    """A convolution or pooling kernel: one output element (n, channel, o...) per iteration,
    computed by the shared ``element(w, desc, o, acc=..., load=...)`` body; with ``channels``
    > 1, ``channels`` consecutive channels per iteration (``element`` then takes
    ``channels=``). Consecutive threads take consecutive positions along the last axis."""
    d = key.desc
    w = SourceWriter()
    header(w, key)
    o = [f"o{i}" for i in range(d.input_tensor.rank - 2)]
    sizes = list(d.output_tensor.sizes)
    sizes[1] //= channels
    with element_loop(w, key, args, d.output_tensor.element_count // channels):
        decompose(w, "f", ["n", channel if channels == 1 else "mb"] + o, sizes)
        if channels > 1:
            w(f"{channel} = mb * {channels}")
        extra = {"channels": channels} if channels > 1 else {}
        dt = d.input_tensor.data_type
        element(w, d, o, acc=acc or (accumulator(dt) if dt.is_float else dt.numpy).name,
                load=half_load(d.input_tensor.data_type), **extra)
    return w.text()


def half_load(data_type: DataType):
    """Reads of half inputs convert to float32 (fp16 is stored as fp16, computed in fp32)."""
    if data_type == DataType.FLOAT16:
        return lambda expr: f"numba.float32({expr})"
    return lambda expr: expr


class CudaKernel:
    """A generated kernel: its source, the module holding it, launch and PTX compilation."""

    def __init__(self, key: KernelKey, source: str, arg_types, total: int, *, f16_bits=False,
                 block: int | None = None, launch_bounds: tuple | None = None,
                 warps: bool = False, scratch=()):
        self.key = key
        self.block = block  # the block size the code is written for (shared-memory tiles)
        self.launch_bounds = launch_bounds  # as in the source's LAUNCH (hardware only)
        self.warps = warps  # written for whole warps: blocks of a multiple of 32 threads
        self.source = source
        #: [(shape, numpy dtype)]: zeroed device arrays the kernel takes after its output
        #: (a split reduction's workspace and counters), made once per thread, GPU and stream;
        #: the kernel leaves them as it found them where it needs that (counters back at 0)
        self.scratch = [(tuple(shape), np.dtype(dt)) for shape, dt in scratch]
        # [(numpy dtype, ndim)] in launch order: inputs, the output, the scratch arrays
        self.arg_types = list(arg_types) + [(dt, len(shape)) for shape, dt in self.scratch]
        self.total = total
        self._f16_bits = f16_bits
        self._scratch = {}
        self._geometry = None  # (blocks, threads), found on the first launch
        self._direct = None  # (compiled kernel, stream conversion) | False, on the first launch

        # the simulator cannot cache: always from memory
        self.fn = _diskcache.compile_kernel(key, source, lambda mod: mod.kernel,
                                            disk=not simulator())

    def __call__(self, inputs, out, stream=None):
        """Launch on device arrays; ``out`` is the output, or the tuple of an operator's
        outputs (max pooling's values and indices)."""
        outs = out if isinstance(out, tuple) else (out,)
        if self._f16_bits:
            inputs = [a.view(np.uint16) for a in inputs]
            outs = (outs[0].view(np.uint16),) + outs[1:]
        blocks, threads = self._geometry or self._find_geometry()
        args = (*inputs, *outs, *self._scratch_for(stream))
        direct = self._direct if self._direct is not None else self._find_direct()
        if direct and all(a.is_c_contiguous() for a in args):
            kernel, core_stream = direct
            kernel.launch(args, (blocks, 1, 1), (threads, 1, 1),
                          core_stream(stream) if stream is not None else core_stream(0), 0)
            return
        launch = (self.fn[blocks, threads, stream] if stream is not None
                  else self.fn[blocks, threads])
        launch(*args)

    def _find_geometry(self) -> tuple:
        fixed = self.block or (32 if self.warps and simulator() else None)
        self._geometry = geometry(self.total, simulator(), self._threads(), fixed=fixed)
        return self._geometry

    def _find_direct(self):
        """On hardware, the kernel compiled for its signature and numba-cuda's stream
        conversion: a launch of contiguous arrays goes to it directly, past the dispatcher's
        typing of the arguments and the launch configuration (whose low-occupancy warning
        goes through Python's warnings on every launch of a grid under 128 blocks); strided
        arrays keep the dispatcher (they need another specialisation). False where these are
        not there (the simulator; another numba-cuda)."""
        self._direct = False
        if not simulator():
            try:
                from numba.cuda.cudadrv.driver import _to_core_stream

                sig = self.signature()
                self.fn.compile(sig)
                kernel = self.fn.overloads[sig]
                if callable(getattr(kernel, "launch", None)):
                    self._direct = (kernel, functools.lru_cache(maxsize=8)(_to_core_stream))
            except (ImportError, AttributeError, KeyError):  # pragma: no cover - the dispatcher
                pass
        return self._direct

    def _scratch_for(self, stream) -> list:
        """This thread's scratch arrays on the current GPU for ``stream`` (made on first use):
        launches that may overlap never share them."""
        if not self.scratch:
            return []
        import threading

        from numba import cuda

        at = (threading.get_ident(), getattr(cuda.get_current_device(), "id", 0),
              _stream_id(stream))
        arrays = self._scratch.get(at)
        if arrays is None:
            arrays = self._scratch[at] = [cuda.to_device(np.zeros(shape, dt))
                                          for shape, dt in self.scratch]
        return arrays

    def _threads(self) -> int:
        """Threads per block: on hardware from the kernel's registers and shared memory on the
        current device (once per kernel), else the default."""
        threads = getattr(self, "_block", None) or self.block
        if threads is None:
            threads = THREADS_PER_BLOCK
            if not simulator():
                try:
                    from numba import cuda

                    sig = self.signature()
                    self.fn.compile(sig)
                    cc = cuda.get_current_device().compute_capability
                    threads = block_size(self.fn.get_regs_per_thread(sig),
                                         self.fn.get_shared_mem_per_block(sig), cc)
                except Exception:  # pragma: no cover  # noqa: BLE001 - no such queries
                    threads = THREADS_PER_BLOCK
            self._block = threads
        return threads

    def signature(self):
        from numba import from_dtype, types

        return tuple(types.Array(from_dtype(dt), nd, "C") for dt, nd in self.arg_types)

    def ptx(self, cc=(9, 0)) -> str:
        """PTX from NVIDIA's compiler for compute capability ``cc`` (no GPU needed); compiled
        once per kernel key and architecture in a process."""
        at = (self.key, tuple(cc))  # the key decides the source and its launch bounds
        if at not in _PTX:
            _PTX[at] = self._nvvm_library(tuple(cc)).get_asm_strs(cc=tuple(cc))[0]
        return _PTX[at]

    def _nvvm_library(self, cc):
        """The kernel typed and lowered once (the work is the same for every architecture
        from sm_80 on); NVVM then writes PTX per architecture. numba-cuda's own
        ``compile_ptx`` with any other numba-cuda layout."""
        lib = _LIBRARIES.get(self.key)
        if lib is None:
            try:
                from numba.cuda.compiler import _compile_pyfunc_with_fixup as lower
            except ImportError:  # pragma: no cover - another numba-cuda: the public path
                return _PublicPtx(self)
            lib, _ = lower(self.fn.py_func, self.signature(), device=False, abi="numba",
                           cc=cc, launch_bounds=self.launch_bounds)
            _LIBRARIES[self.key] = lib
        return lib


def _stream_id(stream) -> int:
    """A stream's handle as a number (0: the default stream)."""
    if stream is None or stream == 0:
        return 0
    handle = getattr(stream, "handle", stream)
    try:
        return int(getattr(handle, "value", handle) or 0)
    except (TypeError, ValueError):
        return id(stream)


class _PublicPtx:
    """``get_asm_strs`` through numba-cuda's public ``compile_ptx`` (one compile per call)."""

    def __init__(self, kernel):
        self.kernel = kernel

    def get_asm_strs(self, cc):
        from numba import cuda

        ptx, _ = cuda.compile_ptx(self.kernel.fn.py_func, self.kernel.signature(), cc=cc,
                                  launch_bounds=self.kernel.launch_bounds)
        return [ptx]


#: PTX by (kernel key, compute capability) and the lowered library by key: a kernel object is
#: made per lowering call (PTX checks ask for the same kernel's PTX several times), the
#: compile done once per process
_PTX: dict = {}
_LIBRARIES: dict = {}


#: a warp of a row-wise gather kernel takes ROW_CHUNK consecutive outputs of one row
WARP, ROW_CHUNK = 32, 256


def rowwise(plan: GatherPlan) -> bool:
    """Row-wise where a row fills a warp: the maps of the outer axes are then worked out once
    per ROW_CHUNK outputs instead of once per output; shorter rows keep the flat loop, in which
    a warp's 32 consecutive outputs span rows (its store stays one coalesced request)."""
    return len(plan.maps) > 1 and plan.maps[-1].size >= WARP


def row_items(plan: GatherPlan) -> int:
    """(row, chunk) pairs of a row-wise kernel: one warp each."""
    return math.prod(m.size for m in plan.maps[:-1]) * -(-plan.maps[-1].size // ROW_CHUNK)


def emit_gather(key: KernelKey, plan: GatherPlan) -> str:
    """Data movement through the per-axis index maps. Flat: one output a thread, every map
    evaluated per output. Row-wise (:func:`rowwise`): each warp takes a chunk of up to
    ROW_CHUNK outputs of one row in a grid-stride loop over (row, chunk), works out the outer
    axes' maps (and for CONSTANT padding whether the row reads the input at all) once, and its
    32 lanes store consecutive outputs of the row."""
    desc = key.desc
    maps = plan.maps
    rank = len(maps)
    o = [f"o{d}" for d in range(rank)]
    i = [f"i{d}" for d in range(rank)]
    w = SourceWriter()
    header(w, key)
    dt = desc.output_tensor.data_type
    if plan.constant is not None:
        w(f"V = {constant_literal(plan.constant, dt)}")
        w()
        w()

    def store(conds):
        if plan.constant is not None and conds:
            with w.block(f"if {' and '.join(conds)}:"):
                w(f"y[{index(*o)}] = x[{index(*i)}]")
            with w.block("else:"):
                w(f"y[{index(*o)}] = V")
        else:
            w(f"y[{index(*o)}] = x[{index(*i)}]")

    if not rowwise(plan):
        with element_loop(w, key, "x, y", desc.output_tensor.element_count):
            decompose(w, "f", o, [m.size for m in maps])
            for d in range(rank):
                emit_map(w, maps[d], o[d], i[d])
            store([c for c in (inside(m, od) for m, od in zip(maps, o)) if c])
        return w.text()

    last = maps[-1].size
    chunks = -(-last // ROW_CHUNK)
    items = row_items(plan)
    w("@cuda.jit(cache=__dml_disk_cache__)")
    with w.block("def kernel(x, y):"):
        w(f"lane = cuda.threadIdx.x % {WARP}")
        w(f"warps = cuda.gridsize(1) // {WARP}")
        with w.block(f"for item in range(cuda.grid(1) // {WARP}, {items}, warps):"):
            decompose(w, "item", o[:-1] + ["chunk"], [m.size for m in maps[:-1]] + [chunks])
            for d in range(rank - 1):  # hoisted: once per row chunk
                emit_map(w, maps[d], o[d], i[d])
            outer = [c for c in (inside(m, od) for m, od in zip(maps[:-1], o)) if c]
            if plan.constant is not None and outer:
                w(f"row_in = {' and '.join(outer)}")
            start = f"chunk * {ROW_CHUNK}" if chunks > 1 else "0"
            stop = f"min({start} + {ROW_CHUNK}, {last})" if chunks > 1 else str(last)
            with w.block(f"for {o[-1]} in range({start} + lane, {stop}, {WARP}):"):
                emit_map(w, maps[-1], o[-1], i[-1])
                conds = (["row_in"] if plan.constant is not None and outer else []) + \
                    [c for c in [inside(maps[-1], o[-1])] if c]
                store(conds)
    return w.text()


def gather_kernel(desc, options) -> CudaKernel:
    key = make_key(desc, options)
    dt = storage_dtype(desc.input_tensor.data_type)
    rank = desc.input_tensor.rank
    plan = desc.gather_plan()
    return CudaKernel(key, emit_gather(key, plan), [(dt, rank), (dt, rank)],
                      row_items(plan) * WARP if rowwise(plan) else desc.output_tensor.element_count,
                      f16_bits=desc.input_tensor.data_type == DataType.FLOAT16,
                      warps=rowwise(plan))
