"""What the machine is and how busy it is, read cheaply (the profiler and the tuner)."""
from __future__ import annotations

import os
import platform
import sys


def cpu_model() -> str:
    """The processor's marketing name (``/proc/cpuinfo`` on Linux, sysctl on macOS), or what
    :func:`platform.processor` says."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("model name", "Hardware", "Processor")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if sys.platform == "darwin":  # pragma: no cover - macOS
        import subprocess

        out = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True,
                             text=True)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    return platform.processor() or platform.machine()


class CpuShare:
    """The share of the machine's CPU time other processes use (and a hypervisor's neighbours
    steal) from its creation to :meth:`others`, from ``/proc/stat``; this process's own threads
    (a thread pool still spinning) are subtracted. None where there is no ``/proc/stat`` or no
    time passed."""

    def __init__(self):
        self._ticks = _cpu_ticks()
        self._own = sum(os.times()[:2])

    def others(self) -> float | None:
        b = _cpu_ticks()
        a = self._ticks
        if a is None or b is None or b[1] == a[1]:
            return None
        own = (sum(os.times()[:2]) - self._own) * os.sysconf("SC_CLK_TCK")
        return round(max(0.0, b[0] - a[0] - own) / (b[1] - a[1]), 3)


def _cpu_ticks() -> tuple[int, int] | None:
    """(busy, total) jiffies of all CPUs since boot, from /proc/stat (None elsewhere)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle and iowait
    total = sum(fields[:8])  # guest time is already counted in user time
    return total - idle, total
