"""A distributed arm as real processes (a Locust master and workers) against the scripted
server: every request exactly once, a killed worker, a cancel, a readiness wait."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from bench.scripted_server import Script, unused_loopback_url
from experiment import build_config
from experiment.config import Arm
from loadtest.distributed import worker_share
from loadtest.launch import (
    ArmProcesses,
    launch_arm,
    master_command,
    stop_arm,
    wait_arm,
    wait_ready,
    worker_command,
)
from loadtest.plan import RunPlan, build_plan
from loadtest.records import read_records
from loadtest.window import WindowMeta

pytestmark = pytest.mark.integration
MASTER_PORT = 8511  # this test's share of the load-test ports


def _plan(url: str, run_dir: Path, *, requests: int, concurrency: int = 4) -> RunPlan:
    load = {"max_tokens": 6, "concurrency": concurrency, "requests_per_prompt": 8,
            "warmup_requests": 2, "max_duration_s": 120}  # fmt: skip
    config = build_config({f"loadtest.{key}": str(value) for key, value in load.items()})
    return build_plan(config, Arm.BASELINE, url, run_dir, max_requests=requests)


def _launch(plan: RunPlan, run_dir: Path, workers: int) -> ArmProcesses:
    plan_path = run_dir / "plan_baseline.json"
    plan_path.write_text(plan.to_json())
    locust_dir = run_dir / "locust"
    locust_dir.mkdir(parents=True, exist_ok=True)
    log = (locust_dir / "baseline.log").open("wb")
    master = master_command(plan, plan_path, locust_dir, workers=workers, master_port=MASTER_PORT)
    return launch_arm(master, [worker_command(MASTER_PORT)] * workers, log)


def _wait_for_measured(records_path: Path, count: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:  # until measured records reached the master
        if records_path.is_file() and records_path.read_text().count('"warmup":false') >= count:
            return
        time.sleep(0.1)
    raise AssertionError(f"fewer than {count} measured records after {timeout_s} s")


def _alive(processes: ArmProcesses) -> list[int]:
    return [p.pid for p in processes.all() if p.poll() is None]


def test_every_request_runs_exactly_once_across_workers(serve, tmp_path) -> None:
    server = serve(Script(ttft_s=0.01, chunk_tokens=[2, 2, 2], gaps_s=0.005))
    plan = _plan(server.url, tmp_path, requests=30)
    processes = _launch(plan, tmp_path, workers=3)
    assert wait_arm(processes, timeout_s=90) == 0
    assert _alive(processes) == []
    records = read_records(Path(plan.records_path))
    measured = sorted(r.index for r in records if not r.warmup)
    assert measured == sorted(item.index for item in plan.measured)  # once each, none lost
    assert sum(r.warmup for r in records) == 2  # the warm-up ran once, not once per worker
    assert all(r.ok for r in records)
    window = WindowMeta.read(plan.meta_path, plan.arm)
    assert window.stopped_by == "schedule_done"
    assert window.workers == 3 and set(window.worker_cpu) == {"0", "1", "2"}
    assert window.clock_skew_ms is not None and window.lost_workers == []
    # Every measured request was read at least once, on loopback with kernel stamps.
    assert window.arrival_stamps is not None and window.arrival_stamps.kernel > 0
    assert window.arrival_stamps.kernel + window.arrival_stamps.user >= len(plan.measured)
    # The server saw exactly the schedule's requests (warm-up included), no duplicates.
    assert len(server.log) == len(plan.schedule)


def test_a_killed_worker_ends_the_arm_bounded_and_keeps_what_was_measured(serve, tmp_path) -> None:
    server = serve(Script(ttft_s=0.05, chunk_tokens=[1] * 6, gaps_s=0.05))  # ~0.3 s each
    plan = _plan(server.url, tmp_path, requests=40)
    processes = _launch(plan, tmp_path, workers=2)
    records_path = Path(plan.records_path)
    _wait_for_measured(records_path, 4)
    killed = processes.workers[1]
    os.kill(killed.pid, signal.SIGKILL)
    started = time.monotonic()
    code = wait_arm(processes, timeout_s=60)
    assert time.monotonic() - started < 30  # Locust marks it missing after ~3 heartbeats
    assert code is not None and _alive(processes) == []
    window = WindowMeta.read(plan.meta_path, plan.arm)
    assert window.stopped_by == "worker_lost"
    records = [r for r in read_records(records_path) if not r.warmup]
    lost_index = next(int(i) for i, cause in window.worker_stopped_by.items()
                      if cause == "worker_lost")  # fmt: skip
    assert window.lost_workers == [lost_index]
    survivor = {i.index for i in worker_share(plan.schedule, 1 - lost_index, 2)}
    assert survivor <= {r.index for r in records}  # the other worker finished its share
    from_lost = [r for r in records if r.index % 2 == lost_index]
    share = len(worker_share(plan.schedule, lost_index, 2))
    assert window.not_started_requests == share - len(from_lost)
    assert len({r.index for r in records}) == len(records)


def test_stop_arm_cancels_within_seconds_and_keeps_the_records(serve, tmp_path) -> None:
    server = serve(Script(ttft_s=0.05, chunk_tokens=[1] * 10, gaps_s=0.1))  # ~1 s each
    plan = _plan(server.url, tmp_path, requests=60)
    processes = _launch(plan, tmp_path, workers=2)
    _wait_for_measured(Path(plan.records_path), 2)
    started = time.monotonic()
    stop_arm(processes)
    assert time.monotonic() - started < 15
    assert _alive(processes) == []
    records = read_records(Path(plan.records_path))
    assert any(not r.warmup for r in records)
    window = WindowMeta.read(plan.meta_path, plan.arm)
    assert window.not_started_requests + window.unfinished_requests > 0


def test_a_master_whose_workers_never_connect_gives_up_at_the_configured_wait(tmp_path) -> None:
    """The cluster's worker pods may never come (no node, no image): the arm fails after
    loadtest.workers_connect_timeout_s, not after the run's whole bound."""
    from loadtest.runner import run_arm

    plan = _plan(unused_loopback_url(), tmp_path, requests=4)
    started = time.monotonic()
    meta = run_arm(
        plan, tmp_path, workers=2, local_workers=False, master_port=MASTER_PORT + 3,
        workers_connect_timeout_s=2,
    )  # fmt: skip
    assert time.monotonic() - started < 20  # the plan's own bound is 120 s
    assert meta.locust_returncode == 1  # Locust: "Gave up waiting for workers to connect"
    assert meta.stopped_by == "crashed"  # no window file: reported as a failed arm


def test_wait_ready_is_bounded_and_reports_who_was_not_ready(serve) -> None:
    server = serve(Script())
    down = unused_loopback_url()
    started = time.monotonic()
    assert wait_ready([server.url, down], timeout_s=1.0, poll_s=0.2) == [down]
    assert time.monotonic() - started < 5
    assert wait_ready([server.url], timeout_s=1.0) == []


def test_worker_pods_serve_an_external_master_and_give_up_at_their_deadline(
    serve, tmp_path
) -> None:
    """The cluster path: a master that starts no workers (--workers-external) and two
    worker_pod loops that connect to it, as the worker Job's pods do."""
    from concurrent.futures import ThreadPoolExecutor

    from loadtest.worker_pod import run_worker_pod

    server = serve(Script(ttft_s=0.01, chunk_tokens=[2, 2, 2], gaps_s=0.005))
    plan = _plan(server.url, tmp_path, requests=12)
    plan_path = tmp_path / "plan_baseline.json"
    plan_path.write_text(plan.to_json())
    master = master_command(plan, plan_path, tmp_path, workers=2, master_port=MASTER_PORT + 1)
    processes = launch_arm(master, [], subprocess.DEVNULL)
    with ThreadPoolExecutor(2) as pool:
        codes = list(
            pool.map(lambda _: run_worker_pod("127.0.0.1", MASTER_PORT + 1, 1, 90), range(2))
        )
    assert wait_arm(processes, timeout_s=30) == 0
    assert codes == [0, 0]
    measured = sorted(r.index for r in read_records(Path(plan.records_path)) if not r.warmup)
    assert measured == sorted(item.index for item in plan.measured)
    started = time.monotonic()
    assert run_worker_pod("127.0.0.1", MASTER_PORT + 2, 1, 2.0) == 1  # no master: deadline
    assert time.monotonic() - started < 15
