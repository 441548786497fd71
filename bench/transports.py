"""The HTTP clients of Locust's HttpUser and FastHttpUser behind the load test's transport API.

``loadtest.client.stream_request`` talks to a ``loadtest.transport.StreamSession``:
``post_stream(url, body, timeout_s, headers)`` returns a response with ``status``, iteration over
``(arrival perf_counter, body bytes)``, ``read_all(limit)`` and ``close()``; failures are
``TransportError``. These adapters give the same API to

- ``requests`` (what HttpUser uses; the load test's transport until the bench showed its
  per-chunk CPU made 64-stream tails 10x worse): ``iter_content(chunk_size=None)`` yields
  each HTTP chunk as urllib3 decodes it, stamped when it is handed over;
- geventhttpclient (what FastHttpUser uses): ``FastResponse.iter_content()`` at its default
  1024-byte block, which is what a FastHttpUser user gets,

so the bench compares HTTP clients with everything else (schedule, SSE parsing, records)
unchanged. Bench only: the load test itself always uses ``loadtest.transport``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any, cast

import requests
from locust.contrib.fasthttp import FastHttpSession

from loadtest.transport import TransportError

FAST_BLOCK_SIZE = 1024  # FastResponse.iter_content's default


def _kind(err: BaseException, connecting: bool) -> str:
    if isinstance(err, requests.Timeout) or "timed out" in str(err):
        return TransportError.TIMEOUT
    if "Connection refused" in str(err):
        return TransportError.REFUSED
    return TransportError.CONNECT if connecting else TransportError.DISCONNECTED


class _AdaptedResponse:
    def __init__(self, status: int, pieces: Iterator[bytes], release: Any) -> None:
        self.status = status
        self._pieces = pieces
        self._release = release

    def __iter__(self) -> Iterator[tuple[float, bytes]]:
        try:
            for piece in self._pieces:
                yield time.perf_counter(), piece
        except Exception as err:  # both clients raise their own types mid-stream
            raise TransportError(_kind(err, connecting=False), str(err)[:500]) from None

    def read_all(self, limit: int) -> bytes:
        out = b""
        try:
            for _, piece in self:
                out += piece
        except TransportError:
            pass
        return out[:limit]

    def close(self) -> None:
        self._release()


class RequestsStreamSession:
    """Locust HttpUser's client: a ``requests.Session``."""

    def __init__(self) -> None:
        self._session = requests.Session()

    def post_stream(
        self, url: str, body: bytes, timeout_s: float, headers: Mapping[str, str] | None = None
    ) -> _AdaptedResponse:
        try:
            response = self._session.post(
                url,
                data=body,
                headers={"Content-Type": "application/json", **(headers or {})},
                stream=True,
                timeout=(timeout_s, timeout_s),
            )
        except requests.RequestException as err:
            raise TransportError(_kind(err, connecting=True), str(err)[:500]) from None
        return _AdaptedResponse(
            response.status_code, response.iter_content(chunk_size=None), response.close
        )

    def close(self) -> None:
        self._session.close()


class FastHttpStreamSession:
    """Locust FastHttpUser's client: geventhttpclient through ``FastHttpSession``."""

    def __init__(self, session: FastHttpSession) -> None:
        self._session = session

    def post_stream(
        self, url: str, body: bytes, timeout_s: float, headers: Mapping[str, str] | None = None
    ) -> _AdaptedResponse:
        response = self._session.request(
            "POST",
            url,
            # Annotated str | dict, but the docstring (locust/contrib/fasthttp.py) and
            # geventhttpclient take bytes as they are: the cast only tells the checker.
            data=cast(str, body),
            headers={"Content-Type": "application/json", **(headers or {})},
            stream=True,
            name="fasthttp-stream",
        )
        error = getattr(response, "error", None)
        if error is not None and not response.status_code:
            raise TransportError(_kind(error, connecting=True), str(error)[:500])
        inner = getattr(response, "_response", None)
        return _AdaptedResponse(
            response.status_code,
            response.iter_content(FAST_BLOCK_SIZE, decode_content=False),
            inner.release if inner is not None else (lambda: None),
        )

    def close(self) -> None:
        self._session.client.close()
