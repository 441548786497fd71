"""End-to-end: real Locust processes against scripted servers (ground truth and faults).

Integration tier; about 40 s in all on the shared 2-core machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench.scripted_server import Fault, Script, ScriptedServer, unused_loopback_url

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
ROOT = Path(__file__).resolve().parents[2]
MAX_TOKENS = 24
FAULTS: dict[str, tuple[Script, str]] = {
    "http500": (Script(fault=Fault.HTTP_ERROR, http_status=500), "http_5xx"),
    "http429": (Script(fault=Fault.HTTP_ERROR, http_status=429), "http_4xx"),
    "disconnect": (Script(fault=Fault.DISCONNECT, fault_after_chunks=2), "disconnected_mid_stream"),
    "malformed": (Script(fault=Fault.MALFORMED, fault_after_chunks=1), "malformed_sse"),
    "truncate": (Script(fault=Fault.TRUNCATE, fault_after_chunks=2), "truncated_stream"),
    "stall": (Script(fault=Fault.STALL, fault_after_chunks=1, stall_s=4.0), "timeout"),
}
BASE_SCRIPT = Script.fixed(MAX_TOKENS, 1, ttft_s=0.04, gaps_s=0.008)
SD_SCRIPT = Script.fixed(MAX_TOKENS, 4, ttft_s=0.05, gaps_s=0.040)


def _chooser(normal: Script):
    def choose(_: int, body: dict[str, Any]) -> Script:
        content = json.dumps(body.get("messages") or body.get("prompt"))
        for name, (script, _reason) in FAULTS.items():
            if f"FAULT:{name}" in content:
                return script
        return normal

    return choose


def _prompt_file(tmp_path: Path, faults: bool) -> Path:
    lines = [{"id": f"s{i}", "class": "structured", "prompt": f"count to {i}"} for i in range(3)]
    lines += [{"id": f"o{i}", "class": "open_ended", "prompt": f"story {i}"} for i in range(3)]
    if faults:
        lines += [
            {"id": f"f-{name}", "class": "faulty", "prompt": f"FAULT:{name}"} for name in FAULTS
        ]
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT)
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    return env


def _loadtest(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loadtest", *args],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_run_measures_truth_counts_every_fault_and_writes_the_report(tmp_path) -> None:
    out = tmp_path / "run"
    with (
        ScriptedServer(_chooser(BASE_SCRIPT)) as base,
        ScriptedServer(_chooser(SD_SCRIPT), spec_decode_k=7) as sd,
    ):
        started = time.monotonic()
        result = _loadtest(
            "run",
            "--baseline",
            base.url,
            "--speculative",
            sd.url,
            "--out",
            str(out),
            "-c",
            f'loadtest.prompts.files=["{_prompt_file(tmp_path, faults=True)}"]',
            "-c",
            f"loadtest.max_tokens={MAX_TOKENS}",
            "-c",
            "loadtest.concurrency=3",
            "-c",
            "loadtest.requests_per_prompt=1",
            "-c",
            "loadtest.warmup_requests=1",
            "-c",
            "loadtest.request_timeout_s=1.0",
            "-c",
            "loadtest.max_duration_s=60",
            "--no-cloudwatch",
            timeout=120,
        )
        elapsed = time.monotonic() - started
        sd_truth = sd.spec_decode_truth()
        sd_log, base_log = list(sd.log), list(base.log)
    # Faults are injected on purpose: failed requests exit 1 (loadtest.max_failure_share
    # defaults to 0, as Locust's --exit-code-on-error), and the report is still written.
    assert result.returncode == 1, result.stderr[-3000:]
    assert elapsed < 60
    summary = json.loads((out / "summary.json").read_text())
    expected_failures = {reason: 1 for _, reason in FAULTS.values()}
    expected_failures["http_4xx"] = 1
    for arm in ("baseline", "speculative"):
        block = summary["arms"][arm]
        assert block["stopped_by"] == "schedule_done"
        assert block["overall"]["failures_by_reason"] == expected_failures, arm
        assert block["by_class"]["faulty"]["failed"] == len(FAULTS)
        assert block["overall"]["succeeded"] == 6
        assert block["overall"]["length_mismatches"] == 0
        assert block["overall"]["output_tokens_total"] == 6 * MAX_TOKENS  # exact, from usage
        assert block["warmup_excluded"] == 1
        assert 0 < block["load_generator_cpu"] < 1.5

    # Reported numbers vs the truth (Locust/gevent process, concurrency 3). The truth is what
    # the servers really sent (their send times), so a CPU-starved machine that delays the
    # server itself does not fail the test; the scripted schedule is checked loosely.
    for arm, log, script in (
        ("speculative", sd_log, SD_SCRIPT),
        ("baseline", base_log, BASE_SCRIPT),
    ):
        block = summary["arms"][arm]["overall"]
        measured = [e for e in log if len(e.send_times) == len(script.chunk_tokens)][1:]
        true_itl = [
            (b - a) / n * 1000
            for e in measured
            for a, b, n in zip(e.send_times, e.send_times[1:], e.chunk_tokens[1:], strict=False)
            for _ in range(n)
        ]
        true_ttft = [(e.send_times[0] - e.received) * 1000 for e in measured]
        assert block["tokens_per_chunk"]["mean"] == pytest.approx(script.chunk_tokens[0])
        assert block["itl_ms"]["count"] == len(true_itl)
        assert block["itl_ms"]["p50"] == pytest.approx(float(np.median(true_itl)), abs=1.0)
        assert block["itl_ms"]["mean"] == pytest.approx(float(np.mean(true_itl)), abs=1.0)
        # client TTFT = server TTFT + connect/send overhead (a few ms), less the write's
        # duration by which the kernel receive stamp leads the server's post-write clock (µs)
        overhead = block["ttft_ms"]["p50"] - float(np.median(true_ttft))
        assert -1 <= overhead < 10, arm
        gap = script.gap_list()[0] * 1000 / script.chunk_tokens[1]
        assert block["itl_ms"]["p50"] == pytest.approx(gap, abs=3.0)
    # Request by request, the Locust (gevent) client's chunk gaps follow the server's real
    # send gaps: the instrument adds no merging or skew of its own.
    plan = json.loads((out / "plan_speculative.json").read_text())
    prompt_of = {item["index"]: item["prompt"]["text"] for item in plan["schedule"]}
    sent_for = {json.dumps(e.body["messages"][0]["content"]): e for e in sd_log}  # last wins
    errors = []
    for line in (out / "records_speculative.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["error"] or record["warmup"]:
            continue
        sent = sent_for[json.dumps(prompt_of[record["index"]])]
        assert record["chunk_tokens"] == sent.chunk_tokens
        client = record["chunk_times"]
        errors += [
            abs((c2 - c1) - (s2 - s1))
            for c1, c2, s1, s2 in zip(
                client, client[1:], sent.send_times, sent.send_times[1:], strict=False
            )
        ]
    assert len(errors) == 6 * (MAX_TOKENS // 4 - 1)
    # strict on the median (systematic skew), tolerant of a busy machine in the tail
    assert float(np.median(errors)) < 0.002
    assert float(np.percentile(errors, 90)) < 0.010
    # Acceptance from /metrics deltas: warm-up excluded, fault requests do not count.
    acceptance = summary["arms"]["speculative"]["acceptance"]
    assert acceptance["acceptance_rate"] == pytest.approx(3 / 7)
    assert acceptance["mean_acceptance_length"] == pytest.approx(4.0)
    assert acceptance["drafts"] == 6 * (MAX_TOKENS // 4) < sd_truth["drafts"]
    assert summary["arms"]["baseline"]["acceptance"]["acceptance_rate"] is None
    # Both ends of each window scraped /metrics for the latency histograms too; the scripted
    # server exports none, which the summary says instead of inventing a figure.
    for arm in ("baseline", "speculative"):
        window = json.loads((out / f"window_{arm}.json").read_text())
        for end in ("histograms_before", "histograms_after"):
            assert window[end] is not None and window[end]["error"] is None, (arm, end)
        server = summary["arms"][arm]["server_latency"]
        assert server["scrapes"] == 2 and server["failed_scrapes"] == 0
        assert not server["available"] and "no latency histograms" in server["reason"]
    assert summary["server_speedup"] is None
    assert summary["lossless"]["exact_match_rate"] == 1.0
    assert summary["speedup"]["overall"]["itl_ms"]["p50"] < 1  # SD per-token ITL is worse here

    report = (out / "report.md").read_text()
    for _, reason in FAULTS.values():
        assert f"| {reason} |" in report or reason in report
    assert "| SD | http_5xx | 1 |" in report
    for name in (
        "report.html",
        "latency_cdfs.png",
        "per_class.png",
        "summary.csv",
        "locust/baseline_stats.csv",
        "locust/speculative.html",
    ):
        assert (out / name).stat().st_size > 0, name
    assert "failed: timeout" in result.stdout
    # Locust's own CSV keeps working and holds every measured request (warm-up reset away).
    import csv

    rows = list(csv.DictReader((out / "locust" / "speculative_stats.csv").open()))
    aggregated = next(r for r in rows if r["Name"] == "Aggregated")
    assert (aggregated["Request Count"], aggregated["Failure Count"]) == ("12", "6")

    # The report is rebuilt from the records alone.
    (out / "summary.json").unlink()
    (out / "report.md").unlink()
    rebuilt = _loadtest("report", str(out), timeout=60)
    assert rebuilt.returncode == 0, rebuilt.stderr[-2000:]
    again = json.loads((out / "summary.json").read_text())
    assert again["arms"] == summary["arms"] and (out / "report.md").is_file()


def test_refused_arm_still_completes_with_a_report(tmp_path) -> None:
    out = tmp_path / "run"
    with ScriptedServer(BASE_SCRIPT) as base:
        result = _loadtest(
            "run",
            "--baseline",
            base.url,
            "--speculative",
            unused_loopback_url(),
            "--out",
            str(out),
            "-c",
            f'loadtest.prompts.files=["{_prompt_file(tmp_path, faults=False)}"]',
            "-c",
            f"loadtest.max_tokens={MAX_TOKENS}",
            "-c",
            "loadtest.requests_per_prompt=1",
            "-c",
            "loadtest.warmup_requests=0",
            "-c",
            "loadtest.request_timeout_s=2",
            "--no-cloudwatch",
            timeout=90,
        )
    # No successful request on an arm: exit 1 (issue 15 item 10), the report still written.
    assert result.returncode == 1, result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["arms"]["speculative"]["overall"]["failures_by_reason"] == {
        "connection_refused": 6
    }
    assert summary["arms"]["speculative"]["acceptance"]["available"] is False
    assert summary["lossless"]["exact_match_rate"] is None
    assert "connection_refused" in (out / "report.md").read_text()


def test_run_stops_at_its_time_bound(tmp_path) -> None:
    slow = Script.fixed(MAX_TOKENS, 1, ttft_s=0.1, gaps_s=0.1)  # 2.4 s per request
    out = tmp_path / "run"
    with ScriptedServer(slow) as base, ScriptedServer(slow) as sd:
        started = time.monotonic()
        result = _loadtest(
            "run",
            "--baseline",
            base.url,
            "--speculative",
            sd.url,
            "--out",
            str(out),
            "-c",
            f'loadtest.prompts.files=["{_prompt_file(tmp_path, faults=False)}"]',
            "-c",
            f"loadtest.max_tokens={MAX_TOKENS}",
            "-c",
            "loadtest.requests_per_prompt=20",
            "-c",
            "loadtest.concurrency=2",
            "-c",
            "loadtest.warmup_requests=0",
            "-c",
            # The whole comparison: concurrent arms (the default) each get 8 - 10% = 7.2 s.
            "loadtest.max_duration_s=8",
            "-c",
            "loadtest.request_timeout_s=10",
            "--no-cloudwatch",
            timeout=120,
        )
        elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr[-3000:]
    assert elapsed < 8 + 3 + 6  # the bound + the arms' stop timeout and start-up, together
    plan = json.loads((out / "plan_baseline.json").read_text())
    assert plan["shape"]["max_duration_s"] == pytest.approx(7.2)
    summary = json.loads((out / "summary.json").read_text())
    for arm in ("baseline", "speculative"):
        block = summary["arms"][arm]
        assert block["stopped_by"] == "time_limit"
        assert block["not_started_requests"] > 100
        assert 0 < block["overall"]["succeeded"] < 10
    assert any("stopped by time_limit" in w for w in summary["warnings"])


def test_plain_locust_command_with_its_own_csv_and_html(tmp_path) -> None:
    config = tmp_path / "experiment.yaml"
    config.write_text(
        "loadtest:\n  max_tokens: 24\n  warmup_requests: 1\n  requests_per_prompt: 1\n"
        f"  prompts:\n    files: ['{_prompt_file(tmp_path, faults=False)}']\n"
    )
    with ScriptedServer(SD_SCRIPT) as server:
        started = time.monotonic()
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "locust",
                "-f",
                "loadtest/locustfile.py",
                "--headless",
                "-H",
                server.url,
                "-u",
                "2",
                "-r",
                "2",
                "-t",
                "60s",
                "--arm",
                "speculative",
                "-c",
                f"experiment_file={config}",
                "--records-dir",
                str(tmp_path / "records"),
                "--max-requests",
                "4",
                "--csv",
                str(tmp_path / "lc"),
                "--html",
                str(tmp_path / "lc.html"),
                "--only-summary",
            ],
            cwd=ROOT,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
        elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr[-3000:]
    assert elapsed < 30  # stopped by itself when the 4 requests were done, not at -t 60s
    lines = (tmp_path / "records" / "records_speculative.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["warmup"] for r in records].count(True) == 1
    assert sum(1 for r in records if not r["warmup"] and r["error"] is None) == 4
    assert all(r["chunk_tokens"] == [4] * 6 for r in records)
    stats = (tmp_path / "lc_stats.csv").read_text()
    assert "speculative/structured" in stats or "speculative/open_ended" in stats
    assert (tmp_path / "lc.html").stat().st_size > 0


def test_open_loop_sends_at_the_scheduled_poisson_arrivals(tmp_path) -> None:
    quick = Script.fixed(8, 1, ttft_s=0.02, gaps_s=0.005)
    out = tmp_path / "run"
    with ScriptedServer(quick) as base, ScriptedServer(quick) as sd:
        result = _loadtest(
            "run",
            "--baseline",
            base.url,
            "--speculative",
            sd.url,
            "--out",
            str(out),
            "-c",
            f'loadtest.prompts.files=["{_prompt_file(tmp_path, faults=False)}"]',
            "-c",
            "loadtest.max_tokens=8",
            "-c",
            "loadtest.requests_per_prompt=2",
            "-c",
            "loadtest.concurrency=4",
            "-c",
            "loadtest.request_rate=10",
            "-c",
            "loadtest.warmup_requests=0",
            "--no-cloudwatch",
            timeout=90,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    plan = json.loads((out / "plan_baseline.json").read_text())
    arrivals = {item["index"]: item["arrival_s"] for item in plan["schedule"]}
    window = json.loads((out / "window_baseline.json").read_text())
    records = [json.loads(line) for line in (out / "records_baseline.jsonl").open()]
    assert len(records) == 12
    for record in records:
        offset = record["start"] - window["window_start"]
        assert offset == pytest.approx(arrivals[record["index"]], abs=0.03)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["run"]["load_shape"]["request_rate"] == 10
    assert summary["arms"]["baseline"]["arrival_lag_ms"]["p99"] < 30
    assert "open loop at 10" in (out / "report.md").read_text()
