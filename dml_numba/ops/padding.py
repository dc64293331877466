"""DML_PADDING_OPERATOR_DESC and DML_PADDING1_OPERATOR_DESC (SEMANTICS 4).

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

import enum
import math
from dataclasses import dataclass

import numpy as np

from .._dtypes import ALL_TYPES, DataType
from .._errors import Checker
from ..tensor import MAX_RANK, TensorDesc
from ._base import OperatorDesc, check_output_sizes, check_unary_tensors


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


def _validate_common(c: Checker, desc):
    inp, out = check_unary_tensors(c, desc, ALL_TYPES, 1, MAX_RANK)
    desc._set("padding_mode", c.enum("padding_mode", desc.padding_mode, PaddingMode))
    start = c.int_tuple("start_padding", desc.start_padding, length=inp.rank, lo=0)
    end = c.int_tuple("end_padding", desc.end_padding, length=inp.rank, lo=0)
    desc._set("start_padding", start)
    desc._set("end_padding", end)
    check_output_sizes(c, "output_tensor", out,
                       (n + s + e for n, s, e in zip(inp.sizes, start, end)),
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


def padding_output_sizes(sizes, start_padding, end_padding) -> tuple[int, ...]:
    return tuple(n + s + e for n, s, e in zip(sizes, start_padding, end_padding))


def padding(x, start_padding, end_padding, mode=PaddingMode.CONSTANT, value=0, *,
            device="cpu", out=None):
    """Pad ``x`` per axis. ``mode``: a PaddingMode or its name ("reflection", ...).

    >>> import numpy as np
    >>> padding(np.array([1., 2.], np.float32), (5,), (5,), "reflection", device="numpy")
    array([2., 1., 2., 1., 2., 1., 2., 1., 2., 1., 2., 1.], dtype=float32)
    """
    from .._api import run_functional
    from ..tensor import as_array

    x = as_array(x, "padding", "x")

    def make_desc():
        m = _enum_by_name(PaddingMode, mode, "padding", "mode") if isinstance(mode, str) else mode
        inp = TensorDesc.like(x)
        start, end = tuple(start_padding), tuple(end_padding)
        outp = TensorDesc(inp.data_type, padding_output_sizes(inp.sizes, start, end)
                          if len(start) == len(end) == inp.rank else inp.sizes)
        v = value
        if not inp.data_type.is_float and isinstance(v, float) and v.is_integer():
            v = int(v)
        return Padding1OperatorDesc(inp, outp, m, inp.data_type, v, start, end)

    return run_functional("padding", (x, start_padding, end_padding, mode, value), make_desc,
                          (x,), device, out)


def _enum_by_name(enum_type, name, owner, field):
    try:
        return enum_type[name.upper()]
    except KeyError:
        Checker(owner).fail(field, name, "expected one of " +
                            ", ".join(m.name.lower() for m in enum_type))


_PAD_KIND = {PaddingMode.CONSTANT: "shift", PaddingMode.EDGE: "clamp",
             PaddingMode.REFLECTION: "reflect", PaddingMode.SYMMETRIC: "symmetric",
             PaddingMode.WRAP: "wrap"}


def gather_plan(desc: Padding1OperatorDesc):
    """Per-axis index maps for the jitted backends (see dml_numba._gather)."""
    from .._gather import AxisMap, GatherPlan

    kind = _PAD_KIND[desc.padding_mode]
    maps = tuple(AxisMap(kind, n, o, a) for n, o, a in
                 zip(desc.input_tensor.sizes, desc.output_tensor.sizes, desc.start_padding))
    return GatherPlan(maps, desc.padding_value if kind == "shift" else None)
