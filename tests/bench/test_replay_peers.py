"""The replay side by side (bench/replay_peers.py): the lone/burst split of the errors, the
peers' trace files, the matching of vllm bench's outputs, and the record's region, whose
verdicts are computed from its numbers (each both ways)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from bench.aiperf_instrument import DEFAULT_VENV, ensure_aiperf
from bench.figures.measure import (
    MEASUREMENTS,
    REPLAY_PEERS_OUT,
    Outcome,
    replay_peers_figures,
)
from bench.figures.records import FigureRecord, Provenance, RecordMachine
from bench.figures.regions import REGIONS
from bench.replay_accuracy import OUTPUT_TOKENS, Level, burst_members, synthetic_trace
from bench.replay_peers import (
    AIPERF_TRACE_TYPE,
    aiperf_command,
    combine,
    error_stats,
    failed_result,
    split_errors,
    tool_result,
    vllm_command,
    vllm_received,
    write_aiperf_trace,
    write_vllm_trace,
)


def test_lone_requests_and_burst_members_are_split_by_their_offset() -> None:
    trace = synthetic_trace(40, 8, seed=0)
    members, largest = burst_members(trace)
    assert 1 < largest < len(members) < len(trace)
    # A burst's sends wait on each other (5 ms); a lone request is on time (0.1 ms).
    errors = {r.id: (5.0 if r.id in members else 0.1) for r in trace}
    late = next(r.id for r in trace if r.id not in members)
    errors[late] = 9.0  # one lone request late: its max, not the bursts'
    lone, burst = split_errors(errors, members)
    assert len(lone) + len(burst) == len(trace) and len(burst) == len(members)
    assert set(burst) == {5.0} and max(lone) == 9.0
    result = tool_result("loadtest", Level(8, 40, 1), trace, errors, [])
    assert result["burst"] == {"n": len(members), "p50_ms": 5.0, "p99_ms": 5.0, "max_ms": 5.0}
    assert result["lone"]["n"] == len(lone) and result["lone"]["p50_ms"] == pytest.approx(0.1)
    assert result["lone"]["max_ms"] == 9.0
    assert result["largest_burst"] == largest and result["workers"] == 1
    peer = tool_result("aiperf", Level(8, 40, 1), trace, errors, ["r3"])
    assert peer["workers"] is None and peer["unmatched"] == 1


def test_the_stats_are_p50_p99_and_max_and_none_for_an_empty_group() -> None:
    stats = error_stats([float(k) for k in range(101)])
    assert stats is not None
    assert (stats.n, stats.p50_ms, stats.p99_ms, stats.max_ms) == (101, 50.0, 99.0, 100.0)
    assert error_stats([]) is None


def test_repetitions_combine_into_the_median_of_each_figure_with_their_p99s_beside() -> None:
    reps = [
        {**_run("loadtest", 64, lone_p99=p99, burst_p99=10 * p99), "load_average_1m": load}
        for p99, load in ((1.0, 0.5), (3.0, 4.25), (2.0, 1.0))
    ]
    failed = failed_result("loadtest", Level(64, 40, 1), 40, "truth server did not start")
    combined = combine([*reps, {**failed, "load_average_1m": 2.0}])
    assert combined["error"] is None and combined["repetitions"] == 3
    assert combined["lone"]["p99_ms"] == 2.0 and combined["burst"]["max_ms"] == 20.0
    assert combined["lone_p99_ms_by_repetition"] == [1.0, 3.0, 2.0]
    assert combined["burst_p99_ms_by_repetition"] == [10.0, 30.0, 20.0]
    assert combined["load_average_1m"] == [0.5, 4.25, 1.0, 2.0]
    assert combined["failures"] == ["truth server did not start"]
    none = combine([{**failed, "load_average_1m": 2.0}] * 2)
    assert none["error"] == "truth server did not start (every repetition failed)"
    assert none["lone"] is None and none["repetitions"] == 0


def test_the_aiperf_trace_is_mooncake_jsonl_with_ms_timestamps_and_the_messages(
    tmp_path: Path,
) -> None:
    trace = synthetic_trace(12, 4, seed=1)
    path = write_aiperf_trace(trace, 0.5, tmp_path / "t.jsonl")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) == len(trace)
    for line, request in zip(lines, trace, strict=True):
        assert set(line) == {"timestamp", "messages", "output_length"}
        assert line["timestamp"] == pytest.approx(request.offset_s * 0.5 * 1000.0)
        assert line["messages"] == [{"role": "user", "content": request.messages[-1].content}]
        assert line["output_length"] == OUTPUT_TOKENS
    command = aiperf_command(Path("aiperf"), path, "http://h:1", tmp_path / "o", tmp_path)
    flag = command.index("--custom-dataset-type")
    assert command[flag + 1] == AIPERF_TRACE_TYPE == "mooncake_trace"
    assert "--fixed-schedule" in command and str(path.resolve()) in command


def test_the_vllm_trace_is_timed_trace_jsonl_in_seconds(tmp_path: Path) -> None:
    trace = synthetic_trace(12, 4, seed=1)
    path = write_vllm_trace(trace, 2.0, tmp_path / "t.jsonl")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["timestamp"] for line in lines] == pytest.approx([r.offset_s * 2.0 for r in trace])
    assert [line["hash_ids"] for line in lines] == [[k] for k in range(len(trace))]
    assert all(
        line["input_length"] >= 1 and line["output_length"] == OUTPUT_TOKENS for line in lines
    )
    command = vllm_command(path, len(trace), "http://h:1", tmp_path, tmp_path)
    assert command[command.index("--dataset-name") + 1] == "timed_trace"
    assert command[command.index("--num-prompts") + 1] == str(len(trace))
    assert "--max-concurrency" not in command and "--request-rate" not in command


def test_vllm_outputs_are_matched_to_the_log_by_the_streamed_index() -> None:
    trace = synthetic_trace(3, 2, seed=0)
    # The server's log: two warm-ups (indexes 0, 1), then the three in another order.
    log: list[dict[str, Any]] = [
        {"index": 0, "kernel_received": 1.0},
        {"index": 1, "kernel_received": 2.0},
        {"index": 2, "kernel_received": 12.0},
        {"index": 3, "kernel_received": 10.0},
        {"index": 4, "kernel_received": None},
    ]
    texts = [" r3.w0 r3.w1", " r2.w0", ""]  # the third request failed: no text
    received = vllm_received(trace, texts, log)
    assert received == {
        trace[0].messages[-1].content: 10.0,
        trace[1].messages[-1].content: 12.0,
        trace[2].messages[-1].content: None,
    }
    with pytest.raises(ValueError, match="2 outputs for 3 requests"):
        vllm_received(trace, texts[:2], log)


def _run(tool: str, streams: int, lone_p99: float, burst_p99: float) -> dict[str, Any]:
    trace = synthetic_trace(40, 8, seed=0)
    members, _ = burst_members(trace)
    errors = {r.id: (burst_p99 if r.id in members else lone_p99) for r in trace}
    workers = 1 if streams == 64 else 2
    return tool_result(tool, Level(streams, 40, workers), trace, errors, [])


def _summary(runs: list[dict[str, Any]], repetitions: int = 1) -> dict[str, Any]:
    return {
        "method": "m",
        "repetitions": repetitions,
        "time_scale": 1.0,
        "service_s": 1.6,
        "burst_every_s": 4.0,
        "burst_share": 0.25,
        "versions": {"aiperf": "0.13.0", "vllm": "0.32.0"},
        "runs": runs,
    }


def _region(tmp_path: Path, runs: list[dict[str, Any]], repetitions: int = 1) -> str:
    out = tmp_path / REPLAY_PEERS_OUT
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(_summary(runs, repetitions)))
    record = FigureRecord(
        name="replay-peers",
        date="2026-11-28T10:00:00Z",
        machine=RecordMachine(cpu="AMD EPYC", cores=2),
        command=MEASUREMENTS["replay-peers"].shown_command(),
        remeasure="python -m bench.figures measure replay-peers",
        provenance=Provenance(kind="measured", commit="abc1234"),
        figures=replay_peers_figures(Outcome(tmp_path, 100.0, "", 0.0)),
    )
    return REGIONS["replay-peers"]({"replay-peers": record})


def test_the_region_says_the_goals_were_met_when_the_numbers_meet_them(tmp_path: Path) -> None:
    text = _region(
        tmp_path,
        [
            _run("loadtest", 64, lone_p99=1.5, burst_p99=3.0),
            _run("aiperf", 64, lone_p99=0.9, burst_p99=4.0),
            _run("vllm", 64, lone_p99=0.8, burst_p99=3.0),  # a tie is no later
            _run("loadtest", 256, lone_p99=4.5, burst_p99=2.0),
            _run("aiperf", 256, lone_p99=9.0, burst_p99=50.0),
            _run("vllm", 256, lone_p99=9.0, burst_p99=30.0),
        ],
    )
    assert (
        "At 64 streams the load test's lone requests reached the server within the goal: "
        "p99 1.50 ms against 2 ms (met)." in text
    )
    assert "At 256 streams the load test's lone requests reached the server within" in text
    assert (
        "At 64 streams the load test's burst members were no later than the best peer's "
        "(vllm bench serve timed_trace): p99 3.00 ms against 3.00 ms (met)." in text
    )
    assert "(AIPerf --fixed-schedule)" not in text  # the best peer, not the first
    assert "(missed)" not in text and "outside the goal" not in text
    rows = [line for line in text.splitlines() if line.startswith("| 64 ")]
    assert len(rows) == 3
    assert rows[0].startswith("| 64 | load test (Locust), 1 process | 40 of 40 | 1.50 / 1.50 /")
    assert "| 256 | load test (Locust), 2 workers |" in text


def test_the_region_says_the_goals_were_missed_when_the_numbers_miss_them(
    tmp_path: Path,
) -> None:
    text = _region(
        tmp_path,
        [
            _run("loadtest", 64, lone_p99=2.5, burst_p99=17.5),
            _run("aiperf", 64, lone_p99=0.9, burst_p99=4.0),
            _run("vllm", 64, lone_p99=0.8, burst_p99=9.0),
            _run("loadtest", 256, lone_p99=6.0, burst_p99=70.0),
            {**_run("aiperf", 256, 0.0, 0.0), "lone": None, "burst": None, "error": "exit 1"},
            _run("vllm", 256, lone_p99=9.0, burst_p99=30.0),
        ],
    )
    assert (
        "At 64 streams the load test's lone requests reached the server outside the goal: "
        "p99 2.50 ms against 2 ms (missed)." in text
    )
    assert (
        "At 64 streams the load test's burst members were later than the best peer's "
        "(AIPerf --fixed-schedule): p99 17.50 ms against 4.00 ms (missed)." in text
    )
    # A failed peer is shown failed and left out of the comparison.
    assert "| 256 | AIPerf --fixed-schedule | failed: exit 1 | - | - | - |" in text
    assert "(vllm bench serve timed_trace): p99 70.00 ms against 30.00 ms (missed)." in text
    assert "(met)" not in text


def test_the_region_shows_each_repetitions_p99_and_the_failed_ones(tmp_path: Path) -> None:
    reps = [
        {**_run("vllm", 64, lone_p99=p99, burst_p99=2 * p99), "load_average_1m": 1.5}
        for p99 in (1.0, 3.0)
    ]
    failed = {**failed_result("vllm", Level(64, 40, 1), 40, "exit 1"), "load_average_1m": 6.0}
    ours = {**_run("loadtest", 64, lone_p99=1.0, burst_p99=3.0), "load_average_1m": 1.0}
    text = _region(tmp_path, [combine([ours]), combine([*reps, failed])], repetitions=3)
    assert "each figure the median of 3 interleaved repetitions" in text
    row = next(line for line in text.splitlines() if "| vllm bench serve" in line)
    assert "40 of 40; 1 repetition failed: exit 1 |" in row
    assert row.endswith("| 1.00, 3.00; 2.00, 6.00 | 1.50, 1.50, 6.00 |")
    assert "p99 3.00 ms against 4.00 ms (met)" in text  # the median of 2.00 and 6.00


def test_without_a_peer_the_burst_goal_is_not_judged(tmp_path: Path) -> None:
    text = _region(tmp_path, [_run("loadtest", 64, lone_p99=1.0, burst_p99=3.0)])
    assert "no peer replayed the trace's bursts: the burst goal is not judged." in text
    failed = failed_result("loadtest", Level(64, 40, 1), 40, "no truth server")
    text = _region(tmp_path, [failed, _run("aiperf", 64, 1.0, 1.0)])
    assert "At 64 streams the load test did not replay the trace: not judged." in text


@pytest.mark.process
@pytest.mark.integration
@pytest.mark.timeout(600)  # installs AIPerf's venv on first use, as the bench does
def test_the_installed_aiperf_reads_the_trace_file_as_its_mooncake_trace(tmp_path: Path) -> None:
    ensure_aiperf(DEFAULT_VENV)  # never skipped: a clean clone gets the venv here
    trace = synthetic_trace(6, 2, seed=0)
    path = write_aiperf_trace(trace, 1.0, tmp_path / "t.jsonl")
    check = (
        "import json, sys\n"
        "from aiperf.dataset.loader.models import MooncakeTrace\n"
        "rows = [MooncakeTrace.model_validate_json(l) for l in open(sys.argv[1])]\n"
        "print(json.dumps([[r.type, r.timestamp, r.messages, r.output_length] for r in rows]))\n"
    )
    done = subprocess.run(
        [str(DEFAULT_VENV / "bin" / "python"), "-c", check, str(path)],
        capture_output=True,
        text=True,
        timeout=100,
        check=True,
    )
    rows = json.loads(done.stdout)
    assert [row[0] for row in rows] == [AIPERF_TRACE_TYPE] * len(trace)
    assert [row[1] for row in rows] == pytest.approx([r.offset_s * 1000.0 for r in trace])
    assert [row[2][-1]["content"] for row in rows] == [r.messages[-1].content for r in trace]
    assert {row[3] for row in rows} == {OUTPUT_TOKENS}


@pytest.mark.parametrize(
    ("together", "in_turns", "words"),
    [
        (3.0, 17.5, "reached the server earlier than with each written in its own turn"),
        (17.5, 3.0, "reached the server later than with each written in its own turn"),
        (3.0, 3.0, "reached the server as late as with each written in its own turn"),
    ],
)
def test_the_region_compares_the_burst_writer_with_turns_from_the_numbers(
    tmp_path: Path, together: float, in_turns: float, words: str
) -> None:
    text = _region(
        tmp_path,
        [
            _run("loadtest", 64, lone_p99=1.0, burst_p99=together),
            _run("loadtest-turns", 64, lone_p99=1.0, burst_p99=in_turns),
            _run("aiperf", 64, lone_p99=0.9, burst_p99=40.0),
        ],
    )
    assert f"Written together, the burst members {words}: p99 {together:.2f} ms against" in text
    # The load test in turns is not a peer: the best peer stays AIPerf.
    assert "best peer's (AIPerf --fixed-schedule)" in text
