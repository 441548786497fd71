"""The streaming transport against servers that send exact bytes: framing, reuse, every fault.

Each test's server is a handler run per accepted connection, so the bytes on the wire (and
when they are sent) are the test's, not an HTTP library's.
"""

from __future__ import annotations

import datetime
import fcntl
import socket
import ssl
import struct
import termios
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bench.scripted_server import unused_loopback_url
from loadtest.client import RequestParams, endpoint_url, request_body, stream_request
from loadtest.records import RequestRecord
from loadtest.transport import StreamSession, TransportError

pytestmark = pytest.mark.process

Handler = Callable[[socket.socket], None]
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
CHUNKED = HEAD + b"Transfer-Encoding: chunked\r\n\r\n"


class CannedServer:
    """Runs ``handler(conn)`` for each accepted connection; counts connections."""

    def __init__(self, handler: Handler, tls: ssl.SSLContext | None = None) -> None:
        self.handler = handler
        self.tls = tls
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def url(self, scheme: str = "http", host: str = "127.0.0.1") -> str:
        return f"{scheme}://{host}:{self.port}/v1/completions"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
            self.handler(conn)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def canned() -> Iterator[Callable[..., CannedServer]]:
    servers: list[CannedServer] = []

    def start(handler: Handler, tls: ssl.SSLContext | None = None) -> CannedServer:
        servers.append(CannedServer(handler, tls))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def read_request(conn: socket.socket) -> bytes:
    """One request (head + Content-Length body) off the connection; b"" at EOF."""
    data = b""
    while b"\r\n\r\n" not in data:
        piece = conn.recv(65536)
        if not piece:
            return b""
        data += piece
    head, body = data.split(b"\r\n\r\n", 1)
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length")
    )
    while len(body) < length:
        body += conn.recv(65536)
    return head + b"\r\n\r\n" + body


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def collect(session: StreamSession, url: str, timeout_s: float = 2.0) -> list[tuple[float, bytes]]:
    response = session.post_stream(url, b'{"x": 1}', timeout_s)
    assert response.status == 200
    pieces = list(response)
    response.close()
    return pieces


def test_each_read_keeps_its_own_arrival_time_and_framing_is_stripped(canned) -> None:
    def handler(conn: socket.socket) -> None:
        read_request(conn)
        conn.sendall(CHUNKED + chunk(b"data: one\n\n"))
        time.sleep(0.05)
        conn.sendall(chunk(b"data: two\n\n") + b"0\r\n\r\n")

    with StreamSession() as session:
        pieces = collect(session, canned(handler).url())
    assert b"".join(piece for _, piece in pieces) == b"data: one\n\ndata: two\n\n"
    assert len(pieces) == 2
    assert 0.04 < pieces[1][0] - pieces[0][0] < 0.5


@pytest.mark.parametrize("framing", ["content-length", "close-delimited"])
def test_non_chunked_bodies(canned, framing: str) -> None:
    body = b"data: whole\n\n"

    def handler(conn: socket.socket) -> None:
        read_request(conn)
        if framing == "content-length":
            conn.sendall(HEAD + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        else:  # HTTP/1.0 style: the body ends when the server closes
            conn.sendall(HEAD + b"Connection: close\r\n\r\n" + body)

    with StreamSession() as session:
        assert b"".join(p for _, p in collect(session, canned(handler).url())) == body


def test_keep_alive_reuses_one_connection(canned) -> None:
    def handler(conn: socket.socket) -> None:
        while read_request(conn):
            conn.sendall(CHUNKED + chunk(b"data: x\n\n") + b"0\r\n\r\n")

    server = canned(handler)
    with StreamSession() as session:
        for _ in range(3):
            assert collect(session, server.url())
    assert server.connections == 1


def test_an_idle_connection_the_server_closed_is_replaced(canned) -> None:
    def handler(conn: socket.socket) -> None:
        read_request(conn)  # answers once with keep-alive, then closes anyway
        conn.sendall(CHUNKED + chunk(b"data: x\n\n") + b"0\r\n\r\n")

    server = canned(handler)
    with StreamSession() as session:
        assert collect(session, server.url())
        time.sleep(0.05)  # the close reaches us
        assert collect(session, server.url())
    assert server.connections == 2


def test_a_request_the_reused_connection_drops_unanswered_is_sent_again(canned) -> None:
    def handler(conn: socket.socket) -> None:
        read_request(conn)
        conn.sendall(CHUNKED + chunk(b"data: x\n\n") + b"0\r\n\r\n")
        read_request(conn)  # the next request arrives, and is dropped without an answer

    server = canned(handler)
    with StreamSession() as session:
        assert collect(session, server.url())
        assert collect(session, server.url())  # answered on a fresh connection
    assert server.connections == 2


def test_an_unfinished_response_is_not_reused(canned) -> None:
    def handler(conn: socket.socket) -> None:
        while read_request(conn):
            conn.sendall(CHUNKED + chunk(b"data: a\n\n"))
            time.sleep(0.05)
            conn.sendall(chunk(b"data: b\n\n") + b"0\r\n\r\n")

    server = canned(handler)
    with StreamSession() as session:
        for _ in range(2):
            response = session.post_stream(server.url(), b"{}", 2.0)
            next(iter(response))  # stop after the first piece, as a client does at [DONE]
            response.close()
    assert server.connections == 2  # the half-read connection was closed, not pooled


# What vLLM's server writes for a one-token stream: the event, [DONE], and the chunked body's
# closing empty chunk, each its own write (uvicorn ends the body with a separate write).
TOKEN_EVENT = chunk(b'data: {"choices": [{"index": 0, "delta": {"content": " a"}}]}\n\n')
DONE_EVENT = chunk(b"data: [DONE]\n\n")
LAST_CHUNK = b"0\r\n\r\n"


def _stream_once(session: StreamSession, server: CannedServer) -> RequestRecord:
    """One request as the load test sends it (stops reading at [DONE])."""
    record = RequestRecord(arm="baseline", index=0, prompt_id="p", prompt_class="c")
    params = RequestParams(model="m", max_tokens=1, timeout_s=5)
    stream_request(session, f"http://127.0.0.1:{server.port}", "hi", params, record)
    assert record.ok, record.error_detail
    return record


def _wait_acknowledged(conn: socket.socket) -> None:
    """Until the peer's kernel has acknowledged every byte written on ``conn``: they are in
    its receive queue (Linux SIOCOUTQ: bytes sent and not yet acknowledged)."""
    while struct.unpack("i", fcntl.ioctl(conn.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0]:
        time.sleep(0.001)


def _stream_prepared(session: StreamSession, server: CannedServer) -> RequestRecord:
    """One request prepared ahead (its connection opened, its bytes built), then sent."""
    record = RequestRecord(arm="baseline", index=0, prompt_id="p", prompt_class="c")
    params = RequestParams(model="m", max_tokens=1, timeout_s=5)
    base = f"http://127.0.0.1:{server.port}"
    body = request_body("hi", params)
    prepared = session.prepare(endpoint_url(base, params.api), body, 5)
    assert prepared is not None and prepared.sent is None
    stream_request(session, base, "hi", params, record, body=body, prepared=prepared)
    assert record.ok, record.error_detail
    assert prepared.sent is not None and record.start == prepared.sent
    return record


def test_a_connection_opened_ahead_carries_the_send(canned) -> None:
    def handler(conn: socket.socket) -> None:
        while read_request(conn):
            conn.sendall(CHUNKED + TOKEN_EVENT + DONE_EVENT + LAST_CHUNK)

    server = canned(handler)
    with StreamSession() as session:
        assert session.prepare("not a url", b"{}", 5) is None  # post_stream reports bad URLs
        _stream_prepared(session, server)
        _stream_prepared(session, server)  # the kept connection, prepared again
        # The server accepts in order: had a send connected, its answer would follow a
        # second accept.
        assert server.connections == 1
    closed = unused_loopback_url()
    with StreamSession() as session:  # nothing listens: left for the send to report
        assert session.prepare(closed + "/v1/completions", b"{}", 5) is None


def test_a_connection_kept_open_ahead_carries_the_first_send(canned) -> None:
    def handler(conn: socket.socket) -> None:
        while read_request(conn):
            conn.sendall(CHUNKED + TOKEN_EVENT + DONE_EVENT + LAST_CHUNK)

    server = canned(handler)
    with StreamSession() as session:
        session.keep_open(server.url(), 5)
        session.keep_open(server.url(), 5)  # one is open already: no second
        session.keep_open("not a url", 5)  # ignored; the send reports bad URLs
        _stream_prepared(session, server)
        assert server.connections == 1  # the send's prepare took the kept connection


def test_a_prepared_request_is_written_once_whoever_writes_it(canned) -> None:
    requests: list[bytes] = []

    def handler(conn: socket.socket) -> None:
        while found := read_request(conn):
            requests.append(found)
            conn.sendall(CHUNKED + TOKEN_EVENT + DONE_EVENT + LAST_CHUNK)

    server = canned(handler)
    with StreamSession() as session:
        params = RequestParams(model="m", max_tokens=1, timeout_s=5)
        base = f"http://127.0.0.1:{server.port}"
        body = request_body("hi", params)
        prepared = session.prepare(endpoint_url(base, params.api), body, 5)
        assert prepared is not None
        prepared.write()  # as a burst's first sender would
        written = prepared.sent
        prepared.write()  # a second write does nothing
        record = RequestRecord(arm="baseline", index=0, prompt_id="p", prompt_class="c")
        stream_request(session, base, "hi", params, record, body=body, prepared=prepared)
        assert record.ok and prepared.sent == written == record.start
    assert len(requests) == 1


def test_a_prepared_request_on_a_connection_the_server_closed_is_sent_again(canned) -> None:
    prepared_now = threading.Event()

    def handler(conn: socket.socket) -> None:
        if not read_request(conn):
            return
        conn.sendall(CHUNKED + TOKEN_EVENT + DONE_EVENT + LAST_CHUNK)
        prepared_now.wait(5)  # the client took this kept connection for its next send
        # then the server closes it, unanswered, as a keep-alive timeout would

    server = canned(handler)
    with StreamSession() as session:
        _stream_once(session, server)
        params = RequestParams(model="m", max_tokens=1, timeout_s=5)
        base = f"http://127.0.0.1:{server.port}"
        body = request_body("hi", params)
        prepared = session.prepare(endpoint_url(base, params.api), body, 5)
        assert prepared is not None
        prepared_now.set()
        time.sleep(0.05)  # the close reaches us
        record = RequestRecord(arm="baseline", index=0, prompt_id="p", prompt_class="c")
        stream_request(session, base, "hi", params, record, body=body, prepared=prepared)
        assert record.ok, record.error_detail
    assert server.connections == 2  # sent again on a fresh connection


@pytest.mark.parametrize("last_chunk", ["arrived", "in flight"])
def test_a_stream_read_to_done_keeps_its_connection_once_its_last_chunk_arrives(
    canned, last_chunk: str
) -> None:
    """The client stops at [DONE]; the closing empty chunk is the server's next write and
    may come after. Once it has arrived the connection carries the next request; while it is
    in flight, the next request goes on a new connection (writing on the old one would mix
    the two responses)."""
    stopped, ended, release = threading.Event(), threading.Event(), threading.Event()

    def handler(conn: socket.socket) -> None:
        while read_request(conn):
            conn.sendall(CHUNKED + TOKEN_EVENT + DONE_EVENT)
            if not stopped.wait(10) or (last_chunk == "in flight" and not release.wait(10)):
                return
            conn.sendall(LAST_CHUNK)
            _wait_acknowledged(conn)
            ended.set()

    server = canned(handler)
    with StreamSession() as session:
        _stream_once(session, server)
        stopped.set()
        if last_chunk == "arrived":
            assert ended.wait(10)
        _stream_once(session, server)
        release.set()
    assert server.connections == (1 if last_chunk == "arrived" else 2)


def test_bytes_after_a_stream_read_to_done_drop_its_connection(canned) -> None:
    """Anything but the closing framing after the caller's end (more body, a response nobody
    asked for) means the connection is not in step with the requests: a new one is opened."""
    stopped, ended = threading.Event(), threading.Event()
    requests: list[socket.socket] = []

    def handler(conn: socket.socket) -> None:
        while read_request(conn):
            requests.append(conn)
            conn.sendall(CHUNKED + TOKEN_EVENT + DONE_EVENT)
            if len(requests) == 1 and stopped.wait(10):
                conn.sendall(TOKEN_EVENT + LAST_CHUNK)
                _wait_acknowledged(conn)
                ended.set()
            else:
                conn.sendall(LAST_CHUNK)

    server = canned(handler)
    with StreamSession() as session:
        _stream_once(session, server)
        stopped.set()
        assert ended.wait(10)
        _stream_once(session, server)
    assert server.connections == 2


def _fails_with(session: StreamSession, url: str, kind: str, timeout_s: float = 2.0) -> str:
    with pytest.raises(TransportError) as caught:
        for _ in session.post_stream(url, b"{}", timeout_s):
            pass
    assert caught.value.kind == kind, str(caught.value)
    return str(caught.value)


@pytest.mark.parametrize(
    ("reply", "kind"),
    [
        (b"this is not HTTP\r\n\r\n", TransportError.PROTOCOL),
        (b"", TransportError.DISCONNECTED),  # closed before any response
        (CHUNKED + chunk(b"data: a\n\n"), TransportError.DISCONNECTED),  # closed mid-body
        (CHUNKED + b"zz\r\n", TransportError.PROTOCOL),  # a bad chunk size
    ],
    ids=["not-http", "closed-before-response", "closed-mid-body", "bad-chunk-size"],
)
def test_broken_responses_are_classified(canned, reply: bytes, kind: str) -> None:
    def handler(conn: socket.socket) -> None:
        read_request(conn)
        conn.sendall(reply)

    with StreamSession() as session:
        _fails_with(session, canned(handler).url(), kind)


@pytest.mark.parametrize("stall_after_head", [False, True])
def test_a_silent_server_times_out_on_time(canned, stall_after_head: bool) -> None:
    release = threading.Event()

    def handler(conn: socket.socket) -> None:
        read_request(conn)
        if stall_after_head:
            conn.sendall(CHUNKED)
        release.wait(10)

    started = time.monotonic()
    with StreamSession() as session:
        _fails_with(session, canned(handler).url(), TransportError.TIMEOUT, timeout_s=0.3)
    release.set()
    assert time.monotonic() - started < 2.0


def test_refused_and_not_a_url() -> None:
    with StreamSession() as session:
        _fails_with(session, unused_loopback_url() + "/v1/completions", TransportError.REFUSED)
        message = _fails_with(session, "localhost:8000/v1/completions", TransportError.CONNECT)
    assert "http://HOST:PORT" in message


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def test_https_verifies_the_server(canned, tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(cert, key)

    def handler(conn: socket.socket) -> None:
        read_request(conn)
        conn.sendall(CHUNKED + chunk(b"data: secret\n\n") + b"0\r\n\r\n")

    server = canned(handler, tls=server_tls)
    url = server.url("https", "localhost")
    trusting = ssl.create_default_context(cafile=str(cert))
    with StreamSession(ssl_context=trusting) as session:
        assert b"".join(p for _, p in collect(session, url)) == b"data: secret\n\n"
        # TLS sockets have no recvmsg: every read is stamped as recv returned.
        assert session.stamps.kernel == 0
        assert session.stamps.user >= 1
    with StreamSession() as session:  # the system CAs do not know this certificate
        assert "TLS" in _fails_with(session, url, TransportError.CONNECT)
