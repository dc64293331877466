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


class Sampler:
    """One row's samples: calibrated loops, then samples taken one by one."""

    def __init__(self, fn, clock=time.perf_counter, cpu_clock=time.thread_time):
        self.fn, self.clock, self.cpu_clock = fn, clock, cpu_clock
        self.loops, self.samples, self.wall, self.cpu = 1, [], 0.0, 0.0

    def _run(self, loops: int) -> tuple[float, float]:
        fn = self.fn
        c0, t0 = self.cpu_clock(), self.clock()
        for _ in range(loops):
            fn()
        return self.clock() - t0, self.cpu_clock() - c0

    def calibrate(self, min_time: float) -> int:
        """One warm-up call, then the calls a sample needs to last ``min_time`` (at least
        doubling each try, aiming a little past it, as pyperf does)."""
        self.fn()
        loops = 1
        while loops < MAX_LOOPS:
            wall, _ = self._run(loops)
            if wall >= min_time:
                break
            loops = min(MAX_LOOPS, max(2 * loops,
                                       math.ceil(loops * 1.2 * min_time / max(wall, 1e-9))))
        self.loops = loops
        return loops

    def sample(self) -> float:
        """Take one sample; its wall seconds."""
        wall, cpu = self._run(self.loops)
        self.samples.append(wall / self.loops)
        self.wall, self.cpu = self.wall + wall, self.cpu + cpu
        return wall

    def take(self, repeat: int, budget: float) -> Sampler:
        """``repeat`` samples one after the other, fewer once ``budget`` seconds are spent,
        never under three."""
        start = self.clock()
        while len(self.samples) < 3 or (len(self.samples) < repeat and
                                        self.clock() - start < budget):
            self.sample()
        return self

    def timing(self) -> Timing:
        return Timing(list(self.samples), self.loops,
                      self.cpu / self.wall if self.wall > 0 else None)


def measure(fn, *, min_time: float, repeat: int, budget: float, clock=time.perf_counter,
            cpu_clock=time.thread_time) -> Timing:
    """Time ``fn`` on its own: loops calibrated to ``min_time`` a sample, then ``repeat``
    samples in a row (at least three, fewer than ``repeat`` once ``budget`` seconds are
    spent)."""
    s = Sampler(fn, clock, cpu_clock)
    s.calibrate(min_time)
    return s.take(repeat, budget).timing()
