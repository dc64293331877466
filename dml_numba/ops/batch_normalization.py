"""DML_BATCH_NORMALIZATION_OPERATOR_DESC (docs/SEMANTICS.md §10), inference.

``Y = Scale * (X - Mean) / sqrt(Variance + Epsilon) + Bias``, then the fused activation. The
four parameter tensors have the input's rank and sizes ``{1, C, 1, ...}`` when Spatial (one
value per channel: what every CNN uses) or ``{1, C, spatial...}`` when not (one per channel and
position); a parameter may have 1 for C (one value for every channel, broadcast). Computed in
the input's accumulator type (float32 for float16 and float32).
"""
from __future__ import annotations

__all__ = ["BatchNormalizationOperatorDesc"]

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

PARAMETERS = ("mean_tensor", "variance_tensor", "scale_tensor", "bias_tensor")


def parameter_sizes(input_sizes, spatial: bool) -> tuple:
    """The sizes a parameter tensor has: ``(1, C, 1...)``, or ``(1, C, spatial...)``."""
    rest = (1,) * (len(input_sizes) - 2) if spatial else tuple(input_sizes[2:])
    return (1, input_sizes[1]) + rest


@dataclass(frozen=True)
class BatchNormalizationOperatorDesc(OperatorDesc):
    """DML_BATCH_NORMALIZATION_OPERATOR_DESC (FL1.0).

    >>> x, p = TensorDesc(1, (2, 3, 4, 4)), TensorDesc(1, (1, 3, 1, 1))
    >>> d = BatchNormalizationOperatorDesc(x, p, p, p, p, x, True, 1e-5)
    """

    input_tensor: TensorDesc
    mean_tensor: TensorDesc
    variance_tensor: TensorDesc
    scale_tensor: TensorDesc
    bias_tensor: TensorDesc
    output_tensor: TensorDesc
    spatial: bool
    epsilon: float
    fused_activation: ActivationDesc | None = None

    input_fields = ("input_tensor",) + PARAMETERS
    exact = False
    batch_separable = True

    def _validate(self, c):
        inp = check_tensor(c, "input_tensor", self.input_tensor)
        check_rank(c, "input_tensor", inp, 3, 5)
        check_type(c, "input_tensor", inp, COMPUTE_TYPES, " (FLOAT64 is a dml_numba extension)")
        self._set("spatial", c.boolean("spatial", self.spatial))
        eps = c.real("epsilon", self.epsilon)
        if eps < 0:
            c.fail("epsilon", eps, "expected a real number >= 0")
        self._set("epsilon", eps)
        self._set("fused_activation", _check_activation(c, self.fused_activation))
        want = parameter_sizes(inp.sizes, self.spatial)
        for field in PARAMETERS:
            t = check_tensor(c, field, getattr(self, field))
            check_same_type(c, field, t, inp, "input_tensor")
            check_same_rank(c, field, t, inp, "input_tensor")
            if t.sizes != want and t.sizes != (1, 1) + want[2:]:
                c.fail(f"{field}.sizes", t.sizes, f"expected {want} ({{1, C, 1...}} when "
                       "spatial, else {1, C, spatial...}; 1 for C broadcasts)")
        out = check_tensor(c, "output_tensor", self.output_tensor)
        check_same_type(c, "output_tensor", out, inp, "input_tensor")
        check_output_sizes(c, "output_tensor", out, inp.sizes, "the input's sizes")

    def flops(self) -> int:
        """A subtraction, a multiplication and an addition per element (the factor per
        parameter position)."""
        return 3 * self.output_tensor.element_count
