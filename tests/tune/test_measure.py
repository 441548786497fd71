"""tune.measure against the scripted server: the per-class sends are loadtest.probe's, with
per-class counters at concurrency 1 only, a deadline, and every connection closed."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from bench.scripted_server import Script, ScriptedServer
from loadtest import transport
from loadtest.client import RequestParams
from loadtest.prompts import Prompt
from tune.measure import measure_classes

K = 4
STRUCTURED = Script(chunk_tokens=[1, 5, 5, 5], gaps_s=0.0, ttft_s=0.0)
OPEN = Script(chunk_tokens=[1, 2, 1, 2, 1, 2, 2, 1], gaps_s=0.0, ttft_s=0.0)
PROMPTS = [
    Prompt(id="s0", prompt_class="structured", text="count to 3"),
    Prompt(id="s1", prompt_class="structured", text="count to 4"),
    Prompt(id="o0", prompt_class="open_ended", text="a story"),
]


def _choose(_: int, body: dict[str, Any]) -> Script:
    return STRUCTURED if "count" in json.dumps(body["messages"]) else OPEN


@pytest.fixture
def closed_sessions(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many StreamSessions were opened and how many closed, as [opened, closed]."""
    counts = [0, 0]
    original_init, original_close = transport.StreamSession.__init__, transport.StreamSession.close

    def init(self: transport.StreamSession, *args: Any, **kwargs: Any) -> None:
        counts[0] += 1
        original_init(self, *args, **kwargs)

    def close(self: transport.StreamSession) -> None:
        counts[1] += 1
        original_close(self)

    monkeypatch.setattr(transport.StreamSession, "__init__", init)
    monkeypatch.setattr(transport.StreamSession, "close", close)
    return counts


def test_classes_repeats_and_per_class_acceptance(closed_sessions: list[int]) -> None:
    params = RequestParams(model="m", max_tokens=16, timeout_s=5.0)
    lines: list[str] = []
    with ScriptedServer(_choose, spec_decode_k=K) as server:
        runs, skipped = measure_classes(
            server.url, PROMPTS, params, concurrency=1, repeats=2,
            deadline=time.monotonic() + 60, speculative=True, log=lines.append,
        )  # fmt: skip
    assert skipped == 0 and sorted(runs) == ["open_ended", "structured"]
    structured = runs["structured"]
    assert [(s.prompt_id, s.repeat) for s in structured.samples] == [
        ("s0", 0), ("s1", 0), ("s0", 1), ("s1", 1),
    ]  # fmt: skip
    assert structured.acceptance is not None
    assert structured.acceptance.acceptance_rate == pytest.approx(12 / 16)  # as test_probe
    assert runs["open_ended"].acceptance is not None
    assert runs["open_ended"].acceptance.acceptance_rate == pytest.approx(4 / 32)
    assert lines[1] == "  structured: 4/4 requests ok, acceptance 75%"
    assert closed_sessions[0] >= 1 and closed_sessions == [closed_sessions[0]] * 2


def test_no_counters_above_concurrency_1_and_nothing_after_the_deadline() -> None:
    params = RequestParams(model="m", max_tokens=16, timeout_s=5.0)
    with ScriptedServer(_choose, spec_decode_k=K) as server:
        runs, _ = measure_classes(
            server.url, PROMPTS, params, concurrency=2, repeats=1,
            deadline=time.monotonic() + 60, speculative=True, log=lambda _: None,
        )  # fmt: skip
        assert all(run.acceptance is None for run in runs.values())
        late, skipped = measure_classes(
            server.url, PROMPTS, params, concurrency=1, repeats=2,
            deadline=time.monotonic() - 1, speculative=True, log=lambda _: None,
        )  # fmt: skip
    assert skipped == 2 * len(PROMPTS)
    assert all(run.samples == [] for run in late.values())
