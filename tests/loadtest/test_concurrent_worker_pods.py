"""Concurrent arms with worker pods, laid out as the cluster runs them, as real processes on
127.0.0.1 against scripted servers: the masters' pod command (charts/loadtest_job.py
``loadtest_command``: ``python -m loadtest run --workers-external``, both arms' masters at
once) and every worker Job's pod command (one Job per arm, each on its arm's master port),
with only the addresses and paths of the cluster replaced. Each request of the schedule is
sent exactly once per arm, both arms open their windows together, and a SIGTERM (the Job's
deadline) stops both arms and still writes the partial report."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.scripted_server import Script
from charts.inputs import ClusterInputs
from charts.loadtest_job import loadtest_command, settings_json, worker_job, worker_sets
from experiment import build_config
from experiment.config import Arm, ExperimentConfig
from loadtest.arms import START_SPREAD_GOAL_S
from loadtest.records import read_records
from loadtest.window import WindowMeta

# Starts the load test's CLI, Locust masters and worker pods (integration: Locust itself).
pytestmark = [pytest.mark.process, pytest.mark.integration, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
INPUTS = ClusterInputs(bucket_name="b", loadtest_image="123456789012.dkr.ecr.x/loadtest:abc")
WORKERS = 2  # per arm
POD_DEADLINE_S = 120  # instead of the chart's hours: a stuck worker pod fails the test


def _config(master_port: int, requests_per_prompt: int) -> ExperimentConfig:
    load = {"workers": WORKERS, "concurrency": 2, "max_tokens": 6, "warmup_requests": 2,
            "requests_per_prompt": requests_per_prompt, "max_duration_s": 120,
            "request_timeout_s": 10, "workers_connect_timeout_s": 60,
            "master_port": master_port}  # fmt: skip
    return build_config({f"loadtest.{key}": str(value) for key, value in load.items()})


def _with(command: list[str], flag: str, value: str) -> list[str]:
    """``command`` with ``flag``'s value replaced (a cluster address or path)."""
    at = command.index(flag) + 1
    return [*command[:at], value, *command[at + 1 :]]


def _start(command: list[str]) -> subprocess.Popen[str]:
    assert command[0] == "python"  # the image's interpreter: here, this one
    return subprocess.Popen(
        [sys.executable, *command[1:]],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _cluster(
    config: ExperimentConfig, urls: dict[Arm, str], tmp_path: Path
) -> tuple[subprocess.Popen[str], dict[Arm, list[subprocess.Popen[str]]], Path]:
    """The worker pods (started first: in the cluster they wait for their master) and the
    masters' pod, from the chart's own commands."""
    pods: dict[Arm, list[subprocess.Popen[str]]] = {}
    for workers in worker_sets(config):
        assert workers.arm is not None  # arms at once: a worker Job per arm
        job = worker_job(config, INPUTS, workers)
        command = job["spec"]["template"]["spec"]["containers"][0]["command"]
        command = _with(command, "--master-host", "127.0.0.1")
        command = _with(command, "--deadline-s", str(POD_DEADLINE_S))
        pods[workers.arm] = [_start(command) for _ in range(job["spec"]["parallelism"])]
    config_file = tmp_path / "config.json"  # what the Job's ConfigMap holds
    config_file.write_text(settings_json(config))
    out = tmp_path / "run"
    command = loadtest_command(config)
    for arm, flag in ((Arm.BASELINE, "--baseline"), (Arm.SPECULATIVE, "--speculative")):
        command = _with(command, flag, urls[arm])
    command = _with(_with(command, "--config", str(config_file)), "--out", str(out))
    return _start([*command, "--no-cloudwatch"]), pods, out


def _finish(pods: dict[Arm, list[subprocess.Popen[str]]]) -> dict[Arm, list[int | None]]:
    """Each worker pod's exit code once its master has run (None: it outlived 60 s)."""
    codes: dict[Arm, list[int | None]] = {}
    for arm, processes in pods.items():
        codes[arm] = []
        for process in processes:
            try:
                codes[arm].append(process.wait(timeout=60))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                codes[arm].append(None)
    return codes


def test_each_arms_worker_pods_serve_only_their_arm_exactly_once_and_both_start_together(
    serve, tmp_path
) -> None:
    config = _config(master_port=8561, requests_per_prompt=2)
    script = Script(ttft_s=0.02, chunk_tokens=[2, 2, 2], gaps_s=0.01)
    servers = {Arm.BASELINE: serve(script), Arm.SPECULATIVE: serve(script)}
    masters, pods, out = _cluster(config, {arm: s.url for arm, s in servers.items()}, tmp_path)
    output, _ = masters.communicate(timeout=200)
    assert masters.returncode == 0, output
    assert _finish(pods) == {arm: [0] * WORKERS for arm in Arm}  # each pod ran its arm once
    summary = json.loads((out / "summary.json").read_text())
    for arm in Arm:
        plan = json.loads((out / f"plan_{arm.value}.json").read_text())
        expected = sorted(item["index"] for item in plan["schedule"] if not item["warmup"])
        records = read_records(out / f"records_{arm.value}.jsonl")
        assert sorted(r.index for r in records if not r.warmup) == expected  # once each
        assert sum(r.warmup for r in records) == config.loadtest.warmup_requests
        assert all(r.ok for r in records)
        # The arm's server saw its schedule and nothing else: no worker of the other arm.
        assert len(servers[arm].log) == len(plan["schedule"])
        meta = WindowMeta.read(out / f"window_{arm.value}.json", arm.value)
        assert meta.stopped_by == "schedule_done"
        assert meta.workers == WORKERS and meta.lost_workers == []
        assert set(meta.worker_cpu) == {str(i) for i in range(WORKERS)}
    timing = summary["arms_timing"]
    assert timing["mode"] == "concurrent"
    assert timing["start_spread_s"] is not None
    assert timing["start_spread_s"] <= START_SPREAD_GOAL_S, timing
    assert summary["warnings"] == [], summary["warnings"]


def test_sigterm_stops_both_arms_and_their_worker_pods_and_writes_the_partial_report(
    serve, tmp_path
) -> None:
    config = _config(master_port=8565, requests_per_prompt=6)
    server = serve(Script(ttft_s=0.05, chunk_tokens=[1] * 10, gaps_s=0.1))  # ~1 s each
    masters, pods, out = _cluster(config, dict.fromkeys(Arm, server.url), tmp_path)
    deadline = time.monotonic() + 120
    files = [out / f"records_{arm.value}.jsonl" for arm in Arm]
    while time.monotonic() < deadline and masters.poll() is None:
        if all(f.is_file() and f.read_text().count('"warmup":false') >= 2 for f in files):
            break
        time.sleep(0.1)
    os.killpg(masters.pid, signal.SIGTERM)  # what Kubernetes sends at the Job's deadline
    started = time.monotonic()
    output, _ = masters.communicate(timeout=60)
    assert time.monotonic() - started < 30, output
    assert masters.returncode == 128 + signal.SIGTERM, output
    # A cancelled master releases its workers: every worker pod ends, none waits for the
    # deadline.
    codes = _finish(pods)
    assert all(code is not None for arm in Arm for code in codes[arm]), codes
    summary = json.loads((out / "summary.json").read_text())
    assert summary["cancelled_by"] == "SIGTERM"
    assert summary["warnings"][0].startswith("cancelled by SIGTERM")
    for arm in Arm:  # both arms were under way: both stop, both keep what they measured
        assert summary["arms"][arm.value]["stopped_by"] == "cancelled"
        assert summary["arms"][arm.value]["overall"]["requests"] >= 2
    assert (out / "report.md").is_file() and (out / "report.html").is_file()
