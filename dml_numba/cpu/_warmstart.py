"""Loading a cached kernel without Numba's start-up.

On a disk-cache hit, ``Dispatcher.compile`` first calls the target context's ``refresh()``,
which imports every typing and lowering registry of Numba (and, through its BLAS check,
``scipy.linalg``): about half a second, although the machine code is already on disk. Calling
a loaded kernel from Python needs none of that: only Numba's runtime (NRT) must be initialised.
:func:`load_cached` does exactly what ``compile`` does on a hit, minus the refresh.

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
