"""A compiled graph's steps as one native call on the CPU (``dml_numba/cpu/_native.py``): the
same numbers as the steps one by one, bit for bit, and never a stale array: each condition the
plan checks before it runs (the kept bindings, the fresh steps' kernels, dtypes, sizes,
contiguity and scalars, the thread count) is tested where it changes.

The suite turns native runs off (``tests/conftest.py``: a background compile per graph would
outlive the test that started it); these tests turn them on, build in the calling thread and
run the graph's steps the way a batch's direct run does."""
from __future__ import annotations

import functools
import gc
import math
import threading
import time
import weakref

import numba
import numpy as np
import pytest

import dml_numba as dml
from dml_numba._frozen import freeze
from dml_numba.cpu import _adaptive, _native
from tests.test_graph import IN, MID, OUT, N, conv, rand


@pytest.fixture(autouse=True)
def native_on(monkeypatch):
    monkeypatch.setenv("DML_NUMBA_NATIVE_STEPS", "1")
    global _patch
    _patch = monkeypatch  # compiled graphs are cached: what a test changes on one, undone


_patch = None


def _direct(body, *args):
    """A batch that always runs directly (the machine quiet: every kernel's parallel variant)."""
    _adaptive._direct, _adaptive._direct_until = _adaptive._ident(), (time.perf_counter,
                                                                       math.inf)
    try:
        return body(*args)
    finally:
        _adaptive._direct = None


def _native_graph(graph):
    """``graph`` compiled for the CPU, run directly, its native function built on the spot."""
    return _made_native(dml.compile_graph(graph, "cpu"))


def _made_native(cg):
    _patch.setattr(cg, "_batch", _direct)
    _patch.setattr(cg, "_run_steps", _native.NativeSteps(start_build=lambda build: build()))
    _patch.setattr(cg, "_local", threading.local())  # bindings (and plans) of its own
    return cg


def _one_by_one(cg, *inputs, **kw):
    """``cg(*inputs)`` with its steps called one by one (the reference)."""
    native = cg._run_steps
    cg._run_steps = lambda runs, fresh, state: [run() for run in runs]
    try:
        return cg(*inputs, **kw).copy()
    finally:
        cg._run_steps = native


def _plan(cg, store=None):
    """This thread's plan of ``cg`` (its bindings in ``store``: a model's, else the graph's)."""
    (entry,) = (store or cg._local).bound.values()
    return entry[2].get("native")


# x -> conv(w0) -> conv(w1) -> conv(w2) -> conv(w3): the filters graph inputs 1-4
SHAPES = [((1, 3, 9, 9), (8, 3, 3, 3)), ((1, 8, 9, 9), (8, 8, 1, 1)),
          ((1, 8, 9, 9), (8, 1, 3, 3), 8), ((1, 8, 9, 9), (4, 8, 1, 1))]


def _chain():
    ops = [conv(xs, ws, pads=(1, 1) if ws[-1] == 3 else (0, 0), groups=g[0] if g else 1)
           for xs, ws, *g in SHAPES]
    nodes = tuple(N(op, f"c{k}") for k, op in enumerate(ops))
    return dml.GraphDesc(5, 1, nodes, (IN(0, 0, 0),) + tuple(IN(k + 1, k, 1) for k in range(4)),
                         (OUT(3, 0, 0),), tuple(MID(k, 0, k + 1, 0) for k in range(3)))


def _filters(seed=3):
    return [freeze(rand(ws, seed=seed + k)) for k, (_, ws, *_) in enumerate(SHAPES)]


GRAPH = _chain()


def _want(x, ws):
    return dml.compile_graph(GRAPH, "numpy")(x, *ws)


def test_the_steps_run_as_one_native_call_bit_for_bit():
    cg = _native_graph(GRAPH)
    ws = _filters()
    for seed in range(4):  # the first call builds the plan; then native, the input anew each time
        x = rand((1, 3, 9, 9), seed=seed)
        got = cg(x, *ws)
        np.testing.assert_array_equal(got, _one_by_one(cg, x, *ws))
        np.testing.assert_allclose(got, _want(x, ws), rtol=1e-4, atol=1e-4)
    assert cg._run_steps.native_runs == 3
    plan = _plan(cg)
    assert [type(item).__name__ for item in plan.items] == ["_Segment"]
    (source,) = plan.sources
    assert "run_calls(addrs, ptrs," in source and "#   call 3:" in source


def test_a_graph_output_passed_as_out_is_written_natively():
    cg, ws = _native_graph(GRAPH), _filters()
    x = rand((1, 3, 9, 9))
    cg(x, *ws)
    out = np.full((1, 4, 9, 9), np.nan, np.float32)
    assert cg(x, *ws, out=out) is out
    assert cg._run_steps.native_runs == 1
    np.testing.assert_array_equal(out, _one_by_one(cg, x, *ws))


def test_other_frozen_filters_are_read_not_the_ones_the_plan_was_made_with():
    # the kept bindings are the plan's first condition: new weights, new bindings, a new plan
    cg = _native_graph(GRAPH)
    x = rand((1, 3, 9, 9))
    first, second = _filters(3), _filters(30)
    cg(x, *first)
    cg(x, *first)
    plan = _plan(cg)
    got = cg(x, *second)
    np.testing.assert_array_equal(got, _one_by_one(cg, x, *second))
    assert _plan(cg) is not plan
    np.testing.assert_array_equal(cg(x, *second), _one_by_one(cg, x, *second))
    np.testing.assert_array_equal(cg(x, *first), _one_by_one(cg, x, *first))


def test_the_callers_own_filters_are_read_at_each_call():
    cg = _native_graph(GRAPH)
    x, ws = rand((1, 3, 9, 9)), [rand(ws, seed=k) for k, (_, ws, *_) in enumerate(SHAPES)]
    for _ in range(3):
        np.testing.assert_array_equal(cg(x, *ws), _one_by_one(cg, x, *ws))
        ws[2] *= -2  # not frozen: no step touching it is kept, it is read anew
    assert cg._run_steps.native_runs == 2  # every step bound anew: all their arrays passed anew


def test_a_strided_input_is_read_at_each_call():
    cg, ws = _native_graph(GRAPH), _filters()
    big = rand((1, 3, 9, 18), seed=5)
    for view in (big[..., ::2], big[..., 1::2], np.asfortranarray(big[..., :9])):
        want = _one_by_one(cg, np.ascontiguousarray(view), *ws)
        np.testing.assert_array_equal(cg(view, *ws), want)


def test_nothing_of_the_callers_is_kept_alive():
    cg, ws = _native_graph(GRAPH), _filters()
    for seed in range(3):
        cg(rand((1, 3, 9, 9), seed=seed), *ws)
    assert cg._run_steps.native_runs == 2
    x = rand((1, 3, 9, 9), seed=9)
    y = cg(x, *ws)
    refs = [weakref.ref(x), weakref.ref(y)]
    del x, y
    gc.collect()
    assert [r() for r in refs] == [None, None]


def test_a_plan_follows_the_thread_count():
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("one thread: no other count to set")
    cg, ws = _native_graph(GRAPH), _filters()
    x = rand((1, 3, 9, 9))
    cg(x, *ws)
    plan = _plan(cg)
    n = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        want = _one_by_one(cg, x, *ws)
        np.testing.assert_array_equal(cg(x, *ws), want)  # not this plan: a new one
        assert _plan(cg) is not plan and _plan(cg).threads == 1
        runs = cg._run_steps.native_runs
        np.testing.assert_array_equal(cg(x, *ws), _one_by_one(cg, x, *ws))
        assert cg._run_steps.native_runs == runs + 1
    finally:
        numba.set_num_threads(n)


def test_no_native_run_outside_a_direct_run_or_when_turned_off(monkeypatch):
    ws, x = _filters(), rand((1, 3, 9, 9))
    cg = _native_graph(GRAPH)
    _patch.setattr(cg, "_batch", lambda body, *args: body(*args))  # kernels deciding one by one
    for _ in range(3):
        cg(x, *ws)
    assert _plan(cg) is None and cg._run_steps.native_runs == 0
    monkeypatch.setenv("DML_NUMBA_NATIVE_STEPS", "0")
    cg = _native_graph(GRAPH)
    for _ in range(3):
        cg(x, *ws)
    assert _plan(cg) is None and cg._run_steps.native_runs == 0
    monkeypatch.setenv("DML_NUMBA_NATIVE_STEPS", "1")  # a plan made and used...
    cg(x, *ws)
    cg(x, *ws)
    assert cg._run_steps.native_runs == 1
    monkeypatch.setenv("DML_NUMBA_NATIVE_STEPS", "0")  # ...and not used once the switch is off
    np.testing.assert_array_equal(cg(x, *ws), _one_by_one(cg, x, *ws))
    assert cg._run_steps.native_runs == 1


def test_a_failed_build_leaves_the_steps_one_by_one(monkeypatch):
    def broken(source):
        raise RuntimeError("no compiler today")

    monkeypatch.setattr(_native, "_compile", broken)
    cg, ws = _native_graph(GRAPH), _filters()
    x = rand((1, 3, 9, 9))
    for _ in range(3):
        np.testing.assert_array_equal(cg(x, *ws), _one_by_one(cg, x, *ws))
    assert isinstance(_plan(cg).error, RuntimeError) and cg._run_steps.native_runs == 0


def _captured_runs(cg, x, ws):
    """The bound steps and fresh positions of one call of ``cg``."""
    seen = []
    inner = cg._run_steps
    cg._run_steps = lambda runs, fresh, state: (seen.append((runs, fresh)),
                                                inner(runs, fresh, state))
    cg(x, *ws)
    cg._run_steps = inner
    return seen[0]


def test_a_step_that_is_not_one_kernel_call_runs_between_native_segments():
    cg, ws, x = _native_graph(GRAPH), _filters(), rand((1, 3, 9, 9))
    runs, fresh = _captured_runs(cg, x, ws)
    calls = []
    middle = functools.partial(calls.append, "python step")  # no kernel: run as it is
    runs = runs[:2] + [middle] + runs[2:]
    fresh = [k + (k >= 2) for k in fresh]
    plan = _native._Plan(runs, fresh)
    assert [item if type(item) is int else (item.first, len(item.calls))
            for item in plan.items] == [(0, 2), 2, (3, 2)]
    plan.build()
    assert plan.error is None
    out = runs[-1].args[-1] if isinstance(runs[-1], functools.partial) else None
    assert plan.run(runs) and calls == ["python step"]
    if out is not None:
        np.testing.assert_array_equal(out.reshape(1, 4, 9, 9), _one_by_one(cg, x, *ws))
    with pytest.raises(LookupError):  # no two one-call steps in a row: nothing to make native
        _native._Plan([middle, runs[0], middle], [1])
    for call, k in plan._fresh_calls:  # each fresh step's slots are filled in its own segment
        assert call.segment is next(item for item in plan.items if type(item) is not int
                                    and item.first <= k < item.first + len(item.calls))


def test_a_build_that_fails_after_its_first_segment_is_not_run(monkeypatch):
    cg, ws, x = _native_graph(GRAPH), _filters(), rand((1, 3, 9, 9))
    runs, fresh = _captured_runs(cg, x, ws)
    runs = runs[:2] + [functools.partial(int)] + runs[2:]  # two segments
    fresh = [k + (k >= 2) for k in fresh]
    plan = _native._Plan(runs, fresh)
    built, real = [], _native._compile

    def second_fails(source):
        if built:
            raise RuntimeError("no compiler for the second")
        built.append(source)
        return real(source)

    monkeypatch.setattr(_native, "_compile", second_fails)
    plan.build()
    assert isinstance(plan.error, RuntimeError) and len(built) == 1 and not plan.built
    steps, state = _native.NativeSteps(start_build=lambda build: None), {"native": plan}
    _direct(steps, runs, fresh, state)
    assert steps.native_runs == 0
    assert state["native"] is plan  # run one by one: the plan kept (not rebuilt each call)


def test_what_a_fresh_step_must_keep_to_run_natively():
    cg, ws, x = _native_graph(GRAPH), _filters(), rand((1, 3, 9, 9))
    runs, fresh = _captured_runs(cg, x, ws)
    plan = _native._Plan(runs, fresh)
    call = plan.calls_at(fresh[0])
    fn, args = _native.call_of(runs[fresh[0]])
    assert call.matches(fn, args)
    k = next(i for i, a in enumerate(args) if isinstance(a, np.ndarray))
    other = [a for a in args]

    def with_arg(value):
        changed = list(other)
        changed[k] = value
        return tuple(changed)

    a = args[k]
    assert not call.matches(fn, with_arg(a.astype(np.float64)))  # another dtype
    assert not call.matches(fn, with_arg(np.zeros(a.size + 1, a.dtype)))  # other sizes
    if a.ndim > 1 or a.size > 1:
        strided = np.zeros(2 * a.size, a.dtype)[::2].reshape(a.shape)
        assert not call.matches(fn, with_arg(strided))  # not C-contiguous
    assert not call.matches(fn, with_arg(1.0))  # a scalar for an array
    assert not call.matches(_native.call_of(runs[fresh[-1]])[0], args)  # another kernel
    assert not call.matches(fn, args[:-1])  # fewer arguments
    scalars = [(i, c) for i, c in enumerate(call.args) if c[0] == "s"]
    for i, c in scalars:  # a slot count: the same value only
        changed = list(args)
        changed[i] = c[2] + 1
        assert not call.matches(fn, tuple(changed))


def test_call_of_knows_a_kernel_call_from_anything_else():
    cg, ws, x = _native_graph(GRAPH), _filters(), rand((1, 3, 9, 9))
    runs, _ = _captured_runs(cg, x, ws)
    assert all(_native.call_of(run) is not None for run in runs)
    fn, args = _native.call_of(runs[0])
    assert _native.call_of(functools.partial(fn, *args)) == (fn, args)
    assert _native.call_of(functools.partial(fn, *args, extra=1)) is None  # keywords
    assert _native.call_of(lambda: fn(*args)) is None
    assert _native.call_of(functools.partial(print, 1)) is None  # not a kernel


def test_two_threads_keep_their_own_plans():
    cg, ws = _native_graph(GRAPH), _filters()
    xs = {seed: rand((1, 3, 9, 9), seed=seed) for seed in range(8)}
    want = {seed: _one_by_one(cg, x, *ws) for seed, x in xs.items()}
    errors = []

    def work(first):
        try:
            for seed in range(first, first + 4):
                np.testing.assert_array_equal(cg(xs[seed], *ws), want[seed])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in (0, 4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert cg._run_steps.native_runs >= 2


@pytest.mark.parametrize("name", ["tiny_resnet", "unet"])
def test_small_networks_from_pytorch_run_natively_as_their_steps_do(name):
    """The networks of ``test_onnx_cnn``'s fused test (their kernels shared through the disk
    cache), exported by PyTorch: each call bit for bit what its steps give one by one."""
    pytest.importorskip("torch")
    onnx = pytest.importorskip("onnx")
    from dml_numba.onnx import compile_model
    from tests import cnn_models as C

    net = C.tiny_resnet() if name == "tiny_resnet" else C.unet(base=4, depth=1)
    data = C.export(net, (1, 3, 16, 16), fold=False, batch="n")
    m = compile_model(onnx.load_from_string(data), "cpu", input_shapes={"x": (2, 3, 16, 16)})
    _made_native(m.compiled)
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal((2, 3, 16, 16)).astype(np.float32)
        want = _one_by_one(m.compiled, x, *m._consts)
        np.testing.assert_array_equal(m(x), want)
    assert m.compiled._run_steps.native_runs == 2
    assert _plan(m.compiled, m._bindings).sources


def test_scalar_arguments_of_every_kind_pass_as_literals():
    # a kernel taking scalars of NumPy and Python types: the literal is the Python value
    import numba as nb

    @nb.njit
    def scaled(x, y, a, b, flag):
        for i in range(x.size):
            y[i] = x[i] * a + b if flag else x[i]

    x, y = np.arange(4, dtype=np.float64), np.zeros(4)
    args = (x, y, np.float32(1.5), 2, True)
    scaled(*args)
    runs = [functools.partial(scaled, *args), functools.partial(scaled, y, x, 2.0, np.int64(1),
                                                                  False)]
    scaled(*runs[1].args)
    plan = _native._Plan(runs, [])
    plan.build()
    assert plan.error is None, plan.error
    x[:], y[:] = np.arange(4), 0
    assert plan.run(runs)
    np.testing.assert_array_equal(y, np.arange(4) * 1.5 + 2)  # float32(1.5), 2, True
    np.testing.assert_array_equal(x, y)  # the second call (False) copied y into x
    spec = [c for c in plan.calls_at(0).args if c[0] == "s"]
    assert [(type(c[2]), c[3]) for c in spec] == [(float, "float32"), (int, "int64"),
                                                 (bool, "bool")]


def _deadline_batch(budget_s):
    """A batch that runs directly with ``budget_s`` seconds left before its deadline, on a
    clock that stands still (Python reads it; the native function reads the C library's)."""
    def batch(body, *args):
        _adaptive._direct = _adaptive._ident()
        _adaptive._direct_until = (lambda: 100.0, 100.0 + budget_s)
        _adaptive._running += 1
        try:
            return body(*args)
        finally:
            _adaptive._leave_direct()
    return batch


@pytest.mark.parametrize("budget_s, native_calls", [(3600.0, 4), (1e-9, 1)])
def test_a_native_run_past_its_deadline_hands_its_later_steps_their_own_choice(
        monkeypatch, budget_s, native_calls):
    cg, ws, x = _native_graph(GRAPH), _filters(), rand((1, 3, 9, 9))
    cg(x, *ws)  # the plan, built
    want = _one_by_one(cg, x, *ws)
    left = []
    leave = _adaptive._leave_direct
    monkeypatch.setattr(_adaptive, "_leave_direct", lambda: (left.append(_adaptive._direct),
                                                             leave()))
    made = []
    plan = _plan(cg)
    (seg,) = plan.items
    inner = seg.fn
    monkeypatch.setattr(seg, "fn", lambda *a: made.append(inner(*a)) or made[-1])
    _patch.setattr(cg, "_batch", _deadline_batch(budget_s))
    running = _adaptive._running
    np.testing.assert_array_equal(cg(x, *ws), want)
    assert made == [native_calls]  # the calls the native function made before the deadline
    # past it, the run is no longer direct for the later steps (the batch's share handed back
    # once); within it, only the batch's own ending
    assert left[0] is not None and (len(left) == 2) == (native_calls < 4)
    assert _adaptive._direct is None and _adaptive._running == running
