"""Element-wise operators, the activations, batch normalization and GEMM on Dask arrays, block
by block."""
from __future__ import annotations

import functools

import numpy as np

from .. import functional as F
from ._common import _as_dask, _check_device, _da, _da_token, _lazy_operand, _shape


def _element_wise(name, a, b, extra, device):
    """Element by element, block by block: the operands broadcast and their chunks unified."""
    da = _da()
    a = _as_dask(a, name, "a")
    _check_device(device)
    b = _lazy_operand(b).astype(a.dtype, casting="same_kind")
    first = a
    a, b = da.broadcast_arrays(a, b)
    if a.shape == first.shape:  # the first operand's chunks (regular where its are)
        a, b = first, b.rechunk(first.chunks)
    getattr(F, f"{name}_desc")(_shape(a), _shape(b), *extra)  # its checks, before any block
    fn = functools.partial(_element_wise_block, name, extra, device)
    return da.map_blocks(fn, a, b, dtype=a.dtype,
                         name=f"dml-{name}-" + _da_token(a, b, extra, device))


def _element_wise_block(name, extra, device, a, b):
    return getattr(F, name)(np.ascontiguousarray(a), np.ascontiguousarray(b), *extra,
                            device=device)


def element_wise_add(a, b, fused_activation=None, *, device="cpu"):
    """Lazy :func:`dml_numba.element_wise_add`: ``a + b`` (broadcast NumPy's way) block by
    block, then the fused activation."""
    return _element_wise("element_wise_add", a, b, (fused_activation,), device)


def element_wise_multiply(a, b, *, device="cpu"):
    """Lazy :func:`dml_numba.element_wise_multiply`: ``a * b`` block by block."""
    return _element_wise("element_wise_multiply", a, b, (), device)


def activation(x, activation, parameters=None, *, device="cpu"):
    """Lazy :func:`dml_numba.activation`: the activation of every element, block by block."""
    x = _as_dask(x, "activation", "x")
    _check_device(device)
    F.activation_desc(_shape(x), activation, parameters)  # its checks, before any block
    fn = functools.partial(_activation_block, activation, parameters, device)
    return x.map_blocks(fn, dtype=x.dtype, name="dml-activation-" + _da_token(
        x, activation, parameters, device))


def _activation_block(activation, parameters, device, x):
    return F.activation(np.ascontiguousarray(x), activation, parameters, device=device)


def batch_normalization(x, mean, variance, scale, bias, epsilon=1e-5, fused_activation=None, *,
                        device="cpu"):
    """Lazy :func:`dml_numba.batch_normalization` of a Dask array; the parameters (in memory)
    go whole to every block, the channel axis taken whole."""
    x = _as_dask(x, "batch_normalization", "x")
    _check_device(device)
    params = [np.asarray(p.compute() if hasattr(p, "compute") else p, x.dtype)
              for p in (mean, variance, scale, bias)]
    params = [p.reshape(F.bias_sizes(p.shape, x.ndim)) if p.ndim == 1 else p for p in params]
    if any(p.shape[2:] != (1,) * (x.ndim - 2) for p in params):
        x = x.rechunk({i: -1 for i in range(2, x.ndim)})  # per-position parameters: whole
    xb = x.rechunk({1: -1})
    F.batch_normalization_desc(_shape(xb), *params, epsilon, fused_activation)
    fn = functools.partial(_batch_normalization_block, params, epsilon, fused_activation, device)
    return xb.map_blocks(fn, dtype=x.dtype, name="dml-batch_normalization-" + _da_token(
        xb, params, epsilon, fused_activation, device))


def _batch_normalization_block(params, epsilon, activation, device, x):
    return F.batch_normalization(np.ascontiguousarray(x), *params, epsilon, activation,
                                 device=device)


def gemm(a, b, c=None, trans_a=False, trans_b=False, alpha=1.0, beta=1.0,
         fused_activation=None, *, device="cpu"):
    """Lazy :func:`dml_numba.gemm` of a Dask array ``a`` by ``b`` (in memory, or a Dask array):
    block by block along ``a``'s batch axes and its M axis, K and N taken whole; ``b`` and
    ``c`` (broadcast to the output) cut along the same batch blocks."""
    da = _da()
    a = _as_dask(a, "gemm", "a")
    _check_device(device)
    b = _lazy_operand(b).astype(a.dtype)
    desc = F.gemm_desc(_shape(a), _shape(b), None, trans_a, trans_b, alpha, beta,
                       fused_activation)
    batch = [f"i{d}" for d in range(a.ndim - 2)]
    a_ix = batch + (["k", "m"] if trans_a else ["m", "k"])
    b_ix = batch + (["n", "k"] if trans_b else ["k", "n"])
    a = a.rechunk({a_ix.index("k"): -1})
    b = b.rechunk(a.chunks[:-2] + (-1, -1))
    args = [a, tuple(a_ix), b, tuple(b_ix)]
    if c is not None:
        cz = _lazy_operand(c).astype(a.dtype)
        cz = da.broadcast_to(cz, desc.output.sizes).rechunk(
            a.chunks[:-2] + (a.chunks[a_ix.index("m")], -1))
        args += [cz, tuple(batch + ["m", "n"])]
    fn = functools.partial(_gemm_block, trans_a, trans_b, alpha, beta, fused_activation, device)
    return da.blockwise(fn, tuple(batch + ["m", "n"]), *args, concatenate=True, dtype=a.dtype,
                        name="dml-gemm-" + _da_token(*args[::2], desc, device))


def _gemm_block(trans_a, trans_b, alpha, beta, activation, device, a, b, c=None):
    return F.gemm(np.ascontiguousarray(a), np.ascontiguousarray(b),
                  None if c is None else np.ascontiguousarray(c), trans_a, trans_b, alpha, beta,
                  activation, device=device)
