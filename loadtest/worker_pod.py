"""A load-test worker pod: one Locust worker per arm it serves, until those arms have run.

``python -m loadtest.worker_pod --master-host HOST --master-port PORT --arms N``
(charts/loadtest_job.py). Arms in turn (``loadtest.arms_mode=sequential``): one set of pods
serves every arm's master on the one port, ``--arms`` 2. Arms at once: one set per arm, each
against its own arm's master port (``loadtest.master_port_of``), ``--arms`` 1. The tiered
arm (``loadtest.drive_gateway``) runs its master last on the baseline's port: that set serves one
more (``--arms`` 3 in turn, 2 for the baseline's set at once). A Locust
worker exits when its master quits (after each arm) and gives up when no master answers
(~5 min of retries, locust/runners.py ``connect_to_master``), so this runs ``locust
--worker`` again until ``--arms`` workers have ended cleanly or ``--deadline-s`` passes.
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
import time

from experiment.loading import PROJECT_ROOT
from loadtest.launch import LOCUSTFILE, locust_env

LOG = logging.getLogger("loadtest.worker_pod")
RETRY_PAUSE_S = 5.0


def worker_command(master_host: str, master_port: int) -> list[str]:
    return [
        sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--worker",
        "--master-host", master_host, "--master-port", str(master_port),
        "--loglevel", "WARNING",
    ]  # fmt: skip


def run_worker_pod(master_host: str, master_port: int, arms: int, deadline_s: float) -> int:
    """0 when ``arms`` workers ended cleanly; 1 when the deadline came first."""
    deadline = time.monotonic() + deadline_s
    done = 0
    while done < arms:
        left = deadline - time.monotonic()
        if left <= 0:
            LOG.error("deadline reached after %d of %d arms", done, arms)
            return 1
        try:
            code = subprocess.run(
                worker_command(master_host, master_port),
                env=locust_env(),
                cwd=PROJECT_ROOT,
                timeout=left,
                check=False,
            ).returncode
        except subprocess.TimeoutExpired:
            continue  # the loop reports the deadline
        if code == 0:
            done += 1
            LOG.info("arm %d of %d done", done, arms)
        else:  # no master yet (still waiting for the services), or it went away
            time.sleep(RETRY_PAUSE_S)
    return 0


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m loadtest.worker_pod")
    parser.add_argument("--master-host", required=True)
    # loadtest.master_port_of(arm): its arm's master, or the one all arms share in turn
    parser.add_argument("--master-port", type=int, required=True)
    parser.add_argument(
        "--arms", type=int, required=True, help="how many arms' masters this pod serves in turn"
    )
    parser.add_argument("--deadline-s", type=float, required=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    return run_worker_pod(args.master_host, args.master_port, args.arms, args.deadline_s)


if __name__ == "__main__":
    sys.exit(main())
