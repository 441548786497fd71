"""A lean HTTP/1.1 streaming POST: one socket per connection, httptools' C parser, no pool.

Why not ``requests``: the instrument's error at high concurrency is set by how much CPU
the client spends per network read. vLLM emits a chunk for every running sequence in the
same engine step, so 64 streams' chunks arrive at once and one client process stamps them
one after another: the last is late by the sum of everybody's per-read work. requests /
urllib3 read each HTTP chunk with several pure-Python layers (``bench/README.md`` measured
~156 µs of CPU per chunk under gevent). Here a read is one ``recv`` and one
``feed_data`` into httptools (the llhttp parser uvicorn uses).

Arrival times: on Linux (plain http) a read's arrival is the kernel's receive timestamp of
the last segment it consumed (``SO_TIMESTAMPNS``), mapped to ``time.perf_counter``. A busy
client's greenlet may run ``recv`` milliseconds after the bytes arrived (128 streams per
process on 2 cores, see bench/README.md): that scheduling delay is the client's, not the
server's latency, and the kernel stamp leaves it out. When no stamp came (timestamping is
enabled lazily by the kernel, TLS, other platforms) or it is impossible, the read is stamped
with ``perf_counter`` as ``recv`` returns, before anything is parsed; ``ArrivalStamps``
counts which clock stamped each read.

Plain ``socket`` calls, so it runs in threads and under gevent's monkey patching (Locust)
alike. Supports what an OpenAI-compatible endpoint needs: http and https, chunked,
Content-Length or close-delimited bodies, keep-alive reuse of one connection per session.
Proxies are not supported (the load test talks to in-cluster or loopback endpoints).
"""

from __future__ import annotations

import errno
import os
import platform
import re
import select
import socket
import ssl
import struct
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import SplitResult, urlsplit

import httptools

READ_SIZE = 65536
USER_AGENT = "spec-decode-loadtest"

# Python's socket module has no SO_TIMESTAMPNS. Linux include/uapi/asm-generic/socket.h:
# SO_TIMESTAMPNS_OLD 35, and SCM_TIMESTAMPNS_OLD == SO_TIMESTAMPNS_OLD (the control message
# carries a struct __kernel_old_timespec: two C longs, CLOCK_REALTIME). x86_64 and aarch64
# use that generic header (alpha, mips, parisc, sparc have their own numbers: not used).
# The kernel side: net/ipv4/tcp.c tcp_recvmsg -> tcp_recv_timestamp (the last skb read).
SO_TIMESTAMPNS_OLD = 35
KERNEL_STAMPS = sys.platform == "linux" and platform.machine() in ("x86_64", "aarch64")
_TIMESPEC = struct.Struct("@ll")
_ANCILLARY_SIZE = socket.CMSG_SPACE(_TIMESPEC.size) if KERNEL_STAMPS else 0


@dataclass
class ArrivalStamps:
    """How many reads with data each clock stamped (one session's, or an arm's sum)."""

    kernel: int = 0
    """The kernel's receive timestamp (SO_TIMESTAMPNS), mapped to perf_counter."""
    user: int = 0
    """perf_counter as recv returned: no (or an impossible) kernel stamp for the read."""

    def add(self, other: ArrivalStamps) -> None:
        self.kernel += other.kernel
        self.user += other.user

    def since(self, earlier: ArrivalStamps) -> ArrivalStamps:
        """The reads counted after ``earlier`` (a copy of this counter) was taken."""
        return ArrivalStamps(kernel=self.kernel - earlier.kernel, user=self.user - earlier.user)


class Response(Protocol):
    """What the client reads of a response: its status, the body as timestamped reads."""

    status: int

    def __iter__(self) -> Iterator[tuple[float, bytes]]: ...

    def read_all(self, limit: int) -> bytes: ...

    def close(self) -> None: ...


class Transport(Protocol):
    """What the client needs of an HTTP client: StreamSession here; the bench adapts others
    (bench/transports.py) to compare them."""

    def post_stream(
        self, url: str, body: bytes, timeout_s: float, headers: Mapping[str, str] | None = None
    ) -> Response: ...

    def close(self) -> None: ...


class TransportError(Exception):
    """A connection-level failure; ``kind`` says which (the client maps it to a reason)."""

    REFUSED = "refused"
    CONNECT = "connect"
    TIMEOUT = "timeout"
    DISCONNECTED = "disconnected"
    PROTOCOL = "protocol"

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind


class _Message:
    """One response as httptools parses it: headers, then body pieces until complete."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.headers: dict[bytes, bytes] = {}
        self.headers_done = False
        self.keep_alive = False
        self.complete = False
        self.begun = 0  # messages begun: a second one on this parser is bytes nobody asked for
        self.body: list[bytes] = []

    def feed(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as err:
            raise TransportError(TransportError.PROTOCOL, f"invalid HTTP: {err}") from None

    def take_body(self) -> bytes:
        piece = self.body[0] if len(self.body) == 1 else b"".join(self.body)
        self.body.clear()
        return piece

    # httptools callbacks
    def on_message_begin(self) -> None:
        self.begun += 1

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.lower()] = value

    def on_headers_complete(self) -> None:
        self.headers_done = True
        # Asked now: llhttp forgets it once the message is complete.
        self.keep_alive = self.parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.complete = True


def enable_kernel_stamps(sock: socket.socket) -> bool:
    """Ask the kernel to stamp the socket's received data; False where it cannot."""
    if not KERNEL_STAMPS:
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS_OLD, 1)
    except OSError:
        return False
    return True


def kernel_arrival(
    ancillary: list[tuple[int, int, bytes]], user_stamp: float, wall_ns: int, not_before: float
) -> float | None:
    """The kernel's receive time of a read on the perf_counter clock, or None (no stamp, or
    an impossible one). ``wall_ns`` is ``time.time_ns()`` taken right after ``user_stamp``:
    their difference maps CLOCK_REALTIME to perf_counter at this read, so a wall-clock step
    between reads does not move arrivals."""
    for level, kind, data in ancillary:
        is_stamp = level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS_OLD
        if is_stamp and len(data) == _TIMESPEC.size:
            seconds, nanoseconds = _TIMESPEC.unpack(data)
            age_ns = wall_ns - (seconds * 1_000_000_000 + nanoseconds)
            arrival = user_stamp - age_ns / 1e9
            # Later than the read returned, or before the request was sent: not this
            # response's bytes (a clock mix-up), so the read keeps its user stamp.
            if age_ns < 0 or arrival < not_before:
                return None
            return arrival
    return None


def _recv(
    sock: socket.socket,
    waiting_for: str,
    stamps: ArrivalStamps,
    not_before: float,
    kernel: bool,
) -> tuple[float, bytes]:
    """One read and its arrival time on perf_counter: the kernel's stamp when ``kernel``
    and one came, else the time ``recv`` returned (taken before any parsing)."""
    ancillary: list[tuple[int, int, bytes]] = []
    try:
        if kernel:
            data, ancillary, _, _ = sock.recvmsg(READ_SIZE, _ANCILLARY_SIZE)
        else:
            data = sock.recv(READ_SIZE)
    except TimeoutError:
        raise TransportError(
            TransportError.TIMEOUT, f"no {waiting_for} before the timeout"
        ) from None
    except OSError as err:
        raise TransportError(TransportError.DISCONNECTED, f"read failed: {err}") from None
    user_stamp = time.perf_counter()
    if not data:
        return user_stamp, data
    if kernel:
        arrival = kernel_arrival(ancillary, user_stamp, time.time_ns(), not_before)
        if arrival is not None:
            stamps.kernel += 1
            return arrival, data
    stamps.user += 1
    return user_stamp, data


class StreamResponse:
    """An open response: ``status``, ``headers``; iterate for ``(arrival, body bytes)``."""

    def __init__(
        self,
        session: StreamSession,
        key: tuple[str, str, int],
        sock: socket.socket,
        message: _Message,
        head_arrival: float,
        sent: float,
    ) -> None:
        self._session = session
        self._sent = sent
        self._key = key
        self._sock: socket.socket | None = sock
        self._message = message
        self._head_arrival = head_arrival
        self.status: int = message.parser.get_status_code()
        self.headers = message.headers
        chunked = b"chunked" in message.headers.get(b"transfer-encoding", b"").lower()
        self._close_delimited = not chunked and b"content-length" not in message.headers

    def __iter__(self) -> Iterator[tuple[float, bytes]]:
        """Body bytes as they arrive, each read with the perf_counter time it returned."""
        message = self._message
        if message.body:  # bytes that came in the same read as the headers
            yield self._head_arrival, message.take_body()
        while not message.complete and self._sock is not None:
            try:
                arrival, data = self._session._read(self._key, self._sock, "data", self._sent)
                if data:
                    message.feed(data)
                elif not self._close_delimited:
                    raise TransportError(TransportError.DISCONNECTED, "server closed mid-response")
            except TransportError:
                self._abort()
                raise
            if not data:
                message.complete = True  # a close-delimited body ends at the server's close
                self._abort()
            elif message.body:
                yield arrival, message.take_body()
        self._release()

    def read_all(self, limit: int) -> bytes:
        """The rest of the body, up to ``limit`` bytes (error responses); then closes."""
        out = b""
        try:
            for _, piece in self:
                out += piece
                if len(out) >= limit:
                    break
        except TransportError:
            pass
        self._abort()
        return out[:limit]

    def close(self) -> None:
        """Done with the response: the connection is kept for reuse if the server allows it
        and the whole body was read, otherwise closed. The framing that ends the message
        may still be on its way (a client stops at ``[DONE]``; the chunked body's last,
        empty chunk is the server's next write): the session reads it before the
        connection's next use, see ``StreamSession._settled``."""
        self._release()

    def _abort(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _release(self) -> None:
        if self._sock is None:
            return
        message = self._message
        if message.keep_alive and not message.body:
            self._session._keep(self._key, self._sock, None if message.complete else message)
            self._sock = None
        else:
            self._abort()


def _readable(sock: socket.socket) -> bool:
    """Bytes (or the peer's close) are there to read now: TLS may hold decrypted ones."""
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return True
    return bool(select.select([sock], [], [], 0)[0])


# RFC 9110 section 5.1 (a field name is a token) and 5.5 (a value holds no CR, LF or NUL):
# a prompt class from a prompts file must not be able to inject another header.
_FIELD_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_FIELD_VALUE = re.compile(r"[^\r\n\x00]*")


def _header_line(name: str, value: str) -> str:
    if not _FIELD_NAME.fullmatch(name) or not _FIELD_VALUE.fullmatch(value):
        raise ValueError(f"header {name!r}: {value!r} is not a valid HTTP field")
    return f"{name}: {value}\r\n"


def _request_bytes(
    url: str, body: bytes, headers: Mapping[str, str] | None, content_type: str
) -> tuple[tuple[str, str, int], bytes]:
    """(origin key, the whole HTTP/1.1 request) of a POST of ``body`` to ``url``."""
    parts = _parts(url)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {parts.netloc.rsplit('@', 1)[-1]}\r\n"
        f"User-Agent: {USER_AGENT}\r\nAccept: text/event-stream\r\n"
        f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
        + "".join(_header_line(name, value) for name, value in (headers or {}).items())
        + "\r\n"
    )
    return _origin(parts), head.encode("latin-1") + body


def _parts(url: str) -> SplitResult:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TransportError(
            TransportError.CONNECT, f"{url!r} is not an http(s) URL: use http://HOST:PORT"
        )
    return parts


def _origin(parts: SplitResult) -> tuple[str, str, int]:
    """(scheme, host, port): the key of an origin's connection."""
    assert parts.hostname is not None  # _parts refuses a URL without one
    return parts.scheme, parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


def _write_now(sock: socket.socket, data: bytes) -> None:
    """``data`` onto ``sock`` with one write(2) on its descriptor where the kernel takes it
    all at once (a request on a fresh or idle connection does): no Python loop around the
    call, as gevent's ``sendall`` is, so a burst's writes follow each other closely. TLS
    (the ssl module must encrypt) and what the kernel did not take go through ``sendall``."""
    written = 0
    if not isinstance(sock, ssl.SSLSocket):
        try:
            written = os.write(sock.fileno(), data)
        except BlockingIOError:
            written = 0
    if written < len(data):
        sock.sendall(data[written:])


class PreparedSend:
    """A request built and its connection opened ahead of its send time (``StreamSession.
    prepare``): ``write`` is one ``sendall``, whoever calls it: its own user at its time, or
    the first user of a burst writing every request due at that instant in one loop
    (loadtest.open_loop.BurstGate). ``sent``: when it was written (None: not yet, or the
    write failed and ``failed`` is set: the caller sends it again the usual way)."""

    def __init__(
        self, session: StreamSession, key: tuple[str, str, int], sock: socket.socket, request: bytes
    ) -> None:
        self._session = session
        self._key = key
        self._sock = sock
        self._request = request
        self.sent: float | None = None
        self.failed = False

    def write(self) -> None:
        """Send the request now, once; a later call does nothing."""
        if self.sent is not None or self.failed:
            return
        self.sent = time.perf_counter()  # no byte of the response can arrive before this
        try:
            _write_now(self._sock, self._request)
        except OSError:  # e.g. the server closed the idle connection under us
            self.sent, self.failed = None, True
            self._sock.close()

    def response(self) -> StreamResponse:
        """The written request's response head. A connection closed before any byte of it
        raises DISCONNECTED: the request was not served, and may be sent again."""
        if self.sent is None:
            raise TransportError(TransportError.CONNECT, "the prepared request was not sent")
        return self._session._read_head(self._key, self._sock, self.sent)


class StreamSession:
    """Keeps at most one idle connection per origin; ``post_stream`` opens a response."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        # Each idle connection with the message it still ends, if any (see _settled).
        self._idle: dict[tuple[str, str, int], tuple[socket.socket, _Message | None]] = {}
        # https only; the default verifies against the system's CAs.
        self._ssl_context = ssl_context
        self.stamps = ArrivalStamps()

    def post_stream(
        self,
        url: str,
        body: bytes,
        timeout_s: float,
        headers: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> StreamResponse:
        """``headers``: the request's own (the prompt class); framing ones are set here."""
        key, request = _request_bytes(url, body, headers, content_type)
        sent = time.perf_counter()  # no byte of the response can arrive before this
        sock = self._settled(key)
        if sock is not None:
            try:
                sock.settimeout(timeout_s)
                sock.sendall(request)
                return self._read_head(key, sock, sent)
            except OSError:
                sock.close()  # the server closed the idle connection under us: reconnect
            except TransportError as err:
                if err.kind != TransportError.DISCONNECTED:
                    raise
                # Closed before a byte of the response came: the request was not served.
        sock = self._connect(key, timeout_s)
        try:
            sock.sendall(request)
        except OSError as err:
            sock.close()
            raise TransportError(TransportError.CONNECT, f"send failed: {err}") from None
        return self._read_head(key, sock, sent)

    def prepare(
        self,
        url: str,
        body: bytes,
        timeout_s: float,
        headers: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> PreparedSend | None:
        """The request built and its origin's connection taken (the idle one, or opened now),
        before a scheduled send: at its time only the write is left (``PreparedSend``).
        None when the URL is bad or the connection cannot be opened: ``post_stream`` meets
        that again at the send and reports it."""
        try:
            key, request = _request_bytes(url, body, headers, content_type)
            sock = self._ready(key, timeout_s)
        except TransportError:
            return None
        sock.settimeout(timeout_s)
        return PreparedSend(self, key, sock, request)

    def keep_open(self, url: str, timeout_s: float) -> None:
        """Have an idle connection to ``url``'s origin ready for the next send (opened now
        when none is). A replay's senders do this while they wait for the measured window,
        so the trace's first requests, which no earlier request left a connection for, find
        theirs open. A failure is left for the send to meet and report."""
        try:
            key = _origin(_parts(url))
            sock = self._ready(key, timeout_s)
        except TransportError:
            return
        self._keep(key, sock, None)

    def _ready(self, key: tuple[str, str, int], timeout_s: float) -> socket.socket:
        """The origin's idle connection if it can carry a request now, else a new one."""
        return self._settled(key) or self._connect(key, timeout_s)

    def close(self) -> None:
        for sock, _ in self._idle.values():
            sock.close()
        self._idle.clear()

    def __enter__(self) -> StreamSession:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _keep(
        self, key: tuple[str, str, int], sock: socket.socket, unfinished: _Message | None
    ) -> None:
        """Pool ``sock``; ``unfinished``: its response, whose body was read to the end but
        whose closing framing has not come yet."""
        old = self._idle.pop(key, None)
        if old is not None:
            old[0].close()
        self._idle[key] = (sock, unfinished)

    def _settled(self, key: tuple[str, str, int]) -> socket.socket | None:
        """The origin's idle connection, taken out of the pool, if it can carry a request
        now; otherwise it is closed and None returned. Never waits: what has arrived is
        read without blocking. A connection whose last response is unfinished first reads
        the framing that ends it (no body byte may come: the caller had read the body to its
        end), and is reusable once that message is complete. Any further byte, or the
        server's close, means the server closed it or sent junk."""
        idle = self._idle.pop(key, None)
        if idle is None:
            return None
        sock, unfinished = idle
        try:
            while _readable(sock):
                if unfinished is None:
                    raise TransportError(TransportError.PROTOCOL, "bytes on an idle connection")
                sock.setblocking(False)
                try:
                    data = sock.recv(READ_SIZE)
                except (BlockingIOError, ssl.SSLWantReadError):
                    break  # a TLS record not yet whole
                if not data:
                    raise TransportError(TransportError.DISCONNECTED, "closed while idle")
                unfinished.feed(data)
                if unfinished.body or unfinished.begun > 1:
                    raise TransportError(TransportError.PROTOCOL, "bytes past the caller's end")
                if unfinished.complete:
                    unfinished = None
        except (TransportError, OSError):
            sock.close()
            return None
        if unfinished is not None:  # its end is still in flight: not safe to write on
            sock.close()
            return None
        return sock

    def _connect(self, key: tuple[str, str, int], timeout_s: float) -> socket.socket:
        scheme, host, port = key
        try:
            sock = socket.create_connection((host, port), timeout=timeout_s)
        except TimeoutError:
            raise TransportError(
                TransportError.TIMEOUT, f"connect to {host}:{port} timed out"
            ) from None
        except OSError as err:
            refused = isinstance(err, ConnectionRefusedError) or err.errno == errno.ECONNREFUSED
            kind = TransportError.REFUSED if refused else TransportError.CONNECT
            raise TransportError(kind, f"connect to {host}:{port}: {err}") from None
        # Our request is one write; NODELAY keeps it (and any retry) from waiting on Nagle.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if scheme == "http":
            enable_kernel_stamps(sock)  # a read without a stamp falls back (see _recv)
        if scheme == "https":
            try:
                context = self._ssl_context or ssl.create_default_context()
                sock = context.wrap_socket(sock, server_hostname=host)
            except (ssl.SSLError, OSError) as err:
                sock.close()
                raise TransportError(TransportError.CONNECT, f"TLS to {host}: {err}") from None
        return sock

    def _read(
        self, key: tuple[str, str, int], sock: socket.socket, waiting_for: str, sent: float
    ) -> tuple[float, bytes]:
        # TLS sockets have no recvmsg (the ssl module reads records): user stamps only.
        kernel = KERNEL_STAMPS and key[0] == "http"
        return _recv(sock, waiting_for, self.stamps, sent, kernel)

    def _read_head(
        self, key: tuple[str, str, int], sock: socket.socket, sent: float
    ) -> StreamResponse:
        message = _Message()
        try:
            while not message.headers_done:
                arrival, data = self._read(key, sock, "response", sent)
                if not data:
                    raise TransportError(
                        TransportError.DISCONNECTED, "server closed before responding"
                    )
                message.feed(data)
        except TransportError:
            sock.close()
            raise
        return StreamResponse(self, key, sock, message, arrival, sent)
