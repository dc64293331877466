"""Loading a cached kernel without Numba's start-up.

On a disk-cache hit, ``Dispatcher.compile`` first calls the target context's ``refresh()``,
which imports every typing and lowering registry of Numba (and, through its BLAS check,
``scipy.linalg``): about half a second, although the machine code is already on disk. Calling
a loaded kernel from Python needs none of that: only Numba's runtime (NRT) must be initialised.
:func:`load_cached` does exactly what ``compile`` does on a hit, minus the refresh.

A kernel called with argument types it was not built for (a model's weights are read-only: a
read-only array is another Numba type) misses its overloads, and Numba's miss path compiles --
or loads from the disk cache, after that same refresh. :func:`load_on_miss` routes a kernel's
misses through :func:`load_cached` first.

It reaches into Numba's internals, so it is used only with the Numba versions it was written
and tested for (:data:`SUPPORTED`); with any other version, when ``DML_NUMBA_FAST_LOAD=0``, or
on any failure, it returns False and the normal path runs. A later compile in the same process
refreshes the context by itself (Numba does so before every compilation).
"""
from __future__ import annotations

from .. import _env

SUPPORTED = ("0.68.1",)


def enabled() -> bool:
    import numba

    return numba.__version__ in SUPPORTED and _env.flag("DML_NUMBA_FAST_LOAD", True)


def load_cached(dispatcher, sig) -> bool:
    """Install the cached overload of ``dispatcher`` for ``sig``; False when there is none (or
    when the fast path does not apply), in which case nothing was changed."""
    if not enabled():
        return False
    try:
        from numba.core import sigutils
        from numba.core.compiler_lock import global_compiler_lock
        from numba.core.runtime import nrt

        args, _ = sigutils.normalize_signature(sig)
        with global_compiler_lock:
            if dispatcher.overloads.get(tuple(args)) is not None:
                return True
            ctx = dispatcher.targetctx
            nrt.rtsys.initialize(ctx)
            cres = dispatcher._cache._load_overload(sig, ctx)
            if cres is None:
                return False
            dispatcher._cache_hits[sig] += 1
            if not cres.objectmode:
                ctx.insert_user_function(cres.entry_point, cres.fndesc, [cres.library])
            dispatcher.add_overload(cres)
            return True
    except Exception:  # noqa: BLE001 - any surprise: the normal path
        return False


def load_on_miss(dispatcher) -> None:
    """Make ``dispatcher``'s misses (a call whose argument types have no overload yet) load
    the overload for those types from the disk cache without the refresh where it is there;
    Numba's own path (compile, or load after the refresh) otherwise. The miss is Numba's
    ``_compile_for_args``, which its C dispatcher looks up on the instance."""
    if not enabled():
        return
    numba_miss = dispatcher._compile_for_args

    def miss(*args, **kws):
        if not kws:
            try:
                sig = tuple(dispatcher.typeof_pyval(a) for a in args)
            except Exception:  # noqa: BLE001 - Numba's path names what it cannot type
                sig = None
            if sig is not None and load_cached(dispatcher, sig):
                return dispatcher.overloads[sig].entry_point
        return numba_miss(*args, **kws)

    dispatcher._compile_for_args = miss
