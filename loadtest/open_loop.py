"""The open loop's wait: a scheduled request leaves at its arrival time, as exactly as one
gevent loop allows (Locust's users are greenlets; no Locust import here, so tests can use it
without Locust's monkey patching)."""

from __future__ import annotations

import time
from collections.abc import Callable

import gevent

from loadtest.transport import PreparedSend

# A gevent timer wakes its greenlet only when the loop next gets
# control, after whatever the other greenlets are doing (reading and parsing streams; a burst's
# other sends), so a sleep to the arrival itself ends late by that much. The wait sleeps to
# SPIN_AHEAD_S before the arrival, then yields to the other greenlets until it comes
# (gevent.sleep(0): "yield execution to any other runnable greenlets", gevent's sleep
# docstring): late only by one other greenlet's turn. The connection is opened CONNECT_AHEAD_S
# before (not at the start of a long wait: servers close idle keep-alive connections).
SPIN_AHEAD_S = 0.002
CONNECT_AHEAD_S = 0.05


def wait_until(moment: float, connect: Callable[[], None] | None = None) -> None:
    """Return at ``moment`` (perf_counter), having called ``connect`` shortly before it."""
    if connect is not None:
        ahead = moment - CONNECT_AHEAD_S - time.perf_counter()
        if ahead > 0:
            gevent.sleep(ahead)
        connect()
    ahead = moment - SPIN_AHEAD_S - time.perf_counter()
    if ahead > 0:
        gevent.sleep(ahead)
    while time.perf_counter() < moment:
        gevent.sleep(0)


class BurstGate:
    """Requests due at the same instant (a trace's burst: several requests at one offset)
    are written together: each user enlists its prepared request before the instant, and
    the first of them to wake at it writes every one in one loop (one ``sendall`` each, on
    connections opened ahead), then goes on to read its own response; the others find
    theirs written. Without it each member is written at its own user's turn, after the
    turns of the members before it (each woken, spinning and writing in turn), so the last
    member of a burst of 160 left tens of milliseconds late (docs/records/replay-peers)."""

    def __init__(self) -> None:
        self._due: dict[float, list[PreparedSend]] = {}

    def enlist(self, moment: float, send: PreparedSend) -> None:
        self._due.setdefault(moment, []).append(send)

    def release(self, moment: float) -> None:
        """Write every request enlisted for ``moment`` that is not written yet."""
        for send in self._due.pop(moment, ()):
            send.write()
