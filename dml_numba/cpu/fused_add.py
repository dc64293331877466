"""An operator with an addend on the CPU (a graph's residual rule: a convolution and the
addition that alone reads its result, :class:`~dml_numba.ops.fused_add.FusedAddDesc`).

The operator's kernel is chosen as for the operator alone (the tuner's choice or the static
rule, with the options given); where that kernel takes the addend in its own epilogue (its
``with_addend``: the blocked FORWARD tiles in float32, which add it to each stored tile while
it is in the first-level cache, then apply the activation; Winograd's output transform), it is
rebuilt so; else it runs without the activation and ADD1's kernel then adds the addend and
applies the activation over its result in place (each element read before it is written):
the two nodes one by one, without the intermediate buffer.
"""
from __future__ import annotations

from .._registry import lowering_for, lowering_options, register
from ..ops.convolution import ConvolutionOperatorDesc
from ..ops.fused_add import FusedAddDesc
from . import convolution  # noqa: F401 - its lowering first: its options are this one's
from .element_wise import ElementWiseKernel


class FusedAddKernel:
    """``kernel``: the operator's (taking the addend itself), or the bare operator's with
    ``add`` (ADD1's kernel) after it."""

    def __init__(self, desc, options):
        bare = desc.bare()
        self._around(desc, lowering_for(type(bare), "cpu")(bare, options), options.get("parallel"))

    @classmethod
    def around(cls, desc, inner, parallel=None):
        """The kernel of ``desc`` from ``inner``, a kernel of its bare operator (the
        Winograd kernel's direct sum, chosen its own way); ``parallel``: the addition's."""
        kernel = cls.__new__(cls)
        kernel._around(desc, inner, parallel)
        return kernel

    def _around(self, desc, inner, parallel) -> None:
        fused = inner.with_addend(desc.operator) if hasattr(inner, "with_addend") else None
        self.kernel, self.add = (fused, None) if fused is not None else (
            inner, ElementWiseKernel(desc.addition(), {"parallel": parallel}))
        self.key = getattr(self.kernel, "key", None)
        self.source = "\n".join(s for s in (getattr(self.kernel, "source", None),
                                            getattr(self.add, "source", None)) if s)

    @property
    def fused(self) -> bool:
        """Whether the operator's kernel adds the addend itself (one pass over memory)."""
        return self.add is None

    def scratch_bytes(self) -> int:
        """The thread's scratch the operator's kernel takes (the addition takes none)."""
        return self.kernel.scratch_bytes() if hasattr(self.kernel, "scratch_bytes") else 0

    def __call__(self, inputs, out):
        if self.add is None:
            self.kernel(inputs, out)
            return
        self.kernel(list(inputs[:-1]), out)
        self.add([out, inputs[-1]], out)

    def bind(self, inputs, out):
        if self.add is None:
            return self.kernel.bind(inputs, out)
        first = self.kernel.bind(list(inputs[:-1]), out)
        then = self.add.bind([out, inputs[-1]], out)

        def run():
            first()
            then()
        return run


register(FusedAddDesc, "cpu",
         options=lowering_options(ConvolutionOperatorDesc, "cpu"))(FusedAddKernel)
