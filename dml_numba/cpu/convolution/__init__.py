"""Convolution on the CPU: three algorithms over the same semantics, one kernel class each.

* ``blocked`` (:mod:`.blocked`): register-blocked SIMD tiles, float32 and float16;
* ``direct`` (:mod:`.direct`): one generated loop nest, every dtype;
* ``gemm`` (:mod:`.gemm`): BLAS with generated kernels around it.

``algorithm=None`` (the default) chooses by :func:`~.choice.choose_algorithm` (a table of
measured rules); ``compile_operator(desc, "cpu", algorithm="blocked"|"direct"|"gemm")`` forces
one. Where to look: the choice in ``choice.py``; a kernel's host-side call in its class; its
generated source in its module's ``emit`` (the blocked kernels' tile in ``blocked/tile.py``,
their plan in ``blocked/plan.py``, their padding phase in ``blocked/padding.py``).
"""
from __future__ import annotations

from ..._registry import register
from ...ops.convolution import ConvolutionOperatorDesc
from . import direct, gemm
from .blocked import BlockedKernel
from .blocked import emit as emit_blocked
from .blocked.plan import BlockPlan, block_plan, pack_filter, pointwise_as_1d
from .choice import RULES, choose_algorithm, choose_rule
from .direct import DirectKernel
from .gemm import GemmKernel

__all__ = ["emit", "make_kernel", "choose_algorithm", "choose_rule", "RULES", "block_plan",
           "BlockPlan", "pack_filter", "pointwise_as_1d", "DirectKernel", "GemmKernel",
           "BlockedKernel"]

KERNELS = {"direct": DirectKernel, "gemm": GemmKernel, "blocked": BlockedKernel}


def emit(key) -> str:
    """The source of any convolution kernel of the CPU backend, from its key alone."""
    if key.kernel == "main":
        return direct.emit(key)
    if key.kernel.startswith("blocked"):
        return emit_blocked(key)
    return gemm.emit(key)


def make_kernel(desc, options):
    """The kernel of ``desc``: ``options["algorithm"]`` or the automatic choice."""
    return KERNELS[options.get("algorithm") or choose_algorithm(desc)](desc, options)


register(ConvolutionOperatorDesc, "cpu",
         options={"algorithm": (None, "direct", "gemm", "blocked")})(make_kernel)
