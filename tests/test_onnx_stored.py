"""A loaded ONNX model kept in the disk cache: a new process compiling the same file for the
same shapes reads the loader's result back (no ``import onnx``), every argument of the load is
in the key, and what is not to be trusted or cannot be read back is loaded from the file."""
import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the onnx package is in the [test] extra")
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import dml_numba.onnx as donnx  # noqa: E402
from dml_numba import _diskcache, _housekeeping  # noqa: E402
from dml_numba._onnx import stored  # noqa: E402


def _model(seed=0, batch="n", pad=None):
    """x (batch, 2, 6, 6) -> Conv 3x3 (3 filters, bias, pads 1) -> Relu -> MaxPool 2x2, and a
    constant Pad first where ``pad`` names the input that gives its amounts."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    nodes, inputs, first = [], [helper.make_tensor_value_info("x", TP.FLOAT, [batch, 2, 6, 6])], "x"
    if pad:
        nodes.append(helper.make_node("Pad", ["x", pad], ["xp"], mode="constant"))
        inputs.append(helper.make_tensor_value_info(pad, TP.INT64, [8]))
        first = "xp"
    nodes += [helper.make_node("Conv", [first, "w", "b"], ["c"], pads=[1, 1, 1, 1]),
              helper.make_node("Relu", ["c"], ["r"]),
              helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    g = helper.make_graph(nodes, "g", inputs,
                          [helper.make_tensor_value_info("y", TP.FLOAT, None)],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _reference(model, x, **feeds):
    return ReferenceEvaluator(model).run(None, {"x": x, **feeds})[0]


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A disk cache of the test's own, models kept (whatever the run sets)."""
    monkeypatch.setenv("DML_NUMBA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("DML_NUMBA_MODEL_CACHE", "1")
    monkeypatch.delenv("DML_NUMBA_DISK_CACHE", raising=False)
    _diskcache.reset()
    yield tmp_path
    _diskcache.reset()


def _kept(folder):
    return sorted((folder / "cache" / _diskcache.SUBDIR).glob(f"{stored.PREFIX}*{stored.SUFFIX}"))


class _NoLoader:
    def __init__(self, *args, **kwargs):
        raise AssertionError("the loader ran: the model was not read back")


X = np.random.default_rng(5).standard_normal((2, 2, 6, 6)).astype(np.float32)


def test_a_new_process_reads_the_kept_load_without_importing_onnx(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    np.save(tmp_path / "x.npy", X)
    code = textwrap.dedent(f"""
        import sys, numpy as np
        from dml_numba.onnx import compile_model
        m = compile_model({str(path)!r}, "cpu", input_shapes={{"x": (2, 2, 6, 6)}})
        np.save(sys.argv[1], m(np.load({str(tmp_path / 'x.npy')!r})))
        print("onnx" in sys.modules)
        """)
    env = {**os.environ, "DML_NUMBA_CACHE_DIR": str(tmp_path / "cache"),
           "DML_NUMBA_MODEL_CACHE": "1"}
    seen = [subprocess.run([sys.executable, "-c", code, str(tmp_path / f"y{k}.npy")], env=env,
                           capture_output=True, text=True, check=True).stdout.split()[-1]
            for k in range(2)]
    assert seen == ["True", "False"]  # the second process never imported onnx
    expected = _reference(_model(), X)
    for k in range(2):
        np.testing.assert_allclose(np.load(tmp_path / f"y{k}.npy"), expected, rtol=1e-5,
                                   atol=1e-6)


@pytest.mark.parametrize("given", ["path", "bytes", "pathlike"])
def test_what_is_read_back_is_what_the_loader_made(folder, given, monkeypatch):
    path = folder / "m.onnx"
    onnx.save(_model(pad="pads"), path)
    model = {"path": str(path), "bytes": path.read_bytes(), "pathlike": path}[given]
    args = (model, {"x": (2, 2, 6, 6)}, {"pads": np.array([0, 0, 1, 2, 0, 0, 2, 1])})
    first = donnx._load(*args)
    assert len(_kept(folder)) == 1
    monkeypatch.setattr(donnx, "Loader", _NoLoader)
    again = donnx._load(*args)
    assert again[0] == first[0] and again[1] == first[1] and again[3] == first[3]
    assert list(again[2]) == list(first[2])
    for name in first[2]:
        np.testing.assert_array_equal(again[2][name], first[2][name])
        assert again[2][name].dtype == first[2][name].dtype


def test_every_argument_of_the_load_is_in_the_key(folder):
    path = folder / "m.onnx"
    onnx.save(_model(seed=0, pad="pads"), path)
    pads = np.array([0, 0, 1, 1, 0, 0, 1, 1])
    base = stored.key(str(path), {"x": (2, 2, 6, 6)}, {"pads": pads})
    assert base is not None
    assert stored.key(path.read_bytes(), {"x": (2, 2, 6, 6)}, {"pads": pads}) == base
    others = [stored.key(str(path), {"x": (1, 2, 6, 6)}, {"pads": pads}),
              stored.key(str(path), {"x": (2, 2, 6, 6)}, {"pads": pads + 1}),
              stored.key(str(path), {"x": (2, 2, 6, 6)}, {"pads": pads.astype(np.int32)}),
              stored.key(str(path), {"x": (2, 2, 6, 6)}, {"other": pads}),
              stored.key(str(path), None, {"pads": pads})]
    onnx.save(_model(seed=1, pad="pads"), path)  # other weights, the same file name
    others.append(stored.key(str(path), {"x": (2, 2, 6, 6)}, {"pads": pads}))
    assert len(set(others + [base])) == len(others) + 1


@pytest.mark.parametrize("form", ["list", "array", "numpy ints", "list constants"])
def test_array_likes_key_as_the_values_they_hold(folder, form):
    """Shapes and constants given as lists, arrays or NumPy integers key as the tuples and
    arrays they equal (the loader reads them so); a value the loader would refuse is not
    kept (no key: the loader says why)."""
    model = _model(pad="pads").SerializeToString()
    pads = np.array([0, 0, 1, 1, 0, 0, 1, 1])
    base = stored.key(model, {"x": (2, 2, 6, 6)}, {"pads": pads})
    shape, const = (2, 2, 6, 6), pads
    if form == "list":
        shape = [2, 2, 6, 6]
    elif form == "array":
        shape = np.array([2, 2, 6, 6])
    elif form == "numpy ints":
        shape = tuple(np.int32(v) for v in shape)
    else:
        const = pads.tolist()
    assert stored.key(model, {"x": shape}, {"pads": const}) == base
    assert stored.key(model, {"x": (2.0, 2, 6, 6)}, {"pads": pads}) is None
    assert stored.key(model, {"x": shape}, {"pads": np.array([object()])}) is None


def test_the_package_source_is_in_the_key(folder, monkeypatch):
    model = _model().SerializeToString()
    before = stored.key(model, None, None)
    monkeypatch.setattr(stored, "source_digest", lambda: "another loader")
    assert stored.key(model, None, None) != before


def test_each_argument_changed_gives_its_own_results(folder):
    """The same file compiled for other shapes, other constants and other weights (rewritten
    in place): each result is ONNX's reference for those arguments."""
    path = folder / "m.onnx"
    for seed, batch, pads in ((0, 2, [0, 0, 1, 1, 0, 0, 1, 1]), (0, 1, [0, 0, 1, 1, 0, 0, 1, 1]),
                              (0, 2, [0, 0, 0, 2, 0, 0, 1, 0]), (1, 2, [0, 0, 0, 2, 0, 0, 1, 0])):
        model = _model(seed=seed, pad="pads")
        onnx.save(model, path)
        pads = np.array(pads, np.int64)
        m = donnx.compile_model(str(path), "numpy", input_shapes={"x": (batch, 2, 6, 6)},
                                constants={"pads": pads})
        np.testing.assert_allclose(m(X[:batch]), _reference(model, X[:batch], pads=pads),
                                   rtol=1e-5, atol=1e-6)
    assert len(_kept(folder)) == 4


def test_a_model_with_external_data_is_loaded_every_time(folder):
    path = folder / "m.onnx"
    for seed in (0, 1):  # the weights file rewritten beside the same model file
        (folder / "weights.bin").unlink(missing_ok=True)  # (onnx appends to it)
        onnx.save_model(_model(seed=seed), folder / f"m{seed}.onnx", save_as_external_data=True,
                        all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
        if seed == 0:
            os.replace(folder / "m0.onnx", path)
        assert onnx.load(path, load_external_data=False).graph.initializer[0].external_data
        m = donnx.compile_model(str(path), "numpy", input_shapes={"x": (2, 2, 6, 6)})
        np.testing.assert_allclose(m(X), _reference(_model(seed=seed), X), rtol=1e-5,
                                   atol=1e-6)
    assert _kept(folder) == []


def test_what_is_not_kept(folder, monkeypatch):
    model = _model()
    donnx.compile_model(model, "numpy", input_shapes={"x": (2, 2, 6, 6)})  # a ModelProto
    with pytest.raises(donnx.ValidationError):  # a load that fails
        donnx.compile_model(model.SerializeToString(), "numpy", input_shapes={"y": (2, 2, 6, 6)})
    monkeypatch.setenv("DML_NUMBA_MODEL_CACHE", "0")
    donnx.compile_model(model.SerializeToString(), "numpy", input_shapes={"x": (2, 2, 6, 6)})
    monkeypatch.setenv("DML_NUMBA_MODEL_CACHE", "1")
    monkeypatch.setenv("DML_NUMBA_DISK_CACHE", "0")
    _diskcache.reset()
    donnx.compile_model(model.SerializeToString(), "numpy", input_shapes={"x": (2, 2, 6, 6)})
    monkeypatch.delenv("DML_NUMBA_DISK_CACHE")
    _diskcache.reset()
    assert _kept(folder) == []
    donnx.compile_model(model.SerializeToString(), "numpy", input_shapes={"x": (2, 2, 6, 6)})
    assert len(_kept(folder)) == 1


def test_a_write_that_fails_keeps_nothing(folder):
    """A value that does not pickle (or a full disk): no entry, no temporary left behind."""
    k = stored.key(_model().SerializeToString(), None, None)
    _diskcache.state()  # the folder made
    stored.write(k, (lambda: 0, None, None, None))
    assert list((folder / "cache" / _diskcache.SUBDIR).glob(f"{stored.PREFIX}*")) == []
    assert stored.read(k) is None


@pytest.mark.skipif(os.name == "nt", reason="POSIX file modes")
@pytest.mark.parametrize("harm", ["writable by others", "garbage", "another value",
                                  "symbolic link"])
def test_an_entry_not_to_be_trusted_or_read_is_loaded_from_the_file(folder, harm):
    model = _model().SerializeToString()
    donnx.compile_model(model, "numpy", input_shapes={"x": (2, 2, 6, 6)})
    (entry,) = _kept(folder)
    if harm == "writable by others":
        os.chmod(entry, 0o666)
    elif harm == "garbage":
        entry.write_bytes(b"\x80\x05not a pickle")
    elif harm == "another value":
        entry.write_bytes(pickle.dumps(("a", "tuple")))
    else:
        target = folder / "elsewhere.pkl"
        entry.rename(target)
        entry.symlink_to(target)
    calls = []
    real = donnx.Loader

    class Counting(real):
        def __init__(self, *args, **kwargs):
            calls.append(1)
            super().__init__(*args, **kwargs)

    try:
        donnx.Loader = Counting
        m = donnx.compile_model(model, "numpy", input_shapes={"x": (2, 2, 6, 6)})
    finally:
        donnx.Loader = real
    assert calls == [1]
    np.testing.assert_allclose(m(X), _reference(_model(), X), rtol=1e-5, atol=1e-6)
    (again,) = _kept(folder)  # written anew from the file's load: the user's own, 0600
    st = os.lstat(again)
    assert not os.path.islink(again) and st.st_mode & 0o077 == 0


def test_cache_housekeeping_counts_and_clears_kept_models(folder):
    donnx.compile_model(_model().SerializeToString(), "numpy", input_shapes={"x": (2, 2, 6, 6)})
    (entry,) = _kept(folder)
    before = _housekeeping.usage()
    assert before["modules"] >= 1 and before["bytes"] >= entry.stat().st_size
    assert _housekeeping.clear()["modules"] >= 1
    assert _kept(folder) == []
