"""Calibrated samples: how every row of a profile is timed.

A sample is ``loops`` calls in a row, timed together, ``loops`` chosen (doubling, as pyperf and
``timeit`` do) so that one sample lasts at least ``min_time``: a 50 us kernel is timed 100 calls
at a time, not one call at a time against a clock and a scheduler that resolve far coarser. A
row keeps every sample (seconds per call), the loops per sample, and the share of the wall time
the calling thread spent on a CPU, from which the statistics and the warnings are derived.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field

MAX_LOOPS = 1 << 20


@dataclass
class Timing:
    samples: list[float]  # seconds per call, one value a sample
    loops: int  # calls per sample
    cpu_share: float | None = None  # calling thread's CPU time / wall time over the samples
    flags: list[str] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def minimum(self) -> float:
        return min(self.samples)

    def q1_q3(self) -> tuple[float, float]:
        """Q1 and Q3 of the samples (the one sample for both when there is one)."""
        if self.n < 2:
            return self.samples[0], self.samples[0]
        return _at(sorted(self.samples), 0.25), _at(sorted(self.samples), 0.75)

    @property
    def iqr(self) -> float:
        q1, q3 = self.q1_q3()
        return q3 - q1

    @property
    def spread(self) -> float:
        """Q3 - Q1 (the IQR) relative to the median."""
        return self.iqr / self.median if self.median > 0 else 0.0

    def sample_totals(self) -> list[float]:
        """Wall seconds of each sample as the clock saw it (all its loops)."""
        return [s * self.loops for s in self.samples]


def _at(ordered: list[float], f: float) -> float:
    """The value a fraction ``f`` of the way through ``ordered``, interpolated linearly between
    neighbours (NumPy's default rule)."""
    x = f * (len(ordered) - 1)
    i = min(int(x), len(ordered) - 2)
    return ordered[i] + (ordered[i + 1] - ordered[i]) * (x - i)


def _timed(fn, loops: int, clock, cpu_clock) -> tuple[float, float]:
    c0, t0 = cpu_clock(), clock()
    for _ in range(loops):
        fn()
    return clock() - t0, cpu_clock() - c0


def measure(fn, *, min_time: float, repeat: int, budget: float, clock=time.perf_counter,
            cpu_clock=time.thread_time) -> Timing:
    """Time ``fn``: one warm-up call, loops calibrated to ``min_time`` a sample, then ``repeat``
    samples (at least three, fewer than ``repeat`` once ``budget`` seconds are spent)."""
    fn()
    loops = 1
    while loops < MAX_LOOPS:
        wall, _ = _timed(fn, loops, clock, cpu_clock)
        if wall >= min_time:
            break
        # aim a little past min_time, at least doubling (pyperf's calibration)
        loops = min(MAX_LOOPS, max(2 * loops, math.ceil(loops * 1.2 * min_time / max(wall, 1e-9))))
    samples, walls, cpus = [], 0.0, 0.0
    start = clock()
    while len(samples) < 3 or (len(samples) < repeat and clock() - start < budget):
        wall, cpu = _timed(fn, loops, clock, cpu_clock)
        samples.append(wall / loops)
        walls, cpus = walls + wall, cpus + cpu
    return Timing(samples, loops, cpus / walls if walls > 0 else None)
