"""Starting and stopping one arm's Locust processes: one process, or a master and N workers.

Each process gets its own session (process group): a Ctrl-C in the terminal then reaches
only the parent (``python -m loadtest``), which stops the load in the one order that keeps
every measured record (``stop_arm``): workers first (each sends its finished records to the
master before telling it that it quit), then the master, then SIGKILL for any survivor.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from experiment.config import LoadTestConfig
from experiment.loading import PROJECT_ROOT
from loadtest.plan import RunPlan
from loadtest.processes import healthy, poll_until, stop_groups

LOG = logging.getLogger("loadtest")
LOCUSTFILE = Path(__file__).resolve().parent / "locustfile.py"
STOP_TIMEOUT_S = 3
# After SIGTERM, how long a process may take to write what it has before SIGKILL.
STOP_GRACE_S = 5.0
READY_POLL_S = 5.0


def locust_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
    return env


@dataclass
class ArmProcesses:
    master: subprocess.Popen[bytes]  # the single process when there are no workers
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def all(self) -> list[subprocess.Popen[bytes]]:
        return [*self.workers, self.master]


def master_command(
    plan: RunPlan,
    plan_path: Path,
    locust_dir: Path,
    *,
    workers: int,
    master_port: int,
    locustfile: Path = LOCUSTFILE,
    workers_connect_timeout_s: int = LoadTestConfig().workers_connect_timeout_s,
    name: str | None = None,
) -> list[str]:
    """``name``: of Locust's own output files (default the arm; a block of alternating arms
    has its own, loadtest/alternating.py)."""
    users = plan.shape.concurrency
    name = name or plan.arm
    command = [
        sys.executable, "-m", "locust", "-f", str(locustfile), "--headless",
        "-u", str(users), "-r", str(users),
        "-t", f"{max(1, math.ceil(plan.shape.max_duration_s))}s",
        "--stop-timeout", str(STOP_TIMEOUT_S),
        "--loadtest-plan", str(plan_path),
        "--csv", str(locust_dir / name),
        "--html", str(locust_dir / f"{name}.html"),
        "--only-summary", "--exit-code-on-error", "0", "--loglevel", "WARNING",
    ]  # fmt: skip
    if workers > 1:
        command += [
            "--master", "--expect-workers", str(workers),
            "--master-bind-port", str(master_port),
            # Locust's master exits 1 when they are not all there by then (locust/main.py
            # start_automatic_run, 2.47); its -t run time starts only after they are.
            "--expect-workers-max-wait", str(workers_connect_timeout_s),
        ]  # fmt: skip
    return command


def connect_wait_s(workers: int, workers_connect_timeout_s: int) -> int:
    """How long an arm's master may wait for its workers before its run time starts."""
    return workers_connect_timeout_s if workers > 1 else 0


def worker_command(master_port: int, locustfile: Path = LOCUSTFILE) -> list[str]:
    return [
        sys.executable, "-m", "locust", "-f", str(locustfile), "--worker",
        "--master-host", "127.0.0.1", "--master-port", str(master_port),
        "--loglevel", "WARNING",
    ]  # fmt: skip


def launch_arm(master: list[str], workers: list[list[str]], log: IO[bytes] | int) -> ArmProcesses:
    def start(command: list[str]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=locust_env(),
            cwd=PROJECT_ROOT,
            start_new_session=True,
        )

    processes = ArmProcesses(master=start(master))
    processes.workers = [start(command) for command in workers]
    return processes


def wait_arm(processes: ArmProcesses, timeout_s: float) -> int | None:
    """The master's exit code; None when it outlived ``timeout_s`` (then everything is
    stopped). Workers left after their master ended are stopped too."""
    try:
        code: int | None = processes.master.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        code = None
    stop_arm(processes)
    return code


def stop_arm(processes: ArmProcesses, grace_s: float = STOP_GRACE_S) -> None:
    """Stop the arm's processes, keeping what they measured; returns when none is left."""

    def kill(process: subprocess.Popen[bytes]) -> None:
        LOG.warning("load generator %d ignored SIGTERM: killing it", process.pid)

    # Workers first: each sends its finished records to the master before it quits.
    stop_groups(processes.workers, grace_s, kill)
    if processes.workers:  # the master ends by itself once its last worker quit
        with contextlib.suppress(subprocess.TimeoutExpired):
            processes.master.wait(timeout=grace_s)
    stop_groups([processes.master], grace_s, kill)


def wait_ready(urls: list[str], timeout_s: float, poll_s: float = READY_POLL_S) -> list[str]:
    """Poll each URL's ``/health`` until all answer 200 or ``timeout_s`` passes; returns the
    URLs still not ready (empty: all ready). vLLM's OpenAI server answers ``/health`` with
    200 once the engine is up (vllm/entrypoints/openai/api_server.py)."""
    waiting = list(urls)

    def all_ready() -> bool:
        waiting[:] = [url for url in waiting if not healthy(url)]
        return not waiting

    def report(left: float) -> None:
        LOG.info("waiting for %s (%.0f s left)", ", ".join(waiting), left)

    if poll_until(all_ready, time.monotonic() + timeout_s, poll_s, report):
        LOG.info("services ready: %s", ", ".join(urls))
        return []
    LOG.error("not ready after %.0f s: %s", timeout_s, ", ".join(waiting))
    return waiting
