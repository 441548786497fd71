"""One streamed OpenAI-compatible request, measured as closely to the socket as we can.

Why not Locust's HttpUser or FastHttpUser clients: Locust times a stream at its headers,
FastHttpUser reads in fixed blocks that merge SSE events, and HttpUser's ``requests`` spends
enough CPU per chunk to stamp the last of 64 simultaneous chunks ~10 ms late (measured in
``bench/``). Here ``loadtest.transport`` stamps every network read with
``time.perf_counter`` as ``recv`` returns, and the SSE events it completes are parsed
afterwards. Tokens per chunk come from the server's cumulative ``usage.completion_tokens``
(``continuous_usage_stats``), which stays exact when speculative decoding puts several
tokens into one chunk. A speculating vLLM started with ``--per-request-spec-decode-metrics``
adds the request's own acceptance to the final usage chunk (``metrics.speculative_decoding``,
guardrails/vllm_metrics.py): kept on the record as it came.

Works unchanged in plain threads and under gevent (Locust)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Literal

from guardrails import vllm_metrics
from loadtest.records import FailureReason, RequestRecord
from loadtest.transport import PreparedSend, Response, Transport, TransportError

Api = Literal["chat", "completions"]
API_PATHS: dict[str, str] = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
_ERROR_BODY_LIMIT = 2000


@dataclass(frozen=True)
class RequestParams:
    """What every request of both arms shares."""

    model: str
    max_tokens: int
    temperature: float = 0.0
    ignore_eos: bool = True
    seed: int = 0
    api: Api = "chat"
    timeout_s: float = 300.0
    # routing.class_header: every request carries its prompt class in it, on every arm, so
    # the arms send identical requests; the tiered gateway routes on it, vLLM ignores it
    # (vllm-project/vllm vllm/entrypoints/openai/api_server.py, build_app: its middlewares
    # read only Authorization with --api-key and X-Request-Id with
    # --enable-request-id-headers).
    class_header: str | None = None


def class_headers(params: RequestParams, prompt_class: str) -> dict[str, str]:
    """The request's own headers: its prompt class under ``params.class_header``."""
    if not params.class_header or not prompt_class:
        return {}
    return {params.class_header: prompt_class}


def build_payload(
    prompt: str,
    params: RequestParams,
    messages: list[dict[str, str]] | None = None,
    max_tokens: int | None = None,
) -> dict[str, Any]:
    """The request body. ``messages``, ``max_tokens``: a replayed request's own conversation
    and output length (loadtest.traffic), in place of ``prompt`` and ``params.max_tokens``."""
    payload: dict[str, Any] = {
        "model": params.model,
        "max_tokens": max_tokens or params.max_tokens,
        # Explicit: vLLM otherwise applies the model's generation_config defaults.
        "temperature": params.temperature,
        "seed": params.seed,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    if params.ignore_eos:
        payload["ignore_eos"] = True  # vLLM extension: fixed output length
    if messages is not None:
        if params.api != "chat":
            raise ValueError("a conversation (messages) needs the chat completions API")
        payload["messages"] = messages
    elif params.api == "chat":
        payload["messages"] = [{"role": "user", "content": prompt}]
    else:
        payload["prompt"] = prompt
    return payload


def request_body(
    prompt: str,
    params: RequestParams,
    messages: list[dict[str, str]] | None = None,
    max_tokens: int | None = None,
) -> bytes:
    """``build_payload`` as the bytes sent."""
    return json.dumps(build_payload(prompt, params, messages, max_tokens)).encode()


def endpoint_url(base_url: str, api: Api) -> str:
    if api not in API_PATHS:
        raise ValueError(f"api {api!r} is not supported; use one of {sorted(API_PATHS)}")
    return base_url.rstrip("/") + API_PATHS[api]


_CONNECT_REASONS: dict[str, FailureReason] = {
    TransportError.REFUSED: FailureReason.CONNECTION_REFUSED,
    TransportError.CONNECT: FailureReason.CONNECTION_ERROR,
    TransportError.TIMEOUT: FailureReason.TIMEOUT,
    TransportError.DISCONNECTED: FailureReason.CONNECTION_ERROR,
    TransportError.PROTOCOL: FailureReason.CONNECTION_ERROR,
}
_READ_REASONS: dict[str, FailureReason] = {
    **_CONNECT_REASONS,
    TransportError.DISCONNECTED: FailureReason.DISCONNECTED,
    TransportError.PROTOCOL: FailureReason.DISCONNECTED,
}


class _StreamError(Exception):
    def __init__(self, reason: FailureReason, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class _SseState:
    """Folds SSE events into the record as they arrive."""

    def __init__(self, record: RequestRecord) -> None:
        self.record = record
        self.cumulative = 0
        self.done = False
        self.saw_usage = False

    def event(self, block: bytes, offset: float) -> None:
        data_lines = []
        for line in block.splitlines():
            if line.startswith(b"data:"):
                data_lines.append(line[5:].strip())
            elif line.startswith(b":") or not line.strip():
                continue  # SSE comment / keep-alive
            elif not line.startswith((b"event:", b"id:", b"retry:")):
                raise _StreamError(FailureReason.MALFORMED_SSE, f"not an SSE line: {line[:120]!r}")
        if not data_lines:
            return
        data = b"\n".join(data_lines)
        if data == b"[DONE]":
            self.done = True
            return
        try:
            chunk = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise _StreamError(
                FailureReason.MALFORMED_SSE, f"data is not JSON: {data[:120]!r}"
            ) from None
        if not isinstance(chunk, dict):
            raise _StreamError(
                FailureReason.MALFORMED_SSE, f"data is not an object: {data[:120]!r}"
            )
        if "error" in chunk:
            raise _StreamError(FailureReason.SERVER_ERROR_EVENT, json.dumps(chunk["error"])[:500])
        self._chunk(chunk, offset)

    def _chunk(self, chunk: dict[str, Any], offset: float) -> None:
        record = self.record
        text = ""
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta")
            if isinstance(delta, dict):  # chat; reasoning parsers put thinking tokens aside
                for key in ("content", "reasoning_content", "reasoning"):
                    text += delta.get(key) or ""
            else:
                text += choice.get("text") or ""
            if choice.get("finish_reason"):
                record.finish_reason = choice["finish_reason"]
        usage = chunk.get("usage")
        tokens = 0
        if isinstance(usage, dict) and usage.get("completion_tokens") is not None:
            self.saw_usage = True
            cumulative = int(usage["completion_tokens"])
            tokens = cumulative - self.cumulative
            self.cumulative = cumulative
            record.output_tokens = cumulative
            if usage.get("prompt_tokens") is not None:
                record.prompt_tokens = int(usage["prompt_tokens"])
        elif text:
            record.token_accounting = "chunks"  # no usage per chunk: 1 token per chunk, inexact
            tokens = 1
        metrics = chunk.get(vllm_metrics.RESPONSE_METRICS)
        if isinstance(metrics, dict):
            _spec_figures(record, metrics.get(vllm_metrics.RESPONSE_SPEC_DECODING))
        if not chunk.get("choices"):
            # The final usage-only chunk: generated tokens belong to no content chunk.
            if tokens and record.chunk_tokens:
                record.chunk_tokens[-1] += tokens
            return
        if tokens > 0 or text:
            if record.ttft_s is None:
                record.ttft_s = offset
            record.chunk_times.append(offset)
            record.chunk_tokens.append(tokens)
            record.chunk_texts.append(text)


def _count(value: Any) -> int | None:
    """A non-negative whole count (JSON booleans are not counts), else None."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _spec_figures(record: RequestRecord, figures: Any) -> None:
    """Keep the server's per-request acceptance on the record, all of it or nothing: a block
    missing a count, accepting more than it drafted, or with a histogram that does not add up
    to its steps and accepted tokens leaves the record without figures (the summary counts it
    as missing). The histogram itself is optional (per-position rates need it)."""
    if not isinstance(figures, dict):
        return
    steps = _count(figures.get(vllm_metrics.REQUEST_SPEC_STEPS))
    drafted = _count(figures.get(vllm_metrics.REQUEST_DRAFT_TOKENS))
    accepted = _count(figures.get(vllm_metrics.REQUEST_ACCEPTED_TOKENS))
    if steps is None or drafted is None or accepted is None or accepted > drafted:
        return
    raw = figures.get(vllm_metrics.REQUEST_ACCEPTANCE_HISTOGRAM)
    histogram: list[int] | None = None
    if raw is not None:
        counts = [_count(v) for v in raw] if isinstance(raw, list) else []
        histogram = [n for n in counts if n is not None]
        adds_up = sum(histogram) == steps
        adds_up = adds_up and sum(j * n for j, n in enumerate(histogram)) == accepted
        if not histogram or len(histogram) != len(counts) or not adds_up:
            return
    record.spec_steps = steps
    record.spec_draft_tokens = drafted
    record.spec_accepted_tokens = accepted
    record.spec_histogram = histogram


def stream_request(
    session: Transport,
    base_url: str,
    prompt: str,
    params: RequestParams,
    record: RequestRecord,
    *,
    messages: list[dict[str, str]] | None = None,
    max_tokens: int | None = None,
    body: bytes | None = None,
    prepared: PreparedSend | None = None,
) -> RequestRecord:
    """Send one streaming request and fill ``record``; never raises for server faults.
    ``messages``, ``max_tokens``: as ``build_payload``; ``body``: that payload already
    encoded (``request_body``), so a scheduled send does no encoding at its time;
    ``prepared``: that request with its connection opened ahead (``StreamSession.prepare``),
    written here unless a burst's first user wrote it already: its send time is the
    request's start. A prepared request whose connection failed is sent the usual way."""
    if body is None:
        body = request_body(prompt, params, messages, max_tokens)
    url = endpoint_url(base_url, params.api)
    record.max_tokens = max_tokens or params.max_tokens
    record.wall_start = time.time()
    start = time.perf_counter()
    response: Response | None = None
    if prepared is not None:
        prepared.write()
        if prepared.sent is not None:
            record.wall_start -= start - prepared.sent
            start = prepared.sent
    record.start = start
    deadline = start + params.timeout_s
    state = _SseState(record)
    try:
        try:
            if prepared is not None and prepared.sent is not None:
                response = _prepared_response(prepared)
            if response is None:
                response = session.post_stream(
                    url, body, params.timeout_s, headers=class_headers(params, record.prompt_class)
                )
        except TransportError as err:
            raise _StreamError(_CONNECT_REASONS[err.kind], str(err)[:500]) from None
        record.http_status = response.status
        if response.status >= 400:
            text = response.read_all(_ERROR_BODY_LIMIT)
            server_side = response.status >= 500
            reason = FailureReason.HTTP_5XX if server_side else FailureReason.HTTP_4XX
            raise _StreamError(
                reason, f"HTTP {response.status}: {text.decode(errors='replace')[:500]}"
            )
        buffer = b""
        try:
            for now, raw in response:
                buffer += raw
                while not state.done:
                    cut = _event_end(buffer)
                    if cut is None:
                        break
                    block, buffer = buffer[: cut[0]], buffer[cut[1] :]
                    state.event(block, now - start)
                if state.done:
                    record.e2e_s = now - start
                    break
                if now > deadline:
                    raise _StreamError(
                        FailureReason.TIMEOUT, f"stream still open after {params.timeout_s}s"
                    )
        except TransportError as err:
            raise _StreamError(_READ_REASONS[err.kind], str(err)[:500]) from None
        if not state.done:
            if buffer.strip():
                raise _StreamError(
                    FailureReason.TRUNCATED_STREAM,
                    f"stream ended inside an SSE event: {buffer[:120]!r}",
                )
            raise _StreamError(FailureReason.TRUNCATED_STREAM, "stream ended without [DONE]")
        if not record.chunk_times:
            raise _StreamError(FailureReason.NO_OUTPUT, "stream finished without generated tokens")
    except _StreamError as err:
        record.error = err.reason.value
        record.error_detail = err.detail
        if record.e2e_s is None:
            record.e2e_s = time.perf_counter() - start
    finally:
        if response is not None:
            response.close()
    return record


def _prepared_response(prepared: PreparedSend) -> Response | None:
    """The written request's response; None when its connection closed before a byte of it
    (a keep-alive the server had closed): not served, so sent again (as post_stream does)."""
    try:
        return prepared.response()
    except TransportError as err:
        if err.kind != TransportError.DISCONNECTED:
            raise
        return None


def _event_end(buffer: bytes) -> tuple[int, int] | None:
    """(end of event, start of next) for the first complete SSE event in ``buffer``."""
    best: tuple[int, int] | None = None
    for separator in (b"\n\n", b"\r\n\r\n", b"\r\r"):
        position = buffer.find(separator)
        if position >= 0 and (best is None or position < best[0]):
            best = (position, position + len(separator))
    return best
