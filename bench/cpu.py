"""CPU used by the client processes during the measured window.

A background thread samples ``cpu_times`` (user + system) of every descendant of this
process except the ground-truth server, every ``interval_s``. The CPU of a window is the sum
over processes of (last sample inside the window - first sample inside it) over the time
between those samples, so process
start-up (vLLM's imports take seconds of CPU) stays out of the figure.
"""

from __future__ import annotations

import threading
import time

import psutil


class CpuSampler:
    def __init__(self, exclude_pids: set[int], interval_s: float = 0.05) -> None:
        self.exclude = exclude_pids
        self.interval_s = interval_s
        self.samples: list[tuple[float, dict[int, float]]] = []
        self.excluded_samples: list[tuple[float, dict[int, float]]] = []  # e.g. the server
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _excluded(self, proc: psutil.Process) -> bool:
        try:
            chain = [proc.pid] + [parent.pid for parent in proc.parents()]
        except psutil.Error:
            return True
        return any(pid in self.exclude for pid in chain)

    def _sample(self) -> None:
        now = time.perf_counter()
        usage: dict[int, float] = {}
        excluded: dict[int, float] = {}
        for proc in psutil.Process().children(recursive=True):
            try:
                times = proc.cpu_times()
            except psutil.Error:
                continue
            target = excluded if self._excluded(proc) else usage
            target[proc.pid] = times.user + times.system
        self.samples.append((now, usage))
        self.excluded_samples.append((now, excluded))

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval_s)

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def window_cores(self, start: float, end: float) -> float | None:
        return window_cores(self.samples, start, end)

    def excluded_window_cores(self, start: float, end: float) -> float | None:
        return window_cores(self.excluded_samples, start, end)


def window_cores(
    samples: list[tuple[float, dict[int, float]]], start: float, end: float
) -> float | None:
    """Mean cores busy between ``start`` and ``end`` (1.0 = one core saturated; None: fewer
    than two samples inside the window)."""
    inside = [(t, usage) for t, usage in samples if start <= t <= end]
    if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
        return None
    first: dict[int, float] = {}
    last: dict[int, float] = {}
    for _, usage in inside:
        for pid, value in usage.items():
            first.setdefault(pid, value)
            last[pid] = value
    used = sum(last[pid] - first[pid] for pid in last)
    return used / (inside[-1][0] - inside[0][0])
