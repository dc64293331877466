"""Other libraries' arrays at the boundary: host tensors in, the same kind out.

A PyTorch CPU tensor or a JAX CPU array given to a compiled operator or to the functional layer
is viewed as a NumPy array without a copy (DLPack, else ``__array__``); the result comes back
as the kind of the first such input (``torch.from_numpy`` shares the result's memory; JAX
arrays are immutable, so JAX copies it); an ``out=`` tensor is written in place and returned.
Device arrays (PyTorch CUDA tensors, CuPy arrays: ``__cuda_array_interface__``) go to the CUDA
device as they are, and its device result comes back as a CUDA tensor or a CuPy array sharing
its memory.
The libraries are recognised by their type's module, so none of them is imported unless it is
already in use.
"""
from __future__ import annotations

import sys

import numpy as np

#: the libraries whose host arrays come back as they went in
KINDS = ("torch", "jax", "jaxlib", "cupy")


def kind(a) -> str | None:
    """"torch", "jax" or "cupy" for those libraries' arrays; None for anything else."""
    if type(a) is np.ndarray:
        return None
    k = type(a).__module__.partition(".")[0]
    if k == "jaxlib":
        return "jax"
    return k if k in KINDS else None


def on_gpu(a) -> bool:
    """A device array (``__cuda_array_interface__``): used in place by the CUDA device, never
    viewed on the host."""
    return hasattr(a, "__cuda_array_interface__")


def is_tracer(a) -> bool:
    """A JAX tracer (inside ``jax.jit``): an array with no data."""
    return type(a).__name__.endswith("Tracer")


def to_host(a, where: str = "input"):
    """Another library's host array as a NumPy view of it (:func:`host_view`); anything else,
    device arrays included, as it is. ``where`` names the argument in errors."""
    return host_view(a, where) if kind(a) is not None and not on_gpu(a) else a


#: what the operators take, for the message when another library's array is none of them
NUMERIC = "float32, float16, float64, int8..int64 or uint8..uint64"


def host_view(a, where: str = "input"):
    """``a`` as a NumPy array sharing its memory (DLPack where the producer offers it). A
    PyTorch tensor that requires grad is read through ``detach()`` (no gradient flows through
    these operators). A type NumPy lacks or the operators do not take (PyTorch's bfloat16,
    complex and conjugate views, JAX's tracers inside ``jax.jit``) is a ValidationError that
    says so, naming ``where``."""
    from ._errors import ValidationError

    if is_tracer(a):  # jax.jit traces: there is no data to read
        raise ValidationError(
            f"{where}: {type(a).__name__} is invalid; expected an array with data: call "
            "dml_numba outside jax.jit (or through jax.pure_callback), on concrete arrays")
    dtype = str(getattr(a, "dtype", ""))
    if kind(a) == "torch" and ("bfloat16" in dtype or "complex" in dtype or
                                getattr(a, "is_conj", lambda: False)()):
        raise ValidationError(
            f"{where}: a torch tensor of dtype {dtype.replace('torch.', '')} is invalid; "
            f"expected {NUMERIC} (DirectML has no bfloat16 or complex type: convert first, "
            "e.g. .float())")
    if getattr(a, "is_meta", False):
        raise ValidationError(f"{where}: a torch tensor on the meta device is invalid; expected "
                              "a CPU tensor (or a CUDA one on the cuda device): it has no data")
    if getattr(a, "requires_grad", False):
        a = a.detach()
    if getattr(a, "is_cpu", False) and kind(a) == "torch":
        try:
            return a.numpy()  # PyTorch's own view: the quickest way
        except (TypeError, RuntimeError):  # a type NumPy lacks, a lazy negation...
            pass
    try:
        return np.from_dlpack(a)
    except (TypeError, BufferError, RuntimeError, AttributeError):
        pass
    try:
        return np.asarray(a)
    except (TypeError, RuntimeError, ValueError) as exc:
        raise ValidationError(f"{where}: {type(a).__module__}.{type(a).__name__} of dtype "
                              f"{dtype or '?'} is invalid; expected an array of {NUMERIC} "
                              f"({exc})") from None


def needs_grad(inputs) -> bool:
    """A PyTorch tensor among ``inputs`` requires grad and grad mode is on."""
    for a in inputs:
        if getattr(a, "requires_grad", False) and kind(a) == "torch":
            return sys.modules["torch"].is_grad_enabled()
    return False


def with_grad(op, inputs, out=None):
    """``op(*inputs)`` (a compiled operator on PyTorch tensors, some requiring grad) as a node
    of PyTorch's autograd graph: forward the kernel, backward the operator's gradient
    (:func:`dml_numba.grad.backward`), the same formulas as the custom operators'."""
    import torch

    from . import grad as _grad

    _grad.check(op.desc)
    bound = [t.sizes for _, t in op.desc.bound_inputs()]

    class Op(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *tensors):
            ctx.save_for_backward(*tensors)
            y = op(*[as_bound(t.detach(), n) for t, n in zip(tensors, bound)],
                   out=None if out is None else out.detach())
            return y if out is None else out

        @staticmethod
        def backward(ctx, grad):
            xs = [np.ascontiguousarray(as_bound(t.detach().numpy(), n))
                  for t, n in zip(ctx.saved_tensors, bound)]
            grads = _grad.backward(op.desc, xs, np.ascontiguousarray(grad.detach().numpy()))
            return tuple(torch.from_numpy(np.ascontiguousarray(reduce_to(g, t.shape)))
                         for g, t in zip(grads, ctx.saved_tensors))

    tensors = [a if kind(a) == "torch" else torch.as_tensor(np.asarray(a)) for a in inputs]
    dtype = tensors[0].dtype  # a parameter given as a list or of another exact type: x's
    return Op.apply(*[t if t.dtype == dtype else t.to(dtype) for t in tensors])


def as_bound(t, sizes):
    """A tensor or array as the operator binds it: with other sizes (a (C,) bias as (1, C,
    1...)), or broadcast (an operand of an element-wise operator)."""
    sizes = tuple(sizes)
    if tuple(t.shape) == sizes:
        return t
    if int(np.prod(t.shape)) == int(np.prod(sizes)):
        return t.reshape(sizes)
    if isinstance(t, np.ndarray):
        return np.broadcast_to(t, sizes)
    return t.broadcast_to(sizes)


def reduce_to(g, shape):
    """The gradient of a bound input (:func:`as_bound`) as the gradient of the input given:
    reshaped back, or summed over the axes it was broadcast along."""
    shape = tuple(shape)
    if g.size == int(np.prod(shape)):
        return g.reshape(shape)
    lead = g.ndim - len(shape)
    g = g.sum(axis=tuple(range(lead))) if lead > 0 else g
    axes = tuple(i for i, (n, m) in enumerate(zip(g.shape, shape)) if m == 1 and n != 1)
    return g.sum(axis=axes, keepdims=True).reshape(shape) if axes else g.reshape(shape)


def check_out(out, where: str) -> None:
    """PyTorch's own rules for an ``out=`` tensor, before anything is written: not one that
    requires grad while grad mode is on (PyTorch refuses: the write would not be recorded),
    not one on the meta device (no memory to write)."""
    if kind(out) != "torch":
        return
    from ._errors import ValidationError

    if getattr(out, "is_meta", False):
        raise ValidationError(f"{where}: a torch tensor on the meta device is invalid; expected "
                              "a CPU tensor (or a CUDA one on the cuda device) to write into")
    if getattr(out, "requires_grad", False) and sys.modules["torch"].is_grad_enabled():
        raise ValidationError(f"{where}: a torch tensor that requires grad is invalid; expected "
                              "one that does not (PyTorch refuses out= arguments that require "
                              "grad: pass out.detach(), or call under torch.no_grad())")


def as_kind(result, k: str | None):
    """``result`` (a NumPy array, or a device array from the CUDA device) as an array of kind
    ``k``, without a copy where the library can share it."""
    # a device result: the CUDA array interface shares it
    if type(result) is not np.ndarray and on_gpu(result) and k in ("torch", "cupy"):
        if k == "torch":
            import torch

            return torch.as_tensor(result, device="cuda")
        import cupy

        return cupy.asarray(result)
    if k == "torch":
        return sys.modules["torch"].from_numpy(result)  # imported: its tensor came in
    if k == "jax":
        import jax.numpy as jnp

        return jnp.asarray(result)
    return result


def first_kind(arrays) -> str | None:
    for a in arrays:
        k = kind(a)
        if k is not None:
            return k
    return None
