"""Stopping process groups, waiting for services and signals as exceptions
(loadtest/processes.py: shared by the Locust launcher and the local run's servers)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

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
