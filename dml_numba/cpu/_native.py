"""A compiled graph's steps as one native call (the CPU).

In a batch's direct run (:class:`~dml_numba.cpu._adaptive.AdaptiveBatch`: a quiet machine,
every kernel's parallel variant) each step costs its Python around the kernel: the bound
call, the kernel's own wrapper, Numba's dispatch (typing and unboxing every array), about
4-7 us a step when the kernels before it have emptied the caches of the interpreter's own
code and data. MobileNetV2 at batch 1 is fifty steps: 0.3 ms of its 5. Where every step of a
graph is one call of a generated kernel (:func:`call_of`: a bound step that is
``fn(*args)``, ``fn`` an automatic, forced or serial kernel), :class:`NativeSteps` makes
one more Numba function of them (:func:`emit`): each kernel called at its compiled
address, in Numba's own calling convention, on arrays rebuilt from data addresses, so the run
crosses from Python into native code once. The function's source depends only on the steps'
shapes, types and scalar arguments (the addresses are its arguments), so it is disk-cached as
every kernel is; it is built in the background the first time a graph's direct run finds two
or more such steps in a row (each such run one function), and until it is there the steps run
one by one.

What it relies on, checked at each call before anything runs (else the steps run one by one):
the kept steps' bindings are the same objects it was built from (a model's weights and the
graph's buffers: their addresses are fixed while those bindings live); the steps bound anew
each call (those touching the caller's input or output) are the same kernels on arrays of the
same types and sizes, C-contiguous, with the same scalar arguments; the thread count is the
one it was built with (the per-thread scratch and the slot counts baked in). It never
decides serial or parallel itself: it runs only where the batch runs directly, calling what a
direct run calls, and keeps the direct run's deadline (``_adaptive._direct_until``): before
each call after a native function's first it reads the C library's monotonic clock, and past
the run's budget it returns the number of calls made; the run then leaves its directness
(:func:`~dml_numba.cpu._adaptive._leave_direct`) and its later steps decide for themselves,
as they would one by one.

It reaches into Numba's internals (a dispatcher's overloads and their compiled symbols, the
calling convention), so it is used only with the Numba versions it was written and tested
for (:data:`SUPPORTED`), and ``DML_NUMBA_NATIVE_STEPS=0`` turns it off.
"""
from __future__ import annotations

import functools
import operator
import threading
import time

import numpy as np

from .. import _env
from .._binding import address, picker
from . import _adaptive

SUPPORTED = ("0.68.1",)
#: the C library's clock a native run reads its deadline on (relative: a budget), and the
#: budget of a run without a deadline
_CLOCK = getattr(time, "CLOCK_MONOTONIC", -1)
_FOREVER = 1 << 62
#: the fewest consecutive one-call steps made one native call (one alone gains little)
SEGMENT = 2

#: the dtypes whose arrays a native run rebuilds (every kernel's accumulator and index types)
_DTYPES = frozenset(np.dtype(t) for t in ("float32", "float64", "int64", "int32", "int8",
                                          "uint8", "int16", "uint16", "uint32", "uint64",
                                          "bool"))


def enabled() -> bool:
    import numba

    return (numba.__version__ in SUPPORTED and _CLOCK >= 0
            and _env.flag("DML_NUMBA_NATIVE_STEPS", True))


def _dispatcher(fn):
    """The Numba dispatcher ``fn`` runs in a batch's direct run (an automatic kernel's or a
    forced one's parallel variant, a serial kernel itself), or None."""
    from numba.core.dispatcher import Dispatcher

    if isinstance(fn, (_adaptive.AdaptiveKernel, _adaptive.ForkSafeKernel)):
        fn = fn._parallel
    return fn if isinstance(fn, Dispatcher) else None


def call_of(run):
    """``(fn, args)`` where the bound step ``run`` is ``fn(*args)``, ``fn`` a kernel
    (:func:`_dispatcher`): a bound kernel call, or a kernel's call over per-thread slots
    (its ``slots_call``, settled now); None otherwise."""
    if not isinstance(run, functools.partial) or run.keywords:
        return None
    f = run.func
    owner = getattr(f, "__self__", None)
    if getattr(f, "__name__", "") == "_in_slots" and hasattr(owner, "slots_call"):
        fn, args = owner.slots_call(*run.args)
    else:
        fn, args = f, run.args
    return (fn, args) if _dispatcher(fn) is not None else None


class _Call:
    """One step as the native function calls it: the kernel's compiled address, each argument
    an array slot (``("a", slot, dtype, shape)``) or a literal (``("s", text, value, Numba
    type name)``, the value a Python number)."""

    def __init__(self, fn, disp, args, slot_of):
        from numba.core import types

        tys = tuple(disp.typeof_pyval(a) for a in args)
        cres = disp.overloads.get(tys)
        if cres is None:
            raise LookupError("no overload for these arguments yet")
        self.fn, self.disp = fn, disp
        self.segment = None  # the segment calling it (a fresh step's: its slots filled there)
        self.addr = cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)
        if not self.addr:
            raise LookupError("no compiled symbol")
        self.args = []
        for a, ty in zip(args, tys):
            if isinstance(a, np.ndarray):
                if a.dtype not in _DTYPES or not a.flags.c_contiguous or a.ndim == 0:
                    raise LookupError("an array the native run does not rebuild")
                self.args.append(("a", slot_of(a), a.dtype, a.shape))
            else:
                if not isinstance(ty, (types.Boolean, types.Integer, types.Float)):
                    raise LookupError("an argument the native run does not pass")
                value = a.item() if isinstance(a, np.generic) else a
                self.args.append(("s", f"{ty}({value!r})", value, str(ty)))

    def matches(self, fn, args) -> bool:
        """Whether ``fn(*args)`` is this call on other arrays of the same kinds."""
        if fn is not self.fn and _dispatcher(fn) is not self.disp or len(args) != len(self.args):
            return False
        for a, spec in zip(args, self.args):
            if spec[0] == "a":
                if not (type(a) is np.ndarray and a.dtype == spec[2] and a.shape == spec[3]
                        and a.flags.c_contiguous):
                    return False
            elif type(a) is np.ndarray or a != spec[2]:
                return False
        return True

    def text(self) -> str:
        """The call's arguments in words (the generated source's comment)."""
        return ", ".join(f"a{spec[1]} {spec[2].name}{list(spec[3])}" if spec[0] == "a"
                         else spec[1] for spec in self.args)


def emit(calls) -> str:
    """The native function's source: ``kernel(addrs, ptrs)`` making ``calls`` in order
    (:func:`~dml_numba.cpu._native_calls.run_calls`; a comment line a call: its arguments)."""
    spec = tuple(tuple(_spec(a) for a in call.args) for call in calls)
    lines = ["# Generated by dml_numba: a compiled graph's steps as one call; do not edit.",
             "# Each call: its kernel's compiled function at addrs[k] (given at run time), its",
             "# arguments the arrays at ptrs[slot] (a<slot>: dtype and sizes) and literals."]
    for k, call in enumerate(calls):
        lines.append(f"#   call {k}: {call.text()}")
    lines += ["import numba", "from dml_numba.cpu._native_calls import run_calls", "", "",
              "@numba.njit(cache=__dml_disk_cache__, nogil=True)",
              "def kernel(addrs, ptrs, clock, budget_ns):",
              f"    return run_calls(addrs, ptrs, clock, budget_ns, {repr(spec)!r})"]
    return "\n".join(lines) + "\n"


def _spec(arg) -> tuple:
    if arg[0] == "a":
        return ("a", arg[1], arg[2].name, tuple(int(n) for n in arg[3]))
    return ("s", arg[3], arg[2])


_built: dict = {}  # source -> the compiled native function (every graph's, every thread's)
_built_lock = threading.Lock()


def _compile(source: str):
    from numba import types

    from .._diskcache import compile_source
    from ._warmstart import load_cached

    with _built_lock:
        fn = _built.get(source)
        if fn is None:
            sig = (types.Array(types.int64, 1, "C"), types.Array(types.int64, 1, "C"),
                   types.int64, types.int64)

            def finish(mod):  # from the disk cache without Numba's start-up where it is there
                if not (mod.__dict__["__dml_disk_cache__"] and load_cached(mod.kernel, sig)):
                    mod.kernel.compile(sig)
                return mod.kernel

            fn = _built[source] = compile_source(source, "cpu_native_steps", finish)
    return fn


class _Seen:
    """The bound steps a plan was made from: the kept ones (their identities) and the thread
    count."""

    def __init__(self, runs, fresh):
        import numba

        self.threads = numba.get_num_threads()
        self.fresh = tuple(fresh)
        self.kept = tuple(k for k in range(len(runs)) if k not in set(self.fresh))
        self._kept_runs = tuple(runs[k] for k in self.kept)
        self._pick = picker(self.kept)

    def holds(self, runs) -> bool:
        """Whether ``runs`` keeps the same bindings (and the thread count is the same)."""
        import numba

        if self.threads != numba.get_num_threads():
            return False
        return all(map(operator.is_, self._pick(runs), self._kept_runs))

    def stale(self, runs, fresh) -> bool:
        """Whether ``runs`` (``fresh`` bound anew) are other steps than these."""
        return len(runs) != len(self.fresh) + len(self.kept) or tuple(fresh) != self.fresh \
            or not self.holds(runs)


class _Segment:
    """Consecutive steps that are each one kernel call, as one native function: its calls,
    their addresses, and the data addresses of the arrays they take (``ptrs``: the kept
    steps' filled in now, the fresh steps' at each call)."""

    def __init__(self, first: int, calls, alive):
        self.first, self.calls = first, calls
        self.source = emit(calls)
        self.addrs = np.array([c.addr for c in calls], np.int64)
        self.ptrs = np.array([address(a) if a is not None else 0 for a in alive], np.int64)
        self._alive = alive  # the kept arrays (a kernel's scratch: only here)
        self.fn = None


class _Plan(_Seen):
    """A graph's steps for one set of bindings: each run of at least :data:`SEGMENT` steps
    that are one kernel call each (:func:`call_of`) as one native call, the others as they
    are; made from one run's bound steps (``runs``; ``fresh``: the positions bound anew each
    call). Nothing of a fresh step's arrays is kept (the caller's input and output)."""

    def __init__(self, runs, fresh):
        super().__init__(runs, fresh)
        got = [call_of(run) for run in runs]
        self.items = []  # in order: a step's position (run as it is) or a _Segment
        self._fresh_calls = []  # (call, its position) of the fresh steps in segments
        k = 0
        while k < len(runs):
            end = k
            while end < len(runs) and got[end] is not None:
                end += 1
            if end - k < SEGMENT:
                self.items.extend(range(k, max(end, k + 1)))
                k = max(end, k + 1)
                continue
            self.items.append(self._segment(k, got[k:end]))
            k = end
        self._segments = [item for item in self.items if isinstance(item, _Segment)]
        if not self._segments:
            raise LookupError("no run of steps that are one kernel call each")
        self.error = None

    def _segment(self, first: int, got) -> _Segment:
        index, alive = {}, []  # a slot per array (by identity; a fresh step's own: None)

        def slot_of(a, own: bool):
            if own or id(a) not in index:
                if not own:
                    index[id(a)] = len(alive)
                alive.append(None if own else a)
                return len(alive) - 1
            return index[id(a)]

        calls, own_calls = [], []
        for k, (fn, args) in enumerate(got, first):
            own = k in self.fresh  # its arrays change each call: slots of their own, not kept
            calls.append(_Call(fn, _dispatcher(fn), args, functools.partial(slot_of, own=own)))
            if own:
                own_calls.append((calls[-1], k))
        seg = _Segment(first, calls, alive)
        for call, _ in own_calls:
            call.segment = seg
        self._fresh_calls.extend(own_calls)
        return seg

    def calls_at(self, k: int) -> _Call:
        """The native call of step ``k`` (in a segment)."""
        for seg in self._segments:
            if seg.first <= k < seg.first + len(seg.calls):
                return seg.calls[k - seg.first]
        raise KeyError(k)

    @property
    def sources(self) -> list:
        """The generated source of each native function, in order."""
        return [seg.source for seg in self._segments]

    @property
    def built(self) -> bool:
        """Whether every segment's function is built (:meth:`build` builds them in order and
        stops at a failure: the last one's is set last)."""
        return self._segments[-1].fn is not None

    def build(self) -> None:
        """Compile (or load from the disk cache) every segment's function, in order; a
        failure is kept in ``error`` and the steps keep running one by one."""
        try:
            for seg in self._segments:
                seg.fn = _compile(seg.source)
        except Exception as exc:  # noqa: BLE001 - kept: the steps run one by one
            self.error = exc

    def run(self, runs) -> bool:
        """The steps, the segments as native calls, where the plan still holds for ``runs``
        (see the module); False (nothing run) where it does not."""
        if not self.holds(runs):
            return False
        for call, k in self._fresh_calls:
            got = call_of(runs[k])
            if got is None or not call.matches(*got):
                return False
            ptrs = call.segment.ptrs
            for a, spec in zip(got[1], call.args):
                if spec[0] == "a":
                    ptrs[spec[1]] = a.__array_interface__["data"][0]
        clock, until = _adaptive._direct_until
        for item in self.items:
            if type(item) is int:
                runs[item]()
                continue
            budget = until - clock()
            done = item.fn(item.addrs, item.ptrs, _CLOCK, int(min(budget * 1e9, _FOREVER))) \
                if budget > 0 else 0
            if done < len(item.calls):  # past the run's deadline: the rest one by one
                _adaptive._leave_direct()
                for k in range(item.first + done, len(runs)):
                    runs[k]()
                return True
        return True


def _in_background(build) -> None:
    threading.Thread(target=build, name="dml_numba-build-native-steps", daemon=True).start()


class NativeSteps:
    """``steps(runs, fresh, state)``: a compiled graph's bound steps run in order, as one
    native call where the batch runs directly and the plan holds (see the module); one per
    graph, a plan per set of bindings (``state``: the dict the graph keeps with them, one per
    thread and model). ``start_build`` is injectable for tests (default: a daemon thread)."""

    def __init__(self, start_build=_in_background):
        self._start = start_build
        self.native_runs = 0  # runs made as one native call (all threads)

    def __call__(self, runs, fresh, state) -> None:
        plan = state.get("native")
        direct = _adaptive.running_directly() and enabled()
        if direct and plan is not None and plan.built and plan.run(runs):
            self.native_runs += 1
            return
        for run in runs:
            run()
        if direct and (plan is None or plan.stale(runs, fresh)):
            failed = state.get("not_native")
            if failed is not None and not failed.stale(runs, fresh):
                return  # these steps are not all one kernel call each: not again
            try:
                plan = _Plan(runs, fresh)
            except LookupError:
                state["native"], state["not_native"] = None, _Seen(runs, fresh)
                return
            state["native"], state["not_native"] = plan, None
            self._start(plan.build)
