"""Stopping process groups, waiting for services and signals as exceptions
(loadtest/processes.py: shared by the Locust launcher and the local run's servers)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loadtest.processes import poll_until, signals_raise, stop_groups

# A leader that dies on SIGTERM and a child of its group that ignores it: what a vLLM server
# whose engine core outlives the API server looks like.
LINGERING_CHILD = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", '''
import signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
time.sleep(120)
'''])
time.sleep(120)
"""


def _group_gone(pgid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.process
def test_a_child_that_outlives_its_leader_is_killed_after_the_grace() -> None:
    leader = subprocess.Popen(
        [sys.executable, "-c", LINGERING_CHILD], stdout=subprocess.PIPE, start_new_session=True
    )
    assert leader.stdout is not None and leader.stdout.readline().strip() == b"ready"
    killed: list[int] = []
    started = time.monotonic()
    stop_groups([leader], grace_s=1.0, on_kill=lambda p: killed.append(p.pid))
    assert leader.poll() is not None
    assert _group_gone(leader.pid, 5.0)
    assert killed == [leader.pid]  # the child ignored SIGTERM: the group got SIGKILL
    assert time.monotonic() - started < 5


# A parent that starts a child with start_group (pinned to the first core we may use), says
# the child's pid, and waits to be killed. The child reports what it was started with.
STARTING_PARENT = """
import sys, time
from loadtest.processes import start_group
log, script, core = sys.argv[1:]
child = start_group([sys.executable, "-c", script], open(log, "wb"), cores=[int(core)])
print(child.pid, flush=True)
time.sleep(120)
"""
REPORTING_CHILD = """
import json, os, sys, time
print(json.dumps({"pid": os.getpid(), "session": os.getsid(0), "stdin": sys.stdin.read(),
                  "cores": sorted(os.sched_getaffinity(0))}), flush=True)
print("to stderr", file=sys.stderr, flush=True)
time.sleep(120)
"""


def _gone(pid: int, timeout_s: float) -> bool:
    """``pid`` exited (or is a zombie: dead, not yet reaped by its new parent)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.process
def test_start_group_isolates_the_child_pins_it_and_ties_it_to_its_parent(tmp_path: Path) -> None:
    log = tmp_path / "child.log"
    core = min(os.sched_getaffinity(0))
    parent = subprocess.Popen(
        [sys.executable, "-c", STARTING_PARENT, str(log), REPORTING_CHILD, str(core)],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    child = 0
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert poll_until(lambda: "to stderr" in log.read_text(), time.monotonic() + 30, 0.05)
        report, stderr = log.read_text().splitlines()
        # Its own session (so its own process group), pinned, stdin empty, stderr logged.
        assert json.loads(report) == {
            "pid": child, "session": child, "stdin": "", "cores": [core]
        }  # fmt: skip
        assert stderr == "to stderr"
        os.kill(parent.pid, signal.SIGKILL)  # no chance to stop its child
        assert _gone(child, 10), "the child outlived its SIGKILLed parent"
    finally:
        for group in (parent.pid, child):  # the child's group too, had it outlived its parent
            with contextlib.suppress(ProcessLookupError):
                if group:
                    os.killpg(group, signal.SIGKILL)
        parent.wait()


def test_poll_until_is_bounded_and_lets_a_check_give_up_early() -> None:
    calls: list[float] = []
    started = time.monotonic()
    assert not poll_until(lambda: False, started + 0.3, 0.05, calls.append)
    assert 0.3 <= time.monotonic() - started < 2 and calls
    answers = iter([False, False, True])
    assert poll_until(lambda: next(answers), time.monotonic() + 5, 0.01)

    def exited() -> bool:
        raise RuntimeError("the server exited")

    with pytest.raises(RuntimeError, match="exited"):
        poll_until(exited, time.monotonic() + 5, 0.01)


class _Stop(Exception):
    pass


def test_signals_raise_once_then_ignore_and_restore_the_handler() -> None:
    previous = signal.getsignal(signal.SIGUSR1)
    with pytest.raises(_Stop), signals_raise((signal.SIGUSR1,), lambda _: _Stop(), once=True):
        try:
            os.kill(os.getpid(), signal.SIGUSR1)
            time.sleep(1)
        except _Stop:
            os.kill(os.getpid(), signal.SIGUSR1)  # a second one while stopping: ignored
            time.sleep(0.1)
            raise
    assert signal.getsignal(signal.SIGUSR1) == previous
