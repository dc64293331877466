"""A join done in place (dml_numba.graph.plan.join_in_place): the steps writing a join's inputs
write them straight into their parts of the join's buffer and the join is no step (a U-Net's
skip connections, copied otherwise). Checked bit for bit against the same graph run node by
node on the same device and against NumPy's concatenate of the joined tensors; each
precondition with a graph that fails it (the join stays a step, the result right), and, for
each, that the graph computes something else (or cannot run) once the precondition is removed."""
import numpy as np
import pytest

import dml_numba as dml
from dml_numba._cache import cache
from dml_numba.graph import plan as plan_module
from dml_numba.graph.plan import JOIN_IN_PLACE
from tests.test_graph import IN, MID, OUT, N, conv, rand

FD = dml.functional


def _graph(nodes, outputs):
    """``nodes``: ``(op, sources)``, a source ``("in", k)`` (graph input ``k``) or ``("node",
    k)`` (node ``k``'s output) for each of the op's inputs in binding order; ``outputs``: the
    nodes that are graph outputs."""
    ins, mids, count = [], [], 0
    for k, (_, sources) in enumerate(nodes):
        for slot, (kind, i) in enumerate(sources):
            if kind == "in":
                ins.append(IN(i, k, slot))
                count = max(count, i + 1)
            else:
                mids.append(MID(i, 0, k, slot))
    return dml.GraphDesc(count, len(outputs), tuple(N(op, f"n{k}") for k, (op, _) in
                                                   enumerate(nodes)),
                         tuple(ins), tuple(OUT(k, 0, g) for g, k in enumerate(outputs)),
                         tuple(mids))


def _join(*shapes, strides=None):
    d = FD.join_desc([np.zeros(s, np.float32) for s in shapes], 1)
    if strides is not None:  # the first input read through strides of its own
        t = d.input_tensors[0]
        d = dml.JoinOperatorDesc((dml.TensorDesc(t.data_type, t.sizes, strides),
                                  *d.input_tensors[1:]), d.output_tensor, 1)
    return d


def _skips(n=1, *, join_is_output=False, strides=None):
    """x -> conv a; a -> pool -> tile b (a read twice: the pool and the join); join(a, b) ->
    1x1 conv (or the join the graph's output)."""
    a = conv((n, 2, 6, 6), (2, 2, 3, 3), pads=(1, 1))
    pool = FD.max_pooling_desc(np.zeros((n, 2, 6, 6), np.float32), (2, 2), (2, 2))
    tile = FD.tile_desc(np.zeros((n, 2, 3, 3), np.float32), (1, 1, 2, 2))
    nodes = [(a, [("in", 0), ("in", 1)]), (pool, [("node", 0)]), (tile, [("node", 1)]),
             (_join((n, 2, 6, 6), (n, 2, 6, 6), strides=strides), [("node", 0), ("node", 2)])]
    if join_is_output:
        return _graph(nodes, [3]), [rand((n, 2, 6, 6)), rand((2, 2, 3, 3), seed=1)]
    nodes.append((conv((n, 4, 6, 6), (3, 4, 1, 1)), [("node", 3), ("in", 2)]))
    return _graph(nodes, [4]), [rand((n, 2, 6, 6)), rand((2, 2, 3, 3), seed=1),
                                rand((3, 4, 1, 1), seed=2)]


def _joined_oracle(x, w1, w2=None):
    """The graph of :func:`_skips` with NumPy's concatenate for the join (each other node on
    the "numpy" device, the specification)."""
    a = FD.convolution(x, w1, start_padding=(1, 1), end_padding=(1, 1), device="numpy")
    p = FD.max_pooling(a, (2, 2), (2, 2), device="numpy")
    p = p[0] if isinstance(p, tuple) else p
    joined = np.concatenate([a, np.tile(p, (1, 1, 2, 2))], axis=1)
    return joined if w2 is None else FD.convolution(joined, w2, device="numpy")


def _run(graph, inputs, device="cpu"):
    return dml.compile_graph(graph, device)(*inputs)


def _nan_run(graph, inputs):
    """The graph compiled anew on "cpu" (not the cached one: a test changed the planner), run
    twice into outputs filled with NaN, its buffers filled with NaN between the two: whatever
    no step writes shows (``np.empty`` hands back freed memory, often holding the values an
    earlier run left)."""
    cache.clear()
    cg = dml.compile_graph(graph, "cpu")
    outs = [np.full(t.sizes, np.nan, np.float32) for t in cg._out]
    cg(*inputs, out=outs)
    for b in cg.buffers().values():
        b[...] = np.nan
    for o in outs:
        o[...] = np.nan
    cg(*inputs, out=outs)
    return outs


@pytest.mark.parametrize("join_is_output", [False, True])
def test_a_join_is_no_step_and_its_result_is_bit_for_bit_the_nodes_one_by_one(join_is_output):
    graph, inputs = _skips(join_is_output=join_is_output)
    cg = dml.compile_graph(graph, "cpu")
    joins = [s for s in cg.steps if isinstance(s.op, dml.JoinOperatorDesc)]
    if join_is_output:  # the caller's array: a step copies into it
        assert len(joins) == 1
    else:
        assert not joins and [s.into[1] for s in cg.steps if s.into] == [0, 2 * 36 * 4]
        assert "(in buffer 3 at byte 288)" in cg.plan
    for _ in range(2):  # the buffers reused
        got = cg(*inputs)
        np.testing.assert_array_equal(got, dml.compile_graph(graph, "cpu", fuse=False)(*inputs))
        np.testing.assert_allclose(got, _joined_oracle(*inputs), rtol=1e-5, atol=1e-5)


def _strided():
    """The graph of :func:`_skips` with the join's first input declaring strides of its own
    (channel-minor): a graph's buffers are packed and its steps read them as the node writing
    them wrote them (run node by node, the declared strides change nothing either), so the
    join is done in place as any other."""
    return _skips(strides=(72, 1, 12, 2))


def test_a_join_of_an_input_declaring_strides_is_done_in_place_and_right():
    graph, inputs = _strided()
    cg = dml.compile_graph(graph, "cpu")
    assert not any(isinstance(s.op, dml.JoinOperatorDesc) for s in cg.steps)
    np.testing.assert_allclose(cg(*inputs), _run(graph, inputs, "numpy"), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(cg(*inputs), _joined_oracle(*inputs), rtol=1e-5, atol=1e-5)


def test_the_joined_buffer_lives_from_its_first_part_to_its_last_reader():
    """The tensor the pool also reads is a part; nothing written while the join's buffer is
    alive lands in it (every buffer's bytes, and the parts at their places)."""
    graph, inputs = _skips()
    cg = dml.compile_graph(graph, "cpu")
    cg(*inputs)
    bufs = cg.buffers()
    whole, a, b = bufs[3], bufs[0], bufs[2]
    assert np.shares_memory(a, whole) and np.shares_memory(b, whole)
    assert not np.shares_memory(a, b) and not np.shares_memory(bufs[1], whole)
    np.testing.assert_array_equal(whole[:, :2], a)
    np.testing.assert_array_equal(whole[:, 2:], b)


def _two_joins():
    """a in two joins, join(a, b) and join(a, relu(b)), both graph outputs' inputs: the second
    refused (a has one place)."""
    a = conv((1, 2, 6, 6), (2, 2, 3, 3), pads=(1, 1))
    pool = FD.max_pooling_desc(np.zeros((1, 2, 6, 6), np.float32), (2, 2), (2, 2))
    tile = FD.tile_desc(np.zeros((1, 2, 3, 3), np.float32), (1, 1, 2, 2))
    relu = FD.activation_desc(np.zeros((1, 2, 6, 6), np.float32), "relu")
    head = conv((1, 4, 6, 6), (2, 4, 1, 1))
    nodes = [(a, [("in", 0), ("in", 1)]), (pool, [("node", 0)]), (tile, [("node", 1)]),
             (_join((1, 2, 6, 6), (1, 2, 6, 6)), [("node", 0), ("node", 2)]),
             (relu, [("node", 2)]),
             (_join((1, 2, 6, 6), (1, 2, 6, 6)), [("node", 0), ("node", 4)]),
             (head, [("node", 3), ("in", 2)]), (head, [("node", 5), ("in", 2)])]
    return _graph(nodes, [6, 7]), [rand((1, 2, 6, 6)), rand((2, 2, 3, 3), seed=1),
                                   rand((2, 4, 1, 1), seed=2)]


def _nested():
    """join(join(a, b), a2): the inner join in place; the outer reads a tensor no step writes
    any more (the inner join's) and copies it."""
    a = conv((1, 2, 6, 6), (2, 2, 3, 3), pads=(1, 1))
    b = conv((1, 2, 6, 6), (2, 2, 3, 3), pads=(1, 1))
    c = FD.activation_desc(np.zeros((1, 2, 6, 6), np.float32), "relu")
    nodes = [(a, [("in", 0), ("in", 1)]), (b, [("node", 0), ("in", 1)]), (c, [("node", 1)]),
             (_join((1, 2, 6, 6), (1, 2, 6, 6)), [("node", 0), ("node", 1)]),
             (_join((1, 4, 6, 6), (1, 2, 6, 6)), [("node", 3), ("node", 2)]),
             (conv((1, 6, 6, 6), (2, 6, 1, 1)), [("node", 4), ("in", 2)])]
    return _graph(nodes, [5]), [rand((1, 2, 6, 6)), rand((2, 2, 3, 3), seed=1),
                                rand((2, 6, 1, 1), seed=2)]


def _joined_after_conv(first, second):
    """x -> conv a; join(first, second) -> 1x1 conv, each source ("in", 0) (the graph's input
    x) or ("node", 0) (a)."""
    a = conv((1, 2, 6, 6), (2, 2, 3, 3), pads=(1, 1))
    nodes = [(a, [("in", 0), ("in", 1)]), (_join((1, 2, 6, 6), (1, 2, 6, 6)), [first, second]),
             (conv((1, 4, 6, 6), (2, 4, 1, 1)), [("node", 1), ("in", 2)])]
    return _graph(nodes, [2]), [rand((1, 2, 6, 6)), rand((2, 2, 3, 3), seed=1),
                                rand((2, 4, 1, 1), seed=2)]


def _twice():
    """join(a, a): one tensor in two places."""
    return _joined_after_conv(("node", 0), ("node", 0))


def _with_graph_input():
    """join(x, a): the caller's input is no step's to write."""
    return _joined_after_conv(("in", 0), ("node", 0))


#: each precondition's name, and the graphs whose (last) join fails it
REFUSED = [
    (JOIN_IN_PLACE[0][0], lambda: _skips(2)),
    (JOIN_IN_PLACE[1][0], lambda: _skips(join_is_output=True)),
    (JOIN_IN_PLACE[2][0], _twice),
    (JOIN_IN_PLACE[3][0], _with_graph_input),
    (JOIN_IN_PLACE[3][0], _nested),
    (JOIN_IN_PLACE[3][0], _two_joins),
]


def test_every_precondition_has_a_graph_that_fails_it():
    assert {name for name, _ in REFUSED} == {name for name, _ in JOIN_IN_PLACE}


def _refusals(graph, monkeypatch) -> list:
    """Why each join of ``graph`` is not done in place (None: it is), in order."""
    seen, real = [], plan_module.join_refusal

    def spy(steps, j, writer):
        why = real(steps, j, writer)
        if isinstance(steps[j].op, dml.JoinOperatorDesc):
            seen.append(why)
        return why

    monkeypatch.setattr(plan_module, "join_refusal", spy)
    plan_module.plan(graph, device="cpu")
    monkeypatch.setattr(plan_module, "join_refusal", real)
    return seen


@pytest.mark.parametrize("name, make", REFUSED)
def test_each_precondition_one_by_one(name, make, monkeypatch):
    graph, inputs = make()
    assert _refusals(graph, monkeypatch)[-1] == name
    cg = dml.compile_graph(graph, "cpu")
    assert any(isinstance(s.op, dml.JoinOperatorDesc) for s in cg.steps)  # the join a step
    got = cg(*inputs)
    np.testing.assert_array_equal(got, dml.compile_graph(graph, "cpu", fuse=False)(*inputs))
    np.testing.assert_allclose(got, _run(graph, inputs, "numpy"), rtol=1e-5, atol=1e-5)


def test_a_nan_run_sees_the_right_result_with_every_precondition():
    """The check the removals below fail: with the preconditions all kept, every graph's
    outputs are right however the buffers were filled before."""
    for _, make in [*REFUSED, (None, _skips), (None, _strided)]:
        graph, inputs = make()
        want = _run(graph, inputs, "numpy")
        for g, w in zip(_nan_run(graph, inputs), want if isinstance(want, tuple) else (want,)):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name, make", REFUSED)
def test_removing_a_precondition_computes_something_else(name, make, monkeypatch):
    graph, inputs = make()
    want = _run(graph, inputs, "numpy")
    monkeypatch.setattr(plan_module, "JOIN_IN_PLACE",
                        tuple(p for p in JOIN_IN_PLACE if p[0] != name))
    try:
        gots = _nan_run(graph, inputs)
    except Exception:  # noqa: BLE001 - cannot be planned or run without it: what is asserted
        return
    finally:
        cache.clear()  # no graph planned without the precondition kept
    wants = want if isinstance(want, tuple) else (want,)
    assert not all(np.allclose(g, w, rtol=1e-5, atol=1e-5) for g, w in zip(gots, wants))


def test_joined_parts_places_each_input_one_run_after_the_other():
    f16 = [np.zeros((1, 1, 3, 4), np.float16), np.zeros((1, 1, 2, 4), np.float16)]
    assert FD.join_desc(f16, 2).joined_parts() == (0, 3 * 4 * 2)
    i32 = [np.zeros((1, 2, 3), np.int32), np.zeros((1, 1, 3), np.int32)]
    assert FD.join_desc(i32, 1).joined_parts() == (0, 2 * 3 * 4)
    rows = [np.zeros((1, 2, 3), np.int32), np.zeros((1, 2, 1), np.int32)]
    assert FD.join_desc(rows, 2).joined_parts() is None  # an input a run per row: no
    assert FD.join_desc([np.zeros((2, 2, 3), np.int32)] * 2, 1).joined_parts() is None
    assert conv((1, 2, 6, 6), (2, 2, 3, 3)).joined_parts() is None  # no join


@pytest.mark.parametrize("dtype", [np.float16, np.int32, np.uint8])
def test_a_join_of_data_movement_steps_is_in_place_for_every_dtype_and_axis(dtype):
    """x -> tile and x -> slice, joined along the last axis (the others of size 1), then a tile
    of the whole: bits moved, equal to NumPy's."""
    x = rand((1, 1, 1, 6), dtype)
    tile = FD.tile_desc(np.zeros((1, 1, 1, 6), dtype), (1, 1, 1, 2))
    sl = FD.slice1_desc(np.zeros((1, 1, 1, 6), dtype), (0, 0, 0, 1), (1, 1, 1, 4), (1, 1, 1, 2))
    join = FD.join_desc([np.zeros((1, 1, 1, 12), dtype), np.zeros((1, 1, 1, 2), dtype)], 3)
    tail = FD.tile_desc(np.zeros((1, 1, 1, 14), dtype), (1, 2, 1, 1))
    graph = _graph([(tile, [("in", 0)]), (sl, [("in", 0)]), (join, [("node", 0), ("node", 1)]),
                    (tail, [("node", 2)])], [3])
    cg = dml.compile_graph(graph, "cpu")
    assert not any(isinstance(s.op, dml.JoinOperatorDesc) for s in cg.steps)
    want = np.tile(np.concatenate([np.tile(x, (1, 1, 1, 2)), x[..., 1:5:2]], axis=3),
                   (1, 2, 1, 1))
    np.testing.assert_array_equal(cg(x), want)
