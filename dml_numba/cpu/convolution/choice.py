"""The automatic choice of kernel (``DML_NUMBA_TUNE=off``, and the tuner's first candidate):
the variant (:mod:`.variants`) the cost model expects to run ``desc`` fastest on the host,
among those that can (each blocked tile where the planner has one for it, ``direct`` and
``gemm`` always), ties to the simpler kernel. The model reads the host's vector width and
thread count, so the choice moves with them on machines nobody measured, and BLAS's rate
against the generated kernels (:func:`rated`: where BLAS runs narrower vectors than the host's
widest, on a CPU that runs those at a lower rate, a Zen 5 whose OpenBLAS runs its Haswell
kernels, its products take longer: ResNet-18 at batch 8 leaves Winograd for the tiles on
its 64- and 512-channel layers, 1.03-1.07x); its constants were
fitted to the crossover grid in ``benchmarks/HISTORY.md`` ("The static choice from the cost
model")."""
from __future__ import annotations

import dataclasses

from ... import _blas
from ..._host import planning_elsewhere
from .._emit import Host
from . import variants
from .blocked.plan import BlockPlan
from .cost import COSTS, Costs
from .variants import ALGORITHMS, Variant, estimate

#: the algorithms whose multiply-adds are BLAS's (at the host's ``blas`` rate)
BLAS_ALGORITHMS = tuple(v.algorithm for v in variants.VARIANTS if v.blas)

__all__ = ["ALGORITHMS", "planned", "tiles", "ranked", "blocked_plan", "options", "cheapest",
           "estimates", "choose", "choose_algorithm"]


def rated(host: Host) -> Host:
    """``host`` with its BLAS rate (``Host.blas``) settled: as given; 1.0 where kernels are
    planned for another host; else this machine's (:func:`dml_numba._blas.rate`, which loads
    SciPy's BLAS: asked for only where BLAS's kernels could be the fastest)."""
    if host.blas is not None:
        return host
    if planning_elsewhere():
        return dataclasses.replace(host, blas=1.0)
    from llvmlite import binding as ll

    return dataclasses.replace(host, blas=_blas.rate(host.lanes, ll.get_host_cpu_name()))


def planned(desc, host: Host) -> list[tuple[Variant, BlockPlan | None]]:
    """Every variant that can run ``desc`` on ``host`` with the planner's plan for it, in the
    order ties go."""
    return [(v, p) for v in variants.VARIANTS for p in v.planned(desc, host)]


def tiles(desc, host: Host) -> list[BlockPlan]:
    """The planner's tiles for ``desc`` on ``host`` (the blocked variants' plans)."""
    return [p for v, p in planned(desc, host) if v.algorithm == "blocked"]


def ranked(desc, host: Host, costs: Costs = COSTS,
           plans: list | None = None) -> list[tuple[Variant, BlockPlan | None, float]]:
    """``(variant, plan, estimate)`` of every variant that can run ``desc``, fastest first,
    ties in :data:`~.variants.VARIANTS`' order. ``plans``: :func:`planned`'s list, where
    already planned."""
    found = planned(desc, host) if plans is None else plans

    def order(host):
        times = [(v, p, v.estimate(desc, p, host, costs=costs)) for v, p in found]
        return sorted(times, key=lambda t: (t[2], variants.VARIANTS.index(t[0])))

    times = order(host)
    if times and times[0][0].blas and host.blas is None:  # BLAS first at its best rate: its
        times = order(rated(host))  # real rate decides (slower, it can only fall behind)
    return times


def blocked_plan(desc, host: Host | None = None, costs: Costs = COSTS) -> BlockPlan | None:
    """The blocked kernel's tile for ``desc`` on ``host``: the tile the cost model expects to
    run fastest (ties to the pixels tile); None where none applies."""
    return options(desc, host or Host.current(), costs).get("blocked")


def options(desc, host: Host, costs: Costs = COSTS,
            plans: list | None = None) -> dict[str, BlockPlan | None]:
    """The algorithms that can run ``desc`` on ``host``, each with the plan of its fastest
    variant (the blocked kernel's tile; None for the others). ``plans``: :func:`planned`'s
    list, where already planned."""
    found: dict = {}
    for v, p, _ in ranked(desc, host, costs, plans):
        found.setdefault(v.algorithm, p)
    return {a: found[a] for a in ALGORITHMS if a in found}


def cheapest(desc, found: dict[str, BlockPlan | None], host: Host,
             costs: Costs = COSTS) -> str:
    """The algorithm of ``found`` (:func:`options`) with the least estimate, ties to the
    simpler kernel."""
    times = _times(desc, found, host, costs)
    return min(times, key=lambda a: (times[a], ALGORITHMS.index(a)))


def estimates(desc, host: Host | None = None) -> dict[str, float]:
    """The modelled time of each algorithm that can run ``desc`` on ``host`` (its fastest
    variant's; one core's vector multiply-adds)."""
    host = host or Host.current()
    return _times(desc, options(desc, host), host, COSTS)


def _times(desc, found: dict[str, BlockPlan | None], host: Host, costs: Costs) -> dict:
    """Each algorithm of ``found`` with its estimate (BLAS's rate settled where a BLAS
    algorithm would be the fastest at the host's own rate, as in :func:`ranked`)."""
    times = {a: estimate(desc, a, plan, host, costs=costs) for a, plan in found.items()}
    if times and host.blas is None and min(times, key=times.get) in BLAS_ALGORITHMS:
        return _times(desc, found, rated(host), costs)
    return times


def choose(desc, host: Host | None = None, among: str | None = None
           ) -> tuple[str, BlockPlan | None]:
    """The algorithm for ``desc`` on ``host`` (this machine by default), and its plan;
    ``among``: the fastest variant of that algorithm (plan None where it has none for
    ``desc``)."""
    for v, p, _ in ranked(desc, host or Host.current()):
        if among is None or v.algorithm == among:
            return v.algorithm, p
    return among, None


def choose_algorithm(desc, host: Host | None = None) -> str:
    """The algorithm for ``desc`` on ``host`` (this machine by default): the least estimate,
    ties to the simpler kernel."""
    return choose(desc, host)[0]
