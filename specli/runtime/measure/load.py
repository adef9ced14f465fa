"""Is the machine busy with something else? What other processes and the hypervisor took
of its CPUs while specli measured: a calibration taken then prices every batch wrong.

Read from /proc/stat (all CPUs' time by kind) and /proc/self/stat (this process's own),
so specli's own threads never count against it; where /proc is missing (not Linux) only
the load average speaks.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

OTHERS_BUSY = 0.2  # share of the machine's CPU time others used: more is a busy machine
STEAL_BUSY = 0.1  # share the hypervisor took
SPREAD_BUSY = 0.25  # t1 measured again at the end of a calibration, off by more than this


@dataclass(frozen=True)
class Load:
    """The machine while measuring: shares of all CPUs' time (0..1) used by other
    processes and stolen by the hypervisor, the 1-minute load average per core at the
    start, and how far t1 moved between the start and the end of the measurement."""

    others: float = 0.0
    steal: float = 0.0
    loadavg: float = 0.0
    spread: float = 0.0

    @property
    def busy(self) -> bool:
        return self.others > OTHERS_BUSY or self.steal > STEAL_BUSY or self.spread > SPREAD_BUSY

    def describe(self) -> str:
        return (f"other processes {self.others:.0%} of the CPUs, steal {self.steal:.0%}, "
                f"load average {self.loadavg:.2f} a core, t1 moved {self.spread:.0%}")


def _cpu_times() -> tuple[int, int, int] | None:
    """(all CPUs' busy jiffies, their total, stolen) from /proc/stat; None without it."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    user, nice, system, idle, iowait, irq, softirq, steal = fields
    total = sum(fields)
    return total - idle - iowait - steal, total, steal


def _own_jiffies() -> int | None:
    """This process's user + system CPU time (every thread's) in jiffies."""
    try:
        with open("/proc/self/stat") as f:
            after_name = f.read().rsplit(")", 1)[1].split()
        return int(after_name[11]) + int(after_name[12])  # utime, stime (fields 14 and 15)
    except (OSError, ValueError, IndexError):
        return None


def _loadavg_per_core() -> float:
    try:
        return os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:
        return 0.0


class LoadProbe:
    """Started before a measurement and read after it."""

    def __init__(self) -> None:
        self._cpu = _cpu_times()
        self._own = _own_jiffies()
        self._loadavg = _loadavg_per_core()

    def read(self, spread: float = 0.0) -> Load:
        cpu, own = _cpu_times(), _own_jiffies()
        if cpu is None or self._cpu is None or own is None or self._own is None:
            return Load(0.0, 0.0, self._loadavg, spread)
        busy, total, steal = (b - a for a, b in zip(self._cpu, cpu))
        if total <= 0:
            return Load(0.0, 0.0, self._loadavg, spread)
        others = max(0, busy - (own - self._own)) / total
        return Load(others, steal / total, self._loadavg, spread)


def sample(seconds: float = 0.5) -> Load:
    """The machine now, over `seconds` of this process sleeping: others' share and steal."""
    probe = LoadProbe()
    time.sleep(seconds)
    return probe.read()
