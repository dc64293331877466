"""How a vectorised operator becomes the "numpy" device's lowering."""
from __future__ import annotations

from .._registry import register


class VectorizedKernel:
    """Runs ``fn(desc, *inputs)`` and stores the result into the bound output."""

    source = None

    def __init__(self, fn, desc):
        self.fn = fn
        self.desc = desc

    def __call__(self, inputs, out):
        result = self.fn(self.desc, *inputs)
        if isinstance(out, tuple):  # an operator of several outputs: a result each
            for o, r in zip(out, result):
                o[...] = r
        else:
            out[...] = result


def vectorized(desc_type):
    """Decorator: ``@vectorized(Padding1OperatorDesc)`` on ``fn(desc, *inputs) -> array``
    registers it as that descriptor's lowering on the "numpy" device."""

    def deco(fn):
        register(desc_type, "numpy")(lambda desc, options: VectorizedKernel(fn, desc))
        return fn

    return deco
