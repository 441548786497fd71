"""Combine repetitions of one (level, instrument) measurement: the median of each figure.

On a shared machine a single run's p99 depends on what else ran during those seconds.
The bench interleaves repetitions (every instrument once, then again), so a noisy moment
hits one repetition of one instrument, and the median across repetitions discards it.
"""

from __future__ import annotations

import statistics
from typing import Any

METRIC_BLOCKS = (
    "ttft_ms",
    "itl_token_ms",
    "chunk_gap_ms",
    "e2e_ms",
    "request_path_ms",
    "truth_user_late_ms",
)
SUMMED = (
    "matched",
    "failed",
    "untagged",
    "unaligned_chunks",
    "duplicate_tags",
    "observed",
    "server_requests",
    "requests",
)
MEDIANS = ("client_cpu_cores", "server_cpu_cores", "client_cpu_us_per_chunk", "loadavg_1m_before")


def _median(values: list[Any]) -> float | None:
    present = [v for v in values if v is not None]
    return float(statistics.median(present)) if present else None


def combine(reps: list[dict[str, Any]]) -> dict[str, Any]:
    """One result from the repetitions of the same (level, instrument)."""
    if not reps:
        raise ValueError("combine() needs at least one repetition")
    good = [rep for rep in reps if "error" not in rep]
    failed = [rep["error"] for rep in reps if "error" in rep]
    if not good:
        return {**reps[0], "repetitions": len(reps), "failed_repetitions": failed}
    first = good[0]
    out: dict[str, Any] = {key: first[key] for key in ("level", "instrument", "label")}
    for block in METRIC_BLOCKS:
        if block not in first:  # repetitions summarized before the block existed (older results)
            continue
        stats = {
            stat: _median([rep[block].get(stat) for rep in good])
            for stat in first[block]
            if stat != "n"
        }
        stats["n"] = sum(rep[block].get("n", 0) for rep in good)
        out[block] = stats
    for key in SUMMED:
        out[key] = sum(rep.get(key, 0) for rep in good)
    for key in MEDIANS:
        out[key] = _median([rep.get(key) for rep in good])
    clocks = [rep.get("truth_clock", {}) for rep in good]
    out["truth_clock"] = {
        clock: sum(c.get(clock, 0) for c in clocks) for clock in ("kernel", "user")
    }
    counts = [rep["token_count"] for rep in good]
    errors = [c["mean_abs_error"] for c in counts if c["mean_abs_error"] is not None]
    out["token_count"] = {
        "requests_with_count": sum(c["requests_with_count"] for c in counts),
        "mismatched_requests": sum(c["mismatched_requests"] for c in counts),
        "mean_abs_error": max(errors) if errors else None,
    }
    if "reported" in first:  # what the instrument reports per request (bench/accuracy.py)
        shown = [rep["reported"] for rep in good]
        flags = [r["chunk_tokens"] for r in shown if r["chunk_tokens"] is not None]
        out["reported"] = {
            "chunk_times": _median([r["chunk_times"] for r in shown]),
            "itl_values": _median([r["itl_values"] for r in shown]),
            "chunk_tokens": all(flags) if flags else None,
        }
    out["load"] = {key: _median([rep["load"][key] for rep in good]) for key in first["load"]}
    out["repetitions"] = len(reps)
    out["failed_repetitions"] = failed
    out["per_repetition"] = [
        {
            "ttft_ms": [rep["ttft_ms"]["p50"], rep["ttft_ms"]["p99"]],
            "itl_token_ms": [rep["itl_token_ms"]["p50"], rep["itl_token_ms"]["p99"]],
            "chunk_gap_ms": [rep["chunk_gap_ms"]["p50"], rep["chunk_gap_ms"]["p99"]],
            "loadavg_1m_before": rep.get("loadavg_1m_before"),
            "meta": rep.get("meta"),
        }
        for rep in good
    ]
    return out
