"""How exactly the trace replay sends each request at its recorded offset, against ground truth.

A synthetic traffic file (bursts on a Poisson background, short outputs) is replayed by the
project's own load test (loadtest.plan.build_plan + loadtest.runner.run_arm: the Locust
processes, ``loadtest.workers`` of them in Locust's distributed mode) against the truth
server (bench/truth_server.py), which logs the kernel's receive timestamp of each request's
first read on the shared ``perf_counter`` clock.

The load test's open loop sends item ``i`` at ``window_start + offset_i x time_scale``
(loadtest/locustfile.py; every worker has its own ``window_start``, taken when the master's
window-open message reached it). The error of request ``i`` is::

    error_i = (received_i - scheduled_i) - median_j (received_j - scheduled_j)

``received``: the kernel receive stamp; ``scheduled``: ``offset x time_scale``. The
clock origins (window start, the loopback path) are the same for every request and cancel
in the median, so the error is how much later (or earlier) than the typical request each one
reached the server, relative to the schedule: what the replay's timing adds to the recorded
gaps. (The first measurement took the trace's first request as the origin; it opens the
window without a connection made ahead, reached the server about 11 ms late, and shifted
every other error by that much: record replay-accuracy of 0ff453f.)

``python -m bench.replay_accuracy`` writes the JSON summary (p50/p99/max per level).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench.truth_server import TruthServer
from bench.workload import Workload
from experiment import build_config
from experiment.config import Arm
from loadtest.distributed import worker_share
from loadtest.plan import build_plan
from loadtest.runner import run_arm
from loadtest.traffic import (
    Message,
    TrafficRequest,
    approximate_tokens,
    messages_sha256,
    write_traffic,
)

CLASSES = ("structured", "open_ended")
# Every request's stream: 4 tokens, the first after TTFT_S, then one per GAP_S (the server's
# workload): 1.6 s in flight, so `streams` in flight need streams / 1.6 requests a second.
TTFT_S = 0.4
GAP_S = 0.4
OUTPUT_TOKENS = 4
SERVICE_S = TTFT_S + GAP_S * (OUTPUT_TOKENS - 1)
BURST_EVERY_S = 4.0
BURST_SHARE = 0.25  # of the requests, sent in bursts (all at one offset each)
USERS_PER_STREAM = 2  # Locust users per target stream: the cap on in-flight never binds
WARMUP_REQUESTS = 2
METHOD = (
    "error_i = (kernel receive of request i - offset_i x time_scale) - (the median of the "
    "same over the requests), on perf_counter (CLOCK_MONOTONIC); the receive stamp is the "
    "truth server's SO_TIMESTAMPNS stamp of the request's first read"
)


@dataclass(frozen=True)
class Level:
    streams: int
    requests: int
    workers: int


DEFAULT_LEVELS = (Level(64, 2000, 1), Level(256, 4000, 2))


def synthetic_trace(requests: int, streams: int, seed: int = 0) -> list[TrafficRequest]:
    """``requests`` requests whose replay keeps about ``streams`` in flight (Little's law:
    streams / SERVICE_S a second), a quarter of them in bursts every BURST_EVERY_S, the rest
    Poisson; each names itself in its message (``replay r<i>``)."""
    if requests < 2 or streams < 1:
        raise ValueError("a trace needs >= 2 requests and >= 1 stream")
    rng = random.Random(seed)
    rate = streams / SERVICE_S
    burst = max(1, round(rate * BURST_EVERY_S * BURST_SHARE))
    background = rate * (1 - BURST_SHARE)
    offsets: list[float] = []
    now, next_burst = 0.0, 0.0
    while len(offsets) < requests:
        gap = rng.expovariate(background)
        if now + gap >= next_burst:
            offsets.extend([next_burst] * burst)
            now, next_burst = next_burst, next_burst + BURST_EVERY_S
            continue
        now += gap
        offsets.append(now)
    traffic = []
    for index, offset in enumerate(sorted(offsets)[:requests]):
        messages = [Message(role="user", content=f"replay r{index}")]
        dumped = [m.model_dump() for m in messages]
        tokens = approximate_tokens(dumped)
        traffic.append(
            TrafficRequest.model_validate(
                {
                    "id": f"r{index}",
                    "class": CLASSES[index % len(CLASSES)],
                    "messages": dumped,
                    "output_tokens": OUTPUT_TOKENS,
                    "offset_s": round(offset, 6),
                    "input_tokens": tokens,
                    "sha256": messages_sha256(dumped),
                }
            )
        )
    return traffic


@dataclass
class LevelErrors:
    streams: int
    workers: int
    n: int  # requests matched to a receive stamp
    unmatched: int  # trace requests with no kernel receive stamp in the server's log
    p50_ms: float
    p99_ms: float
    max_ms: float
    min_ms: float
    mean_in_flight: float  # from the server's log: received -> last chunk sent
    peak_in_flight: int
    # Distributed: p50 error of each worker's requests. Every worker opens its window when
    # the master's message reaches it, so their offsets differ: part of the replay's error.
    worker_p50_ms: dict[str, float] = field(default_factory=dict)
    # One Locust process: its window start is on perf_counter too, so the error needs no
    # origin: receive - (window start + offset x time_scale), connect and loopback included.
    absolute_p50_ms: float | None = None
    absolute_p99_ms: float | None = None
    # The requests alone at their offset against those sharing one with others (a burst):
    # one process writes a burst's sends one after another, so they wait on each other.
    alone_p99_ms: float | None = None
    burst_p99_ms: float | None = None
    largest_burst: int = 0


def burst_members(trace: Sequence[TrafficRequest]) -> tuple[set[str], int]:
    """The ids of requests that share their offset with another, and the largest such group."""
    by_offset: dict[float, list[str]] = {}
    for request in trace:
        by_offset.setdefault(request.offset_s, []).append(request.id)
    groups = [ids for ids in by_offset.values() if len(ids) > 1]
    return {i for ids in groups for i in ids}, max((len(ids) for ids in groups), default=0)


def receive_times(log: Sequence[dict[str, Any]]) -> dict[str, float | None]:
    """Each request text's kernel receive time (None: the server got no stamp). A text
    received twice (the warm-up replays the trace's first requests before the window) keeps
    its last receive, the measured one."""
    last: dict[str, dict[str, Any]] = {}
    for entry in log:
        text = entry.get("request_text", "")
        if text and (text not in last or entry["received"] > last[text]["received"]):
            last[text] = entry
    return {
        text: None if entry.get("kernel_received") is None else float(entry["kernel_received"])
        for text, entry in last.items()
    }


def replay_errors(
    trace: Sequence[TrafficRequest], time_scale: float, received: dict[str, float | None]
) -> tuple[dict[str, float], list[str]]:
    """Each request's error in ms by id (definition: the module docstring), in trace order,
    and the ids of trace requests the log has no kernel receive time for."""
    scheduled = {r.messages[-1].content: r.offset_s * time_scale for r in trace}
    ids = {r.messages[-1].content: r.id for r in trace}
    stamped = {text: at for text, at in received.items() if at is not None}
    lags = {text: stamped[text] - at for text, at in scheduled.items() if text in stamped}
    missing = [ids[text] for text in scheduled if text not in stamped]
    if not lags:
        return {}, missing
    origin = float(np.median(list(lags.values())))
    errors = {ids[text]: (lags[text] - origin) * 1000.0 for text in scheduled if text in lags}
    return errors, missing


def absolute_errors(
    trace: Sequence[TrafficRequest],
    time_scale: float,
    received: dict[str, float | None],
    window_start: float,
) -> list[float]:
    """Each stamped request's receive minus its send time as the load test schedules it
    (``window_start`` + offset x time_scale), ms: one Locust process's window only."""
    return [
        (at - (window_start + r.offset_s * time_scale)) * 1000.0
        for r in trace
        if (at := received.get(r.messages[-1].content)) is not None
    ]


def in_flight(log: Sequence[dict[str, Any]], since: float) -> tuple[float, int]:
    """Mean and peak requests in flight at the server after ``since`` (received -> done)."""
    events: list[tuple[float, int]] = []
    for entry in log:
        start, end = entry.get("received"), entry.get("done_time")
        if start is None or end is None or end < since:
            continue
        events += [(max(float(start), since), 1), (float(end), -1)]
    if not events:
        return 0.0, 0
    events.sort()
    level = peak = 0
    area, last = 0.0, events[0][0]
    for at, step in events:
        area += level * (at - last)
        level, last = level + step, at
        peak = max(peak, level)
    span = events[-1][0] - events[0][0]
    return (area / span if span > 0 else 0.0), peak


def summarize(
    level: Level,
    errors: dict[str, float],
    missing: Sequence[str],
    log: Sequence[dict[str, Any]],
    worker_of: dict[str, int] | None = None,
    absolute: Sequence[float] = (),
    bursts: tuple[set[str], int] = (set(), 0),
) -> LevelErrors:
    if not errors:
        raise ValueError(f"{level.streams} streams: no request was matched to a receive stamp")
    values = np.asarray(list(errors.values()))
    by_worker: dict[str, list[float]] = {}
    for request_id, error in errors.items():
        if worker_of and request_id in worker_of:
            by_worker.setdefault(str(worker_of[request_id]), []).append(error)
    stamps = [e["kernel_received"] for e in log if e.get("kernel_received") is not None]
    mean, peak = in_flight(log, since=min(stamps) if stamps else -math.inf)
    return LevelErrors(
        streams=level.streams,
        workers=level.workers,
        n=len(errors),
        unmatched=len(missing),
        p50_ms=float(np.percentile(values, 50)),
        p99_ms=float(np.percentile(values, 99)),
        max_ms=float(values.max()),
        min_ms=float(values.min()),
        mean_in_flight=round(mean, 1),
        peak_in_flight=peak,
        worker_p50_ms={w: float(np.percentile(v, 50)) for w, v in sorted(by_worker.items())},
        absolute_p50_ms=float(np.percentile(absolute, 50)) if len(absolute) else None,
        absolute_p99_ms=float(np.percentile(absolute, 99)) if len(absolute) else None,
        alone_p99_ms=_p99([e for i, e in errors.items() if i not in bursts[0]]),
        burst_p99_ms=_p99([e for i, e in errors.items() if i in bursts[0]]),
        largest_burst=bursts[1],
    )


def _p99(values: Sequence[float]) -> float | None:
    return float(np.percentile(values, 99)) if len(values) else None


def run_level(
    level: Level, run_dir: Path, seed: int = 0, burst_writes: bool = True
) -> tuple[LevelErrors, dict[str, Any]]:
    """Replay one level's trace with the load test against a fresh truth server;
    ``burst_writes``: loadtest.traffic.burst_writes (a burst's requests written together)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    trace = synthetic_trace(level.requests, level.streams, seed)
    traffic = write_traffic(trace, run_dir / "traffic.jsonl")
    workload = Workload(
        ttft_s=TTFT_S,
        gap_s=GAP_S,
        chunk_tokens=(1,) * OUTPUT_TOKENS,
        levels=(level.streams,),
        requests={level.streams: level.requests},
    )
    users = level.streams * USERS_PER_STREAM
    duration = trace[-1].offset_s + SERVICE_S
    config = build_config(
        {
            "loadtest.traffic.file": str(traffic),
            "loadtest.concurrency": str(users),
            "loadtest.workers": str(level.workers),
            "loadtest.warmup_requests": str(WARMUP_REQUESTS),
            # Twice the trace plus start-up: the window never ends before the schedule does.
            "loadtest.max_duration_s": str(int(2 * duration + 300)),
            "loadtest.request_timeout_s": "60",
            "loadtest.traffic.burst_writes": str(burst_writes).lower(),
        }
    )
    with TruthServer(workload, run_dir / "truth_server.log") as server:
        plan = build_plan(config, Arm.BASELINE, server.url, run_dir)
        meta = run_arm(plan, run_dir, workers=level.workers)
        log = server.log()
    (run_dir / "receive_log.json").write_text(json.dumps(log))
    received = receive_times(log)
    errors, missing = replay_errors(trace, config.loadtest.traffic.time_scale, received)

    worker_of = {
        item.prompt.id: index
        for index in range(level.workers)
        for item in worker_share(plan.schedule, index, level.workers)
    }
    scale = config.loadtest.traffic.time_scale
    # A distributed arm's window file has no perf_counter start (each worker has its own).
    absolute = (
        absolute_errors(trace, scale, received, meta.window_start)
        if level.workers == 1 and meta.window_start
        else []
    )
    result = summarize(
        level,
        errors,
        missing,
        log,
        worker_of if level.workers > 1 else None,
        absolute,
        burst_members(trace),
    )
    detail = {
        "stopped_by": meta.stopped_by,
        "load_generator_cpu": meta.load_generator_cpu,
        "worker_cpu": meta.worker_cpu,
        "trace_s": round(duration, 1),
        "users": users,
    }
    return result, detail


def parse_levels(text: str) -> list[Level]:
    """``STREAMS:REQUESTS:WORKERS,...`` (e.g. ``64:2000:1,256:4000:2``)."""
    levels = []
    for part in text.split(","):
        try:
            streams, requests, workers = (int(x) for x in part.split(":"))
        except ValueError:
            raise ValueError(f"level {part!r}: write STREAMS:REQUESTS:WORKERS") from None
        if streams < 1 or workers < 1 or requests < 2:
            raise ValueError(f"level {part!r}: streams, workers >= 1 and requests >= 2")
        levels.append(Level(streams, requests, workers))
    return levels


def measure(levels: Sequence[Level], run_dir: Path, seed: int = 0) -> dict[str, Any]:
    results = []
    for level in levels:
        result, detail = run_level(level, run_dir / f"streams{level.streams}", seed)
        results.append({**asdict(result), **detail})
    return {
        "method": METHOD,
        "time_scale": 1.0,
        "service_s": SERVICE_S,
        "burst_every_s": BURST_EVERY_S,
        "burst_share": BURST_SHARE,
        "users_per_stream": USERS_PER_STREAM,
        "burst_writes": True,  # run_level's default: loadtest.traffic.burst_writes
        "levels": results,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="replay timing error against ground truth")
    default = ",".join(f"{x.streams}:{x.requests}:{x.workers}" for x in DEFAULT_LEVELS)
    parser.add_argument("--levels", default=default, help="STREAMS:REQUESTS:WORKERS,...")
    parser.add_argument("--run-dir", default="runs/replay-accuracy")
    parser.add_argument("--out", default="", help="JSON file (default: stdout)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        levels = parse_levels(args.levels)
    except ValueError as err:
        parser.error(str(err))
    summary = measure(levels, Path(args.run_dir), args.seed)
    text = json.dumps(summary, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
