"""The operators as PyTorch custom operators: ``import dml_numba.torch`` registers them.

``torch.ops.dml_numba.<name>`` (``padding``, ``lp_pooling``, ``convolution``, ``tile``,
``slice1``) takes and returns CPU tensors, with the functional layer's parameters as lists and
strings, and runs dml_numba's CPU kernels (read in place, result shared, no copy). Each has a
fake (meta) implementation giving its output's shape from the operator's own shape rule, so
``torch.compile`` graphs trace through it (``fullgraph=True`` included) and call the kernel at run
time. No gradient is defined.

    >>> import torch, dml_numba.torch
    >>> torch.ops.dml_numba.padding(torch.arange(3.), [2], [1], "reflect")
    tensor([2., 1., 0., 1., 2., 1.])
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

try:
    import torch
except ImportError:  # pragma: no cover - the module is optional
    raise ImportError("dml_numba.torch registers PyTorch custom operators: it needs PyTorch "
                      "(pip install torch)") from None

from . import functional

#: the operator's schema after its name (parameters as the functional layer takes them)
SCHEMAS = {
    "padding": "(Tensor x, int[] start_padding, int[] end_padding, str mode='constant', "
               "float value=0.) -> Tensor",
    "lp_pooling": "(Tensor x, int[] window_size, int[]? strides=None, "
                  "int[]? start_padding=None, int[]? end_padding=None, int[]? dilations=None, "
                  "int p=2) -> Tensor",
    "convolution": "(Tensor x, Tensor filter, Tensor? bias=None, int[]? strides=None, "
                   "int[]? dilations=None, int[]? start_padding=None, int[]? end_padding=None, "
                   "int[]? output_padding=None, int group_count=1, "
                   "str mode='cross_correlation', str direction='forward') -> Tensor",
    "tile": "(Tensor x, int[] repeats) -> Tensor",
    "slice1": "(Tensor x, int[] offsets, int[] sizes, int[]? strides=None) -> Tensor",
}

_LIBRARY = torch.library.Library("dml_numba", "DEF")


def _host(a):
    return a.detach().numpy() if isinstance(a, torch.Tensor) else a


def _shape_only(a):
    """What the descriptor builders read of a tensor: its shape, rank and NumPy dtype."""
    if not isinstance(a, torch.Tensor):
        return a
    dtype = np.dtype(str(a.dtype).removeprefix("torch."))
    return SimpleNamespace(shape=tuple(a.shape), ndim=a.dim(), dtype=dtype)


def _kernel(name: str):
    fn = getattr(functional, name)

    def run(*args):
        return torch.from_numpy(np.asarray(fn(*(_host(a) for a in args), device="cpu")))

    return run


def _fake(name: str):
    build = getattr(functional, f"{name}_desc")

    def fake(x, *args):
        return x.new_empty(build(_shape_only(x), *map(_shape_only, args)).output.sizes)

    return fake


for _name, _schema in SCHEMAS.items():
    _LIBRARY.define(_name + _schema)
    _LIBRARY.impl(_name, _kernel(_name), "CPU")
    torch.library.register_fake(f"dml_numba::{_name}", _fake(_name), lib=_LIBRARY)
