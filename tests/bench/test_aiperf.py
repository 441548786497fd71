"""AIPerf's exports as bench observations: a sample it wrote against the truth server.

``data/aiperf/`` holds one real run (aiperf 0.13.0, ``bench.aiperf_instrument.run_aiperf``
on 2 streams, 4 requests + 1 warm-up of chunks carrying 1, 3, 2, 4 tokens 5 ms apart) and
the truth server's send log of that run, unedited.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from bench.accuracy import Truth, compute_errors, summarize_errors
from bench.aiperf_instrument import (
    RAW_FILE,
    RECORDS_FILE,
    aiperf_command,
    observations_from_aiperf,
    read_jsonl,
)
from bench.workload import Workload

SAMPLE = Path(__file__).parent / "data" / "aiperf"


def sample() -> tuple[list[dict], list[dict], list[Truth]]:
    truths = [Truth.from_log(e) for e in json.loads((SAMPLE / "truth_log.json").read_text())]
    return read_jsonl(SAMPLE / RECORDS_FILE), read_jsonl(SAMPLE / RAW_FILE), truths


def test_profiling_requests_become_observations_matched_to_the_truth() -> None:
    records, raw, truths = sample()
    assert [r["metadata"]["benchmark_phase"] for r in records].count("warmup") == 1
    observations = observations_from_aiperf(records, raw)
    assert len(observations) == 4  # the warm-up is left out
    errors = compute_errors(observations, truths)
    assert (errors.matched, errors.failed, errors.untagged, errors.unaligned_chunks) == (4, 0, 0, 0)
    assert errors.token_count == [0] * 4  # --use-server-token-count: the server's usage
    assert len(errors.chunk_gap_ms) == 4 * 3 and len(errors.itl_token_ms) == 4 * 9
    # Arrivals after sends: AIPerf stamps on receipt, never before the kernel sent.
    assert min(errors.ttft_ms) > 0 and min(errors.chunk_gap_ms) > -5.0


def test_chunk_times_are_what_aiperf_reports_and_agree_with_its_raw_stamps() -> None:
    records, raw, _ = sample()
    observations = observations_from_aiperf(records, raw)
    raw_by_id = {r["metadata"]["x_request_id"]: r for r in raw}
    profiling = [r for r in records if r["metadata"]["benchmark_phase"] == "profiling"]
    for record, obs in zip(profiling, observations, strict=True):
        metrics = record["metadata"], record["metrics"]
        raw_record = raw_by_id[metrics[0]["x_request_id"]]
        assert obs.start == pytest.approx(raw_record["start_perf_ns"] / 1e9, abs=1e-9)
        ttft_ms = metrics[1]["time_to_first_token"]["value"]
        assert obs.chunk_arrivals[0] - obs.start == pytest.approx(ttft_ms / 1000, abs=1e-9)
        # The first four raw responses carry the content; their perf_ns are AIPerf's stamps.
        content = [r["perf_ns"] / 1e9 for r in raw_record["responses"][:4]]
        assert obs.chunk_arrivals == pytest.approx(content, abs=1e-6)
        assert obs.request_itl_s == pytest.approx(metrics[1]["inter_token_latency"]["value"] / 1000)


def test_aiperf_gives_one_itl_per_request_and_no_tokens_per_chunk() -> None:
    records, raw, truths = sample()
    observations = observations_from_aiperf(records, raw)
    errors = compute_errors(observations, truths)
    assert summarize_errors(errors)["reported"] == {
        "chunk_times": 4.0,
        "itl_values": 1.0,
        "chunk_tokens": False,
    }
    # Every token of a request carries that request's one ITL minus the token's true ITL.
    by_tag = {t.index: t for t in truths}
    expected = []
    for obs in observations:
        assert obs.tag is not None and obs.request_itl_s is not None
        truth = by_tag[obs.tag]
        for j in range(1, len(truth.send_times)):
            true_itl = (truth.send_times[j] - truth.send_times[j - 1]) / truth.chunk_tokens[j]
            expected += [(obs.request_itl_s - true_itl) * 1000] * truth.chunk_tokens[j]
    assert errors.itl_token_ms == pytest.approx(expected)


def test_a_records_export_without_its_raw_export_is_rejected() -> None:
    records, raw, _ = sample()
    with pytest.raises(ValueError, match="--export-level raw"):
        observations_from_aiperf(records, raw[:1])
    bad = json.loads(json.dumps(records))
    for record in bad:
        record["metrics"]["time_to_first_token"]["unit"] = "ns"
    with pytest.raises(ValueError, match="time_to_first_token is in 'ns'"):
        observations_from_aiperf(bad, raw)


def test_failed_request_is_an_observation_with_its_error() -> None:
    records, raw, _ = sample()
    failed = json.loads(json.dumps(records[-1]))
    failed["metrics"] = {}
    failed["error"] = {"code": 500, "type": "ServerError", "message": "boom"}
    (obs,) = observations_from_aiperf([failed], raw)
    assert not obs.ok and obs.error == "boom"


def test_command_runs_the_bench_workload() -> None:
    workload = Workload(levels=(64,), requests={64: 768}, warmup_requests=2)
    command = aiperf_command(
        Path("aiperf"), workload, 64, "http://127.0.0.1:1", Path("out"), Path("tok")
    )
    pairs = dict(itertools.pairwise(command))
    assert command[:2] == ["aiperf", "profile"] and "--streaming" in command
    assert pairs["--endpoint-type"] == "completions"
    assert "--use-server-token-count" in command
    assert (pairs["--concurrency"], pairs["--request-count"]) == ("64", "768")
    assert pairs["--warmup-request-count"] == "2"
    assert pairs["--output-tokens-mean"] == str(workload.output_tokens)
    assert pairs["--synthetic-input-tokens-mean"] == str(workload.prompt_words)
    assert pairs["--export-level"] == "raw"
    assert pairs["--connection-reuse-strategy"] == "never"
    assert Path(pairs["--tokenizer"]).is_absolute()  # AIPerf's services load it elsewhere
    assert Path(pairs["--artifact-dir"]).is_absolute()  # it runs in the run directory
