"""Concurrent arms as real Locust processes against two scripted servers: one start instant
for both, the same prompts in the same order (closed loop) or at the same times (open loop),
exactly once per arm with workers, and the wall time saved against sequential arms."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.scripted_server import Script
from experiment import build_config
from experiment.config import Arm, ExperimentConfig
from loadtest.arms import START_SPREAD_GOAL_S
from loadtest.records import RequestRecord, read_records
from loadtest.runner import run_comparison
from loadtest.window import WindowMeta

pytestmark = pytest.mark.integration
# Each arm: ~0.3 s per request (8 chunks 0.03 s apart), so a concurrent run takes about one
# arm's time and a sequential one about two.
SCRIPT = Script.fixed(8, 1, ttft_s=0.05, gaps_s=0.03)


def _prompts(tmp_path: Path) -> Path:
    lines = [{"id": f"s{i}", "class": "structured", "prompt": f"count to {i}"} for i in range(4)]
    lines += [{"id": f"o{i}", "class": "open_ended", "prompt": f"story {i}"} for i in range(4)]
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path


def _config(tmp_path: Path, **load: object) -> ExperimentConfig:
    settings = {"max_tokens": 8, "concurrency": 1, "requests_per_prompt": 2, "warmup_requests": 1,
                "max_duration_s": 120, "request_timeout_s": 10, **load}  # fmt: skip
    overrides = {f"loadtest.{key}": str(value) for key, value in settings.items()}
    overrides["loadtest.prompts.files"] = json.dumps([str(_prompts(tmp_path))])
    return build_config(overrides)


def _slow_warmup(index: int, _: object) -> Script:
    """The server's first request (the arm's warm-up) takes 2 s longer than the rest."""
    return Script.fixed(8, 1, ttft_s=2.0, gaps_s=0.03) if index == 0 else SCRIPT


def _measured(out: Path, arm: Arm) -> list[RequestRecord]:
    records = [r for r in read_records(out / f"records_{arm.value}.jsonl") if not r.warmup]
    return sorted(records, key=lambda r: r.wall_start)


def test_both_arms_start_together_with_the_same_prompts_in_the_same_order(serve, tmp_path) -> None:
    # The SD arm's warm-up takes 2 s longer: the shared start waits for it, so the arms'
    # measured windows still open together.
    base, sd = serve(SCRIPT), serve(_slow_warmup)
    out = tmp_path / "run"
    summary = run_comparison(_config(tmp_path), base.url, sd.url, out)
    metas = {arm: WindowMeta.read(out / f"window_{arm.value}.json", arm.value) for arm in Arm}
    firsts = [meta.first_request_wall for meta in metas.values()]
    assert None not in firsts
    assert abs(firsts[0] - firsts[1]) <= START_SPREAD_GOAL_S  # type: ignore[operator]
    assert {meta.start_at_wall for meta in metas.values()} != {None}
    assert all(meta.stopped_by == "schedule_done" for meta in metas.values())
    # Closed loop at concurrency 1: each arm sends the schedule in order, one at a time.
    order = {arm: [r.index for r in _measured(out, arm)] for arm in Arm}
    assert order[Arm.BASELINE] == order[Arm.SPECULATIVE] and len(order[Arm.BASELINE]) == 16
    plan = json.loads((out / "plan_baseline.json").read_text())
    assert order[Arm.BASELINE] == [item["index"] for item in plan["schedule"] if not item["warmup"]]
    # The arms ran at the same time: the same slot on both arms left within a request's time.
    starts = {arm: {r.index: r.wall_start for r in _measured(out, arm)} for arm in Arm}
    lags = [abs(starts[Arm.BASELINE][i] - starts[Arm.SPECULATIVE][i]) for i in order[Arm.BASELINE]]
    assert max(lags) < 1.0, lags
    timing = summary.arms_timing
    assert timing is not None and timing.mode == "concurrent"
    assert timing.start_spread_s is not None and timing.start_spread_s <= START_SPREAD_GOAL_S
    # Together they take about one arm's time: at least a third of the sum saved.
    assert timing.wall_saved_s > sum(timing.arms_elapsed_s.values()) / 3, timing
    assert summary.run.arms_mode == "concurrent"
    assert summary.warnings == [], summary.warnings
    report = (out / "report.md").read_text()
    assert "Arms: concurrent," in report and "less than the arms one after the other" in report


def test_open_loop_releases_each_arrival_to_both_arms_together(serve, tmp_path) -> None:
    base, sd = serve(SCRIPT), serve(_slow_warmup)
    out = tmp_path / "run"
    config = _config(tmp_path, concurrency=4, request_rate=8)
    run_comparison(config, base.url, sd.url, out)
    starts = {arm: {r.index: r.wall_start for r in _measured(out, arm)} for arm in Arm}
    assert set(starts[Arm.BASELINE]) == set(starts[Arm.SPECULATIVE]) and starts[Arm.BASELINE]
    # The same arrival time on both arms: each slot leaves both within the start spread
    # plus gevent's scheduling (not a request's duration apart).
    gaps = [abs(starts[Arm.BASELINE][i] - starts[Arm.SPECULATIVE][i]) for i in starts[Arm.BASELINE]]
    assert max(gaps) < 0.25, gaps


def test_exactly_once_per_arm_with_workers_and_distinct_master_ports(serve, tmp_path) -> None:
    base, sd = serve(SCRIPT), serve(SCRIPT)
    out = tmp_path / "run"
    config = _config(tmp_path, concurrency=2, workers=2, master_port=8541, warmup_requests=2)
    summary = run_comparison(config, base.url, sd.url, out)
    plan = json.loads((out / "plan_baseline.json").read_text())
    expected = sorted(item["index"] for item in plan["schedule"] if not item["warmup"])
    for arm in Arm:
        records = read_records(out / f"records_{arm.value}.jsonl")
        assert sorted(r.index for r in records if not r.warmup) == expected  # once each
        assert sum(r.warmup for r in records) == 2
        meta = WindowMeta.read(out / f"window_{arm.value}.json", arm.value)
        assert meta.workers == 2 and meta.lost_workers == []
    timing = summary.arms_timing
    assert timing is not None and timing.start_spread_s is not None
    assert timing.start_spread_s <= START_SPREAD_GOAL_S
    logs = {arm: (out / "locust" / f"{arm.value}.log").read_text() for arm in Arm}
    assert not any("Address already in use" in log for log in logs.values()), logs


def test_sequential_arms_run_one_after_the_other_and_save_nothing(serve, tmp_path) -> None:
    base, sd = serve(SCRIPT), serve(SCRIPT)
    out = tmp_path / "run"
    summary = run_comparison(_config(tmp_path, arms_mode="sequential"), base.url, sd.url, out)
    first = {arm: _measured(out, arm) for arm in Arm}
    assert first[Arm.BASELINE][-1].wall_start < first[Arm.SPECULATIVE][0].wall_start
    timing = summary.arms_timing
    assert timing is not None and timing.mode == "sequential"
    assert timing.wall_saved_s < 1.0
    assert "Arms: sequential," in (out / "report.md").read_text()
