"""The load test's tiered arm when the speculative server dies mid-run, end to end.

Real: Envoy from PyPI (the bootstrap rendered from ``routing``, with short ejections), Locust
and ``python -m loadtest run --tiered`` itself, its records, summary, report and exit code.
Fake: the two streaming servers, bench's scripted servers (ground truth: they log what they
received and sent). The speculative one is a process of its own (scripted_arm.py) that
SIGKILLs itself on cue once the speculative serving arm is over and the tiered arm has sent
it a few requests: at a request that arrives while each stream it has open is mid-response.

- That request, read but never answered, and every speculative-class request after it had
  not started streaming: Envoy retries them on the baseline (before the first response
  byte), then outlier detection ejects the dead server and the class goes straight to the
  baseline. None fails.
- The streams open at the kill are cut mid-response and fail, counted by reason. A retry
  cannot save them: Envoy has already passed the status line and the first chunks to the
  client, and a second attempt would have to resume the generation mid-stream, which
  neither Envoy nor an OpenAI-compatible server can do; the client sees the connection
  close inside the chunked body (``disconnected_mid_stream``; ``truncated_stream`` is a body
  that ends cleanly without ``[DONE]``).
- Once Envoy has ejected it, the test starts the server again on its port; when the ejection
  time is over, the speculative class goes to it again and never to the baseline after.
- The run ends on its own (its schedule), bounded, and its exit code is honest: 1, since
  ``loadtest.max_failure_share`` is 0 by default (docs/loadtest.md, exit codes), with the
  cut streams in the summary's warnings and the report; the partial failure is not a total
  one.

20-40 s on the shared 2-core machine (measured: 21-37 s).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from gateway_harness import (
    FAST_HEALTH,
    ROOT,
    ScriptedArm,
    gateway_between,
    loadtest_env,
    stat,
    tiered_run_command,
    write_prompts,
)

from bench.scripted_server import Script, ScriptedServer
from experiment.config import RoutingConfig
from loadtest.records import FailureReason, read_records
from loadtest.results import RunSummary
from loadtest.runner import exit_code
from local_run.gateway import Address, EnvoyGateway
from local_run.servers import free_port

pytestmark = [pytest.mark.integration, pytest.mark.process, pytest.mark.timeout(300)]

HEADER = "x-prompt-class"
ROUTING = RoutingConfig(health=FAST_HEALTH)
TOKENS = 24
CONCURRENCY = 4
REPEATS = 14  # 8 prompts x 14: the tiered arm outlasts the kill, the ejection and the return
WARMUP = 1
MEASURED = 8 * REPEATS
SERVED = MEASURED + WARMUP  # what each serving arm sends its own server
DIE_AFTER = 4  # tiered requests the speculative server begins before it may die
CUT_AT_LEAST = 2  # streams open when it dies (of the CONCURRENCY - 1 users not on the cue)
BASE = Script.fixed(TOKENS, 1, ttft_s=0.04, gaps_s=0.008)
SD = Script.fixed(TOKENS, 2, ttft_s=0.03, gaps_s=0.015)  # 12 chunks over 0.2 s
SD_CHUNKS = len(SD.chunk_tokens)
RULE = ROUTING.rule_name("structured")  # the class's rule: its cluster's statistics
EJECTIONS = f"cluster.{RULE}.outlier_detection.ejections_enforced_total"
RETRIED = f"cluster.{RULE}.upstream_rq_retry_success"
RUN_TIMEOUT_S = 200.0
# Envoy forwards each request within a millisecond; a margin for a busy machine.
ROUTING_SLACK_S = 0.5


def _wait(condition: Callable[[], bool], run: subprocess.Popen[bytes], what: str) -> None:
    """Poll ``condition`` while the load test runs; fail if it ends first or times out."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while not condition():
        if run.poll() is not None:
            pytest.fail(f"the load test ended (exit {run.returncode}) before {what}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {RUN_TIMEOUT_S:g} s")
        time.sleep(0.02)


def _restart_when_ejected(
    sd: ScriptedArm, gateway: EnvoyGateway, run: subprocess.Popen[bytes]
) -> float:
    """Wait for the speculative server to die and Envoy to eject it, then start it again on
    its port (as a server would come back); returns when it listens again."""
    process = sd.process
    assert process is not None
    _wait(lambda: process.poll() is not None, run, "the speculative server died")
    _wait(lambda: stat(gateway, EJECTIONS) >= 1, run, "Envoy ejected the dead server")
    sd.die_at = None
    sd.start()
    return time.perf_counter()


def _class(entry: dict[str, Any]) -> str:
    return str(entry["headers"].get(HEADER))


def test_the_speculative_server_dies_during_the_tiered_arm(tmp_path: Path) -> None:
    out = tmp_path / "run"
    dump = tmp_path / "speculative-died.json"
    prompts_file = write_prompts(tmp_path)
    prompt_ids = {
        line["prompt"]: line["id"]
        for line in map(json.loads, prompts_file.read_text().splitlines())
    }
    sd = ScriptedArm(
        free_port(), SD, 7, die_at=SERVED + DIE_AFTER, dump=dump, min_open=CUT_AT_LEAST
    )
    settings = {
        "prompts.files": [str(prompts_file)],
        "max_tokens": TOKENS,
        "concurrency": CONCURRENCY,
        "requests_per_prompt": REPEATS,
        "warmup_requests": WARMUP,
        "arms_mode": "concurrent",
        "request_timeout_s": 20,
        "max_duration_s": 120,  # each of the two turns (concurrent arms) at most 60 s
    }
    started = time.monotonic()
    with ScriptedServer(BASE, precise_pacing=False) as base:
        try:
            sd.start()
            servers = Address.of_url(base.url), Address.of_url(sd.url)
            with gateway_between(ROUTING, *servers, tmp_path / "gateway") as gateway:
                command = tiered_run_command(base.url, sd.url, gateway.url, out, settings)
                stdout, stderr = tmp_path / "loadtest.out", tmp_path / "loadtest.err"
                with stdout.open("wb") as out_file, stderr.open("wb") as err_file:
                    run = subprocess.Popen(
                        command, cwd=ROOT, env=loadtest_env(), stdout=out_file, stderr=err_file
                    )
                    try:
                        restarted_at = _restart_when_ejected(sd, gateway, run)
                        returncode = run.wait(timeout=RUN_TIMEOUT_S)
                    finally:
                        if run.poll() is None:
                            run.kill()
                            run.wait()
                stats = gateway.stats()
            back = sd.log()  # the restarted server's
        finally:
            sd.kill()
        base_log = [asdict(entry) for entry in base.log]  # as the other logs
    elapsed = time.monotonic() - started

    died = json.loads(dump.read_bytes().rstrip(b"\0"))
    killed_at = died["killed_at"]
    before = died["log"]  # every request the first speculative process began
    records = read_records(out / "records_tiered.jsonl")
    measured_starts = [r.start for r in records if not r.warmup]
    cut = [entry for entry in before if entry["done_time"] is None]
    tiered_base = base_log[SERVED:]
    fallen_back = [entry for entry in tiered_base if _class(entry) == "structured"]
    first_back = min((entry["received"] for entry in back), default=float("nan"))
    print(
        f"run {elapsed:.1f} s, exit {returncode}; killed {killed_at - min(measured_starts):.2f} "
        f"s into the tiered window with {len(cut)} streams open; {len(fallen_back)} of the "
        f"class then served by the baseline (Envoy: {stats.get(RETRIED)} retries saved, "
        f"{stats.get(EJECTIONS)} ejections); restarted {restarted_at - killed_at:.2f} s after "
        f"the kill, back in use {first_back - killed_at:.2f} s after it for {len(back)}"
    )  # shown with -s

    # The kill fell in the tiered arm: the speculative serving arm was over, the tiered
    # arm's measured requests had begun and went on after it.
    assert len(before) >= SERVED + DIE_AFTER
    assert all(entry["done_time"] is not None for entry in before[:SERVED])
    serving_end = max(entry["done_time"] for entry in before[:SERVED])
    assert serving_end < min(measured_starts) < killed_at < max(measured_starts)
    assert {_class(entry) for entry in before[SERVED:]} == {"structured"}
    assert _class(died["cue"]) == "structured"

    # The streams open at the kill, each mid-response, are the only failures: the cue
    # request and every speculative-class request after it succeeded.
    assert CUT_AT_LEAST <= len(cut) <= CONCURRENCY - 1, cut  # the cue's user had none open
    assert all(1 <= len(entry["send_times"]) < SD_CHUNKS for entry in cut)
    failed = [r for r in records if not r.ok]
    assert len(failed) == len(cut), [(r.prompt_id, r.error, r.error_detail) for r in failed]
    assert Counter(r.prompt_id for r in failed) == Counter(
        prompt_ids[entry["body"]["messages"][0]["content"]] for entry in cut
    )
    for record in failed:
        assert not record.warmup and record.prompt_class == "structured"
        assert record.error == FailureReason.DISCONNECTED, record.error_detail
        assert record.http_status == 200 and 1 <= len(record.chunk_times) < SD_CHUNKS

    # The speculative class went to the baseline only once the server had died: the cue
    # request and those after it, saved by the retry until the ejection.
    assert fallen_back and all(entry["received"] > killed_at for entry in fallen_back)
    assert stats.get(RETRIED, 0) >= 1 and stats.get(EJECTIONS, 0) >= 1, stats
    # Each tiered request of the class is in exactly one server's log.
    structured = [r for r in records if r.prompt_class == "structured"]
    assert len(structured) == len(before) - SERVED + len(fallen_back) + len(back)
    open_ended = [entry for entry in tiered_base if _class(entry) == "open_ended"]
    assert len(open_ended) == len(records) - len(structured)

    # The server came back: after the ejection time the class went to it again, and from
    # then on never to the baseline.
    assert back, "no speculative-class request reached the restarted server"
    assert {_class(entry) for entry in back} == {"structured"}
    assert all(entry["done_time"] is not None for entry in back)
    assert first_back > restarted_at
    assert first_back - killed_at >= FAST_HEALTH.base_ejection_time_s
    assert all(entry["received"] < first_back + ROUTING_SLACK_S for entry in fallen_back)

    # The run's own verdict: the cut streams, and only they, counted by reason; exit 1.
    summary = RunSummary.model_validate_json((out / "summary.json").read_text())
    for arm in ("baseline", "speculative"):
        overall = summary.arms[arm].overall
        assert overall.requests == overall.succeeded == MEASURED, arm
    tiered = summary.arms["tiered"]
    assert tiered.stopped_by == "schedule_done"
    reasons = {FailureReason.DISCONNECTED.value: len(cut)}
    assert tiered.overall.requests == MEASURED
    assert tiered.overall.failed == len(cut) and tiered.overall.failures_by_reason == reasons
    assert tiered.by_class["structured"].failures_by_reason == reasons
    assert tiered.by_class["open_ended"].failed == 0
    assert summary.tiered is not None and summary.tiered.unpaired == len(cut)
    assert f"tiered: {len(cut)} failed requests {reasons}" in summary.warnings
    report = (out / "report.md").read_text()
    assert f"| Tiered | {FailureReason.DISCONNECTED.value} | {len(cut)} |" in report
    err = stderr.read_text()
    assert returncode == 1, err[-3000:]
    assert "exit 1: an arm has no successful measured request or more than" in err
    assert exit_code(summary, 0.0) == 1
    # A partial failure is not a total one: within a tolerance of its share the run passes;
    # an arm with no success fails whatever the tolerance.
    assert exit_code(summary, len(cut) / MEASURED) == 0
    total = summary.model_copy(deep=True)
    total.arms["tiered"].overall.succeeded = 0
    assert exit_code(total, 0.99) == 1
