"""The 18 activations DirectML can fuse into CONVOLUTION, which are also operators of their own
(DML_ACTIVATION_*_OPERATOR_DESC, ELEMENT_WISE_CLIP; docs/SEMANTICS.md §2, "Fusable
activations").

One frozen dataclass per DML desc, fields in DirectML's order, defaults from DirectMLX's
``dml::FusedActivation``. DirectML uses one struct for both uses: as an operator's
``fused_activation`` its tensors are null (here: ``input_tensor`` and ``output_tensor`` None,
keyword-only, so ``ActivationLinearOperatorDesc(2.0, 1.0)`` reads as in the fused form); given
both, it is an operator of one input and one output of the same sizes and type. Each knows its
formula once, as ``expression(x)``: a string of Python that the vectorised device evaluates
with NumPy and the generated kernels with ``math`` -- the same formula for every device -- and
its derivative as ``derivative(x)`` (the gradient of the standalone operator).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, fields, replace

import numpy as np

from .._dtypes import FLOAT_TYPES, DataType
from ..tensor import MAX_RANK, TensorDesc
from ._base import OperatorDesc, check_unary_tensors

#: The one contract between the activation formulas and every device: an expression may call
#: exactly these functions (scalar semantics; ``where(c, a, b)`` is ``a if c else b``). The
#: jitted backends import them from ``math`` (``where`` is generated), the numpy device binds
#: NumPy's functions of the same names and checks at import that it binds exactly this set.
FUNCTIONS = ("erf", "exp", "expm1", "fabs", "log1p", "tanh", "where")

#: a field that is null (None) in the fused form: left out where a fused activation is
#: described (generated sources' headers), as DirectML leaves it unread
NULL_WHEN_FUSED = {"null_when_fused": True}


def parameter_fields(activation) -> list:
    """The fields of an activation (class or instance) that are parameters, not its tensors."""
    return [f for f in fields(activation) if not f.metadata.get("null_when_fused")]


@dataclass(frozen=True, repr=False)
class ActivationDesc(OperatorDesc, abstract=True):
    """Base of the activation descriptors. ``expression`` returns source computing the
    activation of variable ``x`` with the functions in :data:`FUNCTIONS` only; ``derivative``
    its derivative with respect to ``x`` the same way.

    Fused form (both tensors None): only the parameters are read. Standalone form (both given):
    ``output = f(input)`` element by element; float types (FLOAT16 computed in float32 and
    rounded once), the output of the input's type and sizes (the input may broadcast through
    strides of 0)."""

    input_tensor: TensorDesc | None = field(default=None, kw_only=True, metadata=NULL_WHEN_FUSED)
    output_tensor: TensorDesc | None = field(default=None, kw_only=True,
                                             metadata=NULL_WHEN_FUSED)

    exact = False  # a formula computed within a tolerance
    batch_separable = True
    in_place = True  # as DirectML's activations may run
    #: the types of the standalone form (DirectML's float types and our FLOAT64; RELU adds
    #: DirectML's integer ones)
    data_types = FLOAT_TYPES

    def _validate(self, c):
        for f in parameter_fields(self):
            v = getattr(self, f.name)
            if f.name == "scale_bias":
                if v is not None:
                    if not hasattr(v, "__len__") or len(v) != 2:
                        c.fail("scale_bias", v, "expected None or (scale, bias)")
                    v = (c.real("scale_bias[0]", v[0]), c.real("scale_bias[1]", v[1]))
            else:
                v = c.real(f.name, v)
            self._set(f.name, v)
        self._check(c)
        if self.input_tensor is None and self.output_tensor is None:
            return  # the fused form
        for name, other in (("input_tensor", "output_tensor"), ("output_tensor", "input_tensor")):
            if getattr(self, name) is None:
                c.fail(name, None, f"expected a TensorDesc, as {other} is given (both None: "
                                   "the fused form; both given: the operator of its own)")
        inp, out = check_unary_tensors(
            c, self, self.data_types, 1, MAX_RANK,
            "" if self.data_types != FLOAT_TYPES else " (this activation computes in floating "
                                                       "point)")
        if out.sizes != inp.sizes:
            c.fail("output_tensor.sizes", out.sizes,
                   f"expected {inp.sizes}, the sizes of input_tensor")

    def _check(self, c):
        pass

    def __repr__(self):  # the fused form without its null tensors
        return type(self).__name__ + "(" + ", ".join(
            f"{f.name}={getattr(self, f.name)!r}" for f in fields(self)
            if not (f.metadata.get("null_when_fused") and getattr(self, f.name) is None)) + ")"

    @property
    def fused(self) -> bool:
        """Whether this is the fused form (no tensors: an operator's ``fused_activation``)."""
        return self.input_tensor is None

    def as_fused_activation(self):
        return None if self.fused else replace(self, input_tensor=None, output_tensor=None)

    def parameters(self) -> tuple:
        """The parameters in field order (ELEMENT_WISE_CLIP's scale and bias last, where
        given): what :func:`from_name` takes back."""
        values = []
        for f in parameter_fields(self):
            v = getattr(self, f.name)
            values.extend(() if v is None else v if isinstance(v, tuple) else (v,))
        return tuple(values)

    @classmethod
    def activation_name(cls) -> str:
        """DirectML's name of the activation, lower case: ``relu``, ``leaky_relu``, ``clip``."""
        core = cls.__name__.removesuffix("OperatorDesc")
        core = core.removeprefix("Activation").removeprefix("ElementWise")
        return re.sub(r"(?<!^)(?=[A-Z])", "_", core).lower()

    def flops(self) -> int:
        return self.output_tensor.element_count if self.output_tensor is not None else 0

    def elementwise(self, names) -> list:
        """The element's value as assignments to ``v``, from the input element ``names[0]``
        (the element-wise kernels' body)."""
        return [self.expression(names[0])]

    def expression(self, x: str) -> str:  # pragma: no cover - every activation overrides it
        raise NotImplementedError

    def derivative(self, x: str) -> str:  # pragma: no cover - every activation overrides it
        raise NotImplementedError


def _lit(v: float) -> str:
    return repr(float(v))


def _sigmoid(z: str) -> str:
    return f"(1.0 / (1.0 + exp(-{z})))"


def _softplus(z: str) -> str:
    # ln(1 + e^z) without overflow: max(z, 0) + log1p(e^-|z|)
    return f"(where({z} > 0.0, {z}, 0.0) + log1p(exp(-fabs({z}))))"


@dataclass(frozen=True, repr=False)
class ActivationLinearOperatorDesc(ActivationDesc):
    """alpha * x + beta."""
    alpha: float
    beta: float

    def expression(self, x):
        return f"({_lit(self.alpha)} * {x} + {_lit(self.beta)})"

    def derivative(self, x):
        return _lit(self.alpha)


@dataclass(frozen=True, repr=False)
class ActivationSigmoidOperatorDesc(ActivationDesc):
    """1 / (1 + e^-x)."""

    def expression(self, x):
        return _sigmoid(x)

    def derivative(self, x):
        return f"({_sigmoid(x)} * (1.0 - {_sigmoid(x)}))"


@dataclass(frozen=True, repr=False)
class ActivationHardSigmoidOperatorDesc(ActivationDesc):
    """max(0, min(alpha * x + beta, 1))."""
    alpha: float = 0.2
    beta: float = 0.5

    def expression(self, x):
        z = f"({_lit(self.alpha)} * {x} + {_lit(self.beta)})"
        return f"where({z} > 1.0, 1.0, where({z} > 0.0, {z}, 0.0))"

    def derivative(self, x):
        z = f"({_lit(self.alpha)} * {x} + {_lit(self.beta)})"
        return f"where({z} > 0.0, where({z} < 1.0, {_lit(self.alpha)}, 0.0), 0.0)"


@dataclass(frozen=True, repr=False)
class ActivationTanhOperatorDesc(ActivationDesc):
    """tanh(x)."""

    def expression(self, x):
        return f"tanh({x})"

    def derivative(self, x):
        return f"(1.0 - tanh({x}) * tanh({x}))"


@dataclass(frozen=True, repr=False)
class ActivationScaledTanhOperatorDesc(ActivationDesc):
    """alpha * tanh(beta * x)."""
    alpha: float = 1.0
    beta: float = 0.5

    def expression(self, x):
        return f"({_lit(self.alpha)} * tanh({_lit(self.beta)} * {x}))"

    def derivative(self, x):
        t = f"tanh({_lit(self.beta)} * {x})"
        return f"({_lit(self.alpha * self.beta)} * (1.0 - {t} * {t}))"


@dataclass(frozen=True, repr=False)
class ActivationReluOperatorDesc(ActivationDesc):
    """max(0, x); of its own also on INT32, INT16 and INT8 tensors (FL5.1), exactly."""

    data_types = FLOAT_TYPES + (DataType.INT32, DataType.INT16, DataType.INT8)

    def expression(self, x):
        return f"where({x} > 0.0, {x}, 0.0)"

    def derivative(self, x):
        return f"where({x} > 0.0, 1.0, 0.0)"


@dataclass(frozen=True, repr=False)
class ActivationLeakyReluOperatorDesc(ActivationDesc):
    """x if x >= 0 else alpha * x."""
    alpha: float = 0.01

    def expression(self, x):
        return f"where({x} >= 0.0, {x}, {_lit(self.alpha)} * {x})"

    def derivative(self, x):
        return f"where({x} > 0.0, 1.0, {_lit(self.alpha)})"


@dataclass(frozen=True, repr=False)
class ActivationThresholdedReluOperatorDesc(ActivationDesc):
    """x if x > alpha else 0."""
    alpha: float = 1.0

    def expression(self, x):
        return f"where({x} > {_lit(self.alpha)}, {x}, 0.0)"

    def derivative(self, x):
        return f"where({x} > {_lit(self.alpha)}, 1.0, 0.0)"


@dataclass(frozen=True, repr=False)
class ActivationEluOperatorDesc(ActivationDesc):
    """x if x >= 0 else alpha * (e^x - 1)."""
    alpha: float = 1.0

    def expression(self, x):
        return f"where({x} >= 0.0, {x}, {_lit(self.alpha)} * expm1({x}))"

    def derivative(self, x):
        return f"where({x} > 0.0, 1.0, {_lit(self.alpha)} * exp({x}))"


@dataclass(frozen=True, repr=False)
class ActivationCeluOperatorDesc(ActivationDesc):
    """max(0, x) + min(0, alpha * (e^(x/alpha) - 1)) (FL3.0)."""
    alpha: float = 1.0

    def _check(self, c):
        if self.alpha == 0.0:
            c.fail("alpha", self.alpha, "expected a non-zero alpha (x/alpha is taken)")

    def expression(self, x):
        a = _lit(self.alpha)
        neg = f"({a} * expm1({x} / {a}))"
        return f"(where({x} > 0.0, {x}, 0.0) + where({neg} < 0.0, {neg}, 0.0))"

    def derivative(self, x):
        # the negative part is below 0 exactly where x is (either sign of alpha): its slope
        return f"where({x} > 0.0, 1.0, exp({x} / {_lit(self.alpha)}))"


@dataclass(frozen=True, repr=False)
class ActivationScaledEluOperatorDesc(ActivationDesc):
    """gamma * x if x > 0 else gamma * (alpha * e^x - alpha)."""
    alpha: float = 1.67326319217681884765625
    gamma: float = 1.05070102214813232421875

    def expression(self, x):
        a, g = _lit(self.alpha), _lit(self.gamma)
        return f"where({x} > 0.0, {g} * {x}, {g} * ({a} * exp({x}) - {a}))"

    def derivative(self, x):
        a, g = _lit(self.alpha), _lit(self.gamma)
        return f"where({x} > 0.0, {g}, {g} * {a} * exp({x}))"


@dataclass(frozen=True, repr=False)
class ActivationSoftplusOperatorDesc(ActivationDesc):
    """ln(1 + e^(steepness * x)) / steepness; steepness > 0 (< 1 allowed from FL6.4)."""
    steepness: float = 1.0

    def _check(self, c):
        if not self.steepness > 0.0:
            c.fail("steepness", self.steepness, "expected steepness > 0")

    def expression(self, x):
        s = _lit(self.steepness)
        return f"({_softplus(f'({s} * {x})')} / {s})"

    def derivative(self, x):
        return _sigmoid(f"({_lit(self.steepness)} * {x})")


@dataclass(frozen=True, repr=False)
class ActivationParametricSoftplusOperatorDesc(ActivationDesc):
    """alpha * ln(1 + e^(beta * x))."""
    alpha: float
    beta: float

    def expression(self, x):
        return f"({_lit(self.alpha)} * {_softplus(f'({_lit(self.beta)} * {x})')})"

    def derivative(self, x):
        return f"({_lit(self.alpha * self.beta)} * {_sigmoid(f'({_lit(self.beta)} * {x})')})"


@dataclass(frozen=True, repr=False)
class ActivationSoftsignOperatorDesc(ActivationDesc):
    """x / (1 + |x|)."""

    def expression(self, x):
        return f"({x} / (1.0 + fabs({x})))"

    def derivative(self, x):
        return f"(1.0 / ((1.0 + fabs({x})) * (1.0 + fabs({x}))))"


@dataclass(frozen=True, repr=False)
class ActivationIdentityOperatorDesc(ActivationDesc):
    """x."""

    def expression(self, x):
        return x

    def derivative(self, x):
        return "1.0"


@dataclass(frozen=True, repr=False)
class ActivationShrinkOperatorDesc(ActivationDesc):
    """x - bias if x > threshold; x + bias if x < -threshold; else 0 (FL2.0)."""
    bias: float = 0.0
    threshold: float = 0.5

    def expression(self, x):
        b, t = _lit(self.bias), _lit(self.threshold)
        return f"where({x} > {t}, {x} - {b}, where({x} < -{t}, {x} + {b}, 0.0))"

    def derivative(self, x):
        t = _lit(self.threshold)
        return f"where({x} > {t}, 1.0, where({x} < -{t}, 1.0, 0.0))"


@dataclass(frozen=True, repr=False)
class ActivationGeluOperatorDesc(ActivationDesc):
    """0.5 * x * (1 + erf(x / sqrt(2))) (FL5.1)."""

    def expression(self, x):
        return f"(0.5 * {x} * (1.0 + erf({x} * {_lit(1 / math.sqrt(2))})))"

    def derivative(self, x):
        return (f"(0.5 * (1.0 + erf({x} * {_lit(1 / math.sqrt(2))})) + {x} * "
                f"{_lit(1 / math.sqrt(2 * math.pi))} * exp(-0.5 * {x} * {x}))")


@dataclass(frozen=True, repr=False)
class ElementWiseClipOperatorDesc(ActivationDesc):
    """min(max, max(min, x * scale + bias)); fusable from FL6.0. ``scale_bias`` is the optional
    DML_SCALE_BIAS as ``(scale, bias)``."""
    min: float
    max: float
    scale_bias: tuple | None = None

    def _check(self, c):
        if self.min > self.max:
            c.fail("min", self.min, f"expected min <= max ({self.max})")

    def expression(self, x):
        if self.scale_bias is not None:
            x = f"({x} * {_lit(self.scale_bias[0])} + {_lit(self.scale_bias[1])})"
        lo, hi = _lit(self.min), _lit(self.max)
        return f"where({x} > {hi}, {hi}, where({x} < {lo}, {lo}, {x}))"

    def derivative(self, x):
        scale = 1.0
        if self.scale_bias is not None:
            scale = self.scale_bias[0]
            x = f"({x} * {_lit(scale)} + {_lit(self.scale_bias[1])})"
        lo, hi = _lit(self.min), _lit(self.max)
        return f"where({x} > {hi}, 0.0, where({x} < {lo}, 0.0, {_lit(scale)}))"


FUSABLE_ACTIVATIONS = (
    ActivationLinearOperatorDesc, ActivationSigmoidOperatorDesc,
    ActivationHardSigmoidOperatorDesc, ActivationTanhOperatorDesc,
    ActivationScaledTanhOperatorDesc, ActivationReluOperatorDesc,
    ActivationLeakyReluOperatorDesc, ActivationThresholdedReluOperatorDesc,
    ActivationEluOperatorDesc, ActivationCeluOperatorDesc, ActivationScaledEluOperatorDesc,
    ActivationSoftplusOperatorDesc, ActivationParametricSoftplusOperatorDesc,
    ActivationSoftsignOperatorDesc, ActivationIdentityOperatorDesc, ActivationShrinkOperatorDesc,
    ActivationGeluOperatorDesc, ElementWiseClipOperatorDesc,
)

#: each activation by its name (:meth:`ActivationDesc.activation_name`)
BY_NAME = {a.activation_name(): a for a in FUSABLE_ACTIVATIONS}


def from_name(c, field: str, name, parameters=()) -> ActivationDesc:
    """The fused form of the activation named ``name`` (``"relu"``, ``"leaky_relu"``...) with
    ``parameters`` in field order (a sequence, or one value for the first; those left out keep
    their defaults; ELEMENT_WISE_CLIP's optional scale and bias as two more), checked with
    ``c`` naming ``field``."""
    if not isinstance(name, str) or name.lower() not in BY_NAME:
        c.fail(field, name, "expected an activation descriptor or one of the names " +
               ", ".join(BY_NAME))
    cls = BY_NAME[name.lower()]
    # a sequence, an array or one value (a scalar, a 0-d array) standing for the first
    values = [] if parameters is None else list(np.ravel(np.asarray(parameters, dtype=object)))
    names = [f.name for f in parameter_fields(cls)]
    if "scale_bias" in names and len(values) == len(names) + 1:
        values = values[:-2] + [tuple(values[-2:])]
    if len(values) > len(names):
        c.fail(f"{field} parameters", tuple(values),
               f"expected at most {len(names)} for {name.lower()} ({', '.join(names)})")
    try:
        return cls(*values)
    except TypeError:  # a parameter without a default left out
        c.fail(f"{field} parameters", tuple(values),
               f"expected {', '.join(names)} for {name.lower()}")


__all__ = ["ActivationDesc", "FUSABLE_ACTIVATIONS"] + [a.__name__ for a in FUSABLE_ACTIVATIONS]
