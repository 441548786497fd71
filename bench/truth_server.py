"""The ground-truth server process: a bench Workload streamed from one asyncio event loop.

Runs in its own process so the instrument under test never shares a GIL with it; send times
are on ``time.perf_counter`` (CLOCK_MONOTONIC, shared by every process on Linux), so they
compare directly with the instruments' timestamps.

Why its own server and not ``bench.scripted_server`` (the load-test suite's, one thread per
connection): at 256 streams that server's 256 threads used 0.88 of a core, nearly all one
Python process can, so it fell behind its own script (first chunks 75-120 ms after the
request instead of 50, two chunks sent 0.0 ms apart) exactly when the client was busiest,
and a stamp taken after ``sendall`` waited for the GIL (up to 24-35 ms p99). Here one
thread runs every stream: a write is one non-blocking ``send`` and nothing waits for a lock.

What it sends is the scripted server's stream (``StreamFormat``: cumulative usage on every
chunk when asked, the chat role chunk), with ``Connection: close`` on every response (both
instruments open one connection per stream; vllm bench serve's aiohttp pool otherwise
raced the server's closes). The truth of each chunk is the kernel's transmit timestamp
(``bench/send_stamps.py``); the ``perf_counter`` stamp after the write is logged beside it.
The truth of a request's arrival is the kernel's receive timestamp of its first read
(``SO_TIMESTAMPNS``, loadtest/transport.py): the replay's timing is measured against it.

``python -m bench.truth_server --workload JSON`` prints ``{"url", "port"}``;
``GET /_scripted/log`` returns what was sent.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.scripted_server import DEFAULT_MODEL_NAME, StreamFormat, chunk_frame
from bench.send_stamps import SendStamps
from bench.workload import Workload
from experiment.loading import PROJECT_ROOT
from loadtest.processes import http_get, stop_groups
from loadtest.transport import enable_kernel_stamps, kernel_arrival

STOP_GRACE_S = 10.0
START_TIMEOUT_S = 30.0
MAX_HEADER_BYTES = 65536
# Room for one SCM_TIMESTAMPNS control message (a timespec: two C longs).
_ANCILLARY_SIZE = socket.CMSG_SPACE(16)
REQUEST_TEXT_CHARS = 200
CHAT_PATH = "/v1/chat/completions"
STREAM_PATHS = (CHAT_PATH, "/v1/completions")


@dataclass
class SentLog:
    """What was sent for one request (``bench.accuracy.Truth.from_log`` reads it)."""

    index: int
    path: str
    received: float  # perf_counter when the request body was read
    # The kernel's receive stamp of the request's first read on perf_counter (None: no
    # stamp); tcp_recv_timestamp stamps the last segment that read consumed, which is the
    # first byte's when the client wrote the request in one segment (loopback, < 64 KiB).
    kernel_received: float | None = None
    request_text: str = ""  # the last chat message's (or the prompt's) first characters
    send_times: list[float] = field(default_factory=list)  # after each content chunk's write
    chunk_tokens: list[int] = field(default_factory=list)
    kernel_send_times: list[float | None] | None = None  # None: no stamp for that chunk
    done_time: float | None = None  # after the write of the [DONE] event
    kernel_done_time: float | None = None
    fault: str | None = None


STAMP_RETRIES = 10  # drains of the error queue, 1 ms apart, before a chunk keeps no stamp
_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
)


class _Connection:
    """One accepted socket on the loop: sends whole buffers and counts the bytes, which is
    how each chunk's kernel stamp is found (its key is the offset of its last byte)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
        self.loop = loop
        self.sock = sock
        self.stamps = SendStamps(sock)
        self.receive_stamps = enable_kernel_stamps(sock)
        self.first_read: float | None = None  # the kernel's receive time of the first read

    async def _recv(self) -> bytes:
        if not self.receive_stamps:
            return await self.loop.sock_recv(self.sock, 65536)
        while True:
            try:
                data, ancillary, _, _ = self.sock.recvmsg(65536, _ANCILLARY_SIZE)
            except BlockingIOError:
                await self._readable()
                continue
            if data and self.first_read is None:
                self.first_read = kernel_arrival(
                    ancillary, time.perf_counter(), time.time_ns(), float("-inf")
                )
            return data

    async def _readable(self) -> None:
        ready = self.loop.create_future()
        fd = self.sock.fileno()

        def wake() -> None:
            if not ready.done():  # the reader can fire again before it is removed
                ready.set_result(None)

        self.loop.add_reader(fd, wake)
        try:
            await ready
        finally:
            self.loop.remove_reader(fd)

    async def send(self, data: bytes) -> None:
        await self.loop.sock_sendall(self.sock, data)
        self.stamps.wrote(len(data))

    async def read_request(self) -> tuple[str, str, bytes]:
        """(method, path, body) of one HTTP/1.1 request."""
        buffer = b""
        while b"\r\n\r\n" not in buffer:
            data = await self._recv()
            if not data or len(buffer) > MAX_HEADER_BYTES:
                raise ConnectionError("no complete request")
            buffer += data
        head, body = buffer.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        while len(body) < length:
            data = await self._recv()
            if not data:
                raise ConnectionError("request body cut short")
            body += data
        return method, path, body[:length]

    async def kernel_times(self, keys: list[int]) -> dict[int, float]:
        found: dict[int, float] = {}
        for _ in range(STAMP_RETRIES):
            self.stamps.drain(found)
            if not self.stamps.enabled or all(key in found for key in keys):
                break
            await asyncio.sleep(0.001)
        return found


def _request_text(body: dict[str, Any]) -> str:
    """What names a request in the log: its last message's (or prompt's) first characters."""
    messages = body.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[-1], dict):
        text = messages[-1].get("content")
    else:
        text = body.get("prompt")
    return text[:REQUEST_TEXT_CHARS] if isinstance(text, str) else ""


def _json_response(status: str, payload: Any) -> bytes:
    body = json.dumps(payload).encode()
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


class Streamer:
    """Serves the workload's stream to every POST and keeps the send log."""

    def __init__(self, workload: Workload) -> None:
        self.workload = workload
        self.log: list[SentLog] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def serve(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        listener.setblocking(False)
        while True:
            sock, _ = await loop.sock_accept(listener)
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            task = loop.create_task(self._handle(_Connection(loop, sock)))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _handle(self, conn: _Connection) -> None:
        try:
            method, path, body = await conn.read_request()
            if method == "POST" and path in STREAM_PATHS:
                await self._stream(conn, path, json.loads(body or b"{}"))
            elif method == "GET" and path == "/_scripted/log":
                await conn.send(_json_response("200 OK", [asdict(e) for e in self.log]))
            elif method == "GET" and path in ("/health", "/v1/models"):
                await conn.send(_json_response("200 OK", {"data": [{"id": DEFAULT_MODEL_NAME}]}))
            else:
                await conn.send(_json_response("404 Not Found", {"error": {"message": path}}))
        except (ConnectionError, TimeoutError, ValueError):
            pass  # a client that went away, or a request that is not HTTP/JSON
        finally:
            conn.sock.close()

    async def _stream(self, conn: _Connection, path: str, body: dict[str, Any]) -> None:
        entry = SentLog(
            index=len(self.log),
            path=path,
            received=time.perf_counter(),
            kernel_received=conn.first_read,
            request_text=_request_text(body),
        )
        self.log.append(entry)
        script = self.workload.script(entry.index)
        stream = StreamFormat.of(entry.index, path == CHAT_PATH, body, DEFAULT_MODEL_NAME)
        keys: list[int] = []
        try:
            await conn.send(_HEAD)
            for offset, tokens, data in stream.chunks(script):
                delay = entry.received + offset - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                await conn.send(chunk_frame(data))
                entry.send_times.append(time.perf_counter())
                entry.chunk_tokens.append(tokens)
                keys.append(conn.stamps.last_key())
            await conn.send(chunk_frame(stream.done(script)))
            entry.done_time = time.perf_counter()
            done_key = conn.stamps.last_key()
            await conn.send(b"0\r\n\r\n")
        except (ConnectionError, TimeoutError):
            entry.fault = "client_went_away"
            return
        kernel = await conn.kernel_times([*keys, done_key])
        entry.kernel_send_times = [kernel.get(key) for key in keys]
        entry.kernel_done_time = kernel.get(done_key)


async def _serve(workload: Workload) -> None:
    listener = socket.create_server(("127.0.0.1", 0), backlog=1024)
    # Held for the server's life: the kernel stamps received packets only while some socket
    # asks for stamps (Linux net/core/dev.c: net_enable_timestamp counts the consumers), so
    # between two connections a request could otherwise arrive unstamped (seen: 1-4 of 40).
    enable_kernel_stamps(listener)
    port = listener.getsockname()[1]
    print(json.dumps({"url": f"http://127.0.0.1:{port}", "port": port}), flush=True)
    await Streamer(workload).serve(listener)


class TruthServer:
    """Start/stop the server process; ``log()`` fetches its send log."""

    def __init__(self, workload: Workload, log_path: Path, cpus: set[int] | None = None) -> None:
        self.workload = workload
        self.cpus = cpus  # CPU affinity of the server process (None: inherit)
        self.log_path = log_path
        self.process: subprocess.Popen[str] | None = None
        self.url = ""

    def __enter__(self) -> TruthServer:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        args = json.dumps(
            {
                k: v
                for k, v in self.workload.to_dict().items()
                if k in ("ttft_s", "gap_s", "chunk_tokens")
            }
        )
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.truth_server", "--workload", args],
            stdout=subprocess.PIPE,
            stderr=self.log_path.open("w"),
            text=True,
            cwd=PROJECT_ROOT,
            start_new_session=True,  # its own process group, stopped as one (stop_groups)
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if (cpus := self.cpus) else None,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line or time.monotonic() > deadline:
            self.stop()
            raise RuntimeError(f"truth server did not start; see {self.log_path}")
        self.url = json.loads(line)["url"]
        return self

    def log(self) -> list[dict[str, Any]]:
        ok, body = http_get(self.url + "/_scripted/log", timeout_s=60)
        if not ok:
            raise RuntimeError(f"truth server at {self.url} gave no send log; see {self.log_path}")
        entries: list[dict[str, Any]] = json.loads(body)
        return entries

    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def stop(self) -> None:
        if self.process is not None:
            stop_groups([self.process], STOP_GRACE_S)

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="bench ground-truth streaming server")
    parser.add_argument(
        "--workload", required=True, help='JSON: {"ttft_s": .., "gap_s": .., "chunk_tokens": [..]}'
    )
    args = parser.parse_args(argv)
    fields = json.loads(args.workload)
    fields["chunk_tokens"] = tuple(fields["chunk_tokens"])
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(Workload(**fields)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
