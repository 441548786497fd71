"""Child processes the project starts and must always stop: the load test's Locust processes
(loadtest/launch.py) and the local run's vLLM servers, Envoy and Prometheus (local_run/).

One way to start a background process, to wait for a service, to stop a process group and
to turn signals into exceptions, so a fix to any of them (a lingering child, a missed
SIGKILL) reaches every caller. Every process is started with ``start_new_session=True``: its
pid is its process group id, and signalling the group reaches the children it started
(vLLM's engine core and workers).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from types import FrameType, TracebackType
from typing import IO, Any, Self

LOG = logging.getLogger("loadtest")
HTTP_TIMEOUT_S = 5.0
# While a group's leader is gone but its children linger, how often to look again.
GROUP_POLL_S = 0.1


# Audit events (sys.audit) naming what a long step is doing, so a hang is reported with its
# phase (tests/conftest.py adds the last one to a timed-out test's failure), and marking
# training (the test tiers: only a `train` or `integration` test may train a model).
PHASE_EVENT = "specdecode.phase"
TRAIN_EVENT = "specdecode.train"


def enter_phase(text: str) -> None:
    """Say which phase a long wait or loop is in (an audit event: free when nobody listens)."""
    sys.audit(PHASE_EVENT, text)


def http_get(url: str, timeout_s: float = HTTP_TIMEOUT_S) -> tuple[bool, bytes]:
    """(True, body) when ``url`` answers 200; (False, b"") on any other answer or none."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.status == 200, response.read()
    except (urllib.error.URLError, OSError, ValueError):
        return False, b""


def healthy(url: str) -> bool:
    """``url``'s ``/health`` answers 200: vLLM's OpenAI server does once its engine is up
    (vllm/entrypoints/openai/api_server.py)."""
    return http_get(url.rstrip("/") + "/health")[0]


def poll_until(
    ready: Callable[[], bool],
    deadline: float,
    poll_s: float,
    waiting: Callable[[float], None] | None = None,
) -> bool:
    """Call ``ready`` every ``poll_s`` until it returns True (then True) or ``deadline``
    (``time.monotonic()``) passes (then False); ``waiting(seconds left)`` between polls.
    ``ready`` may raise to give up early (a server that exited)."""
    while True:
        if ready():
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        if waiting is not None:
            waiting(left)
        time.sleep(min(poll_s, left))


# linux/prctl.h: the option that names the signal a process gets when the thread that
# started it exits.
PR_SET_PDEATHSIG = 1


def _start_child(cores: Collection[int] | None) -> None:  # in the child between fork and exec
    # Dies with us even if we are SIGKILLed (no chance to clean up then); not on other
    # platforms, where the ``with`` blocks' stop is the only one.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if cores is not None:
        os.sched_setaffinity(0, cores)  # inherited by every process it starts


def start_group(
    argv: Sequence[str],
    log: IO[bytes],
    *,
    env: Mapping[str, str] | None = None,
    cores: Collection[int] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in the background as a local run starts its servers: in its own
    process group (``stop_groups`` stops it and every child it starts as one), stdin from
    /dev/null, stdout and stderr into ``log``, sent SIGTERM when the thread that started it
    exits (Linux ``PR_SET_PDEATHSIG``: call from the main thread), pinned with its children
    to ``cores`` when given. ``env``: its whole environment (None: ours)."""
    return subprocess.Popen(
        argv,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=lambda: _start_child(cores),
    )


def stop_groups(
    processes: Sequence[subprocess.Popen[Any]],
    grace_s: float,
    on_kill: Callable[[subprocess.Popen[Any]], None] | None = None,
) -> None:
    """SIGTERM each process's group, give them ``grace_s`` together to exit (children
    included: a leader may exit before its engine and workers), then SIGKILL what is left;
    returns when every leader is reaped. ``on_kill``: told before a group is killed."""
    for process in processes:
        _signal_group(process, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
    for process in processes:
        while _group_alive(process.pid) and time.monotonic() < deadline:
            time.sleep(GROUP_POLL_S)
        if process.poll() is None or _group_alive(process.pid):
            if on_kill is not None:
                on_kill(process)
            _signal_group(process, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace_s)


def _signal_group(process: subprocess.Popen[Any], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member we may not signal is still a member
        return True
    return True


@contextlib.contextmanager
def signals_raise(
    signals: Sequence[signal.Signals],
    exception: Callable[[int], BaseException],
    *,
    once: bool = False,
) -> Iterator[None]:
    """While inside, each of ``signals`` raises ``exception(signum)`` in the main thread, so
    every ``with`` block cleans up; the previous handlers come back on the way out.
    ``once``: a second signal is ignored (the first one's stop is under way and bounded)."""
    received: list[int] = []

    def handler(signum: int, _: FrameType | None) -> None:
        if once and received:
            LOG.warning("%s again: already stopping", signal.Signals(signum).name)
            return
        received.append(signum)
        raise exception(signum)

    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


class BackgroundProcess:
    """A process of ours with a log file, started by ``start`` and stopped on every path out
    of a ``with`` block (the start failing included). Subclasses set ``process`` and ``_log``
    in ``start``; ``stop_grace_s`` is how long its group gets to exit after SIGTERM."""

    process: subprocess.Popen[bytes] | None
    _log: IO[bytes] | None
    stop_grace_s: float = 5.0

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None:
            stop_groups([process], self.stop_grace_s)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()
