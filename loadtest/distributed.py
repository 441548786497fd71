"""Splitting one arm's schedule over Locust workers, and combining what the workers report.

Locust's own distributed engine runs the load (a ``--master`` and N ``--worker`` processes,
ZeroMQ between them; locust/runners.py ``MasterRunner``/``WorkerRunner``, 2.47). This module
is the pure part, with no Locust import: which schedule items a worker executes, and how the
master turns the workers' clocks and windows into one window for the arm.

- Worker ``i`` of ``n`` executes the measured items ``i, i+n, i+2n, ...`` of the shared
  schedule (Locust's worker index, 0..n-1, is given by the master in its ``ack``): every
  item runs exactly once, on a worker fixed by its index, in the same order on both arms.
  The warm-up runs once, on worker 0, before the window opens on every worker.
- Per-request metrics stay on each worker's own monotonic clock (TTFT, ITL and E2E are
  differences on one clock). The window and throughput combine wall-clock times, so the
  master estimates each worker's wall-clock offset (one ping-pong when the window opens,
  NTP-style) and reports the skew between workers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from loadtest.prompts import ScheduleItem

# Custom message types (Runner.register_message / send_message).
PLAN_MESSAGE = "loadtest_plan"  # master -> workers: the arm's plan JSON and the worker count
WARMUP_DONE_MESSAGE = "loadtest_warmup_done"  # worker 0 -> master
WINDOW_OPEN_MESSAGE = "loadtest_window_open"  # master -> workers: {"master_wall": t}
CLOCK_MESSAGE = "loadtest_clock"  # worker -> master: reply to the window-open message
RECORDS_MESSAGE = "loadtest_records"  # worker -> master: finished records (JSON lines)
WORKER_DONE_MESSAGE = "loadtest_worker_done"  # worker -> master: its WorkerWindow


def worker_share(schedule: Sequence[ScheduleItem], index: int, count: int) -> list[ScheduleItem]:
    """The measured items worker ``index`` of ``count`` executes, in schedule order."""
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"worker index {index} is outside 0..{count - 1}")
    measured = [item for item in schedule if not item.warmup]
    return measured[index::count]


def warmup_share(schedule: Sequence[ScheduleItem], index: int) -> list[ScheduleItem]:
    """Warm-up items run once, by worker 0, one at a time, before any measured request."""
    return [item for item in schedule if item.warmup] if index == 0 else []


@dataclass(frozen=True)
class ClockSample:
    """One ping-pong between the master and a worker, on their wall clocks."""

    sent_wall: float  # master, when it sent the probe
    worker_wall: float  # worker, when it received it
    received_wall: float  # master, when the reply arrived

    @property
    def offset_s(self) -> float:
        """Worker clock minus master clock, assuming a symmetric path."""
        return self.worker_wall - (self.sent_wall + self.received_wall) / 2

    @property
    def uncertainty_s(self) -> float:
        return max(self.received_wall - self.sent_wall, 0.0) / 2


@dataclass(frozen=True)
class ClockSkew:
    """Spread of the workers' wall-clock offsets, and how precisely it was observed."""

    skew_ms: float
    uncertainty_ms: float
    offsets_ms: dict[int, float]


def clock_skew(samples: dict[int, ClockSample]) -> ClockSkew | None:
    if not samples:
        return None
    offsets = {index: sample.offset_s * 1000 for index, sample in sorted(samples.items())}
    return ClockSkew(
        skew_ms=max(offsets.values()) - min(offsets.values()),
        uncertainty_ms=max(sample.uncertainty_s for sample in samples.values()) * 1000,
        offsets_ms=offsets,
    )


@dataclass
class WorkerWindow:
    """What one worker reports at its end (or what the master knows of a lost worker)."""

    index: int
    window_start_wall: float | None = None
    window_end_wall: float | None = None
    cpu_share: float | None = None  # of one core, over the worker's window
    unfinished_requests: int = 0
    not_started_requests: int = 0
    lost: bool = False  # stopped sending heartbeats (killed, crashed, network)
    # Reads per arrival clock of its measured requests (vars(transport.ArrivalStamps)).
    arrival_stamps: dict[str, int] | None = None


@dataclass(frozen=True)
class CombinedWindow:
    window_start_wall: float | None
    window_end_wall: float | None
    load_generator_cpu: float | None  # the busiest worker's share of its core
    worker_cpu: dict[int, float | None]
    unfinished_requests: int
    not_started_requests: int
    lost_workers: list[int]
    arrival_stamps: dict[str, int] | None  # summed over the workers that reported them


def combine_windows(
    windows: Sequence[WorkerWindow], share_sizes: dict[int, int], received: dict[int, int]
) -> CombinedWindow:
    """One window for the arm. A lost worker's requests that never reached the master count
    as not started (``share_sizes``: items per worker; ``received``: records per worker)."""
    starts = [w.window_start_wall for w in windows if w.window_start_wall is not None]
    ends = [w.window_end_wall for w in windows if w.window_end_wall is not None]
    cpus = [w.cpu_share for w in windows if w.cpu_share is not None]
    not_started = 0
    for window in windows:
        if window.lost:
            not_started += share_sizes.get(window.index, 0) - received.get(window.index, 0)
        else:
            not_started += window.not_started_requests
    return CombinedWindow(
        window_start_wall=min(starts) if starts else None,
        window_end_wall=max(ends) if ends else None,
        load_generator_cpu=max(cpus) if cpus else None,
        worker_cpu={w.index: w.cpu_share for w in sorted(windows, key=lambda w: w.index)},
        unfinished_requests=sum(w.unfinished_requests for w in windows if not w.lost),
        not_started_requests=not_started,
        lost_workers=sorted(w.index for w in windows if w.lost),
        arrival_stamps=_sum_counts([w.arrival_stamps for w in windows]),
    )


def _sum_counts(counts: Sequence[dict[str, int] | None]) -> dict[str, int] | None:
    reported = [c for c in counts if c is not None]
    if not reported:
        return None
    total: dict[str, int] = {}
    for count in reported:
        for key, value in count.items():
            total[key] = total.get(key, 0) + value
    return total
