"""The graph rewrites as rules: each rule's preconditions one by one (a named refusal for each),
random graphs holding every rule's trigger and every blocker (nodes that are graph outputs,
nodes with two readers, stacked paddings of mixed modes, crop and strided slices, transposed
convolutions) whose fused plan equals the nodes run one by one, and, for every precondition,
that removing it makes those random graphs fail.

The fused plan is checked two ways: by :func:`run_plan`, which runs each step's descriptor on
the "numpy" device and a fold as what it means (the input padded with NumPy in the fold's mode,
then the window unpadded), so thousands of plans are judged without compiling; and compiled on
"cpu" (and the CUDA simulator, tests/cuda), its real kernels."""
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import dml_numba as dml
from dml_numba.graph import rules
from dml_numba.graph.plan import plan
from tests.helpers import assert_close

F32 = dml.DataType.FLOAT32
N, IN, OUT, MID = (dml.OperatorGraphNodeDesc, dml.InputGraphEdgeDesc, dml.OutputGraphEdgeDesc,
                   dml.IntermediateGraphEdgeDesc)
P = dml.PaddingMode
NP_MODES = {"EDGE": "edge", "REFLECTION": "reflect", "SYMMETRIC": "symmetric", "WRAP": "wrap"}
FD = dml.functional
CLIP6 = dml.ElementWiseClipOperatorDesc(min=0.0, max=6.0)


def _x(shape):
    return np.zeros(shape, np.float32)


# -- random graphs ------------------------------------------------------------------------------

def _pads(draw, shape, most, channels=False):
    """Start and end paddings of every axis: the spatial ones 0..``most`` (below each axis's
    size, as every mode allows), the channel axis too where ``channels``."""
    start, end = [0] * len(shape), [0] * len(shape)
    for ax in range(1 if channels else 2, len(shape)):
        top = min(most, shape[ax] - 1)
        start[ax], end[ax] = draw(st.integers(0, top)), draw(st.integers(0, top))
    return tuple(start), tuple(end)


def _zero_pad(draw, shape):
    """A padding that is absorbed (+0 of the spatial axes) or a blocker (-0.0, another
    constant, a padded channel axis)."""
    value = draw(st.sampled_from([0.0, 0.0, 0.0, -0.0, 1.5]))
    start, end = _pads(draw, shape, 2, channels=draw(st.integers(0, 4)) == 0)
    return FD.padding_desc(_x(shape), start, end, P.CONSTANT, value), []


def _mode_pad(draw, shape):
    mode = draw(st.sampled_from([P.EDGE, P.REFLECTION, P.SYMMETRIC, P.WRAP]))
    start, end = _pads(draw, shape, 2, channels=draw(st.integers(0, 5)) == 0)
    return FD.padding_desc(_x(shape), start, end, mode), []


def _slice(draw, shape):
    """A crop (batch and channels whole, positive strides, offsets) or a blocker (a channel
    slice, a reversed axis)."""
    offsets, sizes, strides = [], [], []
    blocker = draw(st.integers(0, 4)) == 0
    for ax, n in enumerate(shape):
        if ax < 2 and not blocker:
            offsets.append(0), sizes.append(n), strides.append(1)
            continue
        o = draw(st.sampled_from([0, 0, 1, 2])) if n > 2 else draw(st.integers(0, n - 1))
        offsets.append(o)
        sizes.append(draw(st.integers(1, n - o)))
        strides.append(draw(st.sampled_from([1, 2, 3, -1] if blocker else [1, 2, 3])))
    return FD.slice1_desc(_x(shape), offsets, sizes, strides), []


def _tile(draw, shape):
    reps = tuple(draw(st.integers(1, 2)) if n < 6 else 1 for n in shape)
    return FD.tile_desc(_x(shape), reps), []


def _window_geometry(draw, shape, own_pad):
    """Window sizes, strides, dilations and own padding that fit ``shape``'s spatial axes."""
    ks, ss, ds, pads = [], [], [], []
    for n in shape[2:]:
        p = draw(st.integers(0, 1)) if own_pad else 0
        d = draw(st.integers(1, 2))
        k = draw(st.integers(1, 3))
        while (k - 1) * d + 1 > n + 2 * p:
            k, d = (k - 1, d) if k > 1 else (1, 1)
        ks.append(k), ss.append(draw(st.integers(1, 2))), ds.append(d), pads.append(p)
    return ks, ss, ds, pads


def _conv(draw, shape):
    c = shape[1]
    ks, ss, ds, pads = _window_geometry(draw, shape, draw(st.booleans()))
    rng = np.random.default_rng(draw(st.integers(0, 99)))
    if draw(st.integers(0, 5)) == 0:  # transposed: a windowed operator without a window
        cout = draw(st.integers(1, 2))
        w = rng.standard_normal((c, cout) + tuple(ks)).astype(np.float32)
        return FD.convolution_desc(_x(shape), w, strides=ss,
                                   direction=dml.ConvolutionDirection.BACKWARD), [w]
    groups = draw(st.sampled_from([1, c]))
    cout = groups * draw(st.integers(1, 2))
    w = rng.standard_normal((cout, c // groups) + tuple(ks)).astype(np.float32)
    params = [w]
    bias = None
    if draw(st.booleans()):
        bias = rng.standard_normal((1, cout, 1, 1)).astype(np.float32)
        params.append(bias)
    act = draw(st.sampled_from([None, dml.ActivationReluOperatorDesc()]))
    return FD.convolution_desc(_x(shape), w, bias, strides=ss, dilations=ds, start_padding=pads,
                               end_padding=pads, group_count=groups,
                               fused_activation=act), params


def _lp(draw, shape):
    ks, ss, ds, pads = _window_geometry(draw, shape, draw(st.booleans()))
    return FD.lp_pooling_desc(_x(shape), ks, ss, pads, pads, ds,
                              p=draw(st.integers(1, 3))), []


def _pool(draw, shape):
    """A max pooling (its padding never wins: not zeros) or an average pooling (its padding
    counted: zeros; or not)."""
    ks, ss, ds, pads = _window_geometry(draw, shape, draw(st.booleans()))
    if draw(st.booleans()):
        return FD.max_pooling_desc(_x(shape), ks, ss, pads, pads, ds), []
    return FD.average_pooling_desc(_x(shape), ks, ss, pads, pads, ds,
                                   include_padding=draw(st.booleans())), []


def _pads_stacked(draw, shape):
    """Two paddings in a row, each +0 or a mode (what a fold and an absorb meet)."""
    first = draw(st.sampled_from([_zero_pad, _mode_pad]))(draw, shape)
    return [first, draw(st.sampled_from([_zero_pad, _mode_pad]))(draw, first[0].output.sizes)]


def _window_then_slice(draw, shape):
    """A window and a slice of its output (what a crop meets): offsets mostly within the
    window's start padding, a blocker slice now and then."""
    window = draw(st.sampled_from([_conv, _lp, _pool]))(draw, shape)
    return [window, _slice(draw, window[0].output.sizes)]


def _pads_then_window(draw, shape):
    """Two paddings, each +0 or a mode, and a window reading them: absorb and fold, in either
    order, each blocking the other or not."""
    pads = _pads_stacked(draw, shape)
    return pads + [draw(st.sampled_from([_conv, _lp, _pool]))(draw,
                                                               pads[-1][0].output.sizes)]


def _act(draw, shape):
    """An activation of its own (what a fuse meets after a convolution, a pooling, another
    activation)."""
    act = draw(st.sampled_from([dml.ActivationReluOperatorDesc(),
                                dml.ActivationSigmoidOperatorDesc(),
                                dml.ActivationEluOperatorDesc(0.5)]))
    return FD.activation_desc(_x(shape), act), []


def _window_then_act(draw, shape):
    """A window and an activation of its output (a fuse, or a blocker: a pooling has no slot,
    a convolution may have its activation already)."""
    window = draw(st.sampled_from([_conv, _conv, _pool]))(draw, shape)
    return [window, _act(draw, window[0].output.sizes)]


def _add(draw, shape):
    """A sum of the newest tensor and a graph input, either way round (the third element: the
    newest tensor is input 0)."""
    r = np.random.default_rng(draw(st.integers(0, 99))).standard_normal(shape)
    return FD.element_wise_add_desc(_x(shape), _x(shape)), [r.astype(np.float32)], \
        draw(st.booleans())


def _window_then_add(draw, shape):
    """A window and a sum of its output (a residual, or a blocker: a pooling takes no addend,
    a convolution may have its activation already), the sum's own activation fused or not
    (a ReLU of its own after it)."""
    window = draw(st.sampled_from([_conv, _conv, _pool]))(draw, shape)
    made = [window, _add(draw, window[0].output.sizes)]
    if draw(st.booleans()):
        made.append(_act(draw, window[0].output.sizes))
    return made


def _pointwise_then_depthwise(draw, shape):
    """A pointwise convolution to 4 or 8 channels, then a depthwise one reading it (a pair), or
    a blocker: a unit stride (no pair on the CPU), a REFLECTION padding between them (folded
    into the depthwise window), a 3 x 3 first convolution, a dense second one."""
    c = shape[1]
    rng = np.random.default_rng(draw(st.integers(0, 99)))

    def params(w, cout):
        bias = rng.standard_normal((1, cout, 1, 1)).astype(np.float32) if draw(
            st.booleans()) else None
        act = draw(st.sampled_from([None, dml.ActivationReluOperatorDesc(), CLIP6]))
        return w, bias, act, [w] + ([bias] if bias is not None else [])

    cout = draw(st.sampled_from([4, 8]))
    k = 3 if draw(st.integers(0, 5)) == 0 else 1
    w, bias, act, extra = params(rng.standard_normal((cout, c, k, k)).astype(np.float32), cout)
    made = [(FD.convolution_desc(_x(shape), w, bias, start_padding=k // 2, end_padding=k // 2,
                                 fused_activation=act), extra)]
    mid = made[0][0].output.sizes
    fold = draw(st.integers(0, 4)) == 0
    if fold:
        made.append((FD.padding_desc(_x(mid), (0, 0, 1, 1), (0, 0, 1, 1), P.REFLECTION), []))
        mid = made[-1][0].output.sizes
    groups = 1 if draw(st.integers(0, 5)) == 0 else cout
    pad = 0 if fold else draw(st.integers(0, 1))
    k = min(3, min(mid[2:]) + 2 * pad)
    w, bias, act, extra = params(
        rng.standard_normal((cout, cout // groups, k, k)).astype(np.float32), cout)
    strides = draw(st.sampled_from([(2, 2), (2, 2), (1, 2), (2, 1), (1, 1)]))
    made.append((FD.convolution_desc(_x(mid), w, bias, strides=strides, start_padding=pad,
                                     end_padding=pad, group_count=groups,
                                     fused_activation=act), extra))
    return made


KINDS = {"act": _act, "conv-act": _window_then_act, "zero": _zero_pad, "mode": _mode_pad,
         "slice": _slice, "tile": _tile, "conv": _conv, "lp": _lp, "pool": _pool,
         "pads": _pads_stacked, "crop": _window_then_slice, "padded": _pads_then_window,
         "add": _add, "conv-add": _window_then_add, "pw-dw": _pointwise_then_depthwise}


def _bind(params, arrays):
    """``arrays`` as further graph inputs: their slots' sources."""
    slots = []
    for a in arrays:
        params.append(a)
        slots.append(("input", len(params)))
    return slots


@st.composite
def graphs(draw, kinds=tuple(KINDS), most=6):
    """A random graph of float32 (N, C, H, W) tensors: each node reads the newest tensor or an
    earlier one (a node with two readers), ``kinds`` drawn from KINDS; every node not read is a
    graph output and others may be too. Returns (graph, inputs, data_movement_only)."""
    shape0 = (draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(3, 7)),
              draw(st.integers(3, 7)))
    tensors = [(("input", 0), shape0)]
    nodes, params = [], []
    for _ in range(draw(st.integers(1, most))):
        at = draw(st.one_of(st.just(len(tensors) - 1), st.integers(0, len(tensors) - 1)))
        src, shape = tensors[at]
        kind = draw(st.sampled_from(kinds))
        if max(shape[2:]) > 12 and kind in ("zero", "mode", "tile"):
            kind = "slice"
        try:
            made = KINDS[kind](draw, shape)
        except dml.ValidationError:  # (a window the shrunken tensor cannot hold)
            made = (FD.tile_desc(_x(shape), (1,) * len(shape)), [])
        for desc, extra, *first in [made] if isinstance(made, tuple) else made:
            # (each reads the last, as its input 0 unless it says otherwise)
            bound = _bind(params, extra)
            nodes.append((desc, [src] + bound if first in ([], [True]) else bound + [src]))
            src = ("node", len(nodes) - 1)
            tensors.append((src, desc.output.sizes))
    read = {s[1] for _, slots in nodes for s in slots if s[0] == "node"}
    outs = [k for k in range(len(nodes)) if k not in read or k == len(nodes) - 1 or
            draw(st.integers(0, 3)) == 0]
    ins, mids = [], []
    for k, (_, slots) in enumerate(nodes):
        for slot, s in enumerate(slots):
            (ins if s[0] == "input" else mids).append((s, k, slot))
    graph = dml.GraphDesc(
        1 + len(params), len(outs), tuple(N(d, f"n{k}") for k, (d, _) in enumerate(nodes)),
        tuple(IN(s[1], k, slot) for s, k, slot in ins),
        tuple(OUT(k, 0, g) for g, k in enumerate(outs)),
        tuple(MID(s[1], 0, k, slot) for s, k, slot in mids))
    x = np.random.default_rng(draw(st.integers(0, 99))).standard_normal(shape0)
    moving = all(hasattr(d.canonical(), "gather_plan") for d, _ in nodes)
    return graph, [x.astype(np.float32)] + params, moving


# -- the plan, run as it means -------------------------------------------------------------------

def run_plan(steps, graph, inputs, device="cpu"):
    """The outputs of ``steps`` (a plan for ``device``), each step's descriptor on the "numpy"
    device; a fold as its meaning: the input padded in the fold's mode by the window's padding,
    the window then unpadded (refused, as compiling would be, where the device's kernel does not
    read through the mode). A graph output no step writes stays None."""
    results, buffers = [None] * graph.output_count, {}

    def at(ref):
        kind, k = ref
        return inputs[k] if kind == "input" else results[k] if kind == "output" else buffers[k]

    for s in steps:
        op, args = s.op, [at(r) for r in s.inputs]
        mode = dict(s.options).get("input_padding")
        if mode is not None:
            if mode not in rules.reads_through(type(op.canonical()), device):
                raise dml.ValidationError(f"input_padding: {mode!r} is not read by {device!r}")
            win = op.canonical().window()
            args[0] = np.pad(args[0], [(0, 0), (0, 0)] + list(zip(win.start_padding,
                                                                 win.end_padding)),
                             mode=NP_MODES[mode])
            nd = len(win.strides)
            op = op.canonical().rewindow(dml.TensorDesc(F32, args[0].shape), op.output,
                                         win.strides, (0,) * nd, (0,) * nd)
        y = dml.compile_operator(op, "numpy")(*args)
        if s.output[0] == "output":
            results[s.output[1]] = y
        else:
            buffers[s.output[1]] = y
        for extra in s.also:
            results[extra[1]] = y.copy()
    return results


def check_against_nodes(got, graph, inputs, moving):
    """``got`` (the graph's outputs) equal to the nodes run one by one on "numpy": bit for bit
    for data movement, within the operators' tolerance otherwise."""
    ref = dml.compile_graph(graph, "numpy")(*inputs)
    ref = ref if isinstance(ref, tuple) else (ref,)
    got = got if isinstance(got, (tuple, list)) else (got,)
    for k, (g, r) in enumerate(zip(got, ref)):
        assert g is not None, f"graph output {k} was never written"
        if moving:
            np.testing.assert_array_equal(g, r, err_msg=f"graph output {k}")
        else:
            assert_close(np.asarray(g), r, np.float32)


PLAN_SETTINGS = settings(max_examples=300, deadline=None, derandomize=True,
                         suppress_health_check=list(HealthCheck))


@PLAN_SETTINGS
@given(case=graphs())
def test_every_plan_computes_what_the_nodes_do(case):
    graph, inputs, moving = case
    check_against_nodes(run_plan(plan(graph, device="cpu"), graph, inputs), graph, inputs,
                        moving)


@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(case=graphs(most=4))
def test_fused_on_cpu_equals_the_nodes_one_by_one(case):
    """The real kernels: the compiled graph on "cpu" (a sample: each example compiles; the
    plans themselves are judged on 300 examples above)."""
    graph, inputs, moving = case
    check_against_nodes(dml.compile_graph(graph, "cpu")(*inputs), graph, inputs, moving)


def test_the_random_graphs_trigger_every_rule_and_every_blocker():
    """What the property tests above rely on: over their examples, every rule applies somewhere
    and every precondition refuses somewhere (hypothesis draws the same examples each run)."""
    applied, refused = set(), set()

    @PLAN_SETTINGS
    @given(case=graphs(), device=st.sampled_from(["cpu", "numpy"]))
    def tally(case, device):
        count(case, device)

    def tally_targets(name):
        """The examples of the removal tests below: each rule's own kinds (the residual and
        pair rules' blockers are pairs of nodes; a crop needs a window and a slice)."""
        @PLAN_SETTINGS
        @given(case=graphs(kinds=TARGETS[name]), device=st.sampled_from(["cpu", "numpy"]))
        def tally_kinds(case, device):
            count(case, device)
        tally_kinds()

    def count(case, device):
        work = rules.Work(case[0], device)
        for phase in rules.PHASES:
            for k in case[0].order():
                while k in work.nodes:
                    for r in phase:
                        why = r.refusal(work, k)
                        if why is not None:
                            refused.add((r.name, why))
                    rule = next((r for r in phase if r.refusal(work, k) is None), None)
                    if rule is None:
                        break
                    applied.add(rule.name)
                    rule.apply(work, k)

    tally()
    for name in TARGETS:
        tally_targets(name)
    assert applied == {"fuse", "absorb", "fold", "crop", "residual", "pair", "chain"}
    every = {(r.name, name) for phase in rules.PHASES for r in phase for name, _ in
             r.preconditions}
    every -= {("absorb", "the window's padding reads zeros"),  # (no such window yet: unit test)
              ("fuse", "the producer computes in floating point"),  # (float32 graphs: unit test)
              *UNIT_TESTED}
    assert every - refused == set()


# -- each precondition removed: the random graphs fail --------------------------------------------

#: for each rule, the kinds of node that make its triggers and blockers likely
TARGETS = {"fuse": ("conv-act", "conv-act", "act", "conv", "pool", "tile"),
           "absorb": ("zero", "mode", "conv", "lp", "pool", "slice", "pads", "padded"),
           "fold": ("zero", "mode", "conv", "lp", "pool", "pads", "padded"),
           "crop": ("crop", "crop", "conv", "lp", "pool", "slice", "mode", "tile"),
           "chain": ("zero", "mode", "slice", "tile", "lp"),
           "residual": ("conv-add", "conv-add", "add", "conv", "pool", "act"),
           "pair": ("pw-dw", "pw-dw", "conv", "mode", "act")}


#: preconditions the random graphs (float32 throughout) cannot meet: each has a test of its own
#: that fails without it
UNIT_TESTED = {("fuse", "the producer computes in floating point"),
               ("residual", "the device runs an operator with an addend"),
               ("residual", "the node reads the producer's output with its sizes (not through a "
                            "view)"),
               ("pair", "the device computes the pair as one kernel")}


def _preconditions():
    for phase in rules.PHASES:
        for r in phase:
            for name, _ in r.preconditions:
                if (r.name, name) not in UNIT_TESTED:
                    yield pytest.param(r, name, id=f"{r.name}: {name}")


@pytest.mark.parametrize("rule, name", list(_preconditions()))
def test_removing_a_precondition_fails_the_random_graphs(rule, name, monkeypatch):
    """Every precondition is needed: without it, some random graph's plan computes something
    else than its nodes (or cannot be run at all). A device whose kernels read through no mode
    is "numpy"'s registry: the fold's device precondition is tried there."""
    monkeypatch.setattr(rule, "preconditions",
                        tuple(p for p in rule.preconditions if p[0] != name))
    device = "numpy" if name == "the device's kernel reads through the mode" else "cpu"
    failures = []

    @settings(max_examples=400, deadline=None, derandomize=True, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck), report_multiple_bugs=False)
    @given(case=graphs(kinds=TARGETS[rule.name]))
    def prop(case):
        graph, inputs, moving = case
        try:
            got = run_plan(plan(graph, device=device), graph, inputs, device)
            check_against_nodes(got, graph, inputs, moving)
        except Exception as e:
            failures.append(f"{type(e).__name__}: {e}"[:300])
            raise

    with pytest.raises(Exception):  # noqa: B017 - the property, failing, is what is asserted
        prop()
    assert failures


# -- each rule's preconditions, one by one --------------------------------------------------------

def _graph(*ops, outputs=None, extra_readers=()):
    """ops[0] -> ops[1] -> ... (each op reads the one before; convolution filters are further
    graph inputs); ``outputs``: the nodes that are graph outputs (default: the last);
    ``extra_readers``: (reader op, the node it reads) nodes added after, each a graph output."""
    nodes, ins, mids, params = [], [IN(0, 0, 0)], [], 0
    for k, op in enumerate(ops + tuple(r for r, _ in extra_readers)):
        nodes.append(N(op, f"n{k}"))
        if k >= len(ops):
            mids.append(MID(extra_readers[k - len(ops)][1], 0, k, 0))
        elif k:
            mids.append(MID(k - 1, 0, k, 0))
        for slot in range(1, len(op.bound_inputs())):
            params += 1
            ins.append(IN(params, k, slot))
    outs = list(outputs if outputs is not None else [len(ops) - 1])
    outs += list(range(len(ops), len(ops) + len(extra_readers)))
    return dml.GraphDesc(1 + params, len(outs), tuple(nodes), tuple(ins),
                         tuple(OUT(k, 0, g) for g, k in enumerate(outs)), tuple(mids))


def _refusal(rule, graph, k, device="cpu"):
    return rule.refusal(rules.Work(graph, device), k)


X = (1, 2, 6, 6)
W = np.ones((2, 2, 3, 3), np.float32)


def _conv_on(shape, pads=0, strides=1):
    return FD.convolution_desc(_x(shape), W, start_padding=pads, end_padding=pads,
                               strides=strides)


ZERO = FD.padding_desc(_x(X), (0, 0, 1, 1), (0, 0, 1, 1))
REFLECT = FD.padding_desc(_x(X), (0, 0, 1, 1), (0, 0, 1, 1), P.REFLECTION)
FUSE, ABSORB, FOLD, CROP, RESIDUAL, PAIR, CHAIN = (r for phase in rules.PHASES for r in phase)


@pytest.mark.parametrize("graph, k, why", [
    (_graph(ZERO, _conv_on((1, 2, 8, 8))), 1, None),
    (_graph(ZERO, FD.tile_desc(_x((1, 2, 8, 8)), (1, 1, 1, 1))), 1, "the node has a window"),
    (_graph(FD.padding_desc(_x(X), (0, 1, 1, 1), (0, 0, 1, 1)),
            FD.convolution_desc(_x((1, 3, 8, 8)), np.ones((2, 3, 3, 3), np.float32))), 1,
     "the producer pads the spatial axes only"),
    (_graph(FD.padding_desc(_x(X), (0, 0, 1, 1), (0, 0, 1, 1), P.CONSTANT, -0.0),
            _conv_on((1, 2, 8, 8))), 1, "the producer pads with +0"),
    (_graph(REFLECT, _conv_on((1, 2, 8, 8))), 1, "the producer pads with +0"),
    (_graph(FD.tile_desc(_x(X), (1, 1, 1, 1)), _conv_on(X)), 1,
     "the producer pads the spatial axes only"),
])
def test_absorb_preconditions_one_by_one(graph, k, why):
    assert _refusal(ABSORB, graph, k) == why


def test_absorb_refuses_behind_a_fold_and_takes_the_padding_behind_it_otherwise():
    """zero -> reflect -> conv: the fold applies first; the zero padding behind it is then
    refused (the reflection is of the zero-padded tensor); reflect -> zero -> conv: absorb."""
    z = FD.padding_desc(_x(X), (0, 0, 1, 1), (0, 0, 1, 1))
    r = FD.padding_desc(_x((1, 2, 8, 8)), (0, 0, 1, 1), (0, 0, 1, 1), P.REFLECTION)
    g = _graph(z, r, _conv_on((1, 2, 10, 10)))
    work = rules.Work(g, "cpu")
    FOLD.apply(work, 2)
    assert work.nodes[2].options == (("input_padding", "REFLECTION"),)
    assert ABSORB.refusal(work, 2) == "the window reads through no folded padding"
    steps = plan(g, device="cpu")
    assert len(steps) == 2 and steps[1].options == (("input_padding", "REFLECTION"),)


def test_absorb_needs_a_window_whose_padding_reads_zeros(monkeypatch):
    """A window whose padding is not a zero (a max pooling's) takes no zero padding in: the
    padding's zeros would become values it never reads."""
    import dataclasses

    conv = _conv_on((1, 2, 8, 8))
    real = type(conv).window
    monkeypatch.setattr(type(conv), "window", lambda self: dataclasses.replace(
        real(self), padding_reads_zero=False))
    assert _refusal(ABSORB, _graph(ZERO, conv), 1) == "the window's padding reads zeros"


@pytest.mark.parametrize("graph, k, device, why", [
    (_graph(REFLECT, _conv_on((1, 2, 8, 8))), 1, "cpu", None),
    (_graph(REFLECT, _conv_on((1, 2, 8, 8))), 1, "cuda", None),
    (_graph(REFLECT, _conv_on((1, 2, 8, 8))), 1, "numpy",
     "the device's kernel reads through the mode"),
    (_graph(REFLECT, FD.slice1_desc(_x((1, 2, 8, 8)), (0, 0, 0, 0), (1, 2, 8, 8))), 1, "cpu",
     "the node has a window"),
    (_graph(ZERO, _conv_on((1, 2, 8, 8))), 1, "cpu",
     "the producer pads through a mode (not a constant)"),
    (_graph(REFLECT, _conv_on((1, 2, 8, 8), pads=1)), 1, "cpu",
     "the window has no padding of its own"),
    (_graph(FD.padding_desc(_x(X), (0, 1, 1, 1), (0, 0, 1, 1), P.EDGE),
            FD.convolution_desc(_x((1, 3, 8, 8)), np.ones((2, 3, 3, 3), np.float32))), 1,
     "cpu", "the producer pads the spatial axes only"),
])
def test_fold_preconditions_one_by_one(graph, k, device, why):
    assert _refusal(FOLD, graph, k, device) == why


_CONV = _conv_on(X, pads=1)  # (1, 2, 6, 6) -> (1, 2, 6, 6)


def _crop(offsets=(0, 0, 0, 0), sizes=(1, 2, 6, 6), strides=(1, 1, 2, 2)):
    return FD.slice1_desc(_x((1, 2, 6, 6)), offsets, sizes, strides)


@pytest.mark.parametrize("graph, k, why", [
    (_graph(_CONV, _crop()), 1, None),
    (_graph(_CONV, _crop((0, 0, 1, 1), (1, 2, 5, 5))), 1, None),  # offset 1: start padding 0
    (_graph(_CONV, _crop((0, 0, 2, 2), (1, 2, 4, 4))), 1,  # would start inside the input
     "the rewritten operator is valid"),
    (_graph(_CONV, _crop(strides=(1, 1, 1, -1))), 1, "the rewritten operator is valid"),
    (_graph(_CONV, _crop((0, 1, 0, 0), (1, 1, 6, 6))), 1,  # a channel slice
     "the rewritten operator is valid"),
    (_graph(_CONV, FD.tile_desc(_x((1, 2, 6, 6)), (1, 1, 1, 2))), 1,
     "the node is a slice (an affine gather)"),
    (_graph(REFLECT, FD.slice1_desc(_x((1, 2, 8, 8)), (0, 0, 0, 0), (1, 2, 8, 8), (1, 1, 2, 2))),
     1, "the producer has a window"),
    (_graph(_CONV, _crop(), outputs=[0, 1]), 1, "the producer is no graph output"),
    (_graph(_CONV, _crop(), extra_readers=[(FD.tile_desc(_x((1, 2, 6, 6)), (1, 1, 1, 1)), 0)]),
     1, "the producer is read by this node alone"),
])
def test_crop_preconditions_one_by_one(graph, k, why):
    assert _refusal(CROP, graph, k) == why


def test_a_crop_gives_each_kept_output_the_window_it_had():
    """conv (padding 1) -> every other row and column from 1: the convolution's strides
    double and its start padding becomes 0; equal to slicing the whole result."""
    g = _graph(_CONV, _crop((0, 0, 1, 1), (1, 2, 5, 5)))
    steps = plan(g, device="cpu")
    assert len(steps) == 1 and steps[0].op.strides == (2, 2)
    assert steps[0].op.start_padding == (0, 0)
    x = np.random.default_rng(0).standard_normal(X).astype(np.float32)
    whole = dml.convolution(x, W, start_padding=1, end_padding=1, device="numpy")
    assert_close(dml.compile_graph(g, "cpu")(x, W), whole[:, :, 1::2, 1::2], np.float32)


TILE = FD.tile_desc(_x(X), (1, 1, 1, 2))
SLICE = FD.slice1_desc(_x((1, 2, 6, 12)), (0, 0, 0, 0), (1, 2, 6, 12), (1, 1, 1, 2))


@pytest.mark.parametrize("graph, k, why", [
    (_graph(TILE, SLICE), 1, None),
    (_graph(TILE, SLICE, outputs=[0, 1]), 1, "the producer is no graph output"),
    (_graph(TILE, SLICE, extra_readers=[(FD.tile_desc(_x((1, 2, 6, 12)), (1, 1, 1, 1)), 0)]),
     1, "the producer is read by this node alone"),
    (_graph(_CONV, FD.tile_desc(_x((1, 2, 6, 6)), (1, 1, 1, 1))), 1,
     "the producer moves data"),
    (_graph(ZERO, _conv_on((1, 2, 8, 8))), 1, "the node moves data"),
])
def test_chain_preconditions_one_by_one(graph, k, why):
    assert _refusal(CHAIN, graph, k) == why


RELU_ON = FD.activation_desc(_x((1, 2, 6, 6)), "relu")


@pytest.mark.parametrize("graph, k, why", [
    (_graph(_CONV, RELU_ON), 1, None),
    (_graph(_CONV, FD.tile_desc(_x((1, 2, 6, 6)), (1, 1, 1, 1))), 1,
     "the node is an activation of its own"),
    (_graph(FD.convolution_desc(_x(X), W, start_padding=1, end_padding=1,
                                fused_activation=dml.ActivationSigmoidOperatorDesc()), RELU_ON),
     1, "the producer has an empty fused-activation slot"),
    (_graph(FD.max_pooling_desc(_x(X), (1, 1)), RELU_ON), 1,
     "the producer has an empty fused-activation slot"),
    (_graph(_CONV, RELU_ON, outputs=[0, 1]), 1, "the producer is no graph output"),
    (_graph(_CONV, RELU_ON, extra_readers=[(FD.tile_desc(_x((1, 2, 6, 6)), (1, 1, 1, 1)), 0)]),
     1, "the producer is read by this node alone"),
])
def test_fuse_preconditions_one_by_one(graph, k, why):
    assert _refusal(FUSE, graph, k) == why


def test_fuse_needs_a_producer_computing_in_floating_point(monkeypatch):
    """An integer addition then a RELU of its own (DirectML's RELU takes INT32): the addition
    has an empty slot, but a fused activation computes in floating point, so the RELU stays a
    step of its own; without the precondition the plan cannot be made."""
    a = np.array([[-3, 5, 2**31 - 1]], np.int32)
    add = FD.element_wise_add_desc(a, a)
    relu = FD.activation_desc(a, "relu")
    g = dml.GraphDesc(2, 1, (N(add), N(relu)), (IN(0, 0, 0), IN(1, 0, 1)), (OUT(1, 0, 0),),
                      (MID(0, 0, 1, 0),))
    assert _refusal(FUSE, g, 1) == "the producer computes in floating point"
    b = np.array([[4, -9, 1]], np.int32)
    for device in ("numpy", "cpu"):
        got = dml.compile_graph(g, device)(a, b)
        np.testing.assert_array_equal(got, np.maximum(a + b, 0))  # (wraps: 2**31 - 1 + 1 < 0)
    monkeypatch.setattr(FUSE, "preconditions", tuple(
        p for p in FUSE.preconditions if p[0] != "the producer computes in floating point"))
    with pytest.raises(dml.ValidationError, match="a fused activation computes in floating"):
        plan(g, device="cpu")


def _sum(shape=X, act=None):
    return FD.element_wise_add_desc(_x(shape), _x(shape), act)


def _residual(producer, add=None, first=True, outputs=None, extra_readers=()):
    """producer -> a sum of its output and a graph input (the producer's output its input 0
    where ``first``, else its input 1), the sum the graph's output unless ``outputs``;
    ``extra_readers``: (op, node) pairs reading node 0 or 1 as well, graph outputs."""
    add = add or _sum(producer.output.sizes)
    nodes = [N(producer, "n0"), N(add, "n1")] + [N(r, f"r{i}") for i, (r, _) in
                                                  enumerate(extra_readers)]
    ins = [IN(0, 0, 0)] + [IN(1 + i, 0, i + 1) for i in range(len(producer.bound_inputs()) - 1)]
    g_in = len(ins)
    ins.append(IN(g_in, 1, 1 if first else 0))
    mids = [MID(0, 0, 1, 0 if first else 1)] + [MID(k, 0, 2 + i, 0) for i, (_, k) in
                                                enumerate(extra_readers)]
    outs = list(outputs if outputs is not None else [1]) + [2 + i for i in
                                                          range(len(extra_readers))]
    return dml.GraphDesc(g_in + 1, len(outs), tuple(nodes), tuple(ins),
                         tuple(OUT(k, 0, g) for g, k in enumerate(outs)), tuple(mids))


_CONV_RELU = FD.convolution_desc(_x(X), W, start_padding=1, end_padding=1,
                                 fused_activation=dml.ActivationReluOperatorDesc())


@pytest.mark.parametrize("graph, why", [
    (_residual(_CONV), None),
    (_residual(_CONV, first=False), None),  # the convolution's output as the sum's input 1
    (_residual(_CONV, _sum(act=dml.ActivationReluOperatorDesc())), None),
    (_residual(_CONV, FD.element_wise_multiply_desc(_x(X), _x(X))),
     "the node is a sum of two tensors alike"),
    # a broadcast addend (a stride of 0): no sum of two tensors alike
    (_residual(_CONV, dml.ElementWiseAdd1OperatorDesc(
        dml.TensorDesc(F32, X), dml.TensorDesc(F32, X, (0, 0, 0, 1)), dml.TensorDesc(F32, X))),
     "the node is a sum of two tensors alike"),
    (_residual(FD.max_pooling_desc(_x(X), (1, 1))), "the producer takes an addend"),
    (_residual(_CONV_RELU), "the producer has an empty fused-activation slot"),
    (_residual(_CONV, outputs=[0, 1]), "the producer is no graph output"),
    (_residual(_CONV, extra_readers=[(FD.tile_desc(_x(X), (1, 1, 1, 1)), 0)]),
     "the producer is read by this node alone"),
])
def test_residual_preconditions_one_by_one(graph, why):
    assert _refusal(RESIDUAL, graph, 1) == why


def test_residual_needs_a_device_that_runs_an_operator_with_an_addend(monkeypatch):
    """CUDA has no kernel for a convolution with an addend: the pair stays two steps there;
    without the precondition the plan holds a step no CUDA kernel runs (its compile refuses
    it, before anything runs)."""
    from dml_numba.ops.fused_add import FusedAddDesc

    g = _residual(_CONV)
    why = "the device runs an operator with an addend"
    assert _refusal(RESIDUAL, g, 1, device="cuda") == why
    assert [type(s.op).__name__ for s in plan(g, device="cuda")] == [
        "ConvolutionOperatorDesc", "ElementWiseAdd1OperatorDesc"]
    monkeypatch.setattr(RESIDUAL, "preconditions",
                        tuple(p for p in RESIDUAL.preconditions if p[0] != why))
    (step,) = plan(g, device="cuda")
    assert isinstance(step.op, FusedAddDesc)
    with pytest.raises(dml.ValidationError, match="FusedAddDesc is invalid on device 'cuda'"):
        dml.compile_operator(step.op, "cuda")


def test_residual_needs_the_producer_s_output_with_its_sizes(monkeypatch):
    """A sum reading the convolution's output through a view (other sizes, the same elements)
    stays a step of its own; without the precondition the rewritten convolution would write
    the sum's sizes, which no convolution of its input has (the plan cannot be made)."""
    flat = (1, 2, 36)
    g = dml.GraphDesc(3, 1, (N(_CONV, "conv"), N(_sum(flat), "add")),
                      (IN(0, 0, 0), IN(1, 0, 1), IN(2, 1, 1)), (OUT(1, 0, 0),),
                      (MID(0, 0, 1, 0),))
    why = "the node reads the producer's output with its sizes (not through a view)"
    assert _refusal(RESIDUAL, g, 1) == why
    x = np.random.default_rng(0).standard_normal(X).astype(np.float32)
    r = np.random.default_rng(1).standard_normal(flat).astype(np.float32)
    ref = dml.convolution(x, W, start_padding=1, end_padding=1, device="numpy").reshape(flat) + r
    assert_close(dml.compile_graph(g, "cpu")(x, W, r), ref, np.float32)
    monkeypatch.setattr(RESIDUAL, "preconditions",
                        tuple(p for p in RESIDUAL.preconditions if p[0] != why))
    with pytest.raises(dml.ValidationError, match="output_tensor"):
        plan(g, device="cpu")


@pytest.mark.parametrize("first", [True, False], ids=["conv-first", "conv-second"])
def test_a_residual_is_one_step_bit_for_bit_the_two_nodes_on_cpu(first):
    """conv -> (+ r) -> relu: one step, the convolution taking the addend and the ReLU (fused
    into the sum first), bit for bit the two nodes' kernels one by one on "cpu" (the sum of
    two float32 values is the same either way round) and within tolerance of "numpy"."""
    from dml_numba.ops.fused_add import FusedAddDesc

    g = _residual(_CONV, _sum(act=dml.ActivationReluOperatorDesc()), first=first)
    (step,) = plan(g, device="cpu")
    assert isinstance(step.op, FusedAddDesc) and step.nodes == (0, 1)
    assert step.op.operator.fused_activation == dml.ActivationReluOperatorDesc()
    assert step.inputs == (("input", 0), ("input", 1), ("input", 2))
    assert dml.compile_graph(g, "cpu").plan == (
        "step 0: FusedAddDesc of convolution + addend -> ActivationReluOperatorDesc "
        "[nodes[0] ('n0'), nodes[1] ('n1')]: input 0, input 1, input 2 -> output 0")
    rng = np.random.default_rng(0)
    x, r = rng.standard_normal(X).astype(np.float32), rng.standard_normal(X).astype(np.float32)
    got = dml.compile_graph(g, "cpu")(x, W, r)
    np.testing.assert_array_equal(got, dml.compile_graph(g, "cpu", fuse=False)(x, W, r))
    assert_close(got, dml.compile_graph(g, "numpy")(x, W, r), np.float32)


# -- the pair rule -------------------------------------------------------------------------------

_PW = FD.convolution_desc(_x(X), np.ones((8, 2, 1, 1), np.float32), fused_activation=CLIP6)
_MID = (1, 8, 6, 6)


def _dw(strides=(2, 2), pads=1, groups=8, shape=_MID):
    return FD.convolution_desc(_x(shape), np.ones((8, 8 // groups, 3, 3), np.float32),
                               strides=strides, start_padding=pads, end_padding=pads,
                               group_count=groups, fused_activation=CLIP6)


@pytest.mark.parametrize("graph, k, why, device", [
    (_graph(_PW, _dw()), 1, None, "cpu"),
    (_graph(_PW, _dw(groups=1)), 1, "the node is a depthwise convolution", "cpu"),
    (_graph(FD.convolution_desc(_x(X), np.ones((8, 2, 3, 3), np.float32), start_padding=1,
                                end_padding=1), _dw()), 1,
     "the producer is a pointwise convolution", "cpu"),
    (_graph(FD.convolution_desc(_x(X), np.ones((8, 2, 1, 1), np.float32), strides=2),
            _dw(shape=(1, 8, 3, 3))), 1, "the producer is a pointwise convolution", "cpu"),
    (_graph(_PW, _dw(), outputs=[0, 1]), 1, "the producer is no graph output", "cpu"),
    (_graph(_PW, _dw(), extra_readers=((FD.activation_desc(_x(_MID),
                                                           dml.ActivationReluOperatorDesc()),
                                        0),)), 1,
     "the producer is read by this node alone", "cpu"),
    # unit strides: the CPU's kernel would run the two one by one; "numpy" runs no pair as one
    (_graph(_PW, _dw(strides=(1, 1))), 1, "the device computes the pair as one kernel", "cpu"),
    (_graph(_PW, _dw()), 1, "the device computes the pair as one kernel", "numpy"),
    (_graph(_PW, _dw()), 1, "the device computes the pair as one kernel", "cuda"),
])
def test_pair_preconditions_one_by_one(graph, k, why, device):
    assert _refusal(PAIR, graph, k, device=device) == why


def test_pair_refuses_a_depthwise_window_reading_through_a_folded_padding():
    """pointwise -> REFLECTION padding -> depthwise without padding of its own: the fold makes
    the depthwise window read the pointwise result through the mode; the pair's kernel would
    read zeros there, so the two stay apart (and the plan computes the reflection)."""
    g = _graph(_PW, FD.padding_desc(_x(_MID), (0, 0, 1, 1), (0, 0, 1, 1), P.REFLECTION),
               _dw(pads=0, shape=(1, 8, 8, 8)))
    work = rules.Work(g, "cpu")
    assert FOLD.refusal(work, 2) is None
    FOLD.apply(work, 2)
    assert PAIR.refusal(work, 2) == "the node reads through no folded padding"
    steps = plan(g, device="cpu")
    assert [type(s.op).__name__ for s in steps] == ["ConvolutionOperatorDesc"] * 2
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(np.float32) for s in (X, (8, 2, 1, 1), (8, 1, 3, 3))]
    assert_close(dml.compile_graph(g, "cpu")(*args), dml.compile_graph(g, "numpy")(*args),
                 np.float32)


def test_pair_needs_a_device_that_computes_it_as_one_kernel(monkeypatch):
    """CUDA has no kernel for the pair: it stays two steps there; without the precondition the
    plan holds a step no CUDA kernel runs (its compile refuses it, before anything runs)."""
    g = _graph(_PW, _dw())
    why = "the device computes the pair as one kernel"
    assert [type(s.op).__name__ for s in plan(g, device="cuda")] == [
        "ConvolutionOperatorDesc"] * 2
    monkeypatch.setattr(PAIR, "preconditions",
                        tuple(p for p in PAIR.preconditions if p[0] != why))
    (step,) = plan(g, device="cuda")
    with pytest.raises(dml.ValidationError,
                       match="PointwiseDepthwiseDesc is invalid on device 'cuda'"):
        dml.compile_operator(step.op, "cuda")


def test_a_pair_is_one_step_on_cpu():
    """pointwise -> depthwise at stride 2: one step reading the pointwise input and filter,
    then the depthwise filter (every graph input in binding order), the one kernel on "cpu",
    within tolerance of the nodes one by one and of "numpy"."""
    from dml_numba.cpu.pointwise_depthwise import PointwiseDepthwiseKernel

    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((8, 2, 1, 1)).astype(np.float32)
    w2 = rng.standard_normal((8, 1, 3, 3)).astype(np.float32)
    g = _graph(_PW, _dw())
    (step,) = plan(g, device="cpu")
    assert step.nodes == (0, 1) and step.inputs == (("input", 0), ("input", 1), ("input", 2))
    cg = dml.compile_graph(g, "cpu")
    assert cg.plan == ("step 0: PointwiseDepthwiseDesc of pointwise -> depthwise convolution "
                       "[nodes[0] ('n0'), nodes[1] ('n1')]: input 0, input 1, input 2 -> "
                       "output 0")
    assert isinstance(cg.ops[0].kernel, PointwiseDepthwiseKernel)
    x = rng.standard_normal(X).astype(np.float32)
    got = cg(x, w1, w2)
    assert_close(got, dml.compile_graph(g, "cpu", fuse=False)(x, w1, w2), np.float32)
    assert_close(got, dml.compile_graph(g, "numpy")(x, w1, w2), np.float32)


def test_a_residual_s_addend_stays_alive_until_the_step_that_reads_it():
    """x -> a = conv1(x) -> b = conv2(a) -> b + a -> c = conv3(...) : the addend (a) is read by
    the fused step two steps after it was written; the arena keeps its bytes until then (no
    step's output placed over it), and the result equals the nodes one by one."""
    c1 = _CONV
    nodes = (N(c1, "c1"), N(c1, "c2"), N(_sum(), "add"), N(c1, "c3"))
    ins = (IN(0, 0, 0), IN(1, 0, 1), IN(1, 1, 1), IN(1, 3, 1))
    mids = (MID(0, 0, 1, 0), MID(1, 0, 2, 0), MID(0, 0, 2, 1), MID(2, 0, 3, 0))
    g = dml.GraphDesc(2, 1, nodes, ins, (OUT(3, 0, 0),), mids)
    steps = plan(g, device="cpu")
    assert [type(s.op).__name__ for s in steps] == [
        "ConvolutionOperatorDesc", "FusedAddDesc", "ConvolutionOperatorDesc"]
    assert steps[1].inputs[-1] == ("buffer", 0)
    x = np.random.default_rng(0).standard_normal(X).astype(np.float32)
    for _ in range(2):  # (the second call in the same arena)
        np.testing.assert_array_equal(dml.compile_graph(g, "cpu")(x, W),
                                      dml.compile_graph(g, "cpu", fuse=False)(x, W))


def test_a_fused_activation_is_one_step_and_right_on_every_device():
    """conv -> relu -> sigmoid: one step, the convolution with the relu fused (the sigmoid
    then stays: the slot is taken), equal to the nodes one by one."""
    g = _graph(_CONV, RELU_ON, FD.activation_desc(_x((1, 2, 6, 6)), "sigmoid"))
    steps = plan(g, device="cpu")
    assert len(steps) == 2 and steps[0].op.fused_activation == dml.ActivationReluOperatorDesc()
    assert steps[0].nodes == (0, 1) and steps[1].nodes == (2,)
    x = np.random.default_rng(0).standard_normal(X).astype(np.float32)
    ref = 1 / (1 + np.exp(-np.maximum(dml.convolution(x, W, start_padding=1, end_padding=1,
                                                      device="numpy"), 0)))
    for device in ("numpy", "cpu"):
        assert_close(dml.compile_graph(g, device)(x, W), ref, np.float32)


def test_a_deep_chain_plans_and_compiles_in_one_step():
    """10,000 data-movement nodes: planned in time linear in the nodes (reader lists kept up
    to date, no scan per node) and one gather step, whose kernel reads tables; equal to the
    nodes one by one."""
    shape = (3, 4)
    p = FD.padding_desc(_x(shape), (1, 0), (0, 1), P.REFLECTION)
    s = FD.slice1_desc(_x((4, 5)), (1, 0), (3, 4), (1, 1))
    ops = [p, s] * 5000
    nodes = tuple(N(op) for op in ops)
    g = dml.GraphDesc(1, 1, nodes, (IN(0, 0, 0),), (OUT(len(ops) - 1, 0, 0),),
                      tuple(MID(k, 0, k + 1, 0) for k in range(len(ops) - 1)))
    cg = dml.compile_graph(g, "cpu")
    assert len(cg.steps) == 1 and "A0 = np.array(" in cg.source
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    np.testing.assert_array_equal(cg(x), dml.compile_graph(g, "numpy")(x))


def test_the_graph_names_no_operator_class_and_imports_no_backend():
    """``dml_numba/graph`` reads operators through their traits and the registry: no backend
    module imported, no operator module but the traits' (``ops._base``) and the gather chain
    (the chain rule's own product), the operator with an addend (the residual rule's) and the
    pointwise-depthwise pair (the pair rule's), no descriptor class named but those three,
    ``GatherChainDesc``, ``FusedAddDesc`` and ``PointwiseDepthwiseDesc``."""
    import ast
    from pathlib import Path

    from dml_numba.ops._base import DESCRIPTOR_TYPES

    classes = {t.__name__ for t in DESCRIPTOR_TYPES} - {"GatherChainDesc", "FusedAddDesc",
                                                        "PointwiseDepthwiseDesc"}
    for path in sorted((Path(dml.__file__).parent / "graph").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                parts = (node.module or "").split(".")
                assert parts[0] not in ("cpu", "cuda", "vectorized"), (path.name, node.module)
                if parts[0] == "ops":
                    assert parts[1:] in (["_base"], ["gather_chain"], ["fused_add"],
                                         ["pointwise_depthwise"]), (path.name, node.module)
            names = {node.id} if isinstance(node, ast.Name) else {node.attr} if isinstance(
                node, ast.Attribute) else {a.name for a in node.names} if isinstance(
                node, ast.ImportFrom) else set()
            assert not names & classes, (path.name, names & classes)
