"""A trace replayed by real Locust processes against two scripted servers: every request at
its recorded offset (scaled), with its own messages and output length, the same on both arms,
checked against what each server received and when."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.scripted_server import Script, ScriptedServer
from experiment import build_config
from experiment.config import Arm
from loadtest.__main__ import main
from loadtest.records import read_records
from loadtest.results import RunSummary
from loadtest.runner import run_comparison
from loadtest.summary import SUMMARY_JSON
from loadtest.traffic import ImportSettings, import_lines, write_traffic
from loadtest.window import WindowMeta

pytestmark = [pytest.mark.process, pytest.mark.timeout(180)]

# (offset s, class, turns, output tokens): a burst of three at 0.4 s, a multi-turn long one.
TRACE = [
    (0.0, "structured", 1, 6),
    (0.4, "open_ended", 1, 9),
    (0.4, "structured", 3, 4),
    (0.4, "open_ended", 1, 7),
    (1.0, "structured", 1, 12),
    (1.6, "open_ended", 5, 5),
]
TIME_SCALE = 0.5


def _log() -> list[str]:
    lines = []
    for number, (offset, name, turns, tokens) in enumerate(TRACE):
        messages = []
        for turn in range(turns):
            messages.append({"role": "user", "content": f"request {number} turn {turn}"})
            if turn < turns - 1:
                messages.append({"role": "assistant", "content": f"answer {turn}"})
        lines.append(
            json.dumps(
                {
                    "id": f"r{number}",
                    "timestamp": 1_700_000_000 + offset,
                    "headers": {"x-prompt-class": name},
                    "messages": messages,
                    "usage": {"completion_tokens": tokens},
                }
            )
        )
    return lines


def _script(_: int, body: dict) -> Script:
    return Script.fixed(int(body["max_tokens"]), 1, ttft_s=0.01, gaps_s=0.005)


def test_the_trace_reaches_both_arms_at_its_offsets_with_its_messages_and_lengths(
    serve, tmp_path: Path
) -> None:
    settings = ImportSettings(
        allowed_classes=["structured", "open_ended"], max_model_len=4096, length_buckets=[14]
    )
    requests = import_lines(_log(), settings).requests
    traffic = write_traffic(requests, tmp_path / "traffic.jsonl")
    config = build_config(
        {
            "loadtest.traffic.file": str(traffic),
            "loadtest.traffic.time_scale": str(TIME_SCALE),
            "loadtest.traffic.length_buckets": "[14]",
            "loadtest.concurrency": "4",
            "loadtest.warmup_requests": "1",
            "loadtest.max_duration_s": "120",
            "loadtest.request_timeout_s": "10",
        }
    )
    servers: dict[Arm, ScriptedServer] = {
        Arm.BASELINE: serve(_script),
        Arm.SPECULATIVE: serve(_script),
    }
    out = tmp_path / "run"
    summary = run_comparison(config, servers[Arm.BASELINE].url, servers[Arm.SPECULATIVE].url, out)
    by_id = {r.id: r for r in requests}
    for arm, server in servers.items():
        meta = WindowMeta.read(out / f"window_{arm.value}.json", arm.value)
        assert meta.stopped_by == "schedule_done"
        received = server.log[1:]  # the first is the warm-up
        assert len(received) == len(TRACE)
        for entry in sorted(received, key=lambda e: e.received):
            body = entry.body
            match = [
                r for r in requests if [m.model_dump() for m in r.messages] == body["messages"]
            ]
            assert len(match) == 1, body["messages"]
            request = match[0]
            assert body["max_tokens"] == request.output_tokens and body["ignore_eos"] is True
            assert entry.headers["x-prompt-class"] == request.prompt_class
            # Sent at its offset x the time scale after the window opened (one clock:
            # perf_counter is the system's monotonic clock in every process).
            error = entry.received - (meta.window_start + request.offset_s * TIME_SCALE)
            assert -0.005 <= error < 0.1, (arm, request.id, error)
        records = [r for r in read_records(out / f"records_{arm.value}.jsonl") if not r.warmup]
        assert sorted(r.prompt_id for r in records) == sorted(by_id)
        for record in records:
            assert record.ok and record.output_tokens == by_id[record.prompt_id].output_tokens
            assert record.max_tokens == record.output_tokens
            assert record.input_tokens == by_id[record.prompt_id].input_tokens
    assert _cells(summary) == {
        "open_ended": ["0-13", "14+"],
        "structured": ["0-13", "14+"],
    }
    assert summary.run.analysis is not None and summary.run.analysis.length_buckets == [14]
    assert summary.run.load_shape.traffic_file == str(traffic)
    assert summary.run.load_shape.time_scale == TIME_SCALE
    assert not [w for w in summary.warnings if "differ from" in w], summary.warnings
    plan = out / "plan_baseline.json"
    assert plan.stat().st_mode & 0o777 == 0o600
    # New edges at report time: the recorded input tokens are bucketed again, the traffic
    # file untouched (no re-import), and a rebuild without the key keeps the run's edges.
    imported = traffic.read_bytes()
    assert main(["report", str(out), "-c", "loadtest.traffic.length_buckets=[50]"]) == 0
    rebuilt = RunSummary.model_validate_json((out / SUMMARY_JSON).read_text())
    assert _cells(rebuilt) == {"open_ended": ["0-49", "50+"], "structured": ["0-49"]}
    assert {(v.prompt_class, v.input_bucket) for v in rebuilt.verdict_by_bucket} == {
        ("open_ended", "0-49"),
        ("open_ended", "50+"),
        ("structured", "0-49"),
    }
    assert rebuilt.run.analysis is not None and rebuilt.run.analysis.length_buckets == [50]
    assert "50+" in (out / "report.md").read_text()
    assert traffic.read_bytes() == imported
    assert main(["report", str(out)]) == 0
    again = RunSummary.model_validate_json((out / SUMMARY_JSON).read_text())
    assert _cells(again) == _cells(summary)


def _cells(summary: RunSummary) -> dict[str, list[str]]:
    assert summary.statistics is not None
    return {c: sorted(b) for c, b in summary.statistics.by_bucket.items()}


def test_the_open_loop_wait_connects_ahead_and_returns_at_its_moment() -> None:
    import time

    from loadtest.open_loop import CONNECT_AHEAD_S, wait_until

    connected: list[float] = []
    moment = time.perf_counter() + 2 * CONNECT_AHEAD_S
    wait_until(moment, lambda: connected.append(time.perf_counter()))
    done = time.perf_counter()
    assert done >= moment and len(connected) == 1 and connected[0] < moment
    wait_until(time.perf_counter() - 1)  # a moment already past: no wait


class _Send:
    """A prepared send that notes who wrote it (loadtest.transport.PreparedSend's shape)."""

    def __init__(self, log: list[tuple[str, str]], owner: str) -> None:
        self.log, self.owner, self.sent = log, owner, None

    def write(self) -> None:
        import gevent

        if self.sent is None:
            self.sent = 1.0
            self.log.append((gevent.getcurrent().name, self.owner))


def test_a_burst_is_written_by_its_first_sender_in_one_loop() -> None:
    """Five senders due at one instant, two more at a later one: the first sender of each
    instant to wake writes every request due then, before any other sender of it runs; the
    others find theirs written. The later instant's requests are not written early."""
    import time

    import gevent

    from loadtest.open_loop import CONNECT_AHEAD_S, BurstGate, wait_until

    gate, log = BurstGate(), []
    found: dict[str, float | None] = {}
    start = time.perf_counter()
    first, later = start + 2 * CONNECT_AHEAD_S, start + 3 * CONNECT_AHEAD_S

    def sender(name: str, moment: float) -> None:
        send = _Send(log, name)
        wait_until(moment, lambda: gate.enlist(moment, send))  # type: ignore[arg-type]
        gate.release(moment)
        found[name] = send.sent
        log.append((name, "read"))

    names = [(f"b{i}", first) for i in range(5)] + [(f"c{i}", later) for i in range(2)]
    gevent.joinall([gevent.spawn(sender, n, m) for n, m in names])
    writes = [(writer, owner) for writer, owner in log if owner != "read"]
    burst = [w for w in writes if w[1].startswith("b")]
    assert len({w for w, _ in burst}) == 1  # one sender wrote the whole burst...
    assert sorted(owner for _, owner in burst) == [f"b{i}" for i in range(5)]  # each once
    reads = [i for i, (_, what) in enumerate(log) if what == "read"]
    assert log.index(burst[-1]) < reads[0]  # ...before any sender went on to read
    assert all(found.values())
    assert sorted(owner for _, owner in writes[5:]) == ["c0", "c1"]  # the later instant, later
