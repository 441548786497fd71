"""The window file of one arm (``window_<arm>.json``): how its measured window went.

Written by the Locust process that owns the arm's window (loadtest/locustfile.py: the single
process, or the master of a distributed arm), completed by the runner (exit code, elapsed
time, a cancel) and read by ``loadtest.summary``: one typed model for all three, so a key
cannot be written under one name and read under another. Fields one kind of run does not
have keep their default (a single process has no worker CPU shares or clock skew; a master
has no monotonic window ends).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from loadtest.results import ArrivalStampCounts
from loadtest.server_latency import ServerScrape

NOT_RUN = "not_run"


class BlockWindow(BaseModel):
    """One block of an alternating arm (loadtest/alternating.py): a slice of the schedule
    run by a Locust process of its own."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    block: int
    """The block's number within its arm (0: the first, the one with the warm-up)."""
    turn: int
    """Its place in the run's order of blocks over every arm (0: the first to run)."""
    first_index: int
    """Schedule index of its first measured request (blocks are contiguous slices)."""
    last_index: int
    stopped_by: str = NOT_RUN
    launched_wall: float | None = None
    elapsed_s: float | None = None
    """Its Locust process's wall time, start-up and shutdown included."""
    window_s: float = 0.0
    """Its measured window (elapsed_s minus this: the block's start-up and shutdown cost)."""
    histograms_before: ServerScrape | None = None
    """The block's own latency histograms when its window opened (loadtest.server_latency):
    each block is a window of its own, and a block of one class is that class's figure."""
    histograms_after: ServerScrape | None = None


class WindowMeta(BaseModel):
    """What ``window_<arm>.json`` holds."""

    # Unknown keys are an error, as in summary.json: a misspelt key must not read as a default.
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    arm: str
    stopped_by: str = NOT_RUN
    """schedule_done, time_limit, worker_lost, stopped (a worker's SIGTERM), cancelled,
    killed or crashed (no window file from Locust); the summary's ArmSummary.stopped_by."""
    window_start: float | None = None
    """Single process: perf_counter when the window opened."""
    window_end: float | None = None
    """Single process: perf_counter when it closed."""
    window_start_wall: float | None = None
    window_end_wall: float | None = None
    """Distributed: the last worker's end on its wall clock."""
    window_s: float = 0.0
    load_generator_cpu: float | None = None
    """Share of one core the Locust process used (the busiest worker's with workers)."""
    workers: int = 1
    worker_cpu: dict[str, float | None] = Field(default_factory=dict)
    worker_stopped_by: dict[str, str] = Field(default_factory=dict)
    lost_workers: list[int] = Field(default_factory=list)
    arrival_stamps: ArrivalStampCounts | None = None
    clock_skew_ms: float | None = None
    clock_skew_uncertainty_ms: float | None = None
    unfinished_requests: int = 0
    not_started_requests: int = 0
    metrics_before: dict[str, Any] | None = None
    """The speculative counters of /metrics when the window opened (loadtest.acceptance)."""
    metrics_after: dict[str, Any] | None = None
    histograms_before: ServerScrape | None = None
    """The latency histograms of /metrics when the window opened (loadtest.server_latency;
    alternating arms: per block, in ``blocks``)."""
    histograms_after: ServerScrape | None = None
    locust_returncode: int | None = None
    """Set by the runner: the Locust (master) process's exit code; None when it was stopped."""
    elapsed_s: float | None = None
    """Set by the runner: the arm's wall time, start-up and shutdown included."""
    launched_wall: float | None = None
    """Set by the runner: time.time() when it started the arm's Locust processes."""
    start_at_wall: float | None = None
    """Set by the runner: the shared start instant of concurrent arms (None: sequential)."""
    first_request_wall: float | None = None
    """Set by the runner: when the arm's first measured request left (its records)."""
    blocks: list[BlockWindow] = Field(default_factory=list)
    """Alternating arms: the blocks this window combines, in the order they ran (empty:
    one window, sequential or concurrent)."""

    def write(self, path: str | Path) -> None:
        Path(path).write_text(self.model_dump_json(indent=1))

    @classmethod
    def read(cls, path: str | Path, arm: str) -> WindowMeta:
        """The arm's window file; a file that is not there means the arm never ran."""
        file = Path(path)
        if not file.is_file():
            return cls(arm=arm)
        try:
            return cls.model_validate_json(file.read_text())
        except ValidationError as err:
            problem = err.errors()[0]
            raise ValueError(
                f"{file} is not a window file of this load test version "
                f"({'.'.join(map(str, problem['loc']))}: {problem['msg']}); the load test "
                "writes it, do not edit it by hand"
            ) from None
