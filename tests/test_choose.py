"""``choose_operator``: compile_operator's stages without the build. The kernel chosen is the one
compile_operator builds (same key, same source), nothing is compiled, loaded or cached while
choosing, the tuner times nothing, and ``build()`` gives the compiled operator."""
import numpy as np
import pytest

import dml_numba as dml
from dml_numba import _diskcache
from dml_numba._cache import cache
from dml_numba.functional import (
    convolution_desc,
    gemm_desc,
    lp_pooling_desc,
    max_pooling_desc,
    padding_desc,
)

F32 = np.float32


def _z(*shape, dtype=F32):
    return np.zeros(shape, dtype)


# (name, descriptor, options): one of each kind of kernel the CPU lowers to: a data-movement
# loop nest, the blocked tiles (pixels, channels, depthwise), the direct and gemm convolutions
# (gemm: helper kernels), a pooling, GEMM's loop nest and its BLAS path, a serial variant
CASES = [
    ("padding", padding_desc(_z(2, 3, 9, 11), (0, 0, 1, 2), (0, 0, 2, 1), "reflection"), {}),
    ("blocked 3x3", convolution_desc(_z(1, 8, 14, 30), _z(8, 8, 3, 3), None,
                                     start_padding=(1, 1), end_padding=(1, 1)), {}),
    ("depthwise", convolution_desc(_z(1, 8, 20, 40), _z(8, 1, 3, 3), None, start_padding=(1, 1),
                                   end_padding=(1, 1), group_count=8), {}),
    ("direct", convolution_desc(_z(1, 2, 9, 9), _z(3, 2, 3, 3)), {"algorithm": "direct"}),
    ("gemm convolution", convolution_desc(_z(1, 4, 6, 7), _z(4, 4, 3, 3)),
     {"algorithm": "gemm", "parallel": True}),
    ("lp pooling", lp_pooling_desc(_z(1, 3, 10, 13), (3, 3), (2, 2), p=2), {"parallel": False}),
    ("max pooling", max_pooling_desc(_z(1, 3, 10, 13), (2, 2), (2, 2)), {}),
    ("gemm loops", gemm_desc(_z(3, 7), _z(7, 5)), {}),
    ("gemm blas", gemm_desc(_z(64, 512), _z(512, 300)), {}),
]


@pytest.mark.parametrize("name, desc, options", CASES, ids=[c[0] for c in CASES])
def test_the_chosen_kernel_is_the_one_compiled(name, desc, options):
    chosen = dml.choose_operator(desc, "cpu", **options)
    assert chosen.source and "def kernel" in chosen.source
    compiled = dml.compile_operator(desc, "cpu", **options)
    assert chosen.source == compiled.source
    assert chosen.key == getattr(compiled.kernel, "key", None)
    assert type(chosen.kernel) is type(compiled.kernel)
    assert chosen.build() is compiled  # through the cache, as compile_operator


def test_choosing_compiles_loads_and_caches_nothing(monkeypatch):
    """A descriptor never seen, chosen: no kernel built (the one build path is never entered
    past its check), the cache untouched; the tuner, asked to measure, times nothing."""
    built = []
    real = _diskcache.compile_source
    monkeypatch.setattr(_diskcache, "compile_source",
                        lambda *a, **kw: built.append(a) or real(*a, **kw))
    desc = convolution_desc(_z(1, 8, 17, 29), _z(8, 8, 3, 3), None, start_padding=(1, 1),
                            end_padding=(1, 1))
    before = (len(cache), cache.stats())
    for options in ({}, {"tune": "quick"}, {"tune": "exhaustive"}, {"parallel": True}):
        chosen = dml.choose_operator(desc, "cpu", **options)
        assert chosen.source and chosen.kernel.fn is None
    assert built == [] and (len(cache), cache.stats()) == before
    op = chosen.build()  # now it compiles
    assert built and op.kernel.fn is not None
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((1, 8, 17, 29)).astype(F32), rng.standard_normal(
        (8, 8, 3, 3)).astype(F32)
    np.testing.assert_allclose(op(x, w), dml.compile_operator(desc, "numpy")(x, w), rtol=1e-5,
                               atol=1e-5)


def test_the_numpy_device_has_no_source_and_bad_input_is_named():
    desc = padding_desc(_z(2, 3), (0, 1), (1, 0))
    chosen = dml.choose_operator(desc, "numpy")
    assert chosen.source is None and chosen.key is None
    assert "not compiled" in repr(chosen)
    with pytest.raises(dml.ValidationError, match=r"choose_operator\.desc: int is invalid"):
        dml.choose_operator(3, "cpu")
    with pytest.raises(dml.ValidationError, match=r"device: 'gpu' is invalid"):
        dml.choose_operator(desc, "gpu")
    with pytest.raises(dml.ValidationError, match="bogus"):
        dml.choose_operator(desc, "cpu", bogus=1)


@pytest.mark.cuda
def test_on_cuda_the_chosen_kernel_is_the_one_compiled():
    """The CUDA lowering's kernels too: the tiled convolution and a data-movement kernel, the
    same key and source, nothing compiled until ``build()``."""
    built = []
    real = _diskcache.compile_source
    conv = convolution_desc(_z(1, 4, 6, 7), _z(4, 4, 3, 3), None, start_padding=(1, 1),
                            end_padding=(1, 1))
    for desc, options in ((conv, {"algorithm": "tiled"}), (conv, {}),
                          (padding_desc(_z(2, 3, 5, 6), (0, 0, 1, 1), (0, 0, 2, 0)), {})):
        _diskcache.compile_source = lambda *a, **kw: built.append(a) or real(*a, **kw)
        try:
            chosen = dml.choose_operator(desc, "cuda", **options)
        finally:
            _diskcache.compile_source = real
        assert built == [] and chosen.kernel.fn is None and "cuda" in chosen.source
        compiled = dml.compile_operator(desc, "cuda", **options)
        assert (chosen.key, chosen.source) == (compiled.kernel.key, compiled.source)
