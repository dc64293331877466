"""How a generated parallel loop shares its items between the threads: each thread walks a
share of its own, then takes what is left of the others'.

Numba's ``prange`` splits its iterations evenly between the threads once, before any runs. On a
shared machine one core is often slower than the other for minutes at a time (a neighbour's
memory traffic; measured on a 2-core VM: one core at ~60% of the other's speed), and an even
split then waits for the slow core's half while the fast core idles. The kernels whose
iterations are coarse (a convolution's tiles, a depthwise plane) therefore run
``for s in prange(slots)`` with one counter per slot: slot ``s`` claims the items of its own
share (``s * items // slots`` on, in order, as the even split would run them) by an atomic add
on its counter, in runs of up to a sixteenth of the share (:data:`CLAIMS`), and then claims the
remaining runs of the other shares the same way. Each run is claimed exactly once (the
counter's old value numbers it), so the result is the same bit for bit whichever thread runs
it; on a quiet machine each slot runs its own share as before (one uncontended atomic add a
run, on a cache line of its own).

``claim(counters, i)``: ``counters[i] += 1`` as one atomic operation, the old value returned;
``threads()``: the threads a parallel loop now runs on (``numba.get_num_threads()``, whose own
implementation holds a ctypes pointer and so keeps a kernel out of the disk cache; this calls
the threading layer's function by its symbol).
"""
from __future__ import annotations

from contextlib import contextmanager

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

#: the generated module's import of :func:`claim` and :func:`threads`
IMPORT = "from dml_numba.cpu._share import claim, threads"

#: int64 counters a cache line apart, so that no two slots' counters share a line
STRIDE = 8

#: claims a share is cut into at most: an atomic add costs a few ns, and a depthwise plane of
#: 7 x 7 not much more, so fine items are claimed in runs (a slow core then holds the others up
#: by one run at most)
CLAIMS = 16


@intrinsic
def claim(typingctx, counters, i):
    """``counters[i] += 1`` atomically (an int64 array, C-contiguous; ``i`` unchecked); the old
    value."""
    if not (isinstance(counters, types.Array) and counters.dtype == types.int64):
        return None

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        at = builder.gep(ary.data, [context.cast(builder, args[1], sig.args[1], types.intp)])
        return builder.atomic_rmw("add", at, ir.Constant(ir.IntType(64), 1), "monotonic")

    return types.int64(counters, i), codegen


@intrinsic
def threads(typingctx):
    """The threads of the parallel loops now (the threading layer's ``get_num_threads``)."""
    from numba.np.ufunc.parallel import _launch_threads

    _launch_threads()  # the layer's symbols registered

    def codegen(context, builder, sig, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(cgutils.intp_t, []),
                                            "get_num_threads")
        return builder.call(fn, [])

    return types.intp(), codegen


@contextmanager
def shares(w, loop: str, items, slots: str | None = None, var: str = "f"):
    """The body of ``for {var} in range(items)`` (``items``: a number, or an expression of the
    kernel's), run by the iterations ``s`` of ``loop(slots)`` (``slots``: a name in the
    kernel; None: the threads, up to ``items``, and no ``s``). The serial variant (``loop``
    ``range``) walks the shares in order; the parallel one claims the items as the module's
    docstring says."""
    # the slot's name: ``s`` where the body uses it (its part of a scratch), else one that no
    # body uses (prange forbids assigning its index)
    slot = "s" if slots is not None else "s_"
    n = items if isinstance(items, int) else f"({items})"
    if loop == "range":
        if slots is None:
            with w.block(f"for {var} in range({items}):"):
                yield
            return
        with w.block(f"for s in range({slots}):"), \
                w.block(f"for {var} in range(s * {n} // {slots}, (s + 1) * {n} // {slots}):"):
            yield
        return
    if slots is None:
        w(f"slots_ = max(1, min(threads(), {items}))")
        slots = "slots_"
    # np.empty and a serial loop: np.zeros would be a parallel region of its own (Numba
    # turns array constructors into parallel loops in a parallel kernel; measured: 2 us a
    # call, 2.5% of MobileNetV2 at batch 1)
    w(f"claims_ = np.empty({slots} * {STRIDE}, np.int64)  # each share's next run of items")
    with w.block(f"for v_ in range({slots}):"):
        w(f"claims_[v_ * {STRIDE}] = 0")
    w(f"run_ = max(1, -(-({n} // {slots}) // {CLAIMS}))  # items a claim")
    with w.block(f"for {slot} in {loop}({slots}):"), w.block(f"for v_ in range({slots}):"):
        w(f"own_ = ({slot} + v_) % {slots}  # its own share first, then what the others left")
        w(f"lo_ = own_ * {n} // {slots}")
        w(f"hi_ = (own_ + 1) * {n} // {slots}")
        with w.block("while True:"):
            w(f"c_ = lo_ + claim(claims_, own_ * {STRIDE}) * run_")
            with w.block("if c_ >= hi_:"):
                w("break")
            with w.block(f"for {var} in range(c_, min(c_ + run_, hi_)):"):
                yield
