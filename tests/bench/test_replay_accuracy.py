"""The replay-accuracy bench: its error arithmetic on synthetic receive logs, its trace, its
record and region, and one small real replay against the truth server."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench.figures.measure import MEASUREMENTS, REPLAY_OUT, Outcome, replay_figures
from bench.figures.records import (
    FigureRecord,
    Provenance,
    RecordMachine,
    ReplayAccuracyFigures,
)
from bench.figures.regions import REGIONS
from bench.replay_accuracy import (
    SERVICE_S,
    Level,
    absolute_errors,
    burst_members,
    in_flight,
    parse_levels,
    receive_times,
    replay_errors,
    run_level,
    summarize,
    synthetic_trace,
)
from loadtest.transport import KERNEL_STAMPS


def _entry(text: str, received: float, kernel: float | None, done: float | None = None) -> dict:
    return {
        "request_text": text,
        "received": received,
        "kernel_received": kernel,
        "done_time": received + 1.0 if done is None else done,
    }


def test_the_error_is_the_lag_behind_the_schedule_relative_to_the_median_lag() -> None:
    trace = synthetic_trace(6, 2, seed=3)
    texts = [r.messages[-1].content for r in trace]
    scale = 0.5
    # Clock origin 1000 s; request k reaches the server k ms late on top of a 0.3 ms path.
    log = [
        _entry(text, 0.0, 1000.0 + r.offset_s * scale + 0.0003 + k / 1000.0)
        for k, (text, r) in enumerate(zip(texts, trace, strict=True))
    ]
    # The warm-up's earlier receive of the first request does not count.
    log.insert(0, _entry(texts[0], -5.0, 990.0))
    for k, entry in enumerate(log[1:]):
        entry["received"] = float(k)
    errors, missing = replay_errors(trace, scale, receive_times(log))
    assert missing == []
    # Lags 0.3 + 0..5 ms: their median 2.8 ms is the origin.
    assert list(errors.values()) == pytest.approx([k - 2.5 for k in range(6)], abs=1e-6)
    assert list(errors) == [r.id for r in trace]


def test_a_request_without_a_kernel_stamp_is_unmatched_never_replaced_by_the_warm_up() -> None:
    trace = synthetic_trace(4, 2, seed=1)
    texts = [r.messages[-1].content for r in trace]
    log = [_entry(texts[0], 0.0, 10.0)]  # the warm-up's, stamped
    log += [_entry(text, 1.0 + k, 20.0 + r.offset_s) for k, (text, r) in enumerate(
        zip(texts, trace, strict=True)
    )]  # fmt: skip
    log[-1]["kernel_received"] = None  # the measured receive of the last request: no stamp
    errors, missing = replay_errors(trace, 1.0, receive_times(log))
    assert missing == [trace[-1].id]
    assert list(errors.values()) == pytest.approx([0.0] * 3, abs=1e-6)
    log[1]["kernel_received"] = None  # the first request unstamped too: the rest still count
    errors, missing = replay_errors(trace, 1.0, receive_times(log))
    assert missing == [trace[0].id, trace[-1].id] and len(errors) == 2


def test_a_late_first_request_does_not_shift_the_others() -> None:
    trace = synthetic_trace(40, 8, seed=0)
    received = {r.messages[-1].content: 50.0 + r.offset_s + 0.002 for r in trace}
    received[trace[0].messages[-1].content] += 0.011  # the window's first send, 11 ms late
    errors, _ = replay_errors(trace, 1.0, received)
    assert errors[trace[0].id] == pytest.approx(11.0, abs=1e-6)
    assert sorted(errors.values())[:-1] == pytest.approx([0.0] * 39, abs=1e-6)


def test_the_trace_keeps_about_the_asked_streams_in_flight_with_bursts() -> None:
    trace = synthetic_trace(4000, 64, seed=0)
    offsets = [r.offset_s for r in trace]
    assert offsets == sorted(offsets) and offsets[0] == 0.0 and len(trace) == 4000
    rate = len(trace) / offsets[-1]
    assert rate * SERVICE_S == pytest.approx(64, rel=0.1)  # Little's law
    assert max(offsets.count(at) for at in set(offsets)) >= 10  # bursts at one offset
    assert len({r.messages[-1].content for r in trace}) == len(trace)  # each names itself
    assert {r.prompt_class for r in trace} == {"structured", "open_ended"}


def test_the_absolute_error_is_against_the_window_start() -> None:
    trace = synthetic_trace(5, 2, seed=2)
    received: dict[str, float | None] = {
        r.messages[-1].content: 7.0 + r.offset_s * 2.0 + 0.001 * k for k, r in enumerate(trace)
    }
    received[trace[2].messages[-1].content] = None
    errors = absolute_errors(trace, 2.0, received, window_start=7.0)
    assert errors == pytest.approx([0.0, 1.0, 3.0, 4.0], abs=1e-6)


def test_in_flight_counts_overlaps_from_the_log() -> None:
    log = [_entry("a", 0.0, 0.0, done=2.0), _entry("b", 1.0, 1.0, done=3.0)]
    mean, peak = in_flight(log, since=0.0)
    assert peak == 2 and mean == pytest.approx(4.0 / 3.0)


def test_levels_parse_and_bad_ones_are_named() -> None:
    assert parse_levels("64:2000:1,256:4000:2") == [Level(64, 2000, 1), Level(256, 4000, 2)]
    with pytest.raises(ValueError, match="STREAMS:REQUESTS:WORKERS"):
        parse_levels("64:2000")
    with pytest.raises(ValueError, match=">= 1"):
        parse_levels("64:2000:0")


def _summary_json(p99_64: float, burst_writes: bool | None = None) -> dict:
    level = {
        "streams": 64, "workers": 1, "users": 128, "n": 2000, "unmatched": 0, "p50_ms": 0.2,
        "p99_ms": p99_64, "max_ms": 9.0, "min_ms": -0.7, "mean_in_flight": 61.2,
        "peak_in_flight": 90, "stopped_by": "schedule_done", "load_generator_cpu": 0.4,
        "worker_cpu": {}, "worker_p50_ms": {}, "trace_s": 60.0,
        "absolute_p50_ms": 0.6, "absolute_p99_ms": 2.4,
        "alone_p99_ms": 0.5, "burst_p99_ms": 3.5, "largest_burst": 40,
    }  # fmt: skip
    return {
        "method": "m",
        "time_scale": 1.0,
        "service_s": SERVICE_S,
        "burst_every_s": 4.0,
        "burst_share": 0.25,
        "users_per_stream": 2,
        **({} if burst_writes is None else {"burst_writes": burst_writes}),
        "levels": [
            level,
            {
                **level,
                "streams": 256,
                "workers": 2,
                "p99_ms": 4.0,
                "worker_p50_ms": {"0": -0.5, "1": 2.25},
                "absolute_p50_ms": None,  # distributed: no window start on perf_counter
                "absolute_p99_ms": None,
            },
        ],
    }


def _region(figures: ReplayAccuracyFigures) -> str:
    """The rendered replay-accuracy region of a record holding ``figures``."""
    record = FigureRecord(
        name="replay-accuracy",
        date="2026-11-27T14:00:00Z",
        machine=RecordMachine(cpu="AMD EPYC", cores=2),
        command=MEASUREMENTS["replay-accuracy"].shown_command(),
        remeasure="python -m bench.figures measure replay-accuracy",
        provenance=Provenance(kind="measured", commit="abc1234"),
        figures=figures,
    )
    return REGIONS["replay-accuracy"]({"replay-accuracy": record})


@pytest.mark.parametrize(("p99", "word"), [(1.5, "met"), (2.5, "missed")])
def test_the_record_and_region_say_whether_each_goal_was_met(
    tmp_path: Path, p99: float, word: str
) -> None:
    out = tmp_path / REPLAY_OUT
    out.parent.mkdir(parents=True)
    out.write_text(json.dumps(_summary_json(p99)))
    figures = replay_figures(Outcome(tmp_path, 100.0, "", 0.0))
    assert figures.level(64).p99_ms == p99 and figures.level(256).workers == 2
    text = _region(figures)
    rows = [line for line in text.splitlines() if line.startswith("| 64 ")]
    assert len(rows) == 1 and f"<= 2 ms: {word}" in rows[0] and f"{p99:.2f}" in rows[0]
    assert "<= 5 ms: met" in text and "2 workers" in text
    assert "At 64 streams (one process), against the window start itself: p50 0.60 ms" in text
    assert "At 256 streams (one process)" not in text
    assert "At 256 streams, the p50 error of each worker's own requests: -0.50, 2.25 ms" in text


def test_a_level_with_nothing_matched_is_refused() -> None:
    with pytest.raises(ValueError, match="no request was matched"):
        summarize(Level(8, 40, 1), {}, ["r0"], [])


def test_each_workers_requests_get_their_own_p50() -> None:
    errors = {"r0": 0.0, "r1": 3.0, "r2": 0.2, "r3": 3.2}
    log = [_entry("a", 0.0, 0.0)]
    result = summarize(Level(2, 4, 2), errors, [], log, {"r0": 0, "r1": 1, "r2": 0, "r3": 1})
    assert result.worker_p50_ms == pytest.approx({"0": 0.1, "1": 3.1})
    assert summarize(Level(2, 4, 1), errors, [], log).worker_p50_ms == {}


@pytest.mark.parametrize(
    ("burst_writes", "words"),
    [
        (None, "written one after another"),  # a record from before the setting
        (False, "written one after another"),
        (True, "written together by the first of their senders"),
    ],
)
def test_the_region_says_how_the_bursts_were_written(
    tmp_path: Path, burst_writes: bool | None, words: str
) -> None:
    out = tmp_path / REPLAY_OUT
    out.parent.mkdir(parents=True)
    out.write_text(json.dumps(_summary_json(1.5, burst_writes)))
    text = _region(replay_figures(Outcome(tmp_path, 100.0, "", 0.0)))
    assert f"those in a burst (up to 40 at one offset, {words}): p99 3.50 ms." in text


def test_bursts_and_lone_requests_get_their_own_p99() -> None:
    trace = synthetic_trace(40, 8, seed=0)
    members, largest = burst_members(trace)
    offsets = [r.offset_s for r in trace]
    assert members == {r.id for r in trace if offsets.count(r.offset_s) > 1}
    assert largest == max(offsets.count(o) for o in offsets) > 1
    # A burst's sends wait on each other; a lone request is on time.
    errors = {r.id: (5.0 if r.id in members else 0.1) for r in trace}
    result = summarize(
        Level(8, 40, 1), errors, [], [_entry("a", 0.0, 0.0)], None, (), (members, largest)
    )
    assert result.alone_p99_ms == pytest.approx(0.1) and result.burst_p99_ms == pytest.approx(5.0)
    assert result.largest_burst == largest
    assert summarize(Level(8, 40, 1), errors, [], []).burst_p99_ms is None  # not asked: none


@pytest.mark.skipif(not KERNEL_STAMPS, reason="kernel receive stamps: Linux x86_64/aarch64")
@pytest.mark.process
@pytest.mark.integration
@pytest.mark.timeout(300)
def test_a_small_replay_is_matched_request_by_request(tmp_path: Path) -> None:
    result, detail = run_level(Level(8, 40, 1), tmp_path)
    log = json.loads((tmp_path / "receive_log.json").read_text())
    assert detail["stopped_by"] == "schedule_done"
    texts = {r["messages"][-1]["content"] for r in map(json.loads, _lines(tmp_path))}
    assert {e["request_text"] for e in log} == texts  # the warm-up only repeats the first
    assert all(e["kernel_received"] is not None for e in log)  # every receive was stamped
    assert result.n == 40 and result.unmatched == 0
    for value in (result.p50_ms, result.p99_ms, result.max_ms, result.min_ms):
        assert math.isfinite(value)
    # Loose: a shared 2-core machine; the bench's goal is what the record shows.
    assert -50.0 < result.min_ms <= 0.0 <= result.max_ms < 500.0
    assert result.peak_in_flight >= 2
    assert result.absolute_p50_ms is not None and result.absolute_p99_ms is not None
    assert 0.0 < result.absolute_p50_ms < 500.0  # no request reaches the server before its time


def _lines(run_dir: Path) -> list[str]:
    return (run_dir / "traffic.jsonl").read_text().splitlines()
