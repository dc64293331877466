"""The automatic choice of algorithm (``DML_NUMBA_TUNE=off``, and the tuner's first candidate):
the algorithm the cost model (:mod:`.cost`) expects to run ``desc`` fastest on the host, among
those that can (``blocked`` where the planner has a tile for it, ``direct`` and ``gemm``
always). The model reads the host's vector width and thread count, so the choice moves with
them on machines nobody measured; its constants were fitted to the crossover grid in
``benchmarks/HISTORY.md`` ("The static choice from the cost model")."""
from __future__ import annotations

from .._emit import Host
from .blocked.plan import BlockPlan, block_plan, channel_plan, pointwise_as_1d
from .cost import COSTS, Costs, estimate

#: the algorithms in the order ties go (the simplest kernel first)
ALGORITHMS = ("direct", "blocked", "gemm")


def tiles(desc, host: Host) -> list[BlockPlan]:
    """The planner's tiles for ``desc`` on ``host``: its pixels tile
    (:func:`.blocked.plan.block_plan`) and its channels tile
    (:func:`.blocked.plan.channel_plan`), those that apply."""
    kdesc = pointwise_as_1d(desc) or desc
    return [p for p in (block_plan(kdesc, host), channel_plan(kdesc, host)) if p is not None]


def pick_tile(desc, plans: list[BlockPlan], host: Host, costs: Costs = COSTS):
    """The tile of ``plans`` the cost model expects to run fastest (ties to the first), or
    None where there is none."""
    return min(plans, key=lambda p: estimate(desc, "blocked", p, host, costs=costs),
               default=None)


def blocked_plan(desc, host: Host | None = None, costs: Costs = COSTS) -> BlockPlan | None:
    """The blocked kernel's tile for ``desc`` on ``host``: the planner's pixels tile or its
    channels tile, whichever the cost model expects to run faster (ties to the pixels tile);
    None where neither applies."""
    host = host or Host.current()
    return pick_tile(desc, tiles(desc, host), host, costs)


def options(desc, host: Host, costs: Costs = COSTS,
            plans: list[BlockPlan] | None = None) -> dict[str, BlockPlan | None]:
    """The algorithms that can run ``desc`` on ``host``, each with its plan (the blocked
    kernel's tile, :func:`blocked_plan`; None for the others). ``plans``: the planner's
    tiles, where already planned (:func:`tiles`)."""
    plan = pick_tile(desc, tiles(desc, host) if plans is None else plans, host, costs)
    return {a: plan if a == "blocked" else None for a in ALGORITHMS
            if a != "blocked" or plan is not None}


def cheapest(desc, found: dict[str, BlockPlan | None], host: Host,
             costs: Costs = COSTS) -> str:
    """The algorithm of ``found`` (:func:`options`) with the least estimate, ties to the
    simpler kernel."""
    times = _times(desc, found, host, costs)
    return min(times, key=lambda a: (times[a], ALGORITHMS.index(a)))


def estimates(desc, host: Host | None = None) -> dict[str, float]:
    """The modelled time of each algorithm that can run ``desc`` on ``host`` (one core's
    vector multiply-adds; :func:`.cost.estimate`)."""
    host = host or Host.current()
    return _times(desc, options(desc, host), host, COSTS)


def _times(desc, found: dict[str, BlockPlan | None], host: Host, costs: Costs) -> dict:
    """Each algorithm of ``found`` with its estimate."""
    return {a: estimate(desc, a, plan, host, costs=costs) for a, plan in found.items()}


def choose(desc, host: Host | None = None) -> tuple[str, BlockPlan | None]:
    """The algorithm for ``desc`` on ``host`` (this machine by default), and its plan."""
    host = host or Host.current()
    found = options(desc, host)
    algorithm = cheapest(desc, found, host)
    return algorithm, found[algorithm]


def choose_algorithm(desc, host: Host | None = None) -> str:
    """The algorithm for ``desc`` on ``host`` (this machine by default): the least estimate,
    ties to the simpler kernel."""
    return choose(desc, host)[0]
