"""A scripted OpenAI-compatible streaming server: ground truth for the measuring instrument.

It answers ``/v1/chat/completions`` and ``/v1/completions`` with a *scripted* stream: a
time to first token, a gap before every further chunk, how many tokens each chunk carries
(several, as under speculative decoding) and cumulative ``usage`` on every chunk
(``continuous_usage_stats``). It records when it actually sent each chunk (after the
socket write, ``time.perf_counter``; on Linux that clock is shared by all processes), and
serves a fake Prometheus ``/metrics`` with ``vllm:spec_decode_*`` counters that advance as
if every chunk were one speculative step with ``k`` drafted tokens.

It can inject every fault the load test must survive: an HTTP error status, a disconnect
in the middle of the stream, a malformed SSE event, a truncated stream (ends without
``[DONE]``) and a stall longer than the client's timeout. A refused connection is just a
port with nothing listening: :func:`unused_loopback_url`.

Use in-process (a thread)::

    with ScriptedServer(Script(ttft_s=0.05, chunk_tokens=[1, 3, 2], gaps_s=0.02)) as server:
        ... server.url ...; server.log[0].send_times

or as a process: ``python -m bench.scripted_server --script script.json`` prints one JSON
line ``{"url": ...}``; ``GET /_scripted/log`` returns what was sent. A script file holds one
script object or a list (used in turn); fields are those of :class:`Script`.

Sending is paced with a sleep that ends ~1 ms early plus a short spin, each chunk is one
``sendall`` on a ``TCP_NODELAY`` socket with HTTP/1.1 chunked encoding and keep-alive (what
vLLM's uvicorn does), so a client sees each event as its own read. Responses that end in a
fault say ``Connection: close``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class Fault(StrEnum):
    HTTP_ERROR = "http_error"  # respond with Script.http_status and a JSON error body
    DISCONNECT = "disconnect"  # close the socket mid-stream (no terminating chunk)
    MALFORMED = "malformed"  # send a data line that is not JSON
    TRUNCATE = "truncate"  # end the body cleanly inside an event, without [DONE]
    STALL = "stall"  # stop sending for Script.stall_s (past the client's timeout)


@dataclass
class Script:
    """The stream one request gets. Chunk j >= 1 is sent ``gaps_s[j-1]`` after chunk j-1."""

    ttft_s: float = 0.05
    chunk_tokens: list[int] = field(default_factory=lambda: [1] * 8)
    gaps_s: float | list[float] = 0.02
    fault: Fault | None = None
    fault_after_chunks: int = 2  # content chunks sent normally before the fault
    http_status: int = 500
    stall_s: float = 5.0
    divergence_token: int | None = None  # from this token on, emit different text
    continuous_usage: bool = True  # False: usage only in the final chunk

    def __post_init__(self) -> None:
        if isinstance(self.fault, str):
            self.fault = Fault(self.fault)
        if not self.chunk_tokens or any(n < 1 for n in self.chunk_tokens):
            raise ValueError("Script.chunk_tokens must list at least one chunk of >= 1 tokens")
        gaps = self.gap_list()
        if len(gaps) != len(self.chunk_tokens) - 1 or any(g < 0 for g in gaps):
            raise ValueError(
                f"Script.gaps_s must be one non-negative number or {len(self.chunk_tokens) - 1} "
                "of them (one per chunk after the first)"
            )

    def gap_list(self) -> list[float]:
        if isinstance(self.gaps_s, int | float):
            return [float(self.gaps_s)] * (len(self.chunk_tokens) - 1)
        return [float(g) for g in self.gaps_s]

    @property
    def output_tokens(self) -> int:
        return sum(self.chunk_tokens)

    @classmethod
    def fixed(cls, total_tokens: int, tokens_per_chunk: int = 1, **kwargs: Any) -> Script:
        """``total_tokens`` split into chunks of ``tokens_per_chunk`` (the last may be short)."""
        chunks = [tokens_per_chunk] * (total_tokens // tokens_per_chunk)
        if total_tokens % tokens_per_chunk:
            chunks.append(total_tokens % tokens_per_chunk)
        return cls(chunk_tokens=chunks, **kwargs)

    def token_text(self, index: int) -> str:
        if self.divergence_token is not None and index >= self.divergence_token:
            return f" x{index}"
        return f" w{index}"


@dataclass
class SentLog:
    """What the server did for one request (its own clock)."""

    index: int
    path: str
    body: dict[str, Any]
    received: float  # perf_counter when the request body was read
    send_times: list[float] = field(default_factory=list)  # after each content chunk's write
    done_time: float | None = None  # after the write of the ``[DONE]`` event
    chunk_tokens: list[int] = field(default_factory=list)
    fault: str | None = None
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)  # the request's, names lower-cased


ScriptChooser = Callable[[int, dict[str, Any]], Script]


DEFAULT_MODEL_NAME = "scripted-model"


def chunk_frame(data: bytes) -> bytes:
    """``data`` as one HTTP/1.1 chunked-encoding chunk."""
    return b"%x\r\n%s\r\n" % (len(data), data)


@dataclass(frozen=True)
class StreamFormat:
    """How one request's events are written, as vLLM's OpenAI server writes them."""

    index: int  # the server's request index: the events' id
    chat: bool
    model: str
    prompt_tokens: int
    continuous: bool  # usage on every chunk (continuous_usage_stats)
    include_usage: bool  # a usage-only event before [DONE]

    @classmethod
    def of(
        cls, index: int, chat: bool, body: dict[str, Any], model: str, continuous: bool = True
    ) -> StreamFormat:
        """The format a request ``body`` asks for (``continuous=False``: never per chunk)."""
        options = body.get("stream_options") or {}
        return cls(
            index=index,
            chat=chat,
            model=body.get("model", model),
            prompt_tokens=len(str(body.get("messages") or body.get("prompt") or "").split()),
            continuous=bool(options.get("continuous_usage_stats")) and continuous,
            include_usage=bool(options.get("include_usage")),
        )

    def event(self, choices: list[dict[str, Any]], completion: int | None) -> bytes:
        """One ``data:`` event (usage when ``completion`` is given)."""
        payload: dict[str, Any] = {
            "id": f"cmpl-{self.index}",
            "object": "chat.completion.chunk" if self.chat else "text_completion",
            "model": self.model,
            "choices": choices,
        }
        if completion is not None:
            payload["usage"] = {
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": completion,
                "total_tokens": self.prompt_tokens + completion,
            }
        return b"data: " + json.dumps(payload).encode() + b"\n\n"

    def choice(self, text: str, finish: str | None) -> dict[str, Any]:
        if self.chat:
            return {"index": 0, "delta": {"content": text}, "finish_reason": finish}
        return {"index": 0, "text": text, "finish_reason": finish}

    def chunks(self, script: Script) -> Iterator[tuple[float, int, bytes]]:
        """Each content chunk of ``script``: (when to send it, in seconds after the request
        was received; the tokens it carries; its event bytes, the chat role chunk first)."""
        gaps = script.gap_list()
        offset = script.ttft_s
        emitted = 0
        for number, tokens in enumerate(script.chunk_tokens):
            if number > 0:
                offset += gaps[number - 1]
            text = "".join(script.token_text(emitted + i) for i in range(tokens))
            emitted += tokens
            finish = "length" if number == len(script.chunk_tokens) - 1 else None
            data = self.event([self.choice(text, finish)], emitted if self.continuous else None)
            if number == 0 and self.chat:  # vLLM's first chunk: the role, no tokens yet
                role = {
                    "index": 0,
                    "delta": {"role": "assistant", "content": ""},
                    "finish_reason": None,
                }
                data = self.event([role], 0 if self.continuous else None) + data
            yield offset, tokens, data

    def done(self, script: Script) -> bytes:
        """The end of the stream: the usage-only event when asked, then ``[DONE]``."""
        tail = self.event([], script.output_tokens) if self.include_usage else b""
        return tail + b"data: [DONE]\n\n"


def unused_loopback_url() -> str:
    """A URL on 127.0.0.1 with nothing listening: connecting is refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _sleep_until(target: float, spin: bool) -> None:
    remaining = target - time.perf_counter()
    if not spin:
        if remaining > 0:
            time.sleep(remaining)
        return
    if remaining > 0.002:
        time.sleep(remaining - 0.001)
    while time.perf_counter() < target:
        pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def _send_json(self, status: int, payload: Any, close: bool = False) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if close:
            # Say so: a client that pooled the connection must not reuse it (a race otherwise).
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        owner = self.server.owner
        if self.path == "/metrics":
            body = owner.metrics_text().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif self.path == "/_scripted/log":
            self._send_json(200, [dataclasses.asdict(entry) for entry in owner.log])
        elif self.path in ("/health", "/v1/models"):
            self._send_json(200, {"data": [{"id": owner.model_name}]})
        else:
            self._send_json(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:
        received = time.perf_counter()
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError:
            self._send_json(400, {"error": {"message": "body is not JSON"}})
            return
        if self.path not in ("/v1/chat/completions", "/v1/completions"):
            self._send_json(404, {"error": {"message": f"no route {self.path}"}})
            return
        owner = self.server.owner
        headers = {name.lower(): value for name, value in self.headers.items()}
        entry, script = owner.begin(self.path, body, received, headers)
        if script.fault == Fault.HTTP_ERROR:
            entry.status = script.http_status
            self._send_json(
                script.http_status, {"error": {"message": "scripted failure"}}, close=True
            )
            return
        self._stream(script, body, entry, received, chat=self.path.endswith("chat/completions"))

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(chunk_frame(data))

    def _stream(
        self, script: Script, body: dict[str, Any], entry: SentLog, received: float, chat: bool
    ) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        if script.fault is not None or not self.server.owner.keep_alive:
            # Normal streams keep alive, like uvicorn, unless the owner says otherwise.
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.flush()
        owner = self.server.owner
        stream = StreamFormat.of(entry.index, chat, body, owner.model_name, script.continuous_usage)
        try:
            for number, (offset, tokens, data) in enumerate(stream.chunks(script)):
                if script.fault is not None and number == script.fault_after_chunks:
                    self._fault(script, entry)
                    return
                _sleep_until(received + offset, spin=owner.precise_pacing)
                self._write_chunk(data)
                entry.send_times.append(time.perf_counter())
                entry.chunk_tokens.append(tokens)
            self._write_chunk(stream.done(script))
            entry.done_time = time.perf_counter()
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            entry.fault = entry.fault or "client_went_away"
            self.close_connection = True

    def _fault(self, script: Script, entry: SentLog) -> None:
        entry.fault = script.fault.value if script.fault else None
        if script.fault == Fault.DISCONNECT:
            self.connection.shutdown(socket.SHUT_RDWR)
        elif script.fault == Fault.MALFORMED:
            self._write_chunk(b"data: {this is not json\n\n")
            time.sleep(0.5)  # let the client see it before the socket closes
        elif script.fault == Fault.TRUNCATE:
            self._write_chunk(b'data: {"choices": [{"index": 0, "delta": {"cont')
            self.wfile.write(b"0\r\n\r\n")
        elif script.fault == Fault.STALL:
            deadline = time.perf_counter() + script.stall_s
            while time.perf_counter() < deadline and not self.server.owner.stopping.is_set():
                time.sleep(0.05)
        self.close_connection = True


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # socketserver's default backlog of 5 drops simultaneous connects into SYN retransmits
    # (a ~1 s stall that would be the server's, not the client's).
    request_queue_size = 1024
    owner: ScriptedServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client closing its keep-alive connection (or a test's fault) is normal here.
        if isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)


@dataclass
class _EngineCounters:
    """One engine's spec-decode counters, as vLLM exports them per engine."""

    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    per_pos: dict[int, int] = field(default_factory=dict)


class ScriptedServer:
    """The scripted server on 127.0.0.1 (port 0: an ephemeral port) in a background thread.

    ``scripts``: one Script for every request, a list used in turn (by arrival), or a
    function ``(request_index, body) -> Script``. ``spec_decode_k``: when set, ``/metrics``
    exports spec-decode counters (k drafted tokens per chunk, ``n - 1`` of them accepted for
    a chunk of n tokens); when None, ``/metrics`` has none (a baseline server).
    ``precise_pacing``: end each pause with a ~1 ms spin for exact send times; turn it off
    when many streams would spin at once and steal the CPU the client under test needs (the
    truth is the recorded send time either way). ``keep_alive``: False says
    ``Connection: close`` on every response and closes after it.
    """

    def __init__(
        self,
        scripts: Script | Sequence[Script] | ScriptChooser,
        *,
        spec_decode_k: int | None = None,
        model_name: str = DEFAULT_MODEL_NAME,
        port: int = 0,
        engines: int = 2,
        precise_pacing: bool = True,
        keep_alive: bool = True,
    ) -> None:
        if isinstance(scripts, Script):
            scripts = [scripts]
        self._scripts = scripts
        self.spec_decode_k = spec_decode_k
        self.model_name = model_name
        self.engines = engines
        self.precise_pacing = precise_pacing
        self.keep_alive = keep_alive
        self.log: list[SentLog] = []
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._counters = [_EngineCounters() for _ in range(engines)]
        self._httpd = _Server(("127.0.0.1", port), _Handler)
        self._httpd.owner = self
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ScriptedServer:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, daemon=True, kwargs={"poll_interval": 0.05}
        )
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in the calling thread until interrupted (the runnable-module form)."""
        try:
            self._httpd.serve_forever(poll_interval=0.05)
        except KeyboardInterrupt:
            pass
        finally:
            self.stopping.set()
            self._httpd.server_close()

    def stop(self) -> None:
        self.stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread:
            self._thread.join(timeout=5)

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def begin(
        self,
        path: str,
        body: dict[str, Any],
        received: float,
        headers: dict[str, str] | None = None,
    ) -> tuple[SentLog, Script]:
        with self._lock:
            index = len(self.log)
            entry = SentLog(
                index=index, path=path, body=body, received=received, headers=headers or {}
            )
            self.log.append(entry)
            if callable(self._scripts):
                script = self._scripts(index, body)
            else:
                script = self._scripts[index % len(self._scripts)]
            if self.spec_decode_k and script.fault is None:
                self._count_spec_decode(index, script)
        return entry, script

    def _count_spec_decode(self, index: int, script: Script) -> None:
        engine = self._counters[index % self.engines]
        k = self.spec_decode_k or 0
        for tokens in script.chunk_tokens:
            accepted = min(tokens - 1, k)
            engine.drafts += 1
            engine.draft_tokens += k
            engine.accepted += accepted
            for position in range(accepted):
                engine.per_pos[position] = engine.per_pos.get(position, 0) + 1

    def spec_decode_truth(self) -> dict[str, Any]:
        """Totals of the counters (all engines), for tests."""
        with self._lock:
            totals: dict[str, Any] = {
                "drafts": sum(e.drafts for e in self._counters),
                "draft_tokens": sum(e.draft_tokens for e in self._counters),
                "accepted": sum(e.accepted for e in self._counters),
            }
            per_pos: dict[int, int] = {}
            for engine in self._counters:
                for position, count in engine.per_pos.items():
                    per_pos[position] = per_pos.get(position, 0) + count
        totals["per_pos"] = per_pos
        return totals

    def metrics_text(self) -> str:
        lines = [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            f'vllm:num_requests_running{{engine="0",model_name="{self.model_name}"}} 0.0',
        ]
        if not self.spec_decode_k:
            return "\n".join(lines) + "\n"
        created = 1.7e9
        with self._lock:
            for name, key in (
                ("drafts", "drafts"),
                ("draft_tokens", "draft_tokens"),
                ("accepted_tokens", "accepted"),
            ):
                metric = f"vllm:spec_decode_num_{name}"
                lines += [f"# HELP {metric} Spec decode counter.", f"# TYPE {metric} counter"]
                for number, engine in enumerate(self._counters):
                    labels = f'engine="{number}",model_name="{self.model_name}"'
                    lines.append(f"{metric}_total{{{labels}}} {float(getattr(engine, key))}")
                    lines.append(f"{metric}_created{{{labels}}} {created}")
            metric = "vllm:spec_decode_num_accepted_tokens_per_pos"
            lines += [f"# HELP {metric} Accepted tokens per position.", f"# TYPE {metric} counter"]
            for number, engine in enumerate(self._counters):
                for position in range(self.spec_decode_k):
                    labels = (
                        f'engine="{number}",model_name="{self.model_name}",position="{position}"'
                    )
                    value = float(engine.per_pos.get(position, 0))
                    lines.append(f"{metric}_total{{{labels}}} {value}")
                    lines.append(f"{metric}_created{{{labels}}} {created}")
        return "\n".join(lines) + "\n"


def load_scripts(path: Path) -> list[Script]:
    data = json.loads(path.read_text())
    items = data if isinstance(data, list) else [data]
    try:
        return [Script(**item) for item in items]
    except TypeError as err:
        fields = sorted(f.name for f in dataclasses.fields(Script))
        raise SystemExit(f"{path}: {err}; script fields are {fields}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--script",
        type=Path,
        help="JSON script (object or list); default: 8 one-token chunks, 50 ms TTFT, 20 ms gaps",
    )
    parser.add_argument("--port", type=int, default=0, help="0: an ephemeral port")
    parser.add_argument(
        "--spec-decode-k",
        type=int,
        default=None,
        help="export spec_decode counters on /metrics with this k",
    )
    parser.add_argument("--model-name", default=DEFAULT_MODEL_NAME)
    args = parser.parse_args(argv)
    scripts = load_scripts(args.script) if args.script else [Script()]
    server = ScriptedServer(
        scripts, spec_decode_k=args.spec_decode_k, model_name=args.model_name, port=args.port
    )
    print(json.dumps({"url": server.url, "port": server.port}), flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
