"""The load test's locustfile with a FastHttpUser transport instead of requests, for the
HttpUser-vs-FastHttpUser accuracy comparison only.

Everything else (schedule, warm-up, records, SSE parsing, timestamps) is
``loadtest/locustfile.py`` and ``loadtest.client.stream_request`` unchanged: a small adapter
gives ``FastHttpSession`` the slice of the ``requests`` API that ``stream_request`` uses, and
the stream is read with ``FastResponse.iter_content()`` at its default block size (1024),
which is what a FastHttpUser user gets.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import requests
from locust.contrib.fasthttp import FastHttpSession

import loadtest.locustfile as base  # registers the loadtest's arguments and listeners

FAST_BLOCK_SIZE = 1024  # FastResponse.iter_content's default


class _FastStream:
    """The part of ``requests.Response`` that ``stream_request`` reads."""

    def __init__(self, response: Any) -> None:
        self._response = response
        self.status_code = response.status_code
        self.raw = self

    def read(self, amount: int, decode_content: bool = True) -> bytes:
        return self._response.content[:amount] if self._response.content else b""

    def iter_content(self, chunk_size: int | None = None) -> Iterator[bytes]:
        try:
            yield from self._response.iter_content(FAST_BLOCK_SIZE, decode_content=False)
        except Exception as err:  # geventhttpclient raises its own types mid-stream
            raise requests.ConnectionError(str(err)) from err

    def close(self) -> None:
        inner = getattr(self._response, "_response", None)
        if inner is not None:
            inner.release()


class _FastSession:
    def __init__(self, session: FastHttpSession) -> None:
        self._session = session

    def post(self, url: str, json: Any, stream: bool, timeout: Any) -> _FastStream:
        response = self._session.request("POST", url, json=json, stream=stream,
                                         name="fasthttp-stream")
        error = getattr(response, "error", None)
        if error is not None and not response.status_code:
            raise requests.ConnectionError(str(error))
        return _FastStream(response)

    def close(self) -> None:
        self._session.client.close()


class FastStreamingUser(base.StreamingUser):
    """The load test's user, with geventhttpclient (FastHttpUser's client) as transport."""

    def on_start(self) -> None:
        plan = self.environment.loadtest_state.plan  # type: ignore[attr-defined]
        timeout = plan.params.timeout_s
        self.session = _FastSession(FastHttpSession(
            self.host, request_event=self.environment.events.request, user=self,
            network_timeout=timeout, connection_timeout=timeout,
            concurrency=1,
        ))  # type: ignore[assignment]
