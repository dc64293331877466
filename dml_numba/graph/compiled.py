"""compile_graph and the compiled graph: plan -> one compiled operator a step -> run."""
from __future__ import annotations

import operator
import threading

import numpy as np

from .. import _interop, _pages
from .._api import CompiledOperator, check_allocatable, compile_operator
from .._binding import address, overlaps, picker, run_each
from .._cache import cache, graph_key
from .._errors import ValidationError
from .._frozen import Derived, is_frozen
from .._registry import check_device_name, get_device, split_device
from . import memory
from .desc import GraphDesc
from .plan import describe, plan


class CompiledGraph:
    """``g(*inputs, out=None)``: the graph inputs in order (or, from an ONNX model, a dict by
    name); returns its output, or a tuple of its outputs. ``out`` (an array, or a sequence of
    one array a graph output) is written in place and returned."""

    def __init__(self, graph: GraphDesc, device: str, steps, ops):
        self.graph = graph
        self.device = device
        self.steps = steps
        self.ops: list[CompiledOperator] = ops
        self._in = [graph.input_tensor(k) for k in range(graph.input_count)]
        # (sizes, NumPy dtype) of each input: what a NumPy input is compared with each call
        self._in_sig = [(t.sizes, np.dtype(t.dtype)) for t in self._in]
        self._out = [graph.output_tensor(k) for k in range(graph.output_count)]
        self._local = threading.local()
        self._cuda = split_device(device)[0] == "cuda"
        # the steps run as one batch of the device's (the CPU's: its automatic kernels decided
        # as one run while the machine is quiet); CUDA's launch as they are
        self._batch = None if self._cuda else get_device(device).new_batch()
        # the bound steps called in order (the CPU's as native calls where they can)
        self._run_steps = run_each if self._cuda else get_device(device).new_steps()
        self._views = [_views(graph, step) for step in steps]
        self._touches = [_touches(step) for step in steps]
        self._uploads = Derived()  # the device copies of frozen host inputs (CUDA)
        self._arena = None  # (offsets, bytes) of the intermediate buffers, made on first use

    # -- what it runs -------------------------------------------------------------------------
    @property
    def plan(self) -> str:
        """The steps in words: which operator runs each, over which graph nodes, reading and
        writing which tensors (graph inputs, graph outputs, buffers)."""
        return describe(self.steps, self.graph)

    @property
    def source(self) -> str:
        """The generated source of every step's kernel, in order (empty on the "numpy"
        device)."""
        return "\n".join(op.source for op in self.ops if op.source)

    def buffers(self) -> dict:
        """This thread's intermediate buffers by node (views of one arena allocated on the first
        call: outputs never alive at once share memory, :mod:`.memory`); the buffer of a node's
        output ``i`` > 0 by ``(node, i)``. A tensor joined in place is a view of its part of
        the join's buffer (:func:`~dml_numba.graph.plan.join_in_place`)."""
        return dict(getattr(self._local, "buffers", {}))

    # -- calling ------------------------------------------------------------------------------
    def __call__(self, *inputs, out=None):
        return self._call(inputs, out, self._local)

    def _call(self, inputs, out, store, own: int = 0):
        """The call, the steps' kept bindings in ``store`` (a ``threading.local``): the graph's
        own, or that of the model whose frozen weights they hold (:mod:`dml_numba.onnx`), so
        that they go with the model and no cached graph keeps a deleted model's weights.
        ``own``: the last inputs are that model's own frozen arrays, checked against the graph
        when it made them (a model's weights: a hundred arrays each call otherwise)."""
        g = self.graph
        if len(inputs) != g.input_count:
            raise ValidationError(f"compile_graph: {len(inputs)} inputs are invalid; expected "
                                  f"{g.input_count} (the graph's input_count)")
        outs = self._outs(out)
        theirs = inputs[:len(inputs) - own]
        if all(type(a) is np.ndarray for a in theirs):  # the common case, decided first
            kind, host = None, inputs
            for k, (a, (sizes, dtype)) in enumerate(zip(theirs, self._in_sig)):
                if a.shape != sizes or a.dtype != dtype:
                    self._check(a, self._in[k], f"input {k}")
        else:
            kind, host = self._host(inputs)
        for k, o in enumerate(outs):
            if o is not None:
                _interop.check_out(o, f"compile_graph.out[{k}]")
        host_outs = [_interop.to_host(o) if o is not None else None for o in outs]
        for k, o in enumerate(host_outs):  # the steps write them unchecked (run_checked)
            if isinstance(o, np.ndarray) and not o.flags.writeable:
                raise ValidationError(f"compile_graph.out[{k}]: a read-only array is invalid; "
                                      "expected a writable array")
        _check_aliases(host, host_outs)
        if self._cuda:
            return self._run_cuda(host, outs, out, kind, store)
        results = [None] * g.output_count
        for k, o in enumerate(outs):
            results[k] = _interop.to_host(o) if o is not None else np.empty(self._out[k].sizes,
                                                                             self._out[k].dtype)
            self._check(results[k], self._out[k], f"out[{k}]")
        self._batch(self._run, host, results, _pages.empty, store)
        return self._finish(results, out, kind)

    def _host(self, inputs):
        """The kind of the inputs (the first other library's) and the inputs as host views,
        checked (device arrays are checked as Numba sees them, in :meth:`_run_cuda`)."""
        kind = _interop.first_kind(inputs)
        if _interop.needs_grad(inputs):
            k = next(k for k, a in enumerate(inputs) if getattr(a, "requires_grad", False))
            raise ValidationError(
                f"compile_graph.input {k}: a torch tensor that requires grad is invalid; "
                "expected one that does not (a compiled graph has no gradient: call the "
                "operators through the functional layer or torch.ops.dml_numba, whose "
                "gradients are defined, or pass x.detach())")
        host = [_interop.to_host(a, f"compile_graph.input {k}") for k, a in enumerate(inputs)]
        for k, (a, t) in enumerate(zip(host, self._in)):
            if not self._cuda or isinstance(a, np.ndarray):  # device arrays: as Numba's
                self._check(a, t, f"input {k}")
        return kind, host

    def _run(self, inputs, results, allocate, store) -> None:
        """Every step, reading graph inputs, graph outputs and this thread's buffers (views of
        an arena made by ``allocate(shape, dtype)`` on first use).

        Each step runs as a call of no arguments made by :meth:`_bind` (its arrays resolved,
        reshaped and handed to the kernel's ``bind``: ~2 us a step instead of ~5). A binding
        is kept for the next call, in this thread's ``store``, only where every graph input and
        output the step touches is a frozen array (a model's own weights,
        :mod:`dml_numba._frozen`) and is the same array again: a step that reads the caller's
        input or writes a graph output is bound anew each call, so nothing of the caller's is
        kept alive by the graph."""
        local = self._local.__dict__
        bufs = local.get("buffers")
        if bufs is None:
            bufs = local["buffers"] = self._buffers(allocate)
        kept = store.__dict__.setdefault("bound", {})
        entry = kept.get(id(self))
        if entry is None or entry[0] is not bufs:  # bound to this thread's buffers
            # the device's preparation of this thread (the CPU's scratch, one buffer for all)
            get_device(self.device).before_binding([op.kernel for op in self.ops])
            entry = kept[id(self)] = (bufs, [None] * len(self.steps), {})
        bound, state = entry[1], entry[2]
        fast = state.get("kept")
        if fast is not None:  # the kept bindings' arrays all the same again: checked at once
            pick, arrays, template, fresh = fast
            if all(map(operator.is_, pick(inputs), arrays)):
                runs = list(template)
                for k in fresh:
                    runs[k] = self._bind(k, inputs, results, bufs)
                self._run_steps(runs, fresh, state)
                return
        runs, fresh = [], []
        for k, refs in enumerate(self._touches):
            step_kept = bound[k]
            if step_kept is not None:
                arrays, run = step_kept
                for (kind, i), a in zip(refs, arrays):
                    if (inputs if kind == "input" else results)[i] is not a:
                        break
                else:
                    runs.append(run)
                    continue
            run = self._bind(k, inputs, results, bufs)
            arrays = [(inputs if kind == "input" else results)[i] for kind, i in refs]
            bound[k] = (arrays, run) if all(map(is_frozen, arrays)) else None
            if bound[k] is None:
                fresh.append(k)
            runs.append(run)
        state["kept"] = _kept_check(self._touches, bound, runs, fresh)
        self._run_steps(runs, fresh, state)  # the device's state for these bindings

    def _bind(self, k, inputs, results, bufs):
        """Step ``k`` as a call of no arguments on these arrays (see :meth:`_run`)."""
        step, op = self.steps[k], self.ops[k]

        def at(ref):
            if ref[0] == "input":
                return inputs[ref[1]]
            if ref[0] == "output":
                return results[ref[1]]
            return bufs[memory.key_of(ref)]

        target = at(step.output)
        args = [at(r) for r in step.inputs]
        for i, sizes in self._views[k]:  # an input seen with other sizes (a reshaping edge)
            args[i] = args[i].reshape(sizes)
        # an operator of several outputs: the tuple of its targets; checked: the graph's entry,
        # edges and buffers
        targets = [target] + [at(ref) for ref, _ in step.more]
        run = op.bind_checked(args, tuple(targets) if step.more else target)
        copies = [(results[extra[1]], target) for extra in step.also] + [
            (results[extra[1]], a) for a, (_, also) in zip(targets[1:], step.more)
            for extra in also]
        if not copies:
            return run

        def run_and_copy():
            run()
            for to, a in copies:
                to[...] = a
        return run_and_copy

    def _buffers(self, allocate) -> dict:
        """This thread's buffers: views of one arena (``allocate(shape, dtype)``, uint8) at the
        offsets :mod:`.memory` gives them (outputs never alive at once share memory)."""
        if self._arena is None:
            self._arena = memory.place(self.steps, lambda k: _nbytes(self._tensor(k)))
        offsets, total = self._arena
        if not offsets:
            return {}
        arena = allocate((total + memory.ALIGN,), np.uint8)
        base = -(address(arena) or 0) % memory.ALIGN  # unknown: CUDA's are aligned
        views = {}
        for k, off in offsets.items():
            t = self._tensor(k)
            start = base + off
            views[k] = arena[start:start + _nbytes(t)].view(t.dtype).reshape(t.sizes)
        return views

    def _tensor(self, key):
        return self.graph.node_output(*key) if isinstance(key, tuple) else \
            self.graph.node_output(key)

    def _run_cuda(self, host, outs, out, kind, store):
        dev = get_device(self.device)  # its arrays, through the device (no backend import)
        # host inputs copied to the GPU; a frozen one (a model's weights) once, kept
        # (the steps launch on Numba's device arrays: another library's shared, not copied)
        dev_in = [dev.as_array(a) if not isinstance(a, np.ndarray)
                  else self._uploads.get(a, dev.to_device) for a in host]
        results = []
        for k, o in enumerate(outs):
            o = _interop.to_host(o) if o is not None else None
            if o is not None and dev.is_device_array(o):
                results.append(dev.as_array(o))
                self._check(results[-1], self._out[k], f"out[{k}]")
            else:
                results.append(dev.device_array(self._out[k].sizes, self._out[k].dtype))
        # the steps launch unchecked: the device arrays passed in checked here, as Numba sees
        # them (host arrays were checked on entry; their copies and the outputs made here are
        # the graph's own shapes)
        for k, (a, d, t) in enumerate(zip(host, dev_in, self._in)):
            if not isinstance(a, np.ndarray):
                self._check(d, t, f"input {k}")
        self._run(dev_in, results, dev.device_array, store)
        on_device = any(dev.is_device_array(a) for a in host)
        final = []
        for k, r in enumerate(results):
            o = outs[k]
            if o is not None:
                target = _interop.to_host(o)
                if isinstance(target, np.ndarray):
                    target[...] = r.copy_to_host()
                final.append(o)
            else:
                final.append(r if on_device else r.copy_to_host())
        if out is not None:
            return out
        if on_device:
            final = [_interop.as_kind(r, kind) for r in final]
        return final[0] if len(final) == 1 else tuple(final)

    def _outs(self, out) -> list:
        n = self.graph.output_count
        if out is None:
            return [None] * n
        if n == 1 and not isinstance(out, (list, tuple)):
            return [out]
        if not isinstance(out, (list, tuple)) or len(out) != n:
            raise ValidationError(f"compile_graph.out: {type(out).__name__} is invalid; expected "
                                  f"a sequence of {n} arrays (one per graph output)")
        return list(out)

    @staticmethod
    def _check(a, t, what):
        if not hasattr(a, "shape") or tuple(a.shape) != t.sizes or a.dtype != t.dtype:
            got = (f"{type(a).__name__} {getattr(a, 'dtype', '?')} "
                   f"{tuple(getattr(a, 'shape', ()))}")
            raise ValidationError(f"compile_graph.{what}: {got} is invalid; expected "
                                  f"{t.dtype} {t.sizes} ({t.data_type.name})")

    def _finish(self, results, out, kind):
        if out is not None:
            return out
        results = [_interop.as_kind(r, kind) for r in results]
        return results[0] if len(results) == 1 else tuple(results)

    def __repr__(self):
        return (f"<CompiledGraph of {len(self.graph.nodes)} nodes in {len(self.steps)} steps on "
                f"{self.device!r}>")


def _kept_check(touches, bound, runs, fresh):
    """What the next call checks instead of each kept binding's arrays one by one: ``(pick,
    arrays, runs, fresh)``, ``pick(inputs)`` the graph inputs the kept bindings read, to be the
    same objects as ``arrays`` (kept alive by those bindings: no other object can have their
    identity meanwhile), ``runs`` the kept bindings' calls in place (None where ``fresh``, the
    steps bound anew each call). None where a kept binding touches a graph output."""
    used = {}
    for k, refs in enumerate(touches):
        if bound[k] is None:
            continue
        for (kind, i), a in zip(refs, bound[k][0]):
            if kind != "input":
                return None
            used[i] = a
    order = sorted(used)
    return (picker(order), tuple(used[i] for i in order),
            [None if k in fresh else r for k, r in enumerate(runs)], tuple(fresh))


def _nbytes(t) -> int:
    """Bytes of a packed array of tensor ``t``'s sizes and type (a buffer's)."""
    return t.element_count * np.dtype(t.dtype).itemsize


def _views(graph: GraphDesc, step) -> list:
    """``(i, sizes)`` for each input of ``step`` that sees its buffer with other sizes (a
    reshaping edge: :func:`~dml_numba.graph.desc.reshapes`)."""
    def sizes(ref):
        if ref[0] == "input":
            return graph.input_tensor(ref[1]).sizes
        if ref[0] == "output":
            return graph.output_tensor(ref[1]).sizes
        return graph.node_output(*ref[1:]).sizes

    wanted = [t.sizes for _, t in step.op.bound_inputs()]
    return [(i, w) for i, (ref, w) in enumerate(zip(step.inputs, wanted)) if sizes(ref) != w]


def _touches(step) -> tuple:
    """The graph inputs and outputs (``("input", k)`` / ``("output", k)``) a step reads or
    writes: what may be another array at each call."""
    refs = [step.output, *step.inputs, *(ref for ref, _ in step.more), *step.also,
            *(extra for _, also in step.more for extra in also)]
    return tuple(dict.fromkeys((r[0], r[1]) for r in refs if r[0] in ("input", "output")))


def _check_aliases(inputs, outs) -> None:
    """Refuse, before anything is written, an ``out`` array that shares memory with a graph
    input (a later step may still read it) or with another ``out`` array (each graph output is
    written whole, in its own step): the same array or overlapping views, on every device."""
    for k, o in enumerate(outs):
        if o is None:
            continue
        for j, a in enumerate(inputs):
            if overlaps(o, a):
                raise ValidationError(
                    f"compile_graph.out[{k}]: an array overlapping input {j} is invalid; expected "
                    "an output that shares no memory with the graph's inputs")
        for j in range(k):
            if outs[j] is not None and overlaps(o, outs[j]):
                raise ValidationError(
                    f"compile_graph.out[{k}]: an array overlapping out[{j}] is invalid; expected "
                    "one array per graph output, sharing no memory with the others")


def compile_graph(graph: GraphDesc, device: str = "cpu", *, fuse: bool = True,
                  **options) -> CompiledGraph:
    """Compile ``graph`` for ``device``: on "numpy" node by node (the specification), on "cpu"
    and "cuda" fused (:mod:`dml_numba.graph.plan`); every step's kernel is cached like any
    operator's (in memory and on disk). ``fuse=False`` runs the nodes one by one on any device.
    ``options`` go to every step (``parallel=``)."""
    if not isinstance(graph, GraphDesc):
        raise ValidationError(f"compile_graph.graph: {type(graph).__name__} is invalid; expected "
                              "a GraphDesc")
    check_device_name(device)
    return cache.get_or_build(graph_key(graph, device, fuse, options),
                              lambda: _build(graph, device, fuse, options))


def _build(graph, device, fuse, options):
    get_device(device)  # unavailable devices fail here, before anything is compiled
    base = split_device(device)[0]
    steps = plan(graph, fuse=fuse and base != "numpy", device=base)
    for s in steps:
        check_allocatable(s.op)
    per_step = [_options_for(s.op, device, options) for s in steps]
    for name, value in options.items():  # an option no step takes is a mistake, not a no-op
        if not any(name in o for o in per_step):
            from .._registry import check_options

            check_options(type(steps[0].op.canonical()), device, {name: value})
    ops = [compile_operator(s.op, device, **o, **dict(s.options))
           for s, o in zip(steps, per_step)]
    return CompiledGraph(graph, device, steps, ops)


def _options_for(op, device, options) -> dict:
    """The options that apply to this step's operator (``algorithm`` is convolution's)."""
    from .._registry import check_options

    keep = {}
    for name, value in options.items():
        try:
            check_options(type(op.canonical()), device, {name: value})
        except ValidationError:
            continue
        keep[name] = value
    return keep
