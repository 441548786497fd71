"""Arrival stamps: the kernel's receive time of a read, not the time a busy client got to it.

Real loopback sockets (Linux): the server thread sends a chunk and notes when; the client
reads it 50 ms later, as a client whose greenlet waited behind 128 others would. The kernel
stamp must still say "when it was sent"; without one the read falls back to the time
``recv`` returned, and the session counts which clock stamped each read (TLS: see
test_transport.py's https test).
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest

from loadtest import transport
from loadtest.transport import (
    SO_TIMESTAMPNS_OLD,
    ArrivalStamps,
    StreamSession,
    enable_kernel_stamps,
    kernel_arrival,
)

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
LATE_READ_S = 0.05
# The kernel stamps the segment while the server's sendall runs (loopback); allow for a
# preempted test thread between its clock reads and the send on a shared 2-core machine.
SLACK_S = 0.01


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class SendsLater:
    """One-connection server: answers the head at once, sends one body chunk when told, and
    notes the perf_counter interval around that send."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.go = threading.Event()
        self.sent = threading.Event()
        self.sent_between: tuple[float, float] = (0.0, 0.0)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            request = b""
            while b"\r\n\r\n" not in request:
                request += conn.recv(4096)
            conn.sendall(HEAD)
            self.go.wait(5)
            before = time.perf_counter()
            conn.sendall(_chunk(b"data: late\n\n") + b"0\r\n\r\n")
            self.sent_between = (before, time.perf_counter())
            self.sent.set()
            time.sleep(0.5)  # keep the connection open until the client has read

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/completions"

    def close(self) -> None:
        self.listener.close()
        self.thread.join(2)


def _late_read(server: SendsLater, session: StreamSession) -> tuple[float, float]:
    """(arrival the transport gave the body, perf_counter when the client read it)."""
    response = session.post_stream(server.url(), b"{}", 2.0)
    server.go.set()
    assert server.sent.wait(5)
    time.sleep(LATE_READ_S)  # a busy event loop gets to this stream late
    read_at = time.perf_counter()
    pieces = list(response)
    response.close()
    assert b"".join(piece for _, piece in pieces) == b"data: late\n\n"
    return pieces[0][0], read_at


def _kernel_stamping_on() -> None:
    """The kernel turns receive timestamping on lazily (a static key, switched by a work
    item after the first SO_TIMESTAMPNS socket): wait until a read carries a stamp, so the
    tests below see the steady state a load test runs in."""
    listener = socket.create_server(("127.0.0.1", 0))
    with listener, socket.create_connection(listener.getsockname()) as client:
        server, _ = listener.accept()
        with server:
            assert enable_kernel_stamps(client), "SO_TIMESTAMPNS refused on Linux"
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                server.sendall(b"x")
                _, ancillary, _, _ = client.recvmsg(16, socket.CMSG_SPACE(16))
                if ancillary:
                    return
                time.sleep(0.05)
    raise AssertionError("the kernel never stamped a received segment within 5 s")


@pytest.fixture
def server() -> Iterator[SendsLater]:
    _kernel_stamping_on()
    started = SendsLater()
    yield started
    started.close()


# A loopback read now and then carries no receive stamp (a fresh clone's CI run had one in
# this test: the body's arrival was its read time, 50 ms late); the transport then keeps the
# read's own time and counts it (ArrivalStamps.user, the report's warning). So the stamped
# case is tried a few times: any stamped body must be on time, and one must come.
STAMP_TRIES = 5


@pytest.mark.process
def test_kernel_stamp_is_the_arrival_not_the_late_read() -> None:
    assert transport.KERNEL_STAMPS, "this test needs Linux on x86_64 or aarch64"
    _kernel_stamping_on()
    unstamped = []
    for _ in range(STAMP_TRIES):
        server = SendsLater()
        try:
            with StreamSession() as session:
                arrival, read_at = _late_read(server, session)
                stamps = session.stamps
        finally:
            server.close()
        before, after = server.sent_between
        if read_at - arrival < LATE_READ_S * 0.9:  # the body's read had no kernel stamp
            unstamped.append((before, arrival, read_at))
            continue
        # Stamped: the arrival is the kernel's, inside the send, not the late read's.
        assert before - SLACK_S <= arrival <= after + SLACK_S, (before, arrival, after)
        assert stamps.kernel >= 1
        return
    pytest.fail(f"no body read carried a kernel stamp in {STAMP_TRIES} tries: {unstamped}")


@pytest.mark.process
def test_without_kernel_stamps_the_read_time_is_the_arrival(
    server: SendsLater, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transport, "KERNEL_STAMPS", False)  # as on macOS or other CPUs
    with StreamSession() as session:
        arrival, read_at = _late_read(server, session)
        stamps = session.stamps
    assert arrival >= read_at
    assert arrival - server.sent_between[1] >= LATE_READ_S * 0.9
    assert stamps == ArrivalStamps(kernel=0, user=2)  # the head's read and the body's


def _stamp(wall_ns: int) -> list[tuple[int, int, bytes]]:
    seconds, nanoseconds = divmod(wall_ns, 1_000_000_000)
    return [(socket.SOL_SOCKET, SO_TIMESTAMPNS_OLD, struct.pack("@ll", seconds, nanoseconds))]


WALL_NS = 1_700_000_000_123_456_789  # time.time_ns() when the read returned
READ_AT = 500.0  # perf_counter when the read returned


def test_a_stamp_maps_to_perf_counter_by_its_age() -> None:
    arrival = kernel_arrival(_stamp(WALL_NS - 30_000_000), READ_AT, WALL_NS, not_before=400.0)
    assert arrival == pytest.approx(READ_AT - 0.030, abs=1e-9)


@pytest.mark.parametrize(
    ("ancillary", "not_before", "why"),
    [
        ([], 400.0, "no control message (stamping not on yet, or not asked for)"),
        (_stamp(WALL_NS + 1_000_000), 400.0, "1 ms after the read returned"),
        (_stamp(WALL_NS - 200 * 1_000_000_000), 400.0, "before the request was sent"),
        ([(socket.SOL_SOCKET, SO_TIMESTAMPNS_OLD, b"\0" * 8)], 400.0, "not a timespec"),
        ([(socket.SOL_SOCKET, SO_TIMESTAMPNS_OLD + 1, b"\0" * 16)], 400.0, "another message"),
    ],
)
def test_impossible_or_missing_stamps_fall_back(
    ancillary: list[tuple[int, int, bytes]], not_before: float, why: str
) -> None:
    assert kernel_arrival(ancillary, READ_AT, WALL_NS, not_before) is None, why


def test_arm_totals_add_sessions() -> None:
    total = ArrivalStamps()
    total.add(ArrivalStamps(kernel=3, user=1))
    total.add(ArrivalStamps(kernel=2, user=0))
    assert total == ArrivalStamps(kernel=5, user=1)
