"""What machine a local measurement ran on: the figures of the miniature move with it.

The same tree measured a baseline decode step of 9.3 ms on one 2-core machine and 19.9-23.6 ms
on another (docs/local-run.md), so every record of a local run or benchmark names the CPU,
the cores it could use, the load average around it and the host's memory bandwidth: the
miniature's target streams its weights from memory every decode step, so the bandwidth is
the host's side of a step's cost (the other side, per-step overhead, is in the run's step
costs: loadtest.expected).
"""

from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

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


# A copy larger than any CPU cache (the EPYCs here have 32 MiB of L3 per CCD), timed a few
# times: the best of them is the bandwidth one core gets, as a decode step's weight reads.
BANDWIDTH_BYTES = 128 * 2**20
BANDWIDTH_REPEATS = 5


def memory_bandwidth_gbs() -> float:
    """One core's copy bandwidth in GB/s (read + write bytes over the best copy's time)."""
    source = np.ones(BANDWIDTH_BYTES // 8)
    target = np.empty_like(source)
    best = float("inf")
    for _ in range(BANDWIDTH_REPEATS):
        started = time.perf_counter()
        np.copyto(target, source)
        best = min(best, time.perf_counter() - started)
    return round(2 * BANDWIDTH_BYTES / best / 1e9, 2)


def load_average() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


@dataclass
class Machine:
    """The machine of one measurement: taken at its start, finished at its end."""

    cpu: str
    cores: int
    load_average_start: list[float]
    load_average_end: list[float] | None = None
    memory_bandwidth_gbs: float | None = None  # None: a record from before it was measured

    @classmethod
    def at_start(cls) -> Machine:
        return cls(cpu_model(), usable_cores(), load_average(), None, memory_bandwidth_gbs())

    def finish(self) -> None:
        self.load_average_end = load_average()

    def text(self) -> str:
        end = self.load_average_end
        return (
            f"{self.cpu}, {self.cores} cores; load average {self.load_average_start[0]:.2f} at "
            "the start"
            + (f", {end[0]:.2f} at the end" if end else "")
            + (
                f"; memory bandwidth {self.memory_bandwidth_gbs:.1f} GB/s (one core's copy)"
                if self.memory_bandwidth_gbs
                else ""
            )
        )
