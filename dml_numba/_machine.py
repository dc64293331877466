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

    def __init__(self, _start=None):
        self._ticks, self._own = _start or (_cpu_ticks(), sum(os.times()[:2]))
        self._read = None  # what :meth:`others` last read

    def others(self) -> float | None:
        b, own_now = self._read = (_cpu_ticks(), sum(os.times()[:2]))
        a = self._ticks
        if a is None or b is None or b[1] == a[1]:
            return None
        own = (own_now - self._own) * os.sysconf("SC_CLK_TCK")
        return round(max(0.0, b[0] - a[0] - own) / (b[1] - a[1]), 3)

    def then(self) -> CpuShare:
        """The share from where :meth:`others` last read on, without reading again (a watch
        measuring interval after interval reads once an interval, not twice)."""
        return CpuShare(self._read)


#: ``/proc/stat`` held open for the process (an fd, opened on first use; -1: not there): the
#: first call after an idle spell reads it, and opening it then took ~0.3 ms of CPU on a 2-core
#: VM (path lookup and a new procfs file), reading a held one ~0.06 ms. Not inherited across
#: exec (Python's fds are not); a forked child reads its parent's at its own offset (``pread``)
_STAT_FD = None
#: the bytes read: the first line (all CPUs' jiffies) fits with room to spare
_STAT_BYTES = 512


def _stat_line() -> str:
    """The first line of ``/proc/stat`` (its contents made afresh at each read at offset 0).
    A held descriptor that no longer reads it (closed behind our back, or its number reused
    for another file) is opened again, once."""
    global _STAT_FD
    for again in (False, True):
        if _STAT_FD is None or again:
            try:
                _STAT_FD = os.open("/proc/stat", os.O_RDONLY)
            except OSError:
                _STAT_FD = -1
        if _STAT_FD < 0:
            raise OSError("no /proc/stat")
        try:
            line = os.pread(_STAT_FD, _STAT_BYTES, 0).decode("ascii", "replace")
        except OSError:
            continue
        if line.startswith("cpu "):
            return line.split("\n", 1)[0]
    raise OSError("/proc/stat unreadable")


def _cpu_ticks() -> tuple[int, int] | None:
    """(busy, total) jiffies of all CPUs since boot, from /proc/stat (None elsewhere)."""
    try:
        fields = [int(x) for x in _stat_line().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle and iowait
    total = sum(fields[:8])  # guest time is already counted in user time
    return total - idle, total
