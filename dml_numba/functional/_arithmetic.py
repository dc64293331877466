"""The functional layer's arithmetic: element-wise addition and multiplication, the
activations, batch normalization, GEMM."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from .._binding import as_array
from .._errors import Checker
from ..ops import gemm as _gemm
from ..ops.activation import FUSABLE_ACTIVATIONS, from_name
from ..ops.batch_normalization import BatchNormalizationOperatorDesc
from ..ops.element_wise import ElementWiseAdd1OperatorDesc, ElementWiseMultiplyOperatorDesc
from ..ops.gemm import GemmOperatorDesc, MatrixTransform
from ..tensor import TensorDesc
from ._call import _like, _scalar, run
from ._convolution import bias_sizes


def _broadcast(owner, arrays, fields):
    """Arrays broadcast NumPy's way to one shape (views with strides of 0: DirectML's
    broadcasting), the first one's data type given to the others where exact."""
    first = as_array(arrays[0], owner, fields[0])
    xs = [first] + [_like(first, a, owner, f) for a, f in zip(arrays[1:], fields[1:])]
    if not all(isinstance(a, np.ndarray) for a in xs):
        return xs  # device arrays: as they are (the descriptor's checks name a mismatch)
    try:
        shape = np.broadcast_shapes(*(a.shape for a in xs))
    except ValueError:
        Checker(owner).fail(f"{fields[1]}.shape", tuple(xs[1].shape),
                            f"expected a shape that broadcasts with {fields[0]}'s "
                            f"{tuple(xs[0].shape)} (NumPy's rule)")
    return [a if a.shape == shape else np.broadcast_to(a, shape) for a in xs]


def element_wise_add(a, b, fused_activation=None, *, device="cpu", out=None):
    """``a + b`` (broadcast NumPy's way), then ``fused_activation`` (a fusable activation
    descriptor, or None).

    >>> import numpy as np
    >>> element_wise_add(np.array([1., -3.], np.float32), 1.0, device="numpy")
    array([ 2., -2.], dtype=float32)
    """
    x0, b0 = a, b
    a, b = _broadcast("element_wise_add", [a, b], ["a", "b"])
    return run("element_wise_add", (a, b), (fused_activation,), element_wise_add_desc, (a, b),
               device, out, x0, (x0, b0))


def element_wise_add_desc(a, b, fused_activation=None):
    """The descriptor :func:`element_wise_add` runs (``a`` and ``b`` of one shape)."""
    ta, tb = TensorDesc.like(a), TensorDesc.like(b)
    return ElementWiseAdd1OperatorDesc(ta, tb, TensorDesc(ta.data_type, ta.sizes),
                                       fused_activation)


def element_wise_multiply(a, b, *, device="cpu", out=None):
    """``a * b`` (broadcast NumPy's way).

    >>> import numpy as np
    >>> element_wise_multiply(np.array([1, -3], np.int32), 2, device="numpy")
    array([ 2, -6], dtype=int32)
    """
    x0, b0 = a, b
    a, b = _broadcast("element_wise_multiply", [a, b], ["a", "b"])
    return run("element_wise_multiply", (a, b), (), element_wise_multiply_desc, (a, b), device,
               out, x0, (x0, b0))


def element_wise_multiply_desc(a, b):
    """The descriptor :func:`element_wise_multiply` runs (``a`` and ``b`` of one shape)."""
    ta, tb = TensorDesc.like(a), TensorDesc.like(b)
    return ElementWiseMultiplyOperatorDesc(ta, tb, TensorDesc(ta.data_type, ta.sizes))


def activation(x, activation, parameters=None, *, device="cpu", out=None):
    """``activation`` of every element of ``x``: an activation descriptor (its parameters; its
    tensors, where it has them, become ``x``'s) or DirectML's name of one (``"relu"``,
    ``"leaky_relu"``, ``"clip"``... :data:`dml_numba.ops.activation.BY_NAME`) with
    ``parameters`` in its fields' order (those left out keep their defaults).

    >>> import numpy as np
    >>> activation(np.array([-2., 3.], np.float32), "leaky_relu", [0.5], device="numpy")
    array([-1.,  3.], dtype=float32)
    """
    x0, x = x, as_array(x, "activation", "x")
    return run("activation", (x,), (activation, parameters), activation_desc, (x,), device, out,
               x0)


def activation_desc(x, activation, parameters=None):
    """The descriptor :func:`activation` runs: the activation's standalone form over ``x``."""
    c = Checker("activation")
    if type(activation) in FUSABLE_ACTIVATIONS:
        if parameters is not None and np.size(parameters):
            c.fail("parameters", parameters, "expected None with an activation descriptor (its "
                   "parameters are its fields)")
        base = activation
    else:
        base = from_name(c, "activation", activation, parameters)
    t = TensorDesc.like(x)
    return replace(base, input_tensor=t, output_tensor=TensorDesc(t.data_type, t.sizes))


def batch_normalization(x, mean, variance, scale, bias, epsilon=1e-5, fused_activation=None,
                        *, device="cpu", out=None):
    """Inference batch normalization of ``x`` (N, C, spatial...): ``scale * (x - mean) /
    sqrt(variance + epsilon) + bias``, then ``fused_activation``. Each parameter is per channel,
    (C,) or (1, C, 1...), or per channel and position, (1, C, spatial...).

    >>> import numpy as np
    >>> batch_normalization(np.array([[[2.], [4.]]], np.float32), [1, 2], [4, 4], [1, 1],
    ...                     [0, 1], epsilon=0.0, device="numpy")
    array([[[0.5],
            [2. ]]], dtype=float32)
    """
    x0, x = x, as_array(x, "batch_normalization", "x")
    nd = getattr(x, "ndim", 0)
    params = []
    for name, v in zip(("mean", "variance", "scale", "bias"), (mean, variance, scale, bias)):
        p = _like(x, v, "batch_normalization", name)
        if getattr(p, "ndim", None) == 1:
            p = p.reshape(bias_sizes(p.shape, nd))
        params.append(p)
    return run("batch_normalization", (x, *params), (epsilon, fused_activation),
               batch_normalization_desc, (x, *params), device, out, x0,
               (x0, mean, variance, scale, bias))


def batch_normalization_desc(x, mean, variance, scale, bias, epsilon=1e-5,
                             fused_activation=None):
    """The descriptor :func:`batch_normalization` runs (parameters of the input's rank)."""
    inp = TensorDesc.like(x)
    ts = [TensorDesc.like(p) for p in (mean, variance, scale, bias)]
    spatial = all(t.sizes[2:] == (1,) * (t.rank - 2) for t in ts)
    return BatchNormalizationOperatorDesc(inp, *ts, TensorDesc(inp.data_type, inp.sizes),
                                          spatial, _scalar(epsilon), fused_activation)


def gemm(a, b, c=None, trans_a=False, trans_b=False, alpha=1.0, beta=1.0,
         fused_activation=None, *, device="cpu", out=None):
    """``alpha * op(a) @ op(b) + beta * c`` over the last two axes (``op``: transposed where
    asked), then ``fused_activation``; ``c`` broadcasts NumPy's way to the product's shape.

    >>> import numpy as np
    >>> gemm(np.eye(2, dtype=np.float32), [[1, 2], [3, 4]], [10, 20], trans_b=True,
    ...      device="numpy")
    array([[11., 23.],
           [12., 24.]], dtype=float32)
    """
    a0, b0, c0 = a, b, c
    a = as_array(a, "gemm", "a")
    b = _like(a, b, "gemm", "b")
    inputs = [a, b]
    if c is not None:
        c = _like(a, c, "gemm", "c")
        if isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and \
                isinstance(c, np.ndarray) and a.ndim == b.ndim >= 2:  # else the desc says why
            sizes = _gemm.output_sizes(a.shape, b.shape, _scalar(trans_a), _scalar(trans_b))
            try:
                c = np.broadcast_to(c, sizes)
            except ValueError:
                Checker("gemm").fail("c.shape", tuple(c.shape), "expected a shape that "
                                     f"broadcasts to the product's {sizes}")
        inputs.append(c)
    return run("gemm", (a, b, c), (trans_a, trans_b, alpha, beta, fused_activation), gemm_desc,
               tuple(inputs), device, out, a0, (a0, b0) + ((c0,) if c0 is not None else ()))


def gemm_desc(a, b, c=None, trans_a=False, trans_b=False, alpha=1.0, beta=1.0,
              fused_activation=None):
    """The descriptor :func:`gemm` runs (``c``, if any, of the output's shape)."""
    ta, tb = TensorDesc.like(a), TensorDesc.like(b)
    owner = Checker("gemm")
    t_a = MatrixTransform.TRANSPOSE if _scalar(trans_a) else MatrixTransform.NONE
    t_b = MatrixTransform.TRANSPOSE if _scalar(trans_b) else MatrixTransform.NONE
    sizes = _gemm.output_sizes(ta.sizes, tb.sizes, t_a, t_b, owner) if ta.rank >= 2 and \
        tb.rank >= 2 else ta.sizes
    tc = TensorDesc.like(c) if c is not None else None
    return GemmOperatorDesc(ta, tb, tc, TensorDesc(ta.data_type, sizes), t_a, t_b,
                            _scalar(alpha), _scalar(beta), fused_activation)
