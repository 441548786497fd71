"""Characterization: ``summarize(run_dir)`` of a fixed, awkward record set gives exactly the
summary pinned in ``summary_characterization.json``.

The records have what real streams have: 0-token chunks (the role chunk, empty deltas),
uneven tokens per chunk, bursts, failures on one arm or both, warm-ups, a missing pair, a
length mismatch, inexact token accounting and a lossless mismatch, over two classes. Speed
work on loadtest/metrics.py, records.py and stats.py must keep this summary identical: the
record-derived blocks are compared as JSON text. The bootstrap sums go through float32 BLAS
products whose last bits may depend on the CPU's kernels, so ``statistics`` and ``cost``
(which uses their intervals) are compared to 1e-6 relative: far below any interval's width.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from experiment import build_config
from loadtest.analysis import analysis_info
from loadtest.records import RequestRecord, write_records
from loadtest.summary import summarize

GOLDEN = Path(__file__).with_name("summary_characterization.json")
CLASSES = ("structured", "open_ended")
MEASURED = 40
EXACT = ("arms", "speedup", "lossless", "warnings")
APPROXIMATE = ("statistics", "cost", "verdict", "floors")


def _tokens_per_chunk(arm: str, index: int, total: int) -> list[int]:
    if arm == "baseline":
        return [1] * total
    sizes, left, j = [], total, 0
    while left:
        size = min(left, 1 + (index + 3 * j) % 4)
        sizes.append(size)
        left -= size
        j += 1
    return sizes


def _record(arm: str, index: int, *, warmup: bool = False) -> RequestRecord:
    total = 12 + (index * 7) % 9
    sizes = _tokens_per_chunk(arm, index, total)
    times: list[float] = []
    tokens: list[int] = []
    texts: list[str] = []
    if index % 3 == 0:  # the role chunk: content-less, before the first token
        times.append(0.001)
        tokens.append(0)
        texts.append("")
    now = 0.03 + 0.004 * ((index * 5) % 7)
    position = 0
    for j, size in enumerate(sizes):
        if j:
            burst = index % 6 == 0 and j % 4 == 1
            now += 0.00005 if burst else 0.007 * (1 + (index + j) % 5) + 0.003 * size
        times.append(now)
        tokens.append(size)
        words = [f"t{position + i} " for i in range(size)]
        if arm == "speculative" and index == 9 and j == 2:
            words[0] = "changed "
        texts.append("".join(words))
        position += size
        if index % 5 == 0 and j == 1:  # an empty delta mid-stream
            now += 0.0002
            times.append(now)
            tokens.append(0)
            texts.append("")
    start = index * 0.37
    record = RequestRecord(
        arm=arm,
        index=index,
        prompt_id=f"p{index % 8}",
        prompt_class=CLASSES[index % 2],
        warmup=warmup,
        max_tokens=total + 2 if index % 11 == 4 else total,
        wall_start=1_700_000_000.0 + start,
        start=start,
        scheduled_lag_s=0.001 * (index % 4),
        ttft_s=times[1] if index % 3 == 0 else times[0],
        e2e_s=now + 0.002,
        chunk_times=times,
        chunk_tokens=tokens,
        chunk_texts=texts,
        output_tokens=total,
        prompt_tokens=20 + index,
        token_accounting="chunks" if index % 13 == 5 else "usage",
        finish_reason="length",
        http_status=200,
    )
    failure = {("baseline", 7): "http_5xx", ("speculative", 12): "timeout"}.get((arm, index))
    if index == 20:
        failure = "disconnected_mid_stream"
    if failure:
        record.error = failure
        record.output_tokens = None
        record.finish_reason = None
    return record


def _arm_records(arm: str) -> list[RequestRecord]:
    warmups = [_record(arm, MEASURED + i, warmup=True) for i in range(3)]
    measured = [_record(arm, i) for i in range(MEASURED) if (arm, i) != ("speculative", 33)]
    return warmups + measured


def _summary(run_dir: Path) -> dict[str, Any]:
    config = build_config({})
    urls = {"baseline": "http://b", "speculative": "http://s"}
    run = {
        "started_at": "2026-01-01T00:00:00Z",
        "model": config.serving.target_model,
        "urls": urls,
        "variant_labels": {"baseline": "Base", "speculative": "SD"},
        "request": {
            "model": "m",
            "max_tokens": 20,
            "temperature": 0.0,
            "ignore_eos": True,
            "seed": 0,
            "api": "chat",
            "timeout_s": 5.0,
        },
        "load_shape": {"concurrency": 2, "request_rate": None, "max_duration_s": 60.0},
        "measured_requests": MEASURED,
        "warmup_requests": 3,
        "seed": 0,
        "slo": {"ttft_ms": 45.0, "tpot_ms": 12.0, "e2e_ms": 400.0},
        "analysis": analysis_info(config).model_dump(mode="json"),
    }
    (run_dir / "run.json").write_text(json.dumps(run))
    for arm in urls:
        write_records(run_dir / f"records_{arm}.jsonl", _arm_records(arm))
    summarize(run_dir)
    summary: dict[str, Any] = json.loads((run_dir / "summary.json").read_text())
    return {key: summary[key] for key in (*EXACT, *APPROXIMATE)}


def _approx(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _approx(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_approx(v) for v in value]
    if isinstance(value, float):
        return pytest.approx(value, rel=1e-6)
    return value


def test_the_record_set_has_what_it_claims_to() -> None:
    records = _arm_records("baseline") + _arm_records("speculative")
    assert any(0 in r.chunk_tokens[1:-1] for r in records)  # an empty delta mid-stream
    assert any(r.chunk_tokens[0] == 0 for r in records)  # a role chunk
    assert {r.error for r in records} >= {"http_5xx", "timeout", "disconnected_mid_stream"}
    assert sum(r.warmup for r in records) == 6
    assert {r.prompt_class for r in records} == set(CLASSES)
    assert len({n for r in records if r.arm == "speculative" for n in r.chunk_tokens}) == 5


def test_summary_is_unchanged(tmp_path: Path) -> None:
    actual = _summary(tmp_path)
    expected = json.loads(GOLDEN.read_text())
    for key in EXACT:
        assert json.dumps(actual[key], indent=1) == json.dumps(expected[key], indent=1), key
    for key in APPROXIMATE:
        assert actual[key] == _approx(expected[key]), key
    assert actual["statistics"]["overall"]["pairs"] == MEASURED - 4  # 7, 12, 20 fail; 33 missing
