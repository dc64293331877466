"""The automatic choice of algorithm: a table of rules over a few facts about the descriptor and
the host, the first rule that holds wins. The thresholds come from the crossover grid in
``benchmarks/RESULTS.md`` ("Convolution algorithms across shapes": float32, batch 1 and 8, 2
cores, AVX-512), where each rule's measurements are given."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ..._dims import prod
from ...ops.convolution import geometry
from .._emit import Host
from .blocked.plan import BlockPlan, block_plan, pointwise_as_1d

#: the measured thresholds the rules compare with
THRESHOLDS = {
    "small_window": (2, 9),  # taps of the windows the direct loop nest wins on, when it does
    "narrow_row": 28,  # output rows this short leave the per-plane kernel's vectors idle
    # (pixels: a plane's output pixels times the batch, the work the blocked kernel shares out;
    # BLAS runs a product per image and group)
    "dense_1x1_gemm_pixels": 512,  # dense 1x1 over fewer pixels: BLAS
    "grouped_gemm_pixels": 32,  # grouped windows over fewer pixels: BLAS
    "grouped_1x1_gemm_pixels": 64,  # grouped 1x1 over fewer pixels: BLAS
    "gemm_inner": 32,  # BLAS pays off from this inner dimension (channels a group x taps)...
    "gemm_rows_forward": 32,  # ...and this many output channels a group (FORWARD)
    "gemm_rows_backward": 8,  # ...or columns (output channels a group x taps, BACKWARD)
    "blocked_channels": 4,  # the dense tile's channel block
}


@dataclasses.dataclass(frozen=True)
class Facts:
    """What the rules read: the descriptor's shape classes, the blocked plan for this host (None:
    the blocked kernel does not apply), and the host."""

    plan: BlockPlan | None
    host: Host
    forward: bool
    groups: int
    out_channels: int  # a group's
    taps: int
    pixels: int  # output pixels a plane, times the batch
    strided: bool
    narrow: bool
    few_planes: bool  # fewer (image, channel) planes than threads
    gemm_fits: bool  # each group's matrix product big enough for BLAS

    @classmethod
    def of(cls, desc, host: Host) -> Facts:
        geo, t = geometry(desc), THRESHOLDS
        if geo.forward:
            inner, rows = geo.in_channels * geo.taps, geo.out_channels
            fits = inner >= t["gemm_inner"] and rows >= t["gemm_rows_forward"]
        else:
            inner, rows = geo.in_channels, geo.out_channels * geo.taps
            fits = inner >= t["gemm_inner"] and rows >= t["gemm_rows_backward"]
        return cls(block_plan(pointwise_as_1d(desc) or desc, host), host, geo.forward,
                   geo.groups, geo.out_channels, geo.taps,
                   prod(desc.output_tensor.sizes[2:]) * desc.input_tensor.sizes[0],
                   any(s > 1 for s in desc.strides),
                   desc.output_tensor.sizes[-1] < t["narrow_row"],
                   desc.input_tensor.sizes[0] * geo.groups < host.threads, fits)

    @property
    def small_window(self) -> bool:
        lo, hi = THRESHOLDS["small_window"]
        return lo <= self.taps <= hi

    @property
    def depthwise_plan(self) -> bool:
        return self.plan is not None and self.plan.depthwise

    @property
    def grouped_pixels(self) -> int:
        return THRESHOLDS["grouped_1x1_gemm_pixels" if self.taps == 1 else "grouped_gemm_pixels"]


@dataclasses.dataclass(frozen=True)
class Rule:
    """``algorithm`` where ``holds(facts)``; ``why`` says what was measured."""

    algorithm: str
    holds: Callable[[Facts], bool]
    why: str


RULES = (
    Rule("direct", lambda f: f.depthwise_plan and f.small_window and f.few_planes,
         "depthwise, small windows over fewer planes than threads: the plane kernel shares out "
         "planes, so threads would idle"),
    Rule("blocked", lambda f: f.depthwise_plan,
         "depthwise: the plane-by-plane kernel keeps each padded plane in cache"),
    Rule("direct", lambda f: f.plan is not None and f.out_channels == 1 and f.small_window
         and (f.strided or not f.narrow),
         "one output channel a group, small windows on strided or wide rows"),
    Rule("blocked", lambda f: f.plan is not None and f.out_channels == 1,
         "one output channel a group otherwise"),
    Rule("gemm", lambda f: f.plan is not None and f.gemm_fits and f.groups == 1
         and f.plan.lanes * 2 < f.host.lanes,
         "dense, rows too short for half the host's vector: the tile's lanes would idle"),
    Rule("gemm", lambda f: f.plan is not None and f.gemm_fits and f.groups == 1 and f.taps == 1
         and f.forward and f.pixels < THRESHOLDS["dense_1x1_gemm_pixels"],
         "dense 1x1 over few pixels: a plain matrix product"),
    Rule("gemm", lambda f: f.plan is not None and f.gemm_fits and f.groups > 1 and f.forward
         and f.pixels < f.grouped_pixels,
         "grouped over tiny planes: too little work a tile"),
    Rule("blocked", lambda f: f.plan is not None
         and f.out_channels >= THRESHOLDS["blocked_channels"],
         "every other convolution the blocked tile takes"),
    Rule("gemm", lambda f: f.gemm_fits, "no blocked tile, matrix products big enough for BLAS"),
    Rule("direct", lambda f: True, "everything else (float64 and short rows, small products)"),
)


def choose_algorithm(desc, host: Host | None = None) -> str:
    """The algorithm for ``desc`` on ``host`` (this machine by default): the first rule of
    :data:`RULES` that holds."""
    return choose_rule(desc, host).algorithm


def choose_rule(desc, host: Host | None = None) -> Rule:
    """The rule that decides ``desc``'s algorithm."""
    facts = Facts.of(desc, host or Host.current())
    return next(rule for rule in RULES if rule.holds(facts))
