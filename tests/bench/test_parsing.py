"""Workload tagging, instrument output conversion, CPU window, report rendering."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.cpu import window_cores
from bench.instruments import observations_from_records, observations_from_vllm
from bench.report import BEGIN, END, render_table, update_readme
from bench.workload import TaggedScript, Workload, tag_of
from loadtest.records import RequestRecord


def test_tagged_script_text_round_trips_to_its_tag() -> None:
    script = Workload().script(42)
    text = "".join(script.token_text(i) for i in range(3))
    assert text == " r42.w0 r42.w1 r42.w2"
    assert tag_of(text) == 42
    assert tag_of("hello w1") is None
    assert isinstance(script, TaggedScript) and script.output_tokens == 32


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"chunk_tokens": (1, 0)}, "at least 1 token"),
        ({"gap_s": -1.0}, ">= 0"),
        ({"levels": (1, 8)}, "no request count for concurrency levels [8]"),
        ({"levels": (16,), "requests": {16: 4}}, "needs >= 16 requests"),
    ],
)
def test_bad_workload_is_rejected_with_what_to_change(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Workload(**kwargs)


def test_vllm_detailed_result_becomes_observations() -> None:
    result = {
        "start_times": [100.0, 200.0],
        "ttfts": [0.05, 0.0],
        "itls": [[0.02, 0.03], []],
        "latencies": [0.1, 0.0],
        "output_lens": [6, 0],
        "generated_texts": [" r3.w0 r3.w1", ""],
        "errors": ["", "boom"],
    }
    first, second = observations_from_vllm(result)
    assert first.tag == 3 and first.ok and first.chunk_tokens is None
    assert first.chunk_arrivals == pytest.approx([100.05, 100.07, 100.10])
    assert first.end == pytest.approx(100.1) and first.output_tokens == 6
    assert not second.ok and second.error == "boom"
    with pytest.raises(ValueError, match="--save-detailed"):
        observations_from_vllm({"ttfts": []})


def test_our_records_become_observations_without_warmup() -> None:
    record = RequestRecord(
        arm="baseline",
        index=0,
        prompt_id="p",
        prompt_class="c",
        start=50.0,
        ttft_s=0.05,
        e2e_s=0.2,
        chunk_times=[0.05, 0.1],
        chunk_tokens=[1, 3],
        chunk_texts=[" r9.w0", " r9.w1 r9.w2 r9.w3"],
        output_tokens=4,
    )
    warm = RequestRecord(arm="baseline", index=-1, prompt_id="p", prompt_class="c", warmup=True)
    (obs,) = observations_from_records([warm, record])
    assert obs.tag == 9 and obs.chunk_tokens == [1, 3] and obs.output_tokens == 4
    assert obs.chunk_arrivals == pytest.approx([50.05, 50.1]) and obs.end == pytest.approx(50.2)


def test_cpu_window_uses_only_samples_inside_and_survives_processes_coming_and_going() -> None:
    samples = [
        (0.0, {1: 0.0}),
        (1.0, {1: 0.5, 2: 10.0}),  # process 2 appears (its start-up CPU is not counted)
        (2.0, {1: 1.0, 2: 10.5}),
        (3.0, {1: 1.5}),  # process 2 has exited
        (9.0, {1: 9.0}),
    ]
    assert window_cores(samples, 0.5, 3.5) == pytest.approx((1.0 + 0.5) / 2.0)
    assert window_cores(samples, 0.5, 0.9) is None


def _result(instrument: str, label: str, ttft: float, itl: float) -> dict:
    stat = {"p50": ttft, "p99": ttft * 2}
    itl_stat = {"p50": itl, "p99": itl * 2}
    return {
        "level": 64,
        "instrument": instrument,
        "label": label,
        "ttft_ms": stat,
        "itl_token_ms": itl_stat,
        "chunk_gap_ms": stat,
        "e2e_ms": stat,
        "token_count": {"requests_with_count": 10, "mismatched_requests": 0},
        "load": {"achieved_streams": 60.0, "tokens_per_s": 3000.0},
        "client_cpu_cores": 0.5,
        "client_cpu_us_per_chunk": 120.0,
        "failed": 0,
        "untagged": 0,
    }


def _bench_run(results: list[dict]) -> dict:
    """A results.json with these results and a fixed run header."""
    return {
        "results": results,
        "machine": {"cpus": 2, "locust": "2.47", "vllm": "0.32"},
        "started_at": "now",
        "duration_s": 60.0,
        "command": "python -m bench",
        "loadavg_start": [1.0, 1.0, 1.0],
        "loadavg_end": [2.0, 1.0, 1.0],
    }


def test_table_shows_both_instruments_and_ratios(tmp_path: Path) -> None:
    data = _bench_run(
        [
            _result("locust_p1", "locust (1 proc)", 0.2, 0.0),
            _result("vllm", "vllm bench serve", 0.4, 13.0),
            {
                "level": 256,
                "instrument": "vllm",
                "label": "vllm bench serve",
                "error": "vllm bench serve failed",
            },
        ]
    )
    table = render_table(data)
    assert "| 64 | locust (1 proc) | 0.20 / 0.40 | 0.00 / 0.00 |" in table
    assert "| 64 | locust (1 proc) | 0.50 | 0.50 | 0.00 | 0.00 |" in table  # ratios, floored
    assert "run failed: vllm bench serve failed" in table
    assert "Truth:" not in table  # results without truth clocks say nothing about them
    readme = tmp_path / "README.md"
    readme.write_text(f"# Bench\n\n{BEGIN}\nold\n{END}\n\nafter\n")
    update_readme(readme, table)
    text = readme.read_text()
    assert "old" not in text and text.count(BEGIN) == 1 and text.endswith("after\n")
    assert json.dumps(data)  # the JSON the table came from stays serializable


def test_table_names_the_truth_clock_and_the_server_stamps_lateness() -> None:
    result = _result("locust_p1", "locust (1 proc)", 0.2, 0.0)
    result["truth_clock"] = {"kernel": 9, "user": 1}
    result["truth_user_late_ms"] = {"p50": 0.1, "p99": 24.05}
    table = render_table(_bench_run([result]))
    assert "kernel's transmit timestamp for 9 of 10 matched requests" in table
    assert "late by up to 24.1 ms p99 (at 64 streams)" in table
