"""Acceptance per prompt class (loadtest/probe.py) against the scripted server's counters."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.scripted_server import Fault, Script, ScriptedServer
from loadtest.client import RequestParams
from loadtest.probe import acceptance_by_class

pytestmark = pytest.mark.process

# Under speculation with k drafts, a chunk of n tokens is one step that accepted n - 1.
K = 4
STRUCTURED = Script(chunk_tokens=[1, 5, 5, 5], gaps_s=0.0, ttft_s=0.0)  # accepts 4 of 4
OPEN = Script(chunk_tokens=[1, 2, 1, 2, 1, 2, 2, 1], gaps_s=0.0, ttft_s=0.0)  # 1, 0, ...
FAILING = Script(fault=Fault.HTTP_ERROR, http_status=500)


def _choose(_: int, body: dict[str, Any]) -> Script:
    text = json.dumps(body["messages"])
    if "FAIL" in text:
        return FAILING
    return STRUCTURED if "count" in text else OPEN


def _prompts(tmp_path: Path) -> str:
    lines = [{"id": f"s{i}", "class": "structured", "prompt": f"count to {i}"} for i in range(3)]
    lines += [{"id": f"o{i}", "class": "open_ended", "prompt": f"story {i}"} for i in range(2)]
    lines += [{"id": "o-fail", "class": "open_ended", "prompt": "FAIL"}]
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return str(path)


def test_each_class_gets_the_acceptance_of_its_own_requests(tmp_path: Path) -> None:
    params = RequestParams(model="m", max_tokens=16, timeout_s=5.0)
    with ScriptedServer(_choose, spec_decode_k=K) as server:
        result = acceptance_by_class([_prompts(tmp_path)], server.url, params)
        truth = server.spec_decode_truth()
    assert list(result) == ["open_ended", "structured"]
    structured, open_ended = result["structured"], result["open_ended"]
    assert (structured.prompts, structured.failed) == (3, 0)
    assert (open_ended.prompts, open_ended.failed) == (3, 1)  # counted, not raised
    # structured: 3 requests x 4 steps, 12 of 16 drafts per request accepted
    assert structured.drafts == 12 and structured.acceptance_rate == pytest.approx(12 / 16)
    assert structured.mean_acceptance_length == pytest.approx(16 / 4)
    # open-ended: 2 served requests x 8 steps accepting 4 tokens in all
    assert open_ended.drafts == 16 and open_ended.acceptance_rate == pytest.approx(8 / 64)
    assert structured.drafts + open_ended.drafts == truth["drafts"]


def test_a_server_without_counters_reads_not_available(tmp_path: Path) -> None:
    params = RequestParams(model="m", max_tokens=16, timeout_s=5.0)
    with ScriptedServer(_choose) as server:
        result = acceptance_by_class([_prompts(tmp_path)], server.url, params)
    assert {block.available for block in result.values()} == {False}
    assert all(block.acceptance_rate is None and block.reason for block in result.values())


def test_requests_overlap_within_a_class_never_across_classes(tmp_path: Path) -> None:
    """Concurrent requests of one class, then the next class: each class's counter window
    holds only its own requests, and the per-class rates are those of the sequential probe."""
    slow = {
        "structured": Script(chunk_tokens=[1, 5, 5, 5], gaps_s=0.05, ttft_s=0.05),
        "open_ended": Script(chunk_tokens=[1, 2, 1, 2], gaps_s=0.05, ttft_s=0.05),
    }

    def choose(_: int, body: dict[str, Any]) -> Script:
        return slow["structured" if "count" in json.dumps(body["messages"]) else "open_ended"]

    lines = [{"id": f"s{i}", "class": "structured", "prompt": f"count to {i}"} for i in range(4)]
    lines += [{"id": f"o{i}", "class": "open_ended", "prompt": f"story {i}"} for i in range(3)]
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    params = RequestParams(model="m", max_tokens=16, timeout_s=5.0)
    with ScriptedServer(choose, spec_decode_k=K) as server:
        result = acceptance_by_class([str(path)], server.url, params, concurrency=2)
        log = list(server.log)
    spans = {
        name: [
            (e.received, e.done_time or 0.0)
            for e in log
            if (name == "open_ended") == ("story" in json.dumps(e.body))
        ]
        for name in ("open_ended", "structured")
    }

    def most_in_flight(intervals: list[tuple[float, float]]) -> int:
        return max(sum(s <= start < e for s, e in intervals) for start, _ in intervals)

    assert most_in_flight(spans["structured"]) == 2
    assert most_in_flight(spans["open_ended"]) == 2
    # Classes in sorted order, one after the other: open-ended all done before structured.
    assert max(e for _, e in spans["open_ended"]) <= min(s for s, _ in spans["structured"])
    assert result["structured"].acceptance_rate == pytest.approx(12 / 16)
    assert result["open_ended"].acceptance_rate == pytest.approx(2 / 16)
    assert (result["structured"].failed, result["open_ended"].failed) == (0, 0)


def test_concurrency_below_one_is_refused(tmp_path: Path) -> None:
    params = RequestParams(model="m", max_tokens=16, timeout_s=5.0)
    with pytest.raises(ValueError, match="concurrency must be at least 1"):
        acceptance_by_class([_prompts(tmp_path)], "http://127.0.0.1:1", params, concurrency=0)
