"""The tuner: on first use of a convolution, time the kernels that could run it and keep the
fastest (FFTW's planner, cuDNN's benchmark mode), remembered per machine (:mod:`dml_numba._wisdom`).

Modes (``DML_NUMBA_TUNE``, or ``compile_operator(..., tune=...)`` which wins):

* ``estimate`` (default): this machine's wisdom where it holds the key (a choice measured
  earlier, by any process), else the static rule: nothing is measured, so no process waits
  for tuning (FFTW's ``FFTW_ESTIMATE`` with wisdom; cuDNN's benchmark mode is opt-in too);
* ``off``: the static rule (:func:`~.choice.choose_algorithm`) whatever the wisdom holds,
  deterministic: the tests' mode;
* ``quick`` (measure on request): the static choice, its tile with the padding staged or not
  (and laid out in rows where it is flattened), and the candidates a cost model ranks next
  (:func:`cost`): three to five, each compiled once (into the disk cache) and timed a few
  calls, within QUICK_BUDGET_S a process; on a busy machine (other programs above
  BUSY_SHARE of the CPU while the static choice is timed) it stops there and records the
  attempt, so a busy process pays for one candidate, not all;
* ``exhaustive``: every valid candidate (:func:`candidates`).

A candidate is an algorithm, for ``blocked`` a tile plan (channels a tile, lanes, staged
padding or not, flattened tiles or rows), and the parallel variant (automatic, or serial in
``exhaustive``). Nothing is tuned where the algorithm is forced (or a padding folded in, or the
kernels are planned for another host); a key is tuned once per machine: later builds (any
process) read the wisdom.
"""
from __future__ import annotations

import dataclasses
import statistics
import time

import numpy as np

from ... import _diskcache, _env, _wisdom
from ..._cache import freeze as freeze_key
from ..._frozen import freeze
from ..._machine import CpuShare
from ...ops.convolution import FOLDS, geometry
from .._emit import COMPILED_HERE, Host, resolve_parallel
from . import variants
from .base import conv_work
from .blocked.plan import BlockPlan, block_plan, can_fold, pointwise_as_1d
from .choice import choose
from .variants import build, estimate
from .winograd import WinogradPlan

MODES = ("off", "estimate", "quick", "exhaustive")
#: candidates timed in quick mode: the static choice and this many more (its tile with the
#: staging flipped where that applies, then other tiles and algorithms by the cost model; and,
#: under QUICK_SERIAL_WORK multiply-adds, the static choice's serial variant)
QUICK_EXTRA = 2
QUICK_SERIAL_WORK = 1 << 24
#: samples a candidate (after an untimed call and a calibrating one)
REPEAT = {"quick": 3, "exhaustive": 5}
#: a candidate whose first sample is this much slower than the best so far is not timed
#: again (it cannot win)
PRUNE = 2.0
#: candidates within this factor of the best after the first pass (at most FINALISTS of them)
#: are timed a second time before the choice
CLOSE, FINALISTS = 1.15, 3
#: a sample lasts at least this long: calls shorter than it are repeated within one sample,
#: so a 20 us kernel is not judged on the clock's and the scheduler's noise
MIN_SAMPLE_S = 2e-3
#: other programs' share of the CPU during a tuning beyond which its result is not kept
BUSY_SHARE = 0.3
#: quick mode's seconds a process (compiles included): a candidate is built only while the
#: tuning so far and the last build would stay within it (the static choice always); those
#: left wait for a later process, the result kept as provisional until none is left
QUICK_BUDGET_S = 2.0


def mode_of(option) -> str:
    """The tuning mode: the option where given, else ``DML_NUMBA_TUNE`` (default estimate)."""
    return option if option is not None else _env.choice("DML_NUMBA_TUNE", MODES, "estimate")


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A kernel the tuner may choose: ``algorithm``, its ``plan`` (blocked: the tile;
    winograd: the transforms' lanes), and
    ``parallel`` (None: chosen automatically as usual; False: the serial loop nest)."""

    algorithm: str
    plan: BlockPlan | WinogradPlan | None = None
    parallel: bool | None = None

    def label(self) -> str:
        staged = " staged" if getattr(self.plan, "staged", False) else ""
        return (self.algorithm + (f" [{self.plan.label}{staged}]" if self.plan else "")
                + (" serial" if self.parallel is False else ""))

    def to_json(self) -> dict:
        plan = dataclasses.asdict(self.plan) if self.plan else None
        return {"algorithm": self.algorithm, "plan": plan, "parallel": self.parallel}

    @classmethod
    def from_json(cls, data: dict) -> Candidate:
        plan = data.get("plan")
        if plan is not None and data["algorithm"] == "winograd":
            plan = WinogradPlan(**plan)
        elif plan is not None:
            plan = BlockPlan(**{k: tuple(v) if k == "padded" else v for k, v in plan.items()})
        return cls(data["algorithm"], plan, data.get("parallel"))

    def build(self, desc, options, *, timed: bool = False):
        """The kernel (compiled, or loaded from the disk cache). ``timed``: the variant to time,
        its parallel choice made explicit (an automatic one would switch to the serial variant
        on a slow streak, mid-measurement)."""
        opts = {k: v for k, v in options.items() if k != "tune"}
        if self.parallel is not None:
            opts["parallel"] = self.parallel
        elif timed and opts.get("parallel") is None and self.algorithm != "gemm":
            opts["parallel"] = _parallel_by_default(desc)  # (BLAS's helpers: serial unless forced)
        return build(desc, opts, self.algorithm, self.plan)


def static(desc, host: Host | None = None) -> Candidate:
    """What ``off`` runs: the static rule's algorithm with its plan."""
    return Candidate(*choose(desc, host))


def blocked_plans(desc, host: Host) -> list[BlockPlan]:
    """The blocked kernel's valid tiles for ``desc``: every blocked variant's plans
    (``Variant.plans``: the planner's tile and the variations the tuner tries), in the variants'
    order."""
    return list(dict.fromkeys(p for v in variants.VARIANTS if v.algorithm == "blocked"
                              for p in v.plans(desc, host)))


def candidates(desc, host: Host | None = None, mode: str = "exhaustive",
               options: dict | None = None) -> list[Candidate]:
    """Every candidate of ``desc`` on ``host`` (``exhaustive``), or the static choice first and
    ``QUICK_EXTRA`` more (``quick``: its staging flipped, the cost model's next distinct tiles;
    the serial variant for small work). ``options["parallel"]`` given: no serial candidates."""
    host = host or Host.current()
    options = options or {}
    fold = FOLDS.get(options.get("input_padding"))
    if fold:  # a padding folded in: the direct kernel and the blocked tiles that read it
        plans = [dataclasses.replace(p, fold=fold) for p in blocked_plans(desc, host)
                 if can_fold(desc, p)]
        algorithm, base = choose(desc, host)  # the static choice, its tile planned once
        first = (Candidate("blocked", dataclasses.replace(base, fold=fold))
                 if algorithm == "blocked" and can_fold(desc, base) else Candidate("direct"))
        found = list(dict.fromkeys([first, Candidate("direct")]
                                   + [Candidate("blocked", p) for p in plans]))
    else:
        kdesc = pointwise_as_1d(desc) or desc
        first = static(desc, host)
        found = [first, Candidate("direct"), Candidate("gemm")]
        found += [Candidate(v.algorithm, p) for v in variants.VARIANTS
                  if v.algorithm == "winograd" for p in v.planned(desc, host)]
        found += [Candidate("blocked", p) for p in blocked_plans(kdesc, host)]
        found = list(dict.fromkeys(found))
    serial = options.get("parallel") is None and _parallel_by_default(desc)
    if mode == "quick":
        # the static tile with its staging flipped first (the model cannot tell them apart,
        # and they differ by up to a fifth on the crossover grid); then distinct tiles only: a
        # variant that differs from one taken only in its staging would crowd out another tile
        flip = isinstance(first.plan, BlockPlan) and dataclasses.replace(
            first, plan=dataclasses.replace(first.plan, staged=not first.plan.staged))
        rest = [flip] if flip in found else []
        # a flattened static tile: the same tile in rows too (the model ranks flattened tiles
        # first by the positions they waste; on 56-pixel rows of 64 channels the rows tile was
        # up to a sixth faster): an extra candidate, beside the cost model's
        rows = _unflattened(desc, first, host, fold)
        extra = [rows] if rows is not None and rows in found else []
        tiles = {_tile(first)} | {_tile(c) for c in extra}
        for c in sorted(found[1:], key=lambda c: cost(desc, c, host)):
            if len(rest) < QUICK_EXTRA and _tile(c) not in tiles:
                rest.append(c)
                tiles.add(_tile(c))
        # small work: waking the thread pool may cost more than it saves
        if serial and first.algorithm != "gemm" and conv_work(desc) < QUICK_SERIAL_WORK:
            rest.append(dataclasses.replace(first, parallel=False))
        return [first] + extra + rest
    if serial:
        found += [dataclasses.replace(c, parallel=False) for c in found
                  if c.algorithm != "gemm"]
    return found


def _unflattened(desc, first: Candidate, host: Host, fold: str) -> Candidate | None:
    """``first``'s blocked tile laid out in rows where it is flattened (None otherwise)."""
    if not isinstance(first.plan, BlockPlan) or not first.plan.flat:
        return None
    plan = block_plan(pointwise_as_1d(desc) or desc, host, lanes=first.plan.lanes,
                      channels=first.plan.mb, staged=first.plan.staged, flat_gain=0.0)
    if plan is None or plan.flat:
        return None
    return Candidate("blocked", dataclasses.replace(plan, fold=fold) if fold else plan)


def _tile(cand: Candidate):
    """The candidate without its staging choice."""
    if not isinstance(cand.plan, BlockPlan):
        return cand
    return dataclasses.replace(cand, plan=dataclasses.replace(cand.plan, staged=False))


def _parallel_by_default(desc) -> bool:
    return resolve_parallel(None, conv_work(desc))


def cost(desc, cand: Candidate, host: Host) -> float:
    """The cost model's time of ``cand`` (:func:`.cost.estimate`), to rank candidates for
    ``quick``; measurement decides."""
    return estimate(desc, cand.algorithm, cand.plan, host, parallel=cand.parallel)


def _inputs(desc, rng) -> tuple[list, np.ndarray]:
    """Random inputs and an output for timing, in the descriptor's types. The filter and bias
    are frozen (:mod:`dml_numba._frozen`), as a model's weights are: a kernel that derives
    something from the filter (the blocked kernels' packed filter) does it once, as it does in
    a model, and each candidate is timed at its steady state (with a caller's own filter array
    the blocked kernels pack it every call: measured on 7x7 MobileNetV2 layers, that packing
    made a 0.115 ms tile time 0.238 ms and lose to BLAS's 0.21 ms, which was then twice as
    slow in the model)."""
    tensors = [desc.input_tensor, desc.filter_tensor] + (
        [desc.bias_tensor] if desc.bias_tensor is not None else [])
    arrays = [rng.standard_normal(t.sizes).astype(t.data_type.numpy) for t in tensors]
    arrays[1:] = [freeze(a) for a in arrays[1:]]
    out = np.empty(desc.output_tensor.sizes, desc.output_tensor.data_type.numpy)
    return arrays, out


def measure(run, clock, repeat: int, best: float | None) -> list[float]:
    """Seconds a call of ``run`` takes, ``repeat`` samples after an untimed call (its first
    call pays for buffers and page faults); a sample is the mean of as many calls as fill
    :data:`MIN_SAMPLE_S`; stops after a sample ``PRUNE`` x slower than ``best``."""
    run()
    t0 = clock()
    run()
    first = clock() - t0
    number = max(1, min(1000, int(MIN_SAMPLE_S / first))) if first > 0 else 1
    samples = []
    for _ in range(repeat):
        t0 = clock()
        for _ in range(number):
            run()
        samples.append((clock() - t0) / number)
        if best is not None and samples[-1] > PRUNE * best:
            break
    return samples


def key_of(desc, options) -> str:
    """The wisdom key of ``desc`` built with ``options`` (the tuning mode left out)."""
    opts = tuple(sorted((k, v) for k, v in options.items() if k != "tune"))
    return _wisdom.digest(repr(freeze_key((desc, opts))))


def describe(desc, options: dict | None = None) -> str:
    """A short label for people: shapes, strides, padding (and a folded one), groups, the
    fused activation, the type."""
    geo = geometry(desc)
    pad = (f" p{tuple(desc.start_padding)}{tuple(desc.end_padding)}"
           if any(desc.start_padding) or any(desc.end_padding) else "")
    fold = (options or {}).get("input_padding")
    act = desc.fused_activation
    act = (" +" + type(act).__name__.removeprefix("Activation").removesuffix("OperatorDesc")
           .lower()) if act is not None else ""
    return (f"{'conv' if geo.forward else 'transposed'} x{tuple(desc.input_tensor.sizes)} "
            f"w{tuple(desc.filter_tensor.sizes)} s{tuple(desc.strides)}{pad}"
            + (f" {fold.lower()}" if fold else "") + f" g{desc.group_count}{act}"
            + f" {desc.input_tensor.data_type.name.lower()}")


def tune(desc, options: dict, mode: str, *, clock=time.perf_counter, build=None,
         host: Host | None = None, remember: bool = True, meter=CpuShare,
         wall=time.perf_counter):
    """The kernel for ``desc``: from this machine's wisdom, or measured now and kept, unless
    other programs used more than :data:`BUSY_SHARE` of the CPU meanwhile (``meter()``; their
    load skews the timings: measured again in the next process). ``remember=False``: measured
    now whatever the wisdom holds, and not kept. ``clock`` times the kernels, ``wall`` the
    tuning itself (:data:`QUICK_BUDGET_S`)."""
    host = host or Host.current()
    build = build or (lambda c, timed=False: c.build(desc, options, timed=timed))
    valid = candidates(desc, host, "exhaustive", options)
    key = key_of(desc, options)
    known = _known(key, mode, valid) if remember else None
    if known is not None:
        return _from_wisdom(known, build)
    with _wisdom.exclusive():  # one tuning at a time: timings undisturbed by another's
        known = _known(key, mode, valid) if remember else None
        if known is not None:  # tuned meanwhile (another thread or process)
            return _from_wisdom(known, build)
        return _measure_all(desc, options, mode, host, valid, key, clock, build, remember,
                            meter, wall)


def wisdom_choice(desc, options: dict, *, build=None, host: Host | None = None):
    """The kernel this machine's wisdom chose for ``desc`` (measured earlier, provisional or
    not), or None where it holds none: ``estimate`` mode, which never measures."""
    host = host or Host.current()
    build = build or (lambda c, timed=False: c.build(desc, options, timed=timed))
    known = _wisdom.get(key_of(desc, options))
    if _wisdom.is_choice(known) and _candidate(known) in candidates(desc, host, "exhaustive",
                                                                    options):
        return _from_wisdom(known, build)
    return None


def _candidate(known: dict) -> Candidate | None:
    """The entry's choice as a Candidate, or None where its plan is not one (an edited file:
    wrong fields or values), so that it is never used and never raises."""
    try:
        return Candidate.from_json(known["choice"])
    except (TypeError, ValueError, KeyError):
        return None


# the wisdom's schema: a choice that makes no candidate is malformed
_wisdom.CHOICE_CHECKS.append(lambda choice: _candidate({"choice": choice}) is not None)


def _known(key, mode, valid) -> dict | None:
    """The wisdom's entry for ``key`` where it serves ``mode`` and names a valid candidate."""
    known = _wisdom.get(key)
    if _wisdom.is_choice(known) and not known.get("provisional") and (
            mode == "quick" or known.get("mode") == "exhaustive"):
        if _candidate(known) in valid:
            return known
    return None


def _busy(desc, options, key, mode, static, cand, kernel, others, seconds):
    """A tuning stopped after its first candidate (the static choice) because other programs
    used more than BUSY_SHARE of the CPU: that kernel, and the attempt recorded (what ``tune``
    and ``info`` report) unless a choice is already kept."""
    earlier = _wisdom.get(key)
    if not _wisdom.is_choice(earlier):
        attempts = earlier["busy"]["attempts"] if _wisdom.is_busy_record(earlier) else 0
        _wisdom.put(key, {"busy": {"attempts": attempts + 1, "others": others,
                                    "limit": BUSY_SHARE},
                          "label": describe(desc, options), "mode": mode,
                          "static": static.label()})
    kernel.tuning = {"source": "static", "kept": False, "others_busy": others,
                     "tuning_s": round(seconds, 4), "chosen": cand.label(), "mode": mode}
    return kernel


def _from_wisdom(known, build):
    kernel = build(Candidate.from_json(known["choice"]))
    kernel.tuning = dict(known, source="wisdom")
    return kernel


def _measure_all(desc, options, mode, host, valid, key, clock, build, remember, meter, wall):
    cands = candidates(desc, host, mode, options) if mode == "quick" else valid
    t0, others = wall(), meter()
    rng = np.random.default_rng(0)
    inputs, out = _inputs(desc, rng)
    best = None
    # BLAS last: its thread pool spins a while after each call and would slow whatever is
    # timed next
    samples, kernels, left, last = {}, {}, [], 0.0
    # after an earlier process's provisional result, the candidates no process has built yet
    # first: this process's compile comes before any time spent loading and timing the others,
    # which wait for the next process where it leaves no room (each process within the
    # budget, one compile at least, until every candidate is in the disk cache). The static
    # choice is timed in every process (built by the first, a load from the disk cache after):
    # a provisional choice, which the default mode uses, is never one measured slower than it
    # (it was: a process that timed BLAS alone kept it for a depthwise layer it ran 27x slower)
    earlier = _wisdom.get(key) if remember and mode == "quick" else None
    seen = set(earlier.get("built") or ()) if earlier and earlier.get("provisional") else set()
    for cand in sorted(cands, key=lambda c: (c.label() in seen, c.algorithm == "gemm")):
        if (mode == "quick" and kernels and cand != cands[0]
                and wall() - t0 + last > QUICK_BUDGET_S):
            left.append(cand)  # another compile would overrun: for a later process
            continue
        tb = wall()
        kernels[cand] = build(cand, timed=True)
        last = wall() - tb
        samples[cand] = measure(lambda k=kernels[cand]: k(inputs, out), clock, REPEAT[mode],
                                best)
        med = statistics.median(samples[cand])
        best = med if best is None else min(best, med)
        busy = others.others() if remember else None
        if busy is not None and busy > BUSY_SHARE:  # nothing measured now would be kept
            return _busy(desc, options, key, mode, cands[0], cand, kernels[cand], busy,
                         wall() - t0)
    # the finalists within CLOSE of the best are timed once more (one pass can be unlucky)
    finalists = sorted((c for c in samples if statistics.median(samples[c]) <= CLOSE * best),
                       key=lambda c: statistics.median(samples[c]))[:FINALISTS]
    if len(finalists) > 1:
        for cand in sorted(finalists, key=lambda c: c.algorithm == "gemm"):
            samples[cand] += measure(lambda k=kernels[cand]: k(inputs, out), clock,
                                     REPEAT[mode], None)
    medians = {c: statistics.median(v) for c, v in samples.items()}
    choice = min(medians, key=medians.get)
    # a kernel compiled in this process can run at another speed than its copy loaded from the
    # disk cache, which is what later processes run (measured: 5.1 against 7.6 ms for one
    # parallel tile): a tuning that compiled keeps its result as provisional, and the next
    # process, loading every candidate from the disk cache, times them once more
    compiled = any(key in COMPILED_HERE for k in kernels.values() for key in k.compiled_keys())
    provisional = bool(compiled or left) and _diskcache.state().usable
    entry = {"choice": choice.to_json(), "chosen": choice.label(), "mode": mode,
             "provisional": provisional, "label": describe(desc, options),
             "tuning_s": round(wall() - t0, 4), "static": cands[0].label(),
             "seconds": {c.label(): medians[c] for c in cands if c in medians},
             "left": [c.label() for c in left],
             "built": sorted(seen | {c.label() for c in kernels})}
    busy = others.others()
    kept = remember and (busy is None or busy <= BUSY_SHARE)
    if kept:
        _wisdom.put(key, entry)
    kernel = build(choice)
    kernel.tuning = dict(entry, source="measured", kept=kept, others_busy=busy)
    return kernel
