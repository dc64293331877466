"""Convolution on the CPU: four algorithms over the same semantics, eight kernel variants.

* ``blocked`` (:mod:`.blocked`): register-blocked SIMD tiles, float32 and float16 (five tiles:
  pixels, transposed, depthwise, depthwise with the channels in the lanes, channels);
* ``direct`` (:mod:`.direct`): one generated loop nest, every dtype;
* ``gemm`` (:mod:`.gemm`): BLAS with generated kernels around it;
* ``winograd`` (:mod:`.winograd`): F(4x4, 3x3), 2-D float32 3x3 stride-1 convolutions.

Each variant is a class (:mod:`.variants`) that owns its plans, its cost estimate, its key's
kernel name, its emitters and its kernel class; the choice and the tuner iterate over them.

``algorithm=None`` (the default) takes this machine's tuned choice where one was measured
(``tune="quick"`` or ``DML_NUMBA_TUNE=quick`` times the candidates on first use of a key and
keeps the fastest: :mod:`.tune`), else the static rule (:func:`~.choice.choose_algorithm`: the
least time of a cost model of the host, :mod:`.cost`; ``tune="off"``: always the static rule);
``compile_operator(desc, "cpu", algorithm="blocked"|"direct"|"gemm"|"winograd")`` forces one.
Where to look: the choice in ``choice.py`` and ``tune.py``; what a variant plans, costs and emits in
``variants.py``; a kernel's host-side call in its class; its generated source in its module's
``emit`` (the blocked kernels' tile in ``blocked/tile.py``,
their plan in ``blocked/plan.py``, their padding phase in ``blocked/padding.py``).
"""
from __future__ import annotations

import dataclasses

from ..._diskcache import only_choosing
from ..._errors import ValidationError
from ..._registry import register
from ...ops.convolution import FOLDS, ConvolutionDirection, ConvolutionOperatorDesc
from .._emit import planning_elsewhere
from . import tune
from .blocked import BlockedKernel
from .blocked.plan import BlockPlan, block_plan, can_fold, pack_filter, pointwise_as_1d
from .choice import blocked_plan, choose, choose_algorithm, estimates
from .direct import DirectKernel
from .gemm import GemmKernel
from .variants import build, emitter, variant_of

__all__ = ["emit", "make_kernel", "choose_algorithm", "estimates", "block_plan", "blocked_plan",
           "BlockPlan", "pack_filter", "pointwise_as_1d", "DirectKernel", "GemmKernel",
           "BlockedKernel", "build", "variant_of"]


def emit(key) -> str:
    """The source of any convolution kernel of the CPU backend, from its key alone (the emitter
    its variant declares for ``key.kernel``)."""
    return emitter(key.kernel)(key)


def make_kernel(desc, options):
    """The kernel of ``desc``: ``options["algorithm"]``, or the tuner's choice, or the static
    rule's (``tune="off"``). ``options["input_padding"]`` (a PaddingMode name but CONSTANT): the
    start/end padding is that mode's fold of the input instead of zeros, read in the blocked
    kernel's phase 1 or the direct kernel's taps (what a graph's padding operator in front of the
    convolution becomes: a graph's fold rule, where the registry lists the mode)."""
    mode = options.get("input_padding")
    algorithm = options.get("algorithm")
    if mode is not None:
        plan = folded_plan(desc, mode)
        if desc.direction != ConvolutionDirection.FORWARD or algorithm in ("gemm", "winograd") or (
                algorithm == "blocked" and plan is None):
            raise ValidationError(
                f"compile_operator.input_padding: {mode!r} is invalid; expected None for this "
                "descriptor (a folded padding needs a FORWARD convolution, run by the direct "
                "kernel or, with a unit stride along the last axis, the blocked one)")
    if algorithm is None and not planning_elsewhere():  # another host's kernels: static rule
        tuning = tune.mode_of(options.get("tune"))
        # the wisdom's choice where it holds one, else static; so for kernels only chosen
        # (_diskcache.choosing): nothing is timed then
        if tuning == "estimate" or (tuning != "off" and only_choosing()):
            known = tune.wisdom_choice(desc, options)
            if known is not None:
                return known
        elif tuning != "off":  # with a folded padding: among the kernels that fold it
            return tune.tune(desc, options, tuning)
    if mode is not None:  # the blocked tile where forced, or where it folds and the static
        # choice is a blocked tile or Winograd (which reads no folded padding); else the direct
        # loop nest
        if algorithm == "blocked" or (algorithm is None and plan is not None and
                                      choose_algorithm(desc) in ("blocked", "winograd")):
            return build(desc, options, "blocked", plan)
        return build(desc, options, "direct")
    algorithm, plan = choose(desc, among=algorithm)
    return build(desc, options, algorithm, plan)


def folded_plan(desc, mode: str):
    """The blocked plan of ``desc`` with the padding mode ``mode`` folded into phase 1, or None
    where it cannot be."""
    plan = blocked_plan(desc)
    if not can_fold(desc, plan) or mode not in FOLDS:
        return None
    return dataclasses.replace(plan, fold=FOLDS[mode])


register(ConvolutionOperatorDesc, "cpu",
         options={"algorithm": (None, "direct", "gemm", "blocked", "winograd"),
                  "input_padding": (None,) + tuple(FOLDS),
                  "tune": (None,) + tune.MODES})(make_kernel)
