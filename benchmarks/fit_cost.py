"""Fit the convolution cost model's constants to measured candidates, and score the static choice.

    python3 -m benchmarks.bench_tune --table-only --dump grid16.json          # measure (~30 min)
    python3 -m benchmarks.fit_cost grid16.json [more.json ...] [--fit [--hold NAME,...]]
                                   [--check other.json ...]
    python3 -m benchmarks.fit_cost grid16.json [more.json ...] --export tests/data/crossover.json

Each dump holds every candidate's time on the crossover grid for one host (the lanes and threads
the kernels were planned for). For every shape the static choice is the kernel variant
(``direct``, ``gemm``, or a blocked tile: ``dml_numba/cpu/convolution/variants.py``) whose
modelled time is the least;
its measured time over the shape's best candidate is its score. ``--fit`` searches the
constants (coordinate descent over factors of each, from the current ones) for the least
geometric-mean score over the dumps given, and prints them; ``--check`` scores the result on
other dumps (hosts left out of the fit: another vector width, another thread count);
``--hold gemm,...`` keeps the named constants as they are while the others are fitted
(``blas_switch`` is always kept: it is measured in networks, not on the grid).
``--export FILE`` writes what the tests check the choice against: per host and shape, the
descriptor's parameters and the three algorithms' measured times (the planner's tile).
"""
from __future__ import annotations

import dataclasses
import json
import math
import statistics
import sys

import numpy as np

from benchmarks.bench_convolution import WORKLOADS, _case, grid_shapes


def _shapes() -> dict:
    """label -> (x shape, filter shape, strides, pads, groups, direction) of every shape a dump
    may hold (the grid's and the benchmark's layers)."""
    return {label: rest for label, *rest in grid_shapes(False) + list(WORKLOADS)}


def export(paths: list[str], target: str) -> None:
    """The static options' measured times of the dumps, with each shape's parameters."""
    from dml_numba.cpu.convolution import choice

    shapes = _shapes()
    hosts = []
    for path in paths:
        found, host = {}, None
        for label, desc, host, times in load(path):
            xs, ws, s, p, g, direction = shapes[label]
            found[label] = {"x": list(xs), "w": list(ws), "strides": list(s), "pads": list(p),
                            "groups": g, "direction": direction,
                            "times": {a: float(f"{times[_label(a, plan)]:.4g}") for a, plan in
                                      choice.options(desc, host).items()}}
        hosts.append({"host": [host.lanes, host.threads], "source": path.rsplit("/", 1)[-1],
                      "shapes": found})
    with open(target, "w") as f:  # a shape a line
        f.write('{"hosts": [\n')
        for i, h in enumerate(hosts):
            f.write(f' {{"host": {json.dumps(h["host"])}, "source": {json.dumps(h["source"])}, '
                    '"shapes": {\n')
            f.write(",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}"
                               for k, v in h["shapes"].items()))
            f.write("}}" + (",\n" if i < len(hosts) - 1 else "\n"))
        f.write("]}\n")


def load(path: str):
    """[(desc, host, {label: seconds})] of a dump."""
    from dml_numba.cpu._emit import Host

    data = json.load(open(path))
    host = Host(*data["host"])
    rng = np.random.default_rng(0)
    shapes = _shapes()
    out = []
    for label, times in data["shapes"].items():
        desc = _case(*shapes[label], rng)[0].canonical()
        out.append((label, desc, host, times))
    return out


def _label(algorithm, plan) -> str:
    """The candidate's label, as the dumps name it."""
    from dml_numba.cpu.convolution.tune import Candidate

    return Candidate(algorithm, plan).label()


def scores(rows, costs, prepared=None):
    """The static choice's measured time over the best, per shape (``prepared``: each row's
    variants with their planner's plans, :func:`~dml_numba.cpu.convolution.choice.planned`;
    which of them the choice
    takes is the constants' to decide too)."""
    from dml_numba.cpu.convolution import choice

    out = []
    for i, (_, desc, host, times) in enumerate(rows):
        opts = choice.options(desc, host, costs, prepared[i] if prepared else None)
        pick = choice.cheapest(desc, opts, host, costs)
        out.append(times[_label(pick, opts[pick])] / min(times.values()))
    return out


def summary(name, r) -> str:
    return (f"{name}: geomean {math.exp(statistics.fmean(map(math.log, r))):.3f}, worst "
            f"{max(r):.2f}, median {statistics.median(r):.2f}; within 3%: "
            f"{sum(x <= 1.03 for x in r)}, 1%: {sum(x <= 1.01 for x in r)} of {len(r)}")


def fit(rows, costs, restarts: int = 12, hold=()):
    """Coordinate descent over each constant's factor, least loss (the geometric-mean score and
    a tenth of the worst's log), from the current constants and from ``restarts`` random
    perturbations of the best so far (a fixed seed: the fit is reproducible). The constants
    named in ``hold`` keep their values (a rate the grid's small shapes cannot pin, which the
    fit would otherwise trade against a fixed cost)."""
    from dml_numba.cpu.convolution import choice

    prepared = [choice.planned(d, h) for _, d, h, _ in rows]
    rng = np.random.default_rng(0)

    def loss(c):
        r = scores(rows, c, prepared)
        return statistics.fmean(map(math.log, r)) + 0.1 * math.log(max(r))

    def descend(c):
        value = loss(c)
        for _ in range(6):
            improved = False
            for field in dataclasses.fields(c):
                if field.name in hold:
                    continue
                for factor in (0.1, 0.25, 0.5, 0.7, 0.85, 1.2, 1.4, 2.0, 4.0, 10.0):
                    trial = dataclasses.replace(c, **{field.name: getattr(c, field.name)
                                                      * factor})
                    v = loss(trial)
                    if v < value - 1e-9:
                        value, c, improved = v, trial, True
            if not improved:
                break
        return value, c

    best, costs = descend(costs)
    for _ in range(restarts):
        start = dataclasses.replace(costs, **{f.name: getattr(costs, f.name)
                                              * float(np.exp(rng.normal(0, 0.7)))
                                              for f in dataclasses.fields(costs)
                                              if f.name not in hold})
        value, found = descend(start)
        if value < best - 1e-9:
            best, costs = value, found
    return dataclasses.replace(costs, **{f.name: float(f"{getattr(costs, f.name):.2g}")
                                         for f in dataclasses.fields(costs)})


def main(argv: list[str]) -> int:
    from dml_numba.cpu.convolution import cost as model

    if "--export" in argv:
        i = argv.index("--export")
        export(argv[:i], argv[i + 1])
        return 0
    hold = ("blas_switch",)  # measured in networks: the grid's shapes run alone
    if "--hold" in argv:  # --hold NAME[,NAME...]: constants the fit keeps as they are
        i = argv.index("--hold")
        hold += tuple(argv[i + 1].split(","))
        argv = argv[:i] + argv[i + 2:]
    flags = [a for a in argv if a.startswith("--")]
    check = argv[argv.index("--check") + 1:] if "--check" in argv else []
    paths = [a for a in (argv[:argv.index("--check")] if check else argv) if a not in flags]
    check = [a for a in check if a not in flags]
    rows = [r for p in paths for r in load(p)]
    costs = model.COSTS
    print(summary("the cost model's choice, current constants", scores(rows, costs)))
    if "--fit" in argv:
        costs = fit(rows, costs, hold=hold)
        print("fitted:", costs)
        print(summary("static choice, fitted constants", scores(rows, costs)))
    for p in check:
        held = load(p)
        print(summary(f"{p} (not fitted), constants", scores(held, costs)))
    worst = sorted(zip(scores(rows, costs), (r[0] for r in rows)), reverse=True)[:12]
    for ratio, label in worst:
        print(f"  {ratio:.2f}  {label}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
