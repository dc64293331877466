"""The registry: every operator is found on every device without a list, unknown kinds and
options are refused the same way everywhere."""
import ast
import os
import re
from pathlib import Path

import numpy as np
import pytest

import dml_numba as dml
from dml_numba._codegen import SourceWriter
from dml_numba._gather import emit_map
from dml_numba._registry import lowering_for
from dml_numba.ops._base import DESCRIPTOR_TYPES, AxisMap, OperatorDesc


def canonical_types():
    """Descriptor classes that are their own canonical form (the ones backends implement)."""
    return sorted((t for t in DESCRIPTOR_TYPES if t.canonical is OperatorDesc.canonical),
                  key=lambda t: t.__name__)


def test_every_descriptor_class_is_exported_and_canonicalises_to_an_implemented_one():
    assert {t.__name__ for t in DESCRIPTOR_TYPES} <= set(dml.__all__)
    assert len(canonical_types()) == 30  # 12 operators and the 18 activations


@pytest.mark.parametrize("device", ["numpy", "cpu", "cuda"])
@pytest.mark.parametrize("desc_type", canonical_types(), ids=lambda t: t.__name__)
def test_every_descriptor_has_a_lowering_on_every_device(desc_type, device):
    assert callable(lowering_for(desc_type, device))


def test_unknown_index_map_kind_raises():
    with pytest.raises(AssertionError, match="unknown AxisMap kind 'mirror'"):
        emit_map(SourceWriter(), AxisMap("mirror", 3, 5), "o", "i")


def _tile():
    t = dml.TensorDesc(dml.DataType.FLOAT32, (2,))
    return dml.TileOperatorDesc(t, dml.TensorDesc(dml.DataType.FLOAT32, (4,)), (2,))


@pytest.mark.parametrize("device", ["numpy", "cpu", "cuda"])
def test_unknown_options_are_refused_on_every_device(device):
    with pytest.raises(dml.ValidationError, match=rf"compile_operator.options: 'bogus' is "
                                                  rf"invalid; .* on the '{device}' device"):
        dml.compile_operator(_tile(), device, bogus=1)


def test_option_values_are_checked():
    with pytest.raises(dml.ValidationError, match="compile_operator.parallel: 'yes' is invalid"):
        dml.compile_operator(_tile(), "cpu", parallel="yes")
    with pytest.raises(dml.ValidationError, match="algorithm.*on the 'cpu' device for Tile"):
        dml.compile_operator(_tile(), "cpu", algorithm="gemm")  # a convolution option only


def test_functional_enums_go_through_the_same_checker():
    x, w = np.ones((1, 1, 3), np.float32), np.ones((1, 1, 2), np.float32)
    with pytest.raises(dml.ValidationError, match=r"convolution.mode: 7 is invalid; expected a "
                                                  r"ConvolutionMode"):
        dml.convolution(x, w, mode=7)
    with pytest.raises(dml.ValidationError, match="convolution.direction: 'sideways'"):
        dml.convolution(x, w, direction="sideways")
    np.testing.assert_array_equal(dml.convolution(x, w, mode="convolution", device="numpy"),
                                  [[[2.0, 2.0]]])


def test_every_operator_has_workloads_and_a_demo_of_its_own():
    """Each descriptor's module in ``ops/`` has a module of the same name in ``workloads/``
    (found by discovery: the profiler, the demo and ``info --cuda-kernels`` keep no list)."""
    from dml_numba import workloads

    modules = {m.__name__.rsplit(".", 1)[1]: m for m in workloads.modules()}
    by_module: dict = {}
    for t in canonical_types():
        by_module.setdefault(t.__module__.rsplit(".", 1)[1], set()).add(t)
    for name, types in by_module.items():
        assert name in modules, f"no dml_numba/workloads/{name}.py for {sorted(types, key=str)}"
        ws = modules[name].workloads(quick=True)
        assert ws and all(w.op in dml.functional.__all__ for w in ws)
        made = set()
        for w in ws:
            desc, _ = w.make(np.dtype(np.float32), np.random.default_rng(0))
            assert type(desc) in types and w.kind in ("bytes", "flops")
            made.add(type(desc))
        assert made == types  # every operator of the module has a workload and a demo
        assert {type(desc) for _, desc, _ in modules[name].demo(np.random.default_rng(0))} == types


def _code_tokens(tree):
    """Identifiers, imported names and string constants of a module, without docstrings and
    comments (prose may name an operator as an example)."""
    import builtins

    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docs.add(id(first.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            yield node.value
        elif isinstance(node, ast.Name) and not hasattr(builtins, node.id):
            yield node.id
        elif isinstance(node, ast.Attribute) and not (hasattr(str, node.attr) or
                                                      hasattr(os.path, node.attr)):
            yield node.attr  # (``", ".join`` and ``os.path.join`` are Python's, not an operator)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            yield getattr(node, "module", None) or ""
            yield from (a.name for a in node.names)


def test_operator_names_appear_outside_their_slices_only_in_the_api_modules():
    """Adding an operator edits no list but the public ones: in code, an operator's name (its
    slice, its functional name, its descriptor class) appears only in modules (or packages) of
    its own name and in the modules that give it a public function (``functional/``,
    ``dask/``, ``torch.py``, whose custom operators' schemas name their parameters, and the
    ONNX loader, ``onnx.py`` and ``_onnx/``, which maps ONNX's operators onto ours), and, as
    parts of other words only (``start_padding``), in the window trait (``ops/_base.py``), the
    pooling shape rule (``ops/_pooling.py``), the window loops (``elements/__init__.py``) and
    the graph's rules and blocks (which name no operator class: tests/test_graph_rules.py).

    The activations are left out of the names: their descriptors are also the fused activation
    of every operator that takes one (DirectML's one struct for both), so they and the word are
    read wherever a fused activation is; their own slice is held by the other tests here."""
    from dml_numba.ops.activation import ActivationDesc

    root = Path(dml.__file__).parent
    types = {t for t in DESCRIPTOR_TYPES if not issubclass(t, ActivationDesc)}
    slices = {t.__module__.rsplit(".", 1)[1] for t in types}
    own = {t.__module__.rsplit(".", 1)[1] for t in DESCRIPTOR_TYPES}  # every slice's modules
    names = slices | (set(dml.functional.__all__) - {"activation"}) | {t.__name__ for t in types}
    pattern = re.compile("|".join(sorted(map(re.escape, names), key=len, reverse=True)))
    found = {}
    for path in sorted(root.rglob("*.py")):
        if path.stem in own or set(path.relative_to(root).parts[:-1]) & own:
            continue  # the slice's own module, or a module of the slice's own package
        tokens = _code_tokens(ast.parse(path.read_text()))
        hits = {m for tok in tokens for m in pattern.findall(tok)}
        if hits:
            found[str(path.relative_to(root))] = sorted(hits)
    public = {f for f in found if f.startswith(("functional/", "dask/"))}
    assert set(found) - public <= {"torch.py", "onnx.py", "graph/plan.py",
                          "graph/blocks.py", "graph/rules.py", "ops/_base.py",
                          "ops/_pooling.py", "elements/__init__.py", "_onnx/nodes.py",
                          "_onnx/load.py", "_onnx/patterns.py"}, found
    assert found.get("functional/__init__.py") and found.get("functional/_pooling.py")  # seen


@pytest.mark.parametrize("kind", ["shift", "clamp", "reflect", "symmetric", "wrap", "modulo",
                                  "affine"])
def test_index_maps_evaluated_with_numpy_agree_with_the_emitted_source(kind):
    """The two formulations of an index map (the source the kernels run, and the NumPy one the
    Dask layer uses) agree for every output coordinate, pads wider than the axis included."""
    for n, a, s, size in [(1, 3, 1, 9), (2, 5, 1, 13), (5, 7, -2, 20), (7, 0, 3, 7), (4, 9, 1, 31)]:
        if kind == "affine":
            a, size = (n - 1 if s < 0 else 0), -(-n // abs(s))
        m = AxisMap(kind, n, size, a, s)
        w = SourceWriter()
        with w.block("def f(o):"):
            emit_map(w, m, "o", "i")
            w("return i")
        ns = {}
        exec(w.text(), ns)
        idx, inside = m.sources(0, size)
        emitted = [ns["f"](o) for o in range(size)]
        if kind == "shift":
            assert list(inside) == [0 <= o - a < n for o in range(size)]
            assert [i for i, ok in zip(emitted, inside) if ok] == list(idx[inside])
        else:
            assert inside.all() and list(idx) == emitted, (m, emitted, list(idx))
            assert all(0 <= i < n for i in emitted)
        assert idx.dtype == np.int64 and inside.dtype == bool
        assert (idx[~inside] == 0).all()  # outside the input: coordinate 0, never read
        for lo, hi in [(1, size), (size // 2, size), (size - 1, size), (2, 2)]:
            if lo <= hi:  # a block of the axis [lo, hi): the same values as the whole axis's
                part, part_inside = m.sources(lo, hi)
                assert list(part) == list(idx[lo:hi]) and list(part_inside) == list(inside[lo:hi])
