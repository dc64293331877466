"""Every parameter of every function of the functional layer (and of ``dml_numba.dask``), in
every form a caller may give it: two calls that differ only in that parameter's value give two
different results, each equal to an independent oracle. The memo that skips building
descriptors must key parameters by value; only tensor inputs are keyed by shape and dtype.

Forms: a tuple, a list, a 1-D NumPy array and NumPy integer elements for per-axis parameters
(and a 0-d array or a NumPy scalar where one value stands for every axis); a Python scalar, a
NumPy scalar and a 0-d array for scalar parameters."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import dml_numba as dml
from tests.helpers import assert_close, assert_exact, brute_conv_backward, brute_conv_forward

RNG = np.random.default_rng(7)
X4 = RNG.uniform(-2, 2, (2, 3, 5, 6)).astype(np.float32)
W = RNG.uniform(-1, 1, (4, 3, 2, 2)).astype(np.float32)
B = RNG.uniform(-1, 1, 4).astype(np.float32)
A1 = np.arange(10, dtype=np.int32)


def seq_forms(values):
    """A per-axis parameter as a tuple, a list, an int64 array, an int32 array, and a tuple
    of NumPy integers."""
    return {"tuple": tuple(values), "list": list(values), "ndarray": np.array(values),
            "ndarray-int32": np.array(values, np.int32),
            "numpy-ints": tuple(np.int64(v) for v in values)}


def axis_scalar_forms(value):
    """One value standing for every spatial axis: an int, a NumPy integer, a 0-d array."""
    return {"int": int(value), "numpy-int": np.int16(value), "0-d": np.array(value)}


def scalar_forms(value, np_type):
    return {"python": value, "numpy": np_type(value), "0-d": np.array(value, np_type)}


# -- independent oracles ---------------------------------------------------------------------

def slice_oracle(x, offsets, sizes, strides):
    idx = []
    for o, n, s in zip(offsets, sizes, strides):
        if s > 0:
            idx.append(slice(o, o + n, s))
        else:  # the window read backwards from its last element
            idx.append(slice(o + n - 1, o - 1 if o > 0 else None, s))
    return x[tuple(idx)]


def pool_oracle(x, window, strides, start, end, dilations, p):
    nd = x.ndim - 2
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + list(zip(start, end)))
    out = [(xp.shape[2 + i] - ((window[i] - 1) * dilations[i] + 1)) // strides[i] + 1
           for i in range(nd)]
    y = np.zeros(x.shape[:2] + tuple(out))
    for o in itertools.product(*(range(n) for n in out)):
        acc = 0.0
        for t in itertools.product(*(range(k) for k in window)):
            at = tuple(oo * s + tt * d for oo, s, tt, d in zip(o, strides, t, dilations))
            acc = acc + np.abs(xp[(slice(None), slice(None)) + at]) ** p
        y[(slice(None), slice(None)) + o] = acc ** (1.0 / p)
    return y


# -- the table: function, parameter, two values in every form, the call and its oracle -------

def _ints(v, n):
    """A per-axis parameter in any form as a tuple of ``n`` ints (one value: every axis)."""
    return tuple(int(i) for i in np.broadcast_to(np.asarray(v), (n,)))


def _member(v, enum):
    """An enum parameter in any form (member, value, name, 0-d array) as the member."""
    v = np.asarray(v).item() if isinstance(v, np.ndarray) else v
    return enum[v.upper()] if isinstance(v, str) else enum(int(v))


CASES = []


def case(fn, param, forms, call):
    """``call(module, value) -> (result, oracle)`` for each form's two values."""
    for form, (a, b) in forms.items():
        CASES.append(pytest.param(fn, param, a, b, call, id=f"{fn}-{param}-{form}"))


def both(make, a, b):
    fa, fb = make(a), make(b)
    return {k: (fa[k], fb[k]) for k in fa}


def enum_forms(a, b):
    return {"member": (a, b), "value": (int(a), int(b)), "name": (a.name.lower(), b.name),
            "0-d": (np.array(int(a)), np.array(b.name))}


PAD = dict(start_padding=(0, 1, 1, 2), end_padding=(1, 0, 2, 1), mode="reflection", value=0.0)
NP_MODE = {dml.PaddingMode.REFLECTION: "reflect", dml.PaddingMode.SYMMETRIC: "symmetric",
           dml.PaddingMode.EDGE: "edge", dml.PaddingMode.WRAP: "wrap",
           dml.PaddingMode.CONSTANT: "constant"}


def _pad_call(mod, **kw):
    a = dict(PAD, **kw)
    y = mod.padding(X4, a["start_padding"], a["end_padding"], a["mode"], a["value"])
    width = list(zip(_ints(a["start_padding"], 4), _ints(a["end_padding"], 4)))
    mode = NP_MODE[_member(a["mode"], dml.PaddingMode)]
    extra = {"constant_values": float(np.asarray(a["value"]))} if mode == "constant" else {}
    return y, np.pad(X4, width, mode=mode, **extra)


for param in ("start_padding", "end_padding"):
    case("padding", param, both(seq_forms, (0, 1, 1, 2), (1, 0, 3, 0)),
         lambda mod, v, p=param: _pad_call(mod, **{p: v}))
    case("padding", param, both(axis_scalar_forms, 1, 2),
         lambda mod, v, p=param: _pad_call(mod, **{p: v}))
case("padding", "mode", enum_forms(dml.PaddingMode.REFLECTION, dml.PaddingMode.SYMMETRIC),
     lambda mod, v: _pad_call(mod, mode=v))
case("padding", "value", both(lambda v: scalar_forms(v, np.float32), 1.5, -3.0),
     lambda mod, v: _pad_call(mod, mode="constant", value=v))


def _tile_call(mod, repeats):
    return mod.tile(X4, repeats), np.tile(X4, _ints(repeats, 4))


case("tile", "repeats", both(seq_forms, (1, 2, 1, 2), (2, 1, 3, 1)), _tile_call)


def _slice_call(mod, offsets=(1,), sizes=(7,), strides=(2,)):
    return (mod.slice1(A1, offsets, sizes, strides),
            slice_oracle(A1, _ints(offsets, 1), _ints(sizes, 1), _ints(strides, 1)))


case("slice1", "offsets", both(seq_forms, (0,), (3,)), lambda mod, v: _slice_call(mod, offsets=v))
case("slice1", "sizes", both(seq_forms, (5,), (7,)), lambda mod, v: _slice_call(mod, sizes=v))
case("slice1", "strides", both(seq_forms, (2,), (-3,)), lambda mod, v: _slice_call(mod, strides=v))

POOL = dict(window_size=(2, 3), strides=(1, 2), start_padding=(0, 1), end_padding=(1, 0),
            dilations=(1, 1), p=2)
POOL_AXES = ("window_size", "strides", "start_padding", "end_padding", "dilations")


def _pool_call(mod, **kw):
    a = dict(POOL, **kw)
    y = mod.lp_pooling(X4, *(a[k] for k in POOL_AXES), a["p"])
    return y, pool_oracle(X4, *(_ints(a[k], 2) for k in POOL_AXES), float(np.asarray(a["p"])))


def window_cases(fn, call, paddings=((0, 1), (1, 0))):
    """Each window parameter of the pooling ``fn`` in every per-axis form and as one value for
    every axis (``paddings``: the two start paddings; the end paddings are them reversed)."""
    values = {"window_size": ((2, 3), (3, 2)), "strides": ((1, 2), (2, 1)),
              "start_padding": paddings, "end_padding": tuple(p[::-1] for p in paddings),
              "dilations": ((1, 1), (2, 1))}
    for param, (va, vb) in values.items():
        case(fn, param, both(seq_forms, va, vb), lambda mod, v, p=param: call(mod, **{p: v}))
        case(fn, param, both(axis_scalar_forms, max(va), max(vb) + 1),
             lambda mod, v, p=param: call(mod, **{p: v}))


window_cases("lp_pooling", _pool_call, paddings=((0, 1), (2, 0)))
case("lp_pooling", "p", both(lambda v: scalar_forms(v, np.int32), 1, 3),
     lambda mod, v: _pool_call(mod, p=v))

def max_oracle(x, window, strides, start, end, dilations):
    """Each window's largest tap: the input padded with -inf (the padding never wins)."""
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + list(zip(start, end)),
                constant_values=-np.inf)
    out = [(xp.shape[2 + i] - ((window[i] - 1) * dilations[i] + 1)) // strides[i] + 1
           for i in range(x.ndim - 2)]
    y = np.full(x.shape[:2] + tuple(out), -np.inf)
    for t in itertools.product(*(range(k) for k in window)):
        y = np.maximum(y, xp[(slice(None), slice(None)) + tuple(
            slice(tt * d, tt * d + (o - 1) * s + 1, s) for tt, d, o, s in
            zip(t, dilations, out, strides))])
    return y


def _max_call(mod, return_indices=False, **kw):
    """Max pooling; with ``return_indices`` (any form of True) its indices, against the first
    maximum's flat index found by a Python loop."""
    from tests.ops.test_max_pooling import brute_indices

    a = dict(POOL, **kw)
    axes = [_ints(a[k], 2) for k in POOL_AXES]
    y = mod.max_pooling(X4, *(a[k] for k in POOL_AXES), return_indices)
    oracle = max_oracle(X4, *axes)
    if not np.asarray(return_indices).item():
        return y, oracle
    window, strides, start, _, dilations = axes
    at = brute_indices(X4, window, strides, start, dilations, oracle.shape[2:])
    return y[1], at.astype(np.uint64)


window_cases("max_pooling", _max_call)
case("max_pooling", "return_indices", {"python": (False, True), "numpy": (
    np.bool_(False), np.bool_(True)), "0-d": (np.array(False), np.array(True))},
    lambda mod, v: _max_call(mod, return_indices=v))

def average_oracle(x, window, strides, start, end, dilations, include_padding):
    """Each window's sum over its taps inside the input, divided by those taps' count (with
    ``include_padding``, the taps inside the padded input)."""
    pads = [(0, 0), (0, 0)] + list(zip(start, end))
    xp = np.pad(x.astype(np.float64), pads)
    inside = np.pad(np.ones(x.shape[2:]), pads[2:])
    out = [(xp.shape[2 + i] - ((window[i] - 1) * dilations[i] + 1)) // strides[i] + 1
           for i in range(x.ndim - 2)]
    total, count = np.zeros(x.shape[:2] + tuple(out)), np.zeros(tuple(out))
    for t in itertools.product(*(range(k) for k in window)):
        at = tuple(slice(tt * d, tt * d + (o - 1) * s + 1, s) for tt, d, o, s in
                   zip(t, dilations, out, strides))
        total += xp[(slice(None), slice(None)) + at]
        count += 1 if include_padding else inside[at]
    with np.errstate(invalid="ignore"):  # a window with nothing to count is NaN
        return total / count


def _average_call(mod, include_padding=False, **kw):
    a = dict(POOL, **kw)
    y = mod.average_pooling(X4, *(a[k] for k in POOL_AXES), include_padding)
    return y, average_oracle(X4, *(_ints(a[k], 2) for k in POOL_AXES),
                             bool(np.asarray(include_padding).item()))


window_cases("average_pooling", _average_call)
case("average_pooling", "include_padding", {
    "python": (False, True), "numpy": (np.bool_(False), np.bool_(True)),
    "0-d": (np.array(False), np.array(True))},
    lambda mod, v: _average_call(mod, start_padding=(1, 1), include_padding=v))

X8 = RNG.uniform(-2, 2, (2, 4, 5, 6)).astype(np.float32)
W8 = RNG.uniform(-1, 1, (4, 2, 2, 3)).astype(np.float32)  # forward groups 2; backward any
B8 = RNG.uniform(-1, 1, 4).astype(np.float32)
CONV = dict(strides=(1, 2), dilations=(1, 1), start_padding=(1, 0), end_padding=(0, 1),
            output_padding=(0, 0), group_count=2, mode="cross_correlation", direction="forward",
            fused_activation=None, bias=B8)
CONV_AXES = ("strides", "dilations", "start_padding", "end_padding")


def _conv_call(mod, **kw):
    """Forward with two groups, or transposed (the filter {C_in, C_out/G, k...} fits any group
    count dividing 4, so a group count alone changes the result)."""
    a = dict(CONV, **kw)
    g = int(np.asarray(a["group_count"]))
    flip = _member(a["mode"], dml.ConvolutionMode) == dml.ConvolutionMode.CONVOLUTION
    direction = _member(a["direction"], dml.ConvolutionDirection)
    backward = direction == dml.ConvolutionDirection.BACKWARD
    s, d, start, end = (_ints(a[k], 2) for k in CONV_AXES)
    op = _ints(a["output_padding"], 2)
    b = a["bias"]
    y = mod.convolution(X8, W8, b, *(a[k] for k in CONV_AXES), a["output_padding"],
                        a["group_count"], a["mode"], a["direction"], a["fused_activation"])
    if backward:
        out = [(n - 1) * ss + (k - 1) * dd + 1 - p - q + o for n, ss, k, dd, p, q, o in
               zip(X8.shape[2:], s, W8.shape[2:], d, start, end, op)]
        ref = brute_conv_backward(X8, W8, b, s, d, start, out, flip=flip, groups=g)
    else:
        out = [(n + p + q - ((k - 1) * dd + 1)) // ss + 1 for n, p, q, k, dd, ss in
               zip(X8.shape[2:], start, end, W8.shape[2:], d, s)]
        ref = brute_conv_forward(X8, W8, b, s, d, start, flip=flip, groups=g, out_spatial=out)
    act = a["fused_activation"]
    if act is not None:  # leaky ReLU
        ref = np.where(ref >= 0, ref, float(act.alpha) * ref)
    return y, ref


for param, (va, vb) in {"strides": ((1, 2), (2, 1)), "dilations": ((1, 1), (2, 1)),
                        "start_padding": ((1, 0), (0, 2)), "end_padding": ((0, 1), (2, 0))}.items():
    case("convolution", param, both(seq_forms, va, vb),
         lambda mod, v, p=param: _conv_call(mod, **{p: v}))
    case("convolution", param, both(axis_scalar_forms, max(va), max(vb) + 1),
         lambda mod, v, p=param: _conv_call(mod, **{p: v}))
case("convolution", "output_padding", both(seq_forms, (0, 1), (1, 0)),
     lambda mod, v: _conv_call(mod, output_padding=v, direction="backward", strides=(2, 2)))
case("convolution", "group_count", both(lambda v: scalar_forms(v, np.int32), 1, 2),
     lambda mod, v: _conv_call(mod, group_count=v, direction="backward", bias=None))
case("convolution", "mode", enum_forms(dml.ConvolutionMode.CROSS_CORRELATION,
                                       dml.ConvolutionMode.CONVOLUTION),
     lambda mod, v: _conv_call(mod, mode=v))
case("convolution", "direction", enum_forms(dml.ConvolutionDirection.FORWARD,
                                            dml.ConvolutionDirection.BACKWARD),
     lambda mod, v: _conv_call(mod, direction=v))
case(
    "convolution",
    "fused_activation",
    {
        "python": (
            dml.ActivationLeakyReluOperatorDesc(0.5),
            dml.ActivationLeakyReluOperatorDesc(0.25),
        ),
        "numpy": (
            dml.ActivationLeakyReluOperatorDesc(np.float32(0.5)),
            dml.ActivationLeakyReluOperatorDesc(np.float32(0.25)),
        ),
    },
    lambda mod, v: _conv_call(mod, fused_activation=v),
)


SQ = [RNG.uniform(-1, 1, (4, 4)).astype(np.float32) for _ in range(3)]  # A, B, C of a GEMM
GEMM = dict(trans_a=False, trans_b=False, alpha=1.0, beta=1.0)


def _gemm_call(mod, **kw):
    a = dict(GEMM, **kw)
    t = {k: bool(np.asarray(a[k]).item()) for k in ("trans_a", "trans_b")}
    y = mod.gemm(SQ[0], SQ[1], SQ[2], a["trans_a"], a["trans_b"], a["alpha"], a["beta"])
    A, B = (m.astype(np.float64) for m in SQ[:2])
    oracle = float(np.asarray(a["alpha"])) * ((A.T if t["trans_a"] else A) @
                                             (B.T if t["trans_b"] else B))
    return y, oracle + float(np.asarray(a["beta"])) * SQ[2].astype(np.float64)


for param in ("trans_a", "trans_b"):  # (forms named apart from the Dask cases' suffixes)
    case("gemm", param, {"bool": (False, True), "numpy-bool": (np.bool_(False), np.bool_(True)),
                         "0-d-bool": (np.array(False), np.array(True))},
         lambda mod, v, p=param: _gemm_call(mod, **{p: v}))
for param, (va, vb) in {"alpha": (1.5, -0.5), "beta": (0.5, 2.0)}.items():
    case("gemm", param, both(lambda v: scalar_forms(v, np.float32), va, vb),
         lambda mod, v, p=param: _gemm_call(mod, **{p: v}))


def _join_call(mod, axis):
    return mod.join([X4, X4], axis), np.concatenate([X4, X4], int(np.asarray(axis)))


case("join", "axis", {"int": (0, 1), "numpy-int": (np.int64(0), np.int32(1)),
                      "0-d-int": (np.array(0), np.array(1))}, _join_call)

BN = [RNG.uniform(0.5, 1.5, 3).astype(np.float32) for _ in range(4)]  # mean, var, scale, bias


def _bn_call(mod, epsilon):
    x = X4.astype(np.float64)
    mean, var, scale, bias = (p.astype(np.float64).reshape(1, 3, 1, 1) for p in BN)
    y = mod.batch_normalization(X4, *BN, epsilon)
    eps = float(np.asarray(epsilon))
    return y, scale * (x - mean) / np.sqrt(var + eps) + bias


case("batch_normalization", "epsilon", both(lambda v: scalar_forms(v, np.float32), 1e-3, 0.5),
     _bn_call)


def _add_call(mod, fused_activation):
    y = mod.element_wise_add(X4, X4[::-1].copy(), fused_activation)
    v = X4.astype(np.float64) + X4[::-1].astype(np.float64)
    relu = isinstance(fused_activation, dml.ActivationReluOperatorDesc)
    return y, np.maximum(v, 0) if relu else 1 / (1 + np.exp(-v))


case("element_wise_add", "fused_activation", {"python": (
    dml.ActivationReluOperatorDesc(), dml.ActivationSigmoidOperatorDesc())}, _add_call)


def _activation_call(mod, activation, parameters=None):
    y = mod.activation(X4, activation, parameters)
    v = X4.astype(np.float64)
    if isinstance(activation, dml.ActivationLeakyReluOperatorDesc) or activation == "leaky_relu":
        alpha = activation.alpha if parameters is None else float(np.asarray(parameters)[0])
        return y, np.where(v >= 0, v, alpha * v)
    return y, np.clip(v, *np.asarray(parameters, np.float64)[:2])  # clip by its name


case("activation", "activation", {"descriptor": (dml.ActivationLeakyReluOperatorDesc(0.1),
                                                 dml.ActivationLeakyReluOperatorDesc(0.3))},
     _activation_call)
case("activation", "parameters", {
    "list": ([0.1], [0.3]), "tuple": ((0.1,), (0.3,)), "ndarray": (np.array([0.1]),
                                                                  np.array([0.3])),
    "numpy": ((np.float32(0.1),), (np.float64(0.3),))},
    lambda mod, v: _activation_call(mod, "leaky_relu", v))
case("activation", "parameters", {"clip-list": ([-0.5, 0.5], [0.0, 1.0])},
     lambda mod, v: _activation_call(mod, "clip", v))


def _check(y, oracle):
    y = np.asarray(y)
    if y.dtype.kind == "f" and oracle.dtype == np.float64 and y.dtype != np.float64:
        assert_close(y, oracle, y.dtype)
    else:
        assert_exact(y, oracle.astype(y.dtype))


class _On:
    """A module's functions with ``device=`` given (the memo sits above the devices: the
    vectorised one keeps the many cases cheap; the cpu one runs the data-movement tuples)."""

    def __init__(self, mod, device):
        self.mod, self.device = mod, device

    def __getattr__(self, name):
        fn = getattr(self.mod, name)
        return lambda *args, **kw: fn(*args, device=self.device, **kw)


def _device(fn, form):
    return "cpu" if form == "tuple" and fn in ("padding", "tile", "slice1") else "numpy"


@pytest.mark.parametrize("fn,param,a,b,call", CASES)
def test_a_parameter_changed_in_value_changes_the_result(fn, param, a, b, call, request):
    """A, then B, then A again, through the in-memory functional layer: each result is its own
    oracle's (the memo never answers B with A's operator)."""
    form = request.node.callspec.id.split(f"{fn}-{param}-", 1)[1]
    mod = _On(dml, _device(fn, form))
    results = [call(mod, v) for v in (a, b, a)]
    for y, oracle in results:
        _check(y, oracle)
    first, second = np.asarray(results[0][0]), np.asarray(results[1][0])
    assert first.shape != second.shape or not np.array_equal(first, second), "A and B agree"


class _Lazy:
    """``dml_numba.dask`` with the functional layer's calling convention (results computed)."""

    def __getattr__(self, name):
        import dml_numba.dask as dmd

        fn = getattr(dmd, name)

        def call(x, *args, **kw):
            import dask
            import dask.array as da

            lazy = fn(da.from_array(x, chunks=tuple(max(1, n // 2) for n in x.shape)), *args,
                      device="numpy", **kw)  # (an array, or a pair: max pooling's indices)
            return dask.compute(lazy, scheduler="threads")[0]

        return call


@pytest.mark.parametrize("fn,param,a,b,call", [c for c in CASES if c.id.endswith(
    ("-tuple", "-ndarray", "-0-d", "-numpy"))])
def test_dask_parameters_changed_in_value_change_the_result(fn, param, a, b, call):
    pytest.importorskip("dask.array")
    for v in (a, b):
        y, oracle = call(_Lazy(), v)
        _check(y, oracle)


def test_dask_results_differing_only_in_a_parameter_computed_together():
    """Two lazy results of one input whose parameters differ only in value (as arrays): one
    ``dask.compute`` gives each its own answer (graph names differ)."""
    da = pytest.importorskip("dask.array")
    import dask

    import dml_numba.dask as dmd

    x = da.from_array(X4, chunks=(1, 3, 3, 3))
    ys = dask.compute(dmd.padding(x, np.array([0, 0, 1, 1]), np.array([0, 0, 1, 1]), "edge"),
                      dmd.padding(x, np.array([0, 0, 2, 2]), np.array([0, 0, 2, 2]), "edge"),
                      dmd.tile(x, np.array([1, 1, 1, 2])), dmd.tile(x, np.array([1, 1, 2, 1])))
    assert ys[0].shape == (2, 3, 7, 8) and ys[1].shape == (2, 3, 9, 10)
    np.testing.assert_array_equal(ys[1], np.pad(X4, [(0, 0), (0, 0), (2, 2), (2, 2)], "edge"))
    np.testing.assert_array_equal(ys[2], np.tile(X4, (1, 1, 1, 2)))
    np.testing.assert_array_equal(ys[3], np.tile(X4, (1, 1, 2, 1)))


def test_an_array_parameter_mutated_in_place_is_read_again():
    """The memo keys an array parameter by its values at the call, not by the object."""
    pads = np.array([0, 0, 1, 1])
    first = dml.padding(X4, pads, pads, "wrap")
    pads[2:] = 2
    second = dml.padding(X4, pads, pads, "wrap")
    assert first.shape == (2, 3, 7, 8) and second.shape == (2, 3, 9, 10)
    np.testing.assert_array_equal(second, np.pad(X4, [(0, 0), (0, 0), (2, 2), (2, 2)], "wrap"))


def test_unkeyable_parameters_run_without_the_memo():
    """An object the memo cannot key by value (hashed by identity, perhaps mutable) is not
    memoised: the call still runs, from its value."""

    class Repeats:
        def __init__(self, r):
            self.r = r

        def __iter__(self):
            return iter(self.r)

        def __len__(self):
            return len(self.r)

    r = Repeats([1, 1, 1, 2])
    np.testing.assert_array_equal(dml.tile(X4, r), np.tile(X4, (1, 1, 1, 2)))
    r.r = [1, 1, 2, 1]
    np.testing.assert_array_equal(dml.tile(X4, r), np.tile(X4, (1, 1, 2, 1)))
    # the device asked for is the one compiled for, memo or not: an unknown one is refused
    for repeats in (r, (1, 1, 2, 1)):
        with pytest.raises(dml.ValidationError, match="compile_operator.device: 'nope' is "):
            dml.tile(X4, repeats, device="nope")


@pytest.mark.parametrize("device", ["numpy", "cpu"])
def test_parameters_equal_in_value_but_not_in_type_never_share(device):
    """The memo keys plain parameters (integers, names, tuples of integers) as themselves and
    everything else by type and bits: a constant 0 and -0.0 are two operators (the padded
    cells' sign bit tells them apart), and so are an integer and a float constant 1 in a
    float16 padding of the same shape (same result, but two keys, each right)."""
    x = np.ones((2, 3), np.float32)
    results = [dml.padding(x, (1, 1), (1, 1), "constant", v, device=device)
               for v in (0, -0.0, 0, np.float32(-0.0), 0.0)]
    assert [bool(np.signbit(r[0, 0])) for r in results] == [False, True, False, True, False]
    for r in results:
        np.testing.assert_array_equal(np.abs(r), np.pad(x, 1))


def test_the_memo_in_front_of_the_cache_follows_it():
    """The functional layer's memo of recent calls is emptied with the cache (a call after
    ``cache.clear()`` builds its operator again), and it holds at most ``RECENT`` calls
    however many distinct calls are made; every call stays right."""
    from dml_numba import functional

    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    dml.tile(x, (1, 2), device="numpy")
    saved = dml.cache._table.copy()
    dml.cache.clear()
    try:
        misses = dml.cache.misses
        np.testing.assert_array_equal(dml.tile(x, (1, 2), device="numpy"), np.tile(x, (1, 2)))
        assert dml.cache.misses > misses  # built again, not answered from the memo
    finally:
        dml.cache._table.update(saved)
    for r in range(1, functional.RECENT + 10):
        np.testing.assert_array_equal(dml.tile(x, (r, 1), device="numpy"), np.tile(x, (r, 1)))
        assert len(functional._recent) <= functional.RECENT
    np.testing.assert_array_equal(dml.tile(x, (1, 2), device="numpy"), np.tile(x, (1, 2)))


# -- refusals name the function, the argument and the value as given ------------------------

F = dml.functional
X = np.zeros((1, 1, 4, 4), np.float32)
W1 = np.zeros((1, 1, 1, 1), np.float32)
NOT_AN_ARRAY = object()
DTYPE_WORDS = ("dtype object is invalid; expected a numeric array (one of float32, float16, "
               "float64, int8..int64, uint8..uint64)")
FORM_WORDS = ("expected numpy.pad's form: an integer, (before, after), or one (before, after) "
              "pair per axis")
BOTH_WORDS = "expected either pad_width or start_padding and end_padding, not both"

REFUSALS = {
    # every array argument of every function, given something that is not one
    "padding.x": (lambda: F.padding(NOT_AN_ARRAY, (1,), (1,)), f"padding.x: {DTYPE_WORDS}"),
    "lp_pooling.x": (lambda: F.lp_pooling(NOT_AN_ARRAY, (2, 2)), f"lp_pooling.x: {DTYPE_WORDS}"),
    "convolution.x": (lambda: F.convolution(NOT_AN_ARRAY, W1), f"convolution.x: {DTYPE_WORDS}"),
    "convolution.filter": (lambda: F.convolution(X, NOT_AN_ARRAY),
                           f"convolution.filter: {DTYPE_WORDS}"),
    "convolution.bias": (lambda: F.convolution(X, W1, NOT_AN_ARRAY),
                         f"convolution.bias: {DTYPE_WORDS}"),
    "tile.x": (lambda: F.tile(NOT_AN_ARRAY, (2,)), f"tile.x: {DTYPE_WORDS}"),
    "slice1.x": (lambda: F.slice1(NOT_AN_ARRAY, (0,), (1,)), f"slice1.x: {DTYPE_WORDS}"),
    # numpy.pad's pad_width: forms it does not take, and conflicts with start/end padding
    "pad_width-ragged": (lambda: F.padding(X, pad_width=((1, 2), (3,), (1, 1), (1, 1))),
                         f"padding.pad_width: ((1, 2), (3,), (1, 1), (1, 1)) is invalid; "
                         f"{FORM_WORDS}"),
    "pad_width-3d": (lambda: F.padding(X, pad_width=[[[1, 1]]]),
                     f"padding.pad_width: ([[1, 1]],) is invalid; {FORM_WORDS}"),
    "pad_width-float-before": (lambda: F.padding(X, pad_width=((0.5, 1),) + ((1, 1),) * 3),
                               "padding.pad_width: ((0.5, 1), (1, 1), (1, 1), (1, 1)) is invalid; "
                               f"{FORM_WORDS}"),
    "pad_width-float-after": (lambda: F.padding(X, pad_width=((1, 0.5),) + ((1, 1),) * 3),
                              "padding.pad_width: ((1, 0.5), (1, 1), (1, 1), (1, 1)) is invalid; "
                              f"{FORM_WORDS}"),
    "pad_width-triples": (lambda: F.padding(X, pad_width=((1, 1, 1),) * 4),
                          "padding.pad_width: ((1, 1, 1), (1, 1, 1), (1, 1, 1), (1, 1, 1)) is "
                          f"invalid; {FORM_WORDS}"),
    "pad_width-no-pairs": (lambda: F.padding(X, pad_width=np.zeros((0, 2), int)),
                           f"padding.pad_width: () is invalid; {FORM_WORDS}"),
    "pad_width-and-start": (lambda: F.padding(X, (1, 1, 1, 1), pad_width=((1, 1),) * 4),
                            f"padding.pad_width: ((1, 1), (1, 1), (1, 1), (1, 1)) is invalid; "
                            f"{BOTH_WORDS}"),
    "pad_width-and-end": (lambda: F.padding(X, end_padding=(1, 1, 1, 1), pad_width=1),
                          f"padding.pad_width: 1 is invalid; {BOTH_WORDS}"),
    "pad_width-floats-before": (lambda: F.padding(X, pad_width=((0.5, 1),) * 4),
                                "padding.pad_width: ((0.5, 1), (0.5, 1), (0.5, 1), (0.5, 1)) is "
                                f"invalid; {FORM_WORDS}"),
    "pad_width-floats-after": (lambda: F.padding(X, pad_width=((1, 0.5),) * 4),
                               "padding.pad_width: ((1, 0.5), (1, 0.5), (1, 0.5), (1, 0.5)) is "
                               f"invalid; {FORM_WORDS}"),
    "pairs-and-end": (lambda: F.padding(X, end_padding=(1, 1, 1, 1), pad_width=((1, 1),) * 4),
                      f"padding.pad_width: ((1, 1), (1, 1), (1, 1), (1, 1)) is invalid; "
                      f"{BOTH_WORDS}"),
    "tile-bool-repeats": (lambda: F.tile(np.zeros((2, 3), np.float32), (True,)),
                          "tile.repeats: (True,) is invalid; expected 2 entries (one per "
                          "dimension), got 1"),
    "slice1_desc-window": (lambda: F.slice1_desc(np.zeros((2, 3), np.float32), (0, 0), (5, 5)),
                           "slice1.input_window_sizes[0]: 5 is invalid; the window [0, 5) must "
                           "lie inside input dimension 0 of size 2"),
    "slice1_desc-sizes-not-a-sequence": (
        lambda: F.slice1_desc(np.zeros((6,), np.float32), (0,), 5),
        "slice1.input_window_sizes: 5 is invalid; expected a sequence of integers"),
    "end-only": (lambda: F.padding(X, end_padding=(1, 1, 1, 1)),
                 "padding.start_padding: None is invalid; expected the padding before each axis "
                 "and after it (start_padding and end_padding), or numpy.pad's pad_width"),
    # enums by name, NumPy's aliases offered where there are some, and by value
    "mode-name": (lambda: F.padding(X, 1, 1, mode="bogus"),
                  "padding.mode: 'bogus' is invalid; expected one of constant, edge, reflection, "
                  "symmetric, wrap, or NumPy's reflect (= reflection)"),
    "mode-value": (lambda: F.padding(X, 1, 1, mode=99),
                   "padding.mode: 99 is invalid; expected a PaddingMode (CONSTANT=0, EDGE=1, "
                   "REFLECTION=2, SYMMETRIC=3, WRAP=4)"),
    "convolution-mode-name": (lambda: F.convolution(X, W1, mode="bogus"),
                              "convolution.mode: 'bogus' is invalid; expected one of convolution, "
                              "cross_correlation"),
    # the batch axis named where the input lacks exactly that one; the rank rule otherwise
    "batch-axis": (lambda: F.lp_pooling(np.zeros((4, 8), np.float32), (2,)),
                   "lp_pooling.x.shape: (4, 8) is invalid; expected 3 dimensions (N, C, "
                   "spatial...) for this window_size: is the batch axis missing? x[None] adds it"),
    "rank": (lambda: F.lp_pooling(np.zeros((4, 4), np.float32), (2, 2)),
             "lp_pooling.input_tensor.sizes: (4, 4) is invalid; expected 3 to 5 dimensions"),
    "convolution-rank": (lambda: F.convolution(np.zeros((4, 4), np.float32), W1),
                         "convolution.input_tensor.sizes: (4, 4) is invalid; expected 3 to 5 "
                         "dimensions"),
    # the descriptor builders' own checks
    "lp_pooling_desc-window": (lambda: F.lp_pooling_desc(X, (5, 5)),
                               "lp_pooling.window_size[0]: 5 is invalid; the dilated window (5) "
                               "must fit the padded input (4 + 0 + 0)"),
    "padding_desc-range": (lambda: F.padding_desc(X, (0, 0, 2**40, 0), (0, 0, 0, 0)),
                           "padding.start_padding[2]: 1099511627776 is invalid; expected an "
                           "integer < 2**32 (4294967296), the range of DirectML's 32-bit fields"),
    "filter-not-exact": (lambda: F.convolution(np.zeros((1, 1, 4, 4), np.int32),
                                               np.full((1, 1, 1, 1), np.inf, np.float32)),
                         "convolution.filter.dtype: 'float32' is invalid; expected int32, the "
                         "data type of x, or values exact in it: cast one of them, e.g. "
                         "filter.astype(np.int32) or x.astype(np.float32)"),
}


@pytest.mark.parametrize("name", list(REFUSALS))
def test_refusals_name_the_function_the_argument_and_the_value(name):
    """Each refusal in full: the function (not the descriptor class), the argument (and the
    element), the value as given and what was expected; no NumPy warning on the way."""
    import warnings

    call, message = REFUSALS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(dml.ValidationError) as e:
            call()
    assert str(e.value) == message


def test_pad_width_forms_numpy_pad_takes_and_values_it_converts():
    """numpy.pad's pad_width as a one-element list and as a (rank, 2) array (not the plain
    tuple form), against numpy.pad; a float constant that is an integer pads an integer array
    with that integer; LP pooling's default p is 2 (a square root of squares)."""
    x = np.arange(6, dtype=np.int8).reshape(2, 3)
    np.testing.assert_array_equal(F.padding(x, pad_width=[1], device="numpy"), np.pad(x, [1]))
    pw = np.array([[1, 0], [0, 2]])
    np.testing.assert_array_equal(F.padding(x, pad_width=pw, mode="reflect", device="numpy"),
                                  np.pad(x, pw, mode="reflect"))
    np.testing.assert_array_equal(F.padding(x, (0, 1), (0, 1), value=3.0, device="numpy"),
                                  np.pad(x, [(0, 0), (1, 1)], constant_values=3))
    assert F.lp_pooling_desc(X, (2, 2)).p == 2
    y = RNG.uniform(-2, 2, (1, 1, 2, 2)).astype(np.float32)
    assert_close(F.lp_pooling(y, (2, 2), device="numpy"),
                 np.sqrt((y.astype(np.float64) ** 2).sum()).reshape(1, 1, 1, 1), np.float32)
    assert F.lp_pooling_desc(np.zeros((1, 2, 8), np.float32), (2,)).output.sizes == (1, 2, 7)


def test_the_descriptor_builders_defaults():
    """What the builders fill in when a parameter is left out: a zero constant, unit slice
    strides, one group, a (C_out,) bias as the (1, C_out, 1, 1) tensor DirectML binds."""
    assert F.padding_desc(np.zeros(6, np.float32), (1,), (1,)).padding_value == 0
    d = F.slice1_desc(np.zeros((2, 3), np.float32), (0, 1), (2, 2))
    assert (d.output.sizes, d.input_window_strides) == ((2, 2), (1, 1))
    c = F.convolution_desc(X, np.zeros((2, 1, 1, 1), np.float32), np.zeros(2, np.float32))
    assert (c.group_count, c.bias_tensor.sizes, c.output.sizes) == (1, (1, 2, 1, 1),
                                                                      (1, 2, 4, 4))


def test_a_filter_with_nan_cast_exactly_to_half():
    """A float32 filter holding NaN, for a float16 input: every value (NaN too) is exact in
    float16, so it is cast, not refused."""
    x = np.ones((1, 1, 3, 3), np.float16)
    y = F.convolution(x, np.full((1, 1, 1, 1), np.nan, np.float32), device="numpy")
    assert y.dtype == np.float16 and np.isnan(y).all()


def test_repeated_calls_are_answered_by_the_memo_in_front_of_the_cache():
    """Calls repeated among others (A, B, A, B) are answered by the functional layer's own
    memo, without a lookup in the kernel cache (its hit count stays), with parameters that key
    as themselves and with array parameters; after ``cache.clear()`` the memo starts again and
    answers the second call of each."""
    from dml_numba import functional

    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    calls = [lambda: dml.tile(x, (1, 2), device="numpy"),
             lambda: dml.tile(x, np.array([2, 1]), device="numpy"),
             lambda: dml.padding(x, (1, 0), (0, 1), "reflection", device="numpy")]
    want = [np.tile(x, (1, 2)), np.tile(x, (2, 1)), np.pad(x, [(1, 0), (0, 1)], mode="reflect")]
    saved = dml.cache._table.copy()
    # the worker's earlier calls may have filled the memo to one below its bound: the first
    # new call here would then empty it, and a call memoised before that would miss later
    functional._recent.clear()
    try:
        for clear in (False, True):
            if clear:
                dml.cache.clear()
            for call, ref in zip(calls, want):  # built, or found in the cache
                np.testing.assert_array_equal(call(), ref)
            hits, misses = dml.cache.hits, dml.cache.misses
            for call, ref in zip(calls * 2, want * 2):
                np.testing.assert_array_equal(call(), ref)
            assert (dml.cache.hits, dml.cache.misses) == (hits, misses)
            assert len(functional._recent) >= len(calls)
    finally:
        dml.cache._table.update(saved)
