"""DML_ELEMENT_WISE_ADD_OPERATOR_DESC, ADD1 and MULTIPLY (docs/SEMANTICS.md §9).

``Y = A + B`` (ADD1: then its fused activation) and ``Y = A * B``, element by element. Every
tensor has the output's sizes: broadcasting is a stride of 0 in a tensor's strides, as in
DirectML (the functional layer broadcasts NumPy's way by binding such views). Integers wrap
around in their type (two's complement), floats follow IEEE 754 in the tensor's type (float16
computed in float32 and rounded once: exact for one addition or product). ADD canonicalises to
ADD1.
"""
from __future__ import annotations

__all__ = ["ElementWiseAddOperatorDesc", "ElementWiseAdd1OperatorDesc",
           "ElementWiseMultiplyOperatorDesc"]

from dataclasses import dataclass

from .._dims import packed_strides
from .._dtypes import ALL_TYPES, FLOAT_TYPES
from ..tensor import TensorDesc
from ._base import OperatorDesc, check_same_type, check_tensor, check_type
from .activation import ActivationDesc
from .convolution import _check_activation


def check_same_sizes(c, field, t, ref, ref_field):
    if t.sizes != ref.sizes:
        c.fail(f"{field}.sizes", t.sizes, f"expected {ref.sizes}, the sizes of {ref_field} "
                                          "(broadcast through strides of 0)")


def _validate(c, d, activation=None):
    a = check_tensor(c, "a_tensor", d.a_tensor)
    b = check_tensor(c, "b_tensor", d.b_tensor)
    out = check_tensor(c, "output_tensor", d.output_tensor)
    check_type(c, "a_tensor", a, FLOAT_TYPES if activation is not None else ALL_TYPES,
               " (a fused activation computes in floating point)" if activation else "")
    for field, t in (("b_tensor", b), ("output_tensor", out)):
        check_same_type(c, field, t, a, "a_tensor")
        check_same_sizes(c, field, t, a, "a_tensor")


class _Binary:
    """What the binary operators share (a mixin: not a descriptor of its own)."""

    input_fields = ("a_tensor", "b_tensor")
    in_place = True  # DirectML's element-wise operators may run in place

    def flops(self) -> int:
        return self.output_tensor.element_count


@dataclass(frozen=True)
class ElementWiseAdd1OperatorDesc(_Binary, OperatorDesc):
    """DML_ELEMENT_WISE_ADD1_OPERATOR_DESC (FL2.0): ``A + B``, then the fused activation.

    >>> t = TensorDesc(1, (2, 3))
    >>> d = ElementWiseAdd1OperatorDesc(t, t, t)
    """

    a_tensor: TensorDesc
    b_tensor: TensorDesc
    output_tensor: TensorDesc
    fused_activation: ActivationDesc | None = None

    exact = False  # an activation's formula is computed within a tolerance

    def _validate(self, c):
        self._set("fused_activation", _check_activation(c, self.fused_activation))
        _validate(c, self, self.fused_activation)

    def is_sum(self) -> bool:
        t = self.output_tensor
        return t.data_type.is_float and all(
            x.element_strides == packed_strides(x.sizes)
            for x in (self.a_tensor, self.b_tensor, self.output_tensor))

    def elementwise(self, names) -> list:
        """The element's value as assignments to ``v``, from the input elements ``names`` (the
        element-wise kernels' body): the sum, then the fused activation of it."""
        steps = [f"{names[0]} + {names[1]}"]
        return steps + ([self.fused_activation.expression("v")] if self.fused_activation else [])


@dataclass(frozen=True)
class ElementWiseAddOperatorDesc(_Binary, OperatorDesc):
    """DML_ELEMENT_WISE_ADD_OPERATOR_DESC (FL1.0): ``A + B``."""

    a_tensor: TensorDesc
    b_tensor: TensorDesc
    output_tensor: TensorDesc

    exact = False

    def _validate(self, c):
        _validate(c, self)

    def canonical(self):
        return ElementWiseAdd1OperatorDesc(self.a_tensor, self.b_tensor, self.output_tensor)


@dataclass(frozen=True)
class ElementWiseMultiplyOperatorDesc(_Binary, OperatorDesc):
    """DML_ELEMENT_WISE_MULTIPLY_OPERATOR_DESC (FL1.0): ``A * B``."""

    a_tensor: TensorDesc
    b_tensor: TensorDesc
    output_tensor: TensorDesc

    exact = False

    def _validate(self, c):
        _validate(c, self)

    def elementwise(self, names) -> list:
        return [f"{names[0]} * {names[1]}"]
