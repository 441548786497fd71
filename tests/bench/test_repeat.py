"""Combining interleaved repetitions: medians, sums, failures kept visible."""

from __future__ import annotations

import pytest

from bench.repeat import METRIC_BLOCKS, combine


def rep(p99: float, matched: int = 10, cpu: float | None = 0.5) -> dict:
    block = {"p50": 0.1, "p99": p99, "mean": 0.2, "min": -0.01, "max_abs": p99, "n": 100}
    return {
        "level": 64,
        "instrument": "locust_p1",
        "label": "locust",
        "requests": 10,
        "observed": 10,
        "server_requests": 12,
        "matched": matched,
        "failed": 0,
        "untagged": 0,
        "unaligned_chunks": 0,
        "duplicate_tags": 0,
        **{name: dict(block) for name in METRIC_BLOCKS},
        "token_count": {"requests_with_count": 10, "mismatched_requests": 0, "mean_abs_error": 0.0},
        "load": {
            "window_s": 2.0,
            "achieved_streams": 60.0,
            "tokens_per_s": 5000.0,
            "requests_per_s": 100.0,
        },
        "client_cpu_cores": cpu,
        "server_cpu_cores": 0.3,
        "client_cpu_us_per_chunk": 100.0,
        "loadavg_1m_before": 1.5,
    }


def test_median_discards_one_noisy_repetition() -> None:
    combined = combine([rep(1.0), rep(50.0), rep(2.0)])
    assert combined["ttft_ms"]["p99"] == pytest.approx(2.0)
    assert combined["ttft_ms"]["n"] == 300
    assert combined["matched"] == 30 and combined["requests"] == 30
    assert combined["repetitions"] == 3 and combined["failed_repetitions"] == []
    assert [r["ttft_ms"][1] for r in combined["per_repetition"]] == [1.0, 50.0, 2.0]


def test_failed_repetitions_are_reported_and_missing_values_ignored() -> None:
    failed = {"level": 64, "instrument": "locust_p1", "label": "locust", "error": "boom"}
    combined = combine([rep(1.0, cpu=None), failed, rep(3.0)])
    assert combined["failed_repetitions"] == ["boom"]
    assert combined["client_cpu_cores"] == pytest.approx(0.5)
    assert combined["ttft_ms"]["p99"] == pytest.approx(2.0)
    only_failed = combine([failed])
    assert only_failed["error"] == "boom" and only_failed["failed_repetitions"] == ["boom"]
    with pytest.raises(ValueError):
        combine([])


def test_what_an_instrument_reports_survives_combining() -> None:
    reps = [rep(1.0), rep(2.0)]
    reps[0]["reported"] = {"chunk_times": 14.0, "itl_values": 1.0, "chunk_tokens": False}
    reps[1]["reported"] = {"chunk_times": 14.0, "itl_values": 1.0, "chunk_tokens": False}
    assert combine(reps)["reported"] == reps[0]["reported"]
    assert "reported" not in combine([rep(1.0)])  # older results without it
