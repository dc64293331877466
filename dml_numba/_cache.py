"""The one kernel cache: per-key build locks, hit/miss counters, an LRU bound, ``clear()``, kept
sources; and :func:`freeze`, which makes keys compare floats by their bits.

Keys are hashable and decide everything about what is built (for kernels: the canonical
descriptor with packed tensors, the backend, the codegen options and the library version).
Floats in keys are held by their bit pattern (``-0.0`` and ``0.0`` differ, every NaN of one
pattern is one entry) and ``True`` is kept apart from ``1``, so a cached value is only ever
reused for an identical request. The on-disk table of generated modules lives in
:mod:`dml_numba._diskcache`.

Keys, one scheme: every key of the one cache names its family first, so entries of different
families never compare equal, and holds, frozen, exactly what decides the entry:

* :class:`KernelKey` (its class is its family): a generated kernel: backend, canonical
  descriptor, which of the operator's kernels, serial or parallel, plan, library version;
* :func:`operator_key`, ``("operator", desc, device, options)``: a compiled operator
  (``compile_operator``), the kernel its lowering chose for the options;
* :func:`graph_key`, ``("graph", graph, device, fuse, options)``: a compiled graph;
* :func:`call_key`, ``("functional", name, tensors, params, device)``: the operator a
  functional call runs, keyed by its inputs' kinds, shapes and dtypes and its parameters'
  values, without building the descriptor (a memo of recent ones sits in front of the cache:
  :mod:`dml_numba.functional`).

``DML_NUMBA_MEMORY_CACHE_SIZE`` bounds the number of entries (default 2048); the least recently
used entry goes first. Compiled kernels are also kept apart for the life of the process: Numba
cannot free machine code, so a kernel evicted and asked for again is taken back rather than
loaded a second time. Memory then grows with the number of distinct kernels a process builds
(measured for data movement: about 0.1 MiB a kernel loaded from the disk cache, 1.2 MiB a
kernel compiled; ``benchmarks/bench_memory.py``), never with evictions.
"""
from __future__ import annotations

import enum
import struct
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, fields, is_dataclass

from . import _env
from ._version import __version__

DEFAULT_MAX_ENTRIES = 2048


_PACK_DOUBLE = struct.Struct("<d").pack


def freeze(value):
    """A hashable stand-in for ``value`` that compares floats by bits and bools apart from ints
    (recursively through tuples, lists, enums and dataclasses such as descriptors). A frozen
    dataclass (a descriptor, a TensorDesc) keeps its result: it cannot change."""
    t = type(value)
    if t is int or t is str or value is None:
        return value
    if t is float:
        return ("f64", _PACK_DOUBLE(value))
    if t is tuple:
        return ("tuple",) + tuple(freeze(v) for v in value)
    cached = getattr(value, "__dict__", {}).get("_dml_frozen")
    if cached is not None:
        return cached
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, enum.Enum):
        return (type(value).__name__, value.value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return ("f64", _PACK_DOUBLE(value))
    if isinstance(value, (tuple, list)):
        return (type(value).__name__,) + tuple(freeze(v) for v in value)
    if is_dataclass(value) and not isinstance(value, type):
        frozen = (type(value),) + tuple(freeze(getattr(value, f.name)) for f in fields(value))
        if value.__dataclass_params__.frozen:
            object.__setattr__(value, "_dml_frozen", frozen)
        return frozen
    if hasattr(value, "dtype") and hasattr(value, "shape") and not hasattr(value, "__len__"):
        # a NumPy scalar: its bits in its own type
        import numpy as np

        a = np.asarray(value)
        return ("np", a.dtype.str, a.tobytes())
    return value


def operator_key(desc, device, options: tuple) -> tuple:
    """The key of ``compile_operator(desc, device, **options)``: ``options`` its sorted items."""
    return ("operator", freeze(desc), device, freeze(options) if options else ())


def graph_key(graph, device, fuse: bool, options: dict) -> tuple:
    """The key of ``compile_graph(graph, device, fuse=fuse, **options)``."""
    return ("graph", freeze(graph), device, bool(fuse), freeze(tuple(sorted(options.items()))))


def call_key(name: str, tensors: tuple, params, device) -> tuple:
    """The key of a functional call's operator: ``tensors`` the inputs' keys (kind, shape,
    dtype), ``params`` the parameters (as they are where plain and hashable, else each one
    keyed by value)."""
    return ("functional", name, tensors, params, device)


@dataclass(frozen=True, eq=False)
class KernelKey:
    """Everything that changes a generated kernel, for every backend: the backend, the canonical
    desc (tensors packed), which of the operator's kernels (``"main"``, or a helper such as
    ``"im2col"``), the codegen options, the plan (what the host chose for it: vector lanes,
    tile shape) and the library version. ``emit(key)`` reads nothing else. Equality and hash
    go through :func:`freeze`."""

    backend: str
    desc: object
    kernel: str = "main"
    parallel: bool = False
    version: str = __version__
    #: the kernel's plan (a frozen dataclass: tile shape, vector lanes...), or None
    plan: object = None
    _id: tuple = field(init=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "_id", (self.backend, self.kernel, freeze(self.desc),
                                         self.parallel, self.version, freeze(self.plan)))

    @property
    def op(self) -> str:
        """The operator's name (from its descriptor class), with the kernel's name and its
        plan's label where they have one."""
        name = type(self.desc).op_name()
        if self.kernel != "main":
            name = f"{name}_{self.kernel}"
        label = getattr(self.plan, "label", "")
        return f"{name} {label}" if label else name

    def __eq__(self, other):
        return isinstance(other, KernelKey) and self._id == other._id

    def __hash__(self):
        return hash(self._id)


def _max_entries() -> int:
    return _env.count("DML_NUMBA_MEMORY_CACHE_SIZE", DEFAULT_MAX_ENTRIES)


class KernelCache:
    def __init__(self, max_entries: int | None = None):
        self._table: OrderedDict = OrderedDict()
        self._sources: OrderedDict = OrderedDict()
        self._lock = threading.RLock()  # guards the tables and the per-key locks
        self._building: dict = {}  # key -> [lock, number of waiters]
        self.max_entries = max_entries if max_entries is not None else _max_entries()
        self._kept: dict = {}  # compiled kernels, kept through eviction (get_or_build(keep=))
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self.returns = 0
        #: counts clear()s: a memo in front of this cache holds its values only while it holds
        self.generation = 0

    def get_or_build(self, key, build, *, keep: bool = False):
        """The value for ``key``; ``build()`` runs once per key, under that key's own lock
        (unrelated keys build in parallel). ``keep``: the value outlives eviction (compiled
        kernels: their machine code cannot be freed, so an evicted kernel that comes back is
        taken from here instead of being loaded a second time)."""
        try:
            value = self._table[key]
        except KeyError:
            pass
        else:
            self.hits += 1
            try:
                self._table.move_to_end(key)
            except KeyError:  # evicted meanwhile: still a valid value
                pass
            return value
        with self._lock:
            slot = self._building.setdefault(key, [threading.RLock(), 0])
            slot[1] += 1
        try:
            with slot[0]:
                with self._lock:
                    if key in self._table:
                        self.hits += 1
                        return self._table[key]
                value = self._kept.get(key) if keep else None
                if value is None:
                    value = build()
                    with self._lock:
                        self.misses += 1
                        if keep:
                            self._kept[key] = value
                else:
                    self.returns += 1
                with self._lock:
                    self._table[key] = value
                    self._evict()
                return value
        finally:
            with self._lock:
                slot[1] -= 1
                if slot[1] == 0:
                    self._building.pop(key, None)

    def _evict(self) -> None:
        while len(self._table) > self.max_entries:
            key, _ = self._table.popitem(last=False)
            self._sources.pop(key, None)
            self.evictions += 1

    def record_source(self, key, source: str) -> None:
        """Keep generated source for inspection; print it when DML_NUMBA_DEBUG=1."""
        with self._lock:
            self._sources[key] = source
            while len(self._sources) > self.max_entries:
                self._sources.popitem(last=False)
        if _env.flag("DML_NUMBA_DEBUG", False):
            print(f"# ---- dml_numba generated source ({getattr(key, 'op', '?')}) ----\n{source}",
                  flush=True)

    def sources(self) -> dict:
        return dict(self._sources)

    def stats(self) -> dict:
        """Counters: ``hits``, ``misses`` (builds), ``entries`` (now, at most ``max_entries``),
        ``evictions``, ``kept`` (compiled kernels held for the process) and ``returns`` (evicted
        kernels taken back from them instead of being loaded again)."""
        return {"hits": self.hits, "misses": self.misses, "entries": len(self._table),
                "max_entries": self.max_entries, "evictions": self.evictions,
                "kept": len(self._kept), "returns": self.returns}

    def clear(self) -> None:
        """Forget everything, kept kernels included (their machine code stays in the process:
        Numba cannot unload it; building them again loads it a second time)."""
        with self._lock:
            self._table.clear()
            self._sources.clear()
            self._kept.clear()
            self.hits = self.misses = self.evictions = self.returns = 0
            self.generation += 1

    def __len__(self):
        return len(self._table)


cache = KernelCache()
