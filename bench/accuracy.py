"""Instrument error against ground truth: matching, per-sample errors, per-level summary.

Pure functions (no I/O), so the arithmetic is unit-tested. Definitions (all on the shared
``perf_counter`` clock, errors = instrument - truth, in milliseconds):

- TTFT error: the instrument's first-content-chunk timestamp minus the server's send time of
  that chunk. (The request path, client start -> server received, is reported separately:
  it is loopback + server accept time, not a timestamping error.)
- E2E error: the instrument's end of stream minus the server's send of ``[DONE]`` (of the
  last content chunk in logs without it).
- Chunk-gap error: measured gap between consecutive content chunks minus the sent gap.
- Per-token ITL error: the instrument's per-token inter-token latency for a chunk minus the
  true one (sent gap / tokens the chunk carried), one sample per generated token. An
  instrument without per-chunk token counts (vllm bench serve) reports the chunk gap as the
  ITL of the chunk; that is what is compared. An instrument that reports one ITL per request
  (AIPerf's ``inter_token_latency``, a mean over the request) has that value compared with
  every token's true ITL.
- Token-count error: reported output tokens minus the tokens the server sent.

The server's send time of a chunk is the kernel's transmit timestamp when the server logged
one for every chunk of the request (``kernel_send_times``, bench/send_stamps.py), else the
``perf_counter`` stamp it took after the write returned. How late those user-space stamps
were is kept (``truth_user_late_ms``): it is the noise the kernel stamps remove.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

PERCENTILES = (50, 99)


@dataclass
class Observation:
    """One request as an instrument reported it (absolute perf_counter seconds)."""

    tag: int | None
    start: float
    chunk_arrivals: list[float] = field(default_factory=list)
    chunk_tokens: list[int] | None = None  # None: the instrument does not count per chunk
    output_tokens: int | None = None
    end: float | None = None
    error: str | None = None
    # Set when the instrument reports one ITL for the whole request, not one per chunk.
    request_itl_s: float | None = None

    @property
    def itl_values(self) -> int:
        """How many ITL values the instrument reports for this request."""
        return 1 if self.request_itl_s is not None else max(len(self.chunk_arrivals) - 1, 0)

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.chunk_arrivals)


@dataclass
class Truth:
    """What the server sent for one request (its own clock, same as the instruments')."""

    index: int
    received: float
    send_times: list[float]
    chunk_tokens: list[int]
    fault: str | None = None
    # The server's after-write stamps when ``send_times`` are the kernel's (else None).
    user_send_times: list[float] | None = None
    done_time: float | None = None  # the ``[DONE]`` event's send, on the same clock

    @property
    def end(self) -> float | None:
        if self.done_time is not None:
            return self.done_time
        return self.send_times[-1] if self.send_times else None

    @property
    def clock(self) -> str:
        return "user" if self.user_send_times is None else "kernel"

    @classmethod
    def from_log(cls, entry: dict[str, Any]) -> Truth:
        user = [float(t) for t in entry["send_times"]]
        kernel = entry.get("kernel_send_times")
        complete = kernel is not None and len(kernel) == len(user) and None not in kernel
        done = entry.get("kernel_done_time") if complete else entry.get("done_time")
        return cls(
            index=int(entry["index"]),
            received=float(entry["received"]),
            send_times=[float(t) for t in kernel] if complete and kernel else user,
            chunk_tokens=[int(n) for n in entry["chunk_tokens"]],
            fault=entry.get("fault"),
            user_send_times=user if complete else None,
            done_time=float(done) if done is not None else None,
        )


@dataclass
class Errors:
    """Pooled per-sample errors (ms) of one instrument over one run."""

    ttft_ms: list[float] = field(default_factory=list)
    e2e_ms: list[float] = field(default_factory=list)
    chunk_gap_ms: list[float] = field(default_factory=list)
    itl_token_ms: list[float] = field(default_factory=list)
    request_path_ms: list[float] = field(default_factory=list)  # start -> server received
    token_count: list[int] = field(default_factory=list)
    matched: int = 0
    failed: int = 0  # the instrument reported an error or no content
    untagged: int = 0  # no tag in the output: cannot be matched to the truth
    unaligned_chunks: int = 0  # chunk count differs from the truth: no chunk-level errors
    duplicate_tags: int = 0
    truth_clock: dict[str, int] = field(default_factory=lambda: {"kernel": 0, "user": 0})
    truth_user_late_ms: list[float] = field(default_factory=list)  # user - kernel stamp
    # What the instrument reported per matched request (measured from its output).
    reported_chunks: list[int] = field(default_factory=list)
    reported_itl_values: list[int] = field(default_factory=list)
    reported_chunk_tokens: list[bool] = field(default_factory=list)


def match(
    observations: Iterable[Observation], truths: Iterable[Truth]
) -> tuple[list[tuple[Observation, Truth]], Errors]:
    """Pair each successful observation with the server's record of the same request."""
    by_index = {truth.index: truth for truth in truths}
    pairs: list[tuple[Observation, Truth]] = []
    errors = Errors()
    seen: set[int] = set()
    for obs in observations:
        if not obs.ok:
            errors.failed += 1
            continue
        if obs.tag is None or obs.tag not in by_index:
            errors.untagged += 1
            continue
        if obs.tag in seen:
            errors.duplicate_tags += 1
            continue
        seen.add(obs.tag)
        pairs.append((obs, by_index[obs.tag]))
    errors.matched = len(pairs)
    return pairs, errors


def request_errors(obs: Observation, truth: Truth, errors: Errors) -> None:
    """Append one matched request's errors to ``errors``."""
    ms = 1000.0
    sends = truth.send_times
    arrivals = obs.chunk_arrivals
    errors.truth_clock[truth.clock] += 1
    errors.reported_chunks.append(len(arrivals))
    errors.reported_itl_values.append(obs.itl_values)
    errors.reported_chunk_tokens.append(obs.chunk_tokens is not None)
    if truth.user_send_times is not None:
        late = zip(truth.user_send_times, sends, strict=True)
        errors.truth_user_late_ms.extend((user - kernel) * ms for user, kernel in late)
    errors.ttft_ms.append((arrivals[0] - sends[0]) * ms)
    errors.request_path_ms.append((truth.received - obs.start) * ms)
    if obs.end is not None and truth.end is not None:
        errors.e2e_ms.append((obs.end - truth.end) * ms)
    if obs.output_tokens is not None:
        errors.token_count.append(int(obs.output_tokens) - sum(truth.chunk_tokens))
    if len(arrivals) != len(sends):
        errors.unaligned_chunks += 1
        return
    for j in range(1, len(sends)):
        measured_gap = arrivals[j] - arrivals[j - 1]
        true_gap = sends[j] - sends[j - 1]
        errors.chunk_gap_ms.append((measured_gap - true_gap) * ms)
        true_tokens = truth.chunk_tokens[j]
        measured_tokens = obs.chunk_tokens[j] if obs.chunk_tokens is not None else 1
        if obs.request_itl_s is not None:
            measured_itl = obs.request_itl_s
        else:
            measured_itl = measured_gap / max(measured_tokens, 1)
        error = (measured_itl - true_gap / true_tokens) * ms
        errors.itl_token_ms.extend([error] * true_tokens)


def compute_errors(observations: Sequence[Observation], truths: Sequence[Truth]) -> Errors:
    pairs, errors = match(observations, truths)
    for obs, truth in pairs:
        request_errors(obs, truth, errors)
    return errors


def percentiles(values: Sequence[float]) -> dict[str, float | None]:
    if not len(values):
        empty: dict[str, float | None] = {f"p{p}": None for p in PERCENTILES}
        return empty | {"mean": None, "min": None, "max_abs": None, "n": 0}
    array = np.asarray(values, dtype=float)
    out: dict[str, float | None] = {f"p{p}": float(np.percentile(array, p)) for p in PERCENTILES}
    out["mean"] = float(array.mean())
    out["min"] = float(array.min())  # below 0: the server stamped its send late (GIL)
    out["max_abs"] = float(np.abs(array).max())
    out["n"] = int(array.size)
    return out


def load_figures(observations: Sequence[Observation], truths: Sequence[Truth]) -> dict[str, Any]:
    """Achieved concurrency and throughput over the measured window (first start -> last end)."""
    done = [obs for obs in observations if obs.ok and obs.end is not None]
    if not done:
        return {
            "window_s": 0.0,
            "achieved_streams": 0.0,
            "tokens_per_s": 0.0,
            "requests_per_s": 0.0,
        }
    window_start = min(obs.start for obs in done)
    window_end = max(obs.end for obs in done if obs.end is not None)
    window = max(window_end - window_start, 1e-9)
    busy = sum((obs.end or obs.start) - obs.start for obs in done)
    by_index = {truth.index: truth for truth in truths}
    tokens = sum(sum(by_index[obs.tag].chunk_tokens) for obs in done if obs.tag in by_index)
    return {
        "window_start": window_start,
        "window_end": window_end,
        "window_s": window,
        "achieved_streams": busy / window,
        "tokens_per_s": tokens / window,
        "requests_per_s": len(done) / window,
    }


def summarize_errors(errors: Errors) -> dict[str, Any]:
    counts = errors.token_count
    return {
        "ttft_ms": percentiles(errors.ttft_ms),
        "itl_token_ms": percentiles(errors.itl_token_ms),
        "chunk_gap_ms": percentiles(errors.chunk_gap_ms),
        "e2e_ms": percentiles(errors.e2e_ms),
        "request_path_ms": percentiles(errors.request_path_ms),
        "token_count": {
            "requests_with_count": len(counts),
            "mismatched_requests": sum(1 for c in counts if c != 0),
            "mean_abs_error": float(np.mean(np.abs(counts))) if counts else None,
        },
        "matched": errors.matched,
        "failed": errors.failed,
        "untagged": errors.untagged,
        "unaligned_chunks": errors.unaligned_chunks,
        "duplicate_tags": errors.duplicate_tags,
        "truth_clock": dict(errors.truth_clock),
        "truth_user_late_ms": percentiles(errors.truth_user_late_ms),
        "reported": reported(errors),
    }


def reported(errors: Errors) -> dict[str, Any]:
    """What the instrument gave per request: chunk times, ITL values, token counts per chunk
    (medians over the matched requests; the truth sends ``len(chunk_tokens)`` chunks)."""
    if not errors.reported_chunks:
        return {"chunk_times": None, "itl_values": None, "chunk_tokens": None}
    return {
        "chunk_times": float(np.median(errors.reported_chunks)),
        "itl_values": float(np.median(errors.reported_itl_values)),
        "chunk_tokens": all(errors.reported_chunk_tokens),
    }
