"""The large working buffers' memory (``dml_numba._pages``): a compiled graph's arena and the
convolution kernels' scratch, of 4 MiB and more, mapped without the huge-page advice NumPy
gives its own arrays where Linux's defrag policy makes a write to advised memory wait for
compaction; NumPy's where it never waits, and as ``DML_NUMBA_HUGE_PAGES`` says where set.
Results are the same either way."""
from __future__ import annotations

import mmap
import sys

import numpy as np
import pytest

import dml_numba as dml
from dml_numba import _pages
from dml_numba.cpu.convolution import base


def _mapped(a) -> bool:
    """Whether ``a``'s memory is an mmap of its own (what :func:`_pages.empty` maps)."""
    while a is not None and not isinstance(a, mmap.mmap):
        a = getattr(a, "base", None) if isinstance(a, np.ndarray) else getattr(a, "obj", None)
    return isinstance(a, mmap.mmap)


def _advice(a) -> set:
    """The VmFlags of the mapping holding ``a``'s middle byte (Linux's ``/proc/self/smaps``; an
    advice given from the first whole page on splits off the mapping of the first bytes)."""
    at, inside = a.ctypes.data + a.nbytes // 2, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and line[0] in "0123456789abcdef":
                lo, hi = (int(v, 16) for v in head.split("-"))
                inside = lo <= at < hi
            elif inside and line.startswith("VmFlags:"):
                return set(line.split()[1:])
    raise AssertionError("no mapping holds the array")


@pytest.fixture
def stalling(tmp_path, monkeypatch):
    """The defrag policy "madvise" (advised memory waits for compaction) and no variable set."""
    path = tmp_path / "defrag"
    path.write_text("always defer defer+madvise [madvise] never\n")
    monkeypatch.setattr(_pages, "DEFRAG", str(path))
    monkeypatch.delenv("DML_NUMBA_HUGE_PAGES", raising=False)
    return path


@pytest.mark.parametrize("text, theirs", [
    ("always defer defer+madvise [madvise] never", False),
    ("always defer [defer+madvise] madvise never", False),
    ("[always] defer defer+madvise madvise never", False),
    ("always [defer] defer+madvise madvise never", True),
    ("always defer defer+madvise madvise [never]", True),
    (None, True),  # no such file: not Linux, or no transparent huge pages
])
def test_the_policy_decides_where_no_variable_is_set(text, theirs, stalling):
    if text is None:
        stalling.unlink()
    else:
        stalling.write_text(text + "\n")
    assert _pages.huge_pages() is theirs
    assert _mapped(_pages.empty((_pages.LARGE,), np.uint8)) is not theirs


@pytest.mark.parametrize("value, theirs", [("1", True), ("on", True), ("0", False),
                                           ("no", False)])
def test_the_variable_overrides_the_policy(value, theirs, stalling, monkeypatch):
    for text in ("[madvise]", "[defer]"):
        stalling.write_text(text + "\n")
        monkeypatch.setenv("DML_NUMBA_HUGE_PAGES", value)
        assert _mapped(_pages.empty((_pages.LARGE,), np.uint8)) is not theirs


@pytest.mark.parametrize("nbytes", [0, 1, _pages.LARGE - 1])
def test_smaller_buffers_are_numpy_s(nbytes, stalling):
    a = _pages.empty((nbytes,), np.uint8)
    assert a.shape == (nbytes,) and not _mapped(a)


@pytest.mark.parametrize("shape, dtype", [((_pages.LARGE,), np.uint8),
                                          ((3, _pages.LARGE // 8 + 1), np.float32),
                                          ((_pages.LARGE // 8,), np.float64)])
def test_large_buffers_are_mapped_page_aligned_and_writable(shape, dtype, stalling):
    a = _pages.empty(shape, dtype)
    assert a.shape == shape and a.dtype == dtype and a.flags.c_contiguous and a.flags.writeable
    assert _mapped(a) and a.ctypes.data % mmap.PAGESIZE == 0
    a[...] = 7
    assert (a == 7).all()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's smaps only")
def test_large_buffers_carry_no_huge_page_advice(stalling, monkeypatch):
    """The mapping's flags: no ``hg`` (MADV_HUGEPAGE) on ours; NumPy's own array of the same
    size carries it where NumPy gives that advice (its default on Linux); under the policy
    "always", ours asks for none (``nh``)."""
    assert "hg" not in _advice(_pages.empty((_pages.LARGE,), np.uint8))
    stalling.write_text("[always] defer defer+madvise madvise never\n")
    flags = _advice(_pages.empty((_pages.LARGE,), np.uint8))
    assert "nh" in flags and "hg" not in flags
    theirs = np.empty(_pages.LARGE, np.uint8)
    if "hg" not in _advice(theirs):
        pytest.skip("NumPy gives no huge-page advice here: nothing to compare with")
    monkeypatch.setenv("DML_NUMBA_HUGE_PAGES", "1")
    assert "hg" in _advice(_pages.empty((_pages.LARGE,), np.uint8))


def _big_graph():
    """A padding by 1.0 (which stays a step) then a convolution: the intermediate, 2 x 8 x 258
    x 258 float32, is 4.1 MiB (over LARGE), as is a padded copy of it."""
    from dml_numba import functional as F

    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 8, 256, 256)).astype(np.float32)
    w = rng.standard_normal((4, 8, 3, 3)).astype(np.float32)
    t = dml.TensorDesc
    f32 = dml.DataType.FLOAT32
    pad = dml.Padding1OperatorDesc(t(f32, x.shape), t(f32, (2, 8, 258, 258)),
                                   dml.PaddingMode.CONSTANT, f32, 1.0, (0, 0, 1, 1), (0, 0, 1, 1))
    conv = F.convolution_desc(np.zeros((2, 8, 258, 258), np.float32), w, start_padding=(1, 1),
                              end_padding=(1, 1))
    graph = dml.GraphDesc(2, 1, (dml.OperatorGraphNodeDesc(pad), dml.OperatorGraphNodeDesc(conv)),
                          (dml.InputGraphEdgeDesc(0, 0, 0), dml.InputGraphEdgeDesc(1, 1, 1)),
                          (dml.OutputGraphEdgeDesc(1, 0, 0),),
                          (dml.IntermediateGraphEdgeDesc(0, 0, 1, 0),))
    return graph, x, w


@pytest.mark.parametrize("huge", ["0", "1"])
def test_a_graph_s_arena_and_scratch_either_way_same_result(huge, stalling, monkeypatch):
    """The arena (and the convolution's scratch, where it copies) mapped under a stalling
    policy, NumPy's with huge pages asked for: the same result, that of the nodes one by one
    on "numpy"."""
    monkeypatch.setenv("DML_NUMBA_HUGE_PAGES", huge)
    graph, x, w = _big_graph()
    fused = dml.compile_graph(graph, "cpu")
    fused._local = type(fused._local)()  # this test's own buffers
    monkeypatch.setattr(base, "_scratch", type(base._scratch)())  # and scratch
    y = fused(x, w)
    ref = dml.compile_graph(graph, "numpy")(x, w)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    arena = next(iter(fused.buffers().values()))
    assert _mapped(arena) == (huge == "0")
    scratch = getattr(base._scratch, "buf", None)  # the convolution's padded copy, if it made one
    assert scratch is None or scratch.nbytes < _pages.LARGE or _mapped(scratch) == (huge == "0")


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_contiguous_copies_into_a_buffer_of_its_own(dtype, stalling):
    """``contiguous``: ``np.ascontiguousarray(a, float32)`` of a transposed view, the same
    values, mapped from LARGE bytes (a filter packed or transformed on a first call)."""
    a = np.arange(3 * (_pages.LARGE // 8), dtype=dtype).reshape(3, -1).T
    c = _pages.contiguous(a, np.float32)
    assert c.dtype == np.float32 and c.flags.c_contiguous and _mapped(c)
    np.testing.assert_array_equal(c, a.astype(np.float32))
    small = _pages.contiguous(a[:10], np.float32)
    assert not _mapped(small) and (small == a[:10]).all()


def test_a_large_packed_filter_is_mapped(stalling):
    """A blocked kernel's packed filter of 9 MiB (512 -> 512, 3 x 3, ResNet-18's last layers)
    comes from ``empty``: mapped under a stalling policy, holding the filter's values."""
    from dml_numba import functional as F
    from dml_numba.cpu import convolution as cpu_conv
    from dml_numba.cpu.convolution.blocked.plan import pack_filter

    w = np.random.default_rng(0).standard_normal((512, 512, 3, 3)).astype(np.float32)
    desc = F.convolution_desc(np.zeros((1, 512, 7, 7), np.float32), w, start_padding=(1, 1),
                              end_padding=(1, 1))
    packed = pack_filter(desc, w, cpu_conv.block_plan(desc))
    assert _mapped(packed) and packed.size >= w.size
    assert sorted(packed[packed != 0]) == sorted(w.reshape(-1)[w.reshape(-1) != 0])
