"""DML_GEMM_OPERATOR_DESC (docs/SEMANTICS.md §11).

``Y = Alpha * op(A) @ op(B) + Beta * C``, then the fused activation, per batch: ``op`` is the
transpose of the last two axes when TransA/TransB is TRANSPOSE. Tensors of 2 to 4 dimensions
(DirectML's are 4-D; fewer is a dml_numba extension) whose leading (batch) sizes are the
output's; A is ``{..., M, K}`` (``{..., K, M}`` transposed), B ``{..., K, N}`` (``{..., N, K}``),
C absent or of the output's sizes ``{..., M, N}`` (broadcast through strides of 0). Products
summed in the accumulator type (float32 for float16 and float32; BLAS on the CPU).
"""
from __future__ import annotations

__all__ = ["GemmOperatorDesc", "MatrixTransform"]

import enum
from dataclasses import dataclass

from .._dtypes import COMPUTE_TYPES
from ..tensor import TensorDesc
from ._base import (
    OperatorDesc,
    check_output_sizes,
    check_rank,
    check_same_rank,
    check_same_type,
    check_tensor,
    check_type,
)
from .activation import ActivationDesc
from .convolution import _check_activation


class MatrixTransform(enum.IntEnum):
    """DML_MATRIX_TRANSFORM."""

    NONE = 0
    TRANSPOSE = 1


def output_sizes(a_sizes, b_sizes, trans_a, trans_b, c=None) -> tuple:
    """The shape rule: ``(batch..., M, N)``; with a Checker ``c``, K and the batch sizes
    checked."""
    m, k = (a_sizes[-1], a_sizes[-2]) if trans_a else (a_sizes[-2], a_sizes[-1])
    kb, n = (b_sizes[-1], b_sizes[-2]) if trans_b else (b_sizes[-2], b_sizes[-1])
    if c is not None:
        if k != kb:
            c.fail("b_tensor.sizes", tuple(b_sizes), f"expected K = {k} (A's "
                   f"{'rows' if trans_a else 'columns'}) as B's "
                   f"{'columns' if trans_b else 'rows'}")
        if tuple(a_sizes[:-2]) != tuple(b_sizes[:-2]):
            c.fail("b_tensor.sizes", tuple(b_sizes), f"expected the batch sizes "
                   f"{tuple(a_sizes[:-2])} of a_tensor")
    return tuple(a_sizes[:-2]) + (m, n)


@dataclass(frozen=True)
class GemmOperatorDesc(OperatorDesc):
    """DML_GEMM_OPERATOR_DESC (FL1.0).

    >>> d = GemmOperatorDesc(TensorDesc(1, (2, 3)), TensorDesc(1, (3, 4)), None,
    ...                      TensorDesc(1, (2, 4)), 0, 0, 1.0, 0.0)
    """

    a_tensor: TensorDesc
    b_tensor: TensorDesc
    c_tensor: TensorDesc | None
    output_tensor: TensorDesc
    trans_a: MatrixTransform
    trans_b: MatrixTransform
    alpha: float
    beta: float
    fused_activation: ActivationDesc | None = None

    input_fields = ("a_tensor", "b_tensor", "c_tensor")
    exact = False

    def _validate(self, c):
        a = check_tensor(c, "a_tensor", self.a_tensor)
        b = check_tensor(c, "b_tensor", self.b_tensor)
        ct = check_tensor(c, "c_tensor", self.c_tensor, optional=True)
        out = check_tensor(c, "output_tensor", self.output_tensor)
        check_rank(c, "a_tensor", a, 2, 4)
        check_type(c, "a_tensor", a, COMPUTE_TYPES, " (FLOAT64 is a dml_numba extension)")
        for field, t in (("b_tensor", b), ("c_tensor", ct), ("output_tensor", out)):
            if t is not None:
                check_same_type(c, field, t, a, "a_tensor")
                check_same_rank(c, field, t, a, "a_tensor")
        self._set("trans_a", c.enum("trans_a", self.trans_a, MatrixTransform))
        self._set("trans_b", c.enum("trans_b", self.trans_b, MatrixTransform))
        self._set("alpha", c.real("alpha", self.alpha))
        self._set("beta", c.real("beta", self.beta))
        self._set("fused_activation", _check_activation(c, self.fused_activation))
        want = output_sizes(a.sizes, b.sizes, self.trans_a, self.trans_b, c)
        check_output_sizes(c, "output_tensor", out, want, "(batch..., M, N)")
        if ct is not None:
            check_output_sizes(c, "c_tensor", ct, want, "the output's sizes; broadcast through "
                                                       "strides of 0")

    @property
    def k(self) -> int:
        return self.a_tensor.sizes[-2 if self.trans_a else -1]

    def flops(self) -> int:
        return 2 * self.output_tensor.element_count * self.k
