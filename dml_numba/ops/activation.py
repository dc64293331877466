"""The 18 activations DirectML can fuse into CONVOLUTION (docs/SEMANTICS.md §2).

One frozen dataclass per DML desc, fields in DirectML's order (the null Input/Output tensors of a
fused activation are omitted), defaults from DirectMLX's ``dml::FusedActivation``. Each knows its
formula once, as ``expression(x)``: a string of Python that the vectorised device evaluates
with NumPy and the generated kernels with ``math`` -- the same formula for every device.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

from .._errors import Checker

#: The one contract between the activation formulas and every device: an expression may call
#: exactly these functions (scalar semantics; ``where(c, a, b)`` is ``a if c else b``). The
#: jitted backends import them from ``math`` (``where`` is generated), the numpy device binds
#: NumPy's functions of the same names and checks at import that it binds exactly this set.
FUNCTIONS = ("erf", "exp", "expm1", "fabs", "log1p", "tanh", "where")


class ActivationDesc:
    """Base of the fusable activation descriptors. ``expression`` returns source computing the
    activation of variable ``x`` with the functions in :data:`FUNCTIONS` only."""

    def __post_init__(self):
        c = Checker(type(self).__name__)
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "scale_bias":
                if v is not None:
                    if not hasattr(v, "__len__") or len(v) != 2:
                        c.fail("scale_bias", v, "expected None or (scale, bias)")
                    v = (c.real("scale_bias[0]", v[0]), c.real("scale_bias[1]", v[1]))
            else:
                v = c.real(f.name, v)
            object.__setattr__(self, f.name, v)
        self._check(c)

    def _check(self, c):
        pass

    def expression(self, x: str) -> str:  # pragma: no cover - every activation overrides it
        raise NotImplementedError


def _lit(v: float) -> str:
    return repr(float(v))


def _softplus(z: str) -> str:
    # ln(1 + e^z) without overflow: max(z, 0) + log1p(e^-|z|)
    return f"(where({z} > 0.0, {z}, 0.0) + log1p(exp(-fabs({z}))))"


@dataclass(frozen=True)
class ActivationLinearOperatorDesc(ActivationDesc):
    """alpha * x + beta."""
    alpha: float
    beta: float

    def expression(self, x):
        return f"({_lit(self.alpha)} * {x} + {_lit(self.beta)})"


@dataclass(frozen=True)
class ActivationSigmoidOperatorDesc(ActivationDesc):
    """1 / (1 + e^-x)."""

    def expression(self, x):
        return f"(1.0 / (1.0 + exp(-{x})))"


@dataclass(frozen=True)
class ActivationHardSigmoidOperatorDesc(ActivationDesc):
    """max(0, min(alpha * x + beta, 1))."""
    alpha: float = 0.2
    beta: float = 0.5

    def expression(self, x):
        z = f"({_lit(self.alpha)} * {x} + {_lit(self.beta)})"
        return f"where({z} > 1.0, 1.0, where({z} > 0.0, {z}, 0.0))"


@dataclass(frozen=True)
class ActivationTanhOperatorDesc(ActivationDesc):
    """tanh(x)."""

    def expression(self, x):
        return f"tanh({x})"


@dataclass(frozen=True)
class ActivationScaledTanhOperatorDesc(ActivationDesc):
    """alpha * tanh(beta * x)."""
    alpha: float = 1.0
    beta: float = 0.5

    def expression(self, x):
        return f"({_lit(self.alpha)} * tanh({_lit(self.beta)} * {x}))"


@dataclass(frozen=True)
class ActivationReluOperatorDesc(ActivationDesc):
    """max(0, x)."""

    def expression(self, x):
        return f"where({x} > 0.0, {x}, 0.0)"


@dataclass(frozen=True)
class ActivationLeakyReluOperatorDesc(ActivationDesc):
    """x if x >= 0 else alpha * x."""
    alpha: float = 0.01

    def expression(self, x):
        return f"where({x} >= 0.0, {x}, {_lit(self.alpha)} * {x})"


@dataclass(frozen=True)
class ActivationThresholdedReluOperatorDesc(ActivationDesc):
    """x if x > alpha else 0."""
    alpha: float = 1.0

    def expression(self, x):
        return f"where({x} > {_lit(self.alpha)}, {x}, 0.0)"


@dataclass(frozen=True)
class ActivationEluOperatorDesc(ActivationDesc):
    """x if x >= 0 else alpha * (e^x - 1)."""
    alpha: float = 1.0

    def expression(self, x):
        return f"where({x} >= 0.0, {x}, {_lit(self.alpha)} * expm1({x}))"


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class ActivationScaledEluOperatorDesc(ActivationDesc):
    """gamma * x if x > 0 else gamma * (alpha * e^x - alpha)."""
    alpha: float = 1.67326319217681884765625
    gamma: float = 1.05070102214813232421875

    def expression(self, x):
        a, g = _lit(self.alpha), _lit(self.gamma)
        return f"where({x} > 0.0, {g} * {x}, {g} * ({a} * exp({x}) - {a}))"


@dataclass(frozen=True)
class ActivationSoftplusOperatorDesc(ActivationDesc):
    """ln(1 + e^(steepness * x)) / steepness; steepness > 0 (< 1 allowed from FL6.4)."""
    steepness: float = 1.0

    def _check(self, c):
        if not self.steepness > 0.0:
            c.fail("steepness", self.steepness, "expected steepness > 0")

    def expression(self, x):
        s = _lit(self.steepness)
        return f"({_softplus(f'({s} * {x})')} / {s})"


@dataclass(frozen=True)
class ActivationParametricSoftplusOperatorDesc(ActivationDesc):
    """alpha * ln(1 + e^(beta * x))."""
    alpha: float
    beta: float

    def expression(self, x):
        return f"({_lit(self.alpha)} * {_softplus(f'({_lit(self.beta)} * {x})')})"


@dataclass(frozen=True)
class ActivationSoftsignOperatorDesc(ActivationDesc):
    """x / (1 + |x|)."""

    def expression(self, x):
        return f"({x} / (1.0 + fabs({x})))"


@dataclass(frozen=True)
class ActivationIdentityOperatorDesc(ActivationDesc):
    """x."""

    def expression(self, x):
        return x


@dataclass(frozen=True)
class ActivationShrinkOperatorDesc(ActivationDesc):
    """x - bias if x > threshold; x + bias if x < -threshold; else 0 (FL2.0)."""
    bias: float = 0.0
    threshold: float = 0.5

    def expression(self, x):
        b, t = _lit(self.bias), _lit(self.threshold)
        return f"where({x} > {t}, {x} - {b}, where({x} < -{t}, {x} + {b}, 0.0))"


@dataclass(frozen=True)
class ActivationGeluOperatorDesc(ActivationDesc):
    """0.5 * x * (1 + erf(x / sqrt(2))) (FL5.1)."""

    def expression(self, x):
        return f"(0.5 * {x} * (1.0 + erf({x} * {_lit(1 / math.sqrt(2))})))"


@dataclass(frozen=True)
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

__all__ = ["ActivationDesc", "FUSABLE_ACTIVATIONS"] + [a.__name__ for a in FUSABLE_ACTIVATIONS]
