"""When a profile cannot be trusted, and what to do about it.

Three signs, each computed from what a row recorded (no timing happens here, so the rules are
tested with made-up samples):

- **busy**: the calling thread was on a CPU for less than :data:`BUSY_SHARE` of the wall time
  while a row was timed (other programs took the cores), or other programs used more than
  :data:`BUSY_OTHERS` of the machine's CPU time just before or just after the run (where that
  cannot be measured, the load average before the run above :data:`BUSY_LOAD` a usable core);
- **unstable**: a row's interquartile range is more than :data:`UNSTABLE_SPREAD` of its median;
- **tick**: a row's samples sit at whole multiples of the scheduler's tick (:data:`TICK_S`,
  Linux at 250 Hz): each call waited for the scheduler, and the time measures that, not the
  kernel.
"""
from __future__ import annotations

BUSY_SHARE = 0.8
BUSY_LOAD = 0.5
BUSY_OTHERS = 0.2
UNSTABLE_SPREAD = 0.25
TICK_S = 0.004
TICK_TOLERANCE = 0.003  # relative distance from a multiple of the tick counted as "on" it
TICK_FRACTION = 0.6  # of a row's samples on a multiple of the tick, for the row to be flagged
ADVICE = ("close other programs (or run on a quiet machine) and rerun with a longer "
          "--min-time and more --repeat; `--compare` tells a change from the noise")


def on_ticks(totals: list[float], tick: float = TICK_S) -> bool:
    """Most sample totals within :data:`TICK_TOLERANCE` of a non-zero multiple of ``tick``."""
    if len(totals) < 3:
        return False
    on = 0
    for t in totals:
        k = round(t / tick)
        if k >= 1 and abs(t - k * tick) <= TICK_TOLERANCE * k * tick:
            on += 1
    return on >= TICK_FRACTION * len(totals)


def on_cpu(impl: str) -> bool:
    """Rows whose calling thread does the work (GPU rows wait for the device instead)."""
    return not (impl.startswith(("cuda", "cupy")) or impl.endswith("-cuda"))


def row_flags(impl: str, totals: list[float], spread: float, cpu_share: float | None) -> list:
    flags = []
    if on_cpu(impl) and cpu_share is not None and cpu_share < BUSY_SHARE:
        flags.append("busy")
    if spread > UNSTABLE_SPREAD:
        flags.append("unstable")
    if on_ticks(totals):
        flags.append("tick")
    return flags


def warnings(meta: dict, rows) -> list[str]:
    """What a reader must know before believing the table (empty when nothing is wrong)."""
    out = []
    cores = meta.get("usable_cores") or 1
    others = {when: meta.get(f"others_busy_{when}") for when in ("before", "after")}
    before = meta.get("load_before")
    if any(v is not None for v in others.values()):
        for when, v in others.items():
            if v is not None and v > BUSY_OTHERS:
                out.append(f"the machine was busy {when} the run: other programs used {v:.0%} "
                           f"of its CPU time")
    elif before and before[0] > BUSY_LOAD * cores:
        out.append(f"the machine was busy before the run: load average {before[0]:.2f} on "
                   f"{cores} usable cores")
    timed = [r for r in rows if r.n]
    busy = [r for r in timed if "busy" in r.flags]
    if busy and len(busy) >= max(1, len(timed) // 4):
        worst = min(busy, key=lambda r: r.cpu_share)
        out.append(f"{len(busy)} of {len(timed)} rows ran with the CPU taken away: the calling "
                   f"thread was on a CPU for {worst.cpu_share:.0%} of the time in "
                   f"'{worst.workload}' on {worst.impl}")
    unstable = [r for r in timed if "unstable" in r.flags]
    if unstable:
        names = ", ".join(f"'{r.workload}' on {r.impl} (spread {r.spread:.0%})"
                          for r in unstable[:4])
        more = f" and {len(unstable) - 4} more" if len(unstable) > 4 else ""
        out.append(f"{len(unstable)} {'row is' if len(unstable) == 1 else 'rows are'} "
                   f"unstable: {names}{more}")
    ticks = [r for r in timed if "tick" in r.flags]
    if len(ticks) >= 2:
        names = ", ".join(f"{r.steady_s * 1e3:.2f} ms" for r in ticks[:5])
        out.append(f"{len(ticks)} rows sit at multiples of the scheduler's "
                   f"{TICK_S * 1e3:.0f} ms tick ({names}): they time the scheduler, not the code")
    return [f"{w}; {ADVICE}" for w in out]
