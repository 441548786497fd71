"""What machine a local measurement ran on: the figures of the miniature move with it.

The same tree measured a baseline decode step of 9.3 ms on one 2-core machine and 19.9-23.6 ms
on another (docs/local-run.md), so every record of a local run or benchmark names the CPU,
the cores it could use and the load average around it.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")


def cpu_model() -> str:
    """The CPU's marketing name (Linux), else what ``platform`` knows."""
    try:
        for line in CPUINFO.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def usable_cores() -> int:
    """Cores this process may run on (its affinity, not the host's count)."""
    return len(os.sched_getaffinity(0))


def load_average() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


@dataclass
class Machine:
    """The machine of one measurement: taken at its start, finished at its end."""

    cpu: str
    cores: int
    load_average_start: list[float]
    load_average_end: list[float] | None = None

    @classmethod
    def at_start(cls) -> Machine:
        return cls(cpu_model(), usable_cores(), load_average())

    def finish(self) -> None:
        self.load_average_end = load_average()

    def text(self) -> str:
        end = self.load_average_end
        return (
            f"{self.cpu}, {self.cores} cores; load average {self.load_average_start[0]:.2f} at "
            "the start" + (f", {end[0]:.2f} at the end" if end else "")
        )
