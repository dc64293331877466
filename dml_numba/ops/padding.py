"""DML_PADDING_OPERATOR_DESC and DML_PADDING1_OPERATOR_DESC (docs/SEMANTICS.md §4).

``Out.Sizes[i] = In.Sizes[i] + StartPadding[i] + EndPadding[i]``. Per axis, output coordinate
``o`` reads input coordinate ``src(o - StartPadding)``:

* CONSTANT: the padding value outside ``[0, n)``;
* EDGE: ``clamp(i, 0, n-1)``;
* REFLECTION: period ``2(n-1)``, edge not repeated (``n == 1`` reads element 0) [INFERRED];
* SYMMETRIC: period ``2n``, edge repeated;
* WRAP: ``i mod n`` [INFERRED: only the enum value and FL6.4 are documented].

Pads wider than the input are legal in every mode (the mirror modes fold repeatedly).
"""
from __future__ import annotations

__all__ = ["PaddingMode", "PaddingOperatorDesc", "Padding1OperatorDesc"]

import enum
import math
from dataclasses import dataclass

import numpy as np

from .._dtypes import ALL_TYPES, DataType
from .._errors import Checker
from ..tensor import MAX_RANK, TensorDesc
from ._base import (
    AxisMap,
    GatherPlan,
    OperatorDesc,
    check_output_sizes,
    check_unary_tensors,
)


class PaddingMode(enum.IntEnum):
    """DML_PADDING_MODE."""

    CONSTANT = 0
    EDGE = 1
    REFLECTION = 2
    SYMMETRIC = 3
    WRAP = 4


def convert_padding_value(value: float, data_type: DataType):
    """PADDING's FLOAT value in the tensor's type [INFERRED beyond "10.6 becomes 10"].

    Float types: rounded to the type (FLOAT16 round-to-nearest). Integer types: truncated toward
    zero, saturated to the type's range, NaN becomes 0 (what GPU ftoi/ftou do).
    """
    value = float(np.float32(value))  # the desc's field is a C FLOAT
    if data_type.is_float:
        return float(data_type.numpy.type(value))
    info = np.iinfo(data_type.numpy)
    if math.isnan(value):
        return 0
    if math.isinf(value):
        return info.max if value > 0 else info.min
    return int(min(max(math.trunc(value), info.min), info.max))


def output_sizes(c: Checker, input_sizes, start_padding, end_padding) -> tuple[int, ...]:
    """The shape rule: ``input + start + end`` per axis. Checks the paddings (one per axis,
    each 0 <= p < 2**32) and returns the output sizes; ``c`` names the caller in errors."""
    rank = len(input_sizes)
    start = c.int_tuple("start_padding", start_padding, length=rank, lo=0)
    end = c.int_tuple("end_padding", end_padding, length=rank, lo=0)
    return tuple(n + s + e for n, s, e in zip(input_sizes, start, end))


def _validate_common(c: Checker, desc):
    inp, out = check_unary_tensors(c, desc, ALL_TYPES, 1, MAX_RANK)
    desc._set("padding_mode", c.enum("padding_mode", desc.padding_mode, PaddingMode))
    sizes = output_sizes(c, inp.sizes, desc.start_padding, desc.end_padding)
    desc._set("start_padding", tuple(int(v) for v in desc.start_padding))
    desc._set("end_padding", tuple(int(v) for v in desc.end_padding))
    check_output_sizes(c, "output_tensor", out, sizes,
                       "input_tensor.sizes + start_padding + end_padding")


@dataclass(frozen=True)
class Padding1OperatorDesc(OperatorDesc):
    """DML_PADDING1_OPERATOR_DESC (FL5.0; WRAP from FL6.4): 1-8 D, all 11 data types.

    ``padding_value`` is the DML_SCALAR_UNION member of ``padding_value_data_type``, which must
    equal the output's data type: an integer in the type's range for integer types, a real
    number for float types (FLOAT16 is rounded to nearest). 64-bit integers are exact.

    >>> x = TensorDesc(DataType.INT64, (2, 3))
    >>> d = Padding1OperatorDesc(x, TensorDesc(DataType.INT64, (2, 6)), PaddingMode.CONSTANT,
    ...                          DataType.INT64, 2**62 + 1, (0, 1), (0, 2))
    """

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    padding_mode: PaddingMode
    padding_value_data_type: DataType
    padding_value: float | int
    start_padding: tuple
    end_padding: tuple

    def _validate(self, c):
        _validate_common(c, self)
        vt = c.enum("padding_value_data_type", self.padding_value_data_type, DataType)
        self._set("padding_value_data_type", vt)
        if vt != self.output_tensor.data_type:
            c.fail("padding_value_data_type", vt.name,
                   f"expected {self.output_tensor.data_type.name}, the output's data type")
        if vt.is_float:
            v = c.real("padding_value", self.padding_value, finite=False)
            self._set("padding_value", float(vt.numpy.type(v)))
        else:
            info = np.iinfo(vt.numpy)
            self._set("padding_value", c.integer("padding_value", self.padding_value,
                                                 lo=int(info.min), hi=int(info.max)))

    def gather_plan(self) -> GatherPlan:
        """Per-axis index maps: the padding mode's fold of ``o - start_padding``."""
        kind = _PAD_KIND[self.padding_mode]
        maps = tuple(AxisMap(kind, n, o, a) for n, o, a in
                     zip(self.input_tensor.sizes, self.output_tensor.sizes, self.start_padding))
        return GatherPlan(maps, self.padding_value if kind == "shift" else None)


@dataclass(frozen=True)
class PaddingOperatorDesc(OperatorDesc):
    """DML_PADDING_OPERATOR_DESC: a FLOAT ``padding_value`` converted to the tensor's type.

    Integer tensors: truncation toward zero, saturation, NaN -> 0 [INFERRED]; see
    :func:`convert_padding_value`. Canonicalises to :class:`Padding1OperatorDesc`.
    """

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    padding_mode: PaddingMode
    padding_value: float
    start_padding: tuple
    end_padding: tuple

    def _validate(self, c):
        _validate_common(c, self)
        self._set("padding_value", c.real("padding_value", self.padding_value, finite=False))

    def canonical(self):
        dt = self.output_tensor.data_type
        return Padding1OperatorDesc(self.input_tensor, self.output_tensor, self.padding_mode, dt,
                                    convert_padding_value(self.padding_value, dt),
                                    self.start_padding, self.end_padding)


_PAD_KIND = {PaddingMode.CONSTANT: "shift", PaddingMode.EDGE: "clamp",
             PaddingMode.REFLECTION: "reflect", PaddingMode.SYMMETRIC: "symmetric",
             PaddingMode.WRAP: "wrap"}


