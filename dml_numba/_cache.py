"""The one kernel cache: a lock around building, hit/miss counters, ``clear()``, kept sources.

Keys are hashable tuples whose contents decide everything about what is built (for kernels:
the canonical descriptor with packed tensors, the backend, the codegen options and the library
version). The on-disk table of generated modules lives in :mod:`dml_numba._diskcache`.
"""
from __future__ import annotations

import os
import threading


class KernelCache:
    def __init__(self):
        self._table: dict = {}
        self._sources: dict = {}
        self._lock = threading.RLock()
        self.hits = 0
        self.misses = 0

    def get_or_build(self, key, build):
        """The value for ``key``; ``build()`` runs once per key, under the lock."""
        try:
            value = self._table[key]
        except KeyError:
            pass
        else:
            self.hits += 1
            return value
        with self._lock:
            if key in self._table:
                self.hits += 1
                return self._table[key]
            value = build()
            self.misses += 1
            self._table[key] = value
            return value

    def record_source(self, key, source: str) -> None:
        """Keep generated source for inspection; print it when DML_NUMBA_DEBUG=1."""
        self._sources[key] = source
        if os.environ.get("DML_NUMBA_DEBUG", "") not in ("", "0"):
            print(f"# ---- dml_numba generated source ({getattr(key, 'op', '?')}) ----\n{source}",
                  flush=True)

    def sources(self) -> dict:
        return dict(self._sources)

    def stats(self) -> dict:
        return {"hits": self.hits, "misses": self.misses, "entries": len(self._table)}

    def clear(self) -> None:
        with self._lock:
            self._table.clear()
            self._sources.clear()
            self.hits = self.misses = 0

    def __len__(self):
        return len(self._table)


cache = KernelCache()
