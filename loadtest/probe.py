"""Acceptance per prompt class: a small load test of one class at a time on the SD server.

The comparison's /metrics counters cover its whole mixed window, so they cannot tell
classes apart. Here each class's prompts are sent with nothing of another class in flight,
and the counter deltas around each class belong to that class alone. Within a class up to
``concurrency`` requests run at once: the counters are sums over requests, so the class's
rate does not depend on how its own requests overlap (greedy drafts and verification are
per request), only the wall time does. Run it after the measured window (it needs the
server to itself).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import requests

from experiment.config import Arm
from loadtest.acceptance import acceptance_from_deltas, decode_tokens, scrape
from loadtest.client import RequestParams, stream_request
from loadtest.prompts import load_prompts
from loadtest.records import RequestRecord
from loadtest.results import ClassAcceptance
from loadtest.transport import StreamSession


class _Sender:
    """Sends one class's requests; each worker thread keeps its own streaming connection."""

    def __init__(self, url: str, params: RequestParams) -> None:
        self.url = url
        self.params = params
        self._local = threading.local()
        self._sessions: list[StreamSession] = []
        self._lock = threading.Lock()

    def _session(self) -> StreamSession:
        session: StreamSession | None = getattr(self._local, "session", None)
        if session is None:
            session = StreamSession()
            self._local.session = session
            with self._lock:
                self._sessions.append(session)
        return session

    def send(self, record: RequestRecord, text: str) -> bool:
        """True when the request succeeded; failures are counted by the caller, never raised
        (stream_request turns every server fault into the record's error)."""
        return stream_request(self._session(), self.url, text, self.params, record).ok

    def close(self) -> None:
        for session in self._sessions:
            session.close()


def acceptance_by_class(
    prompt_files: Sequence[str],
    speculative_url: str,
    params: RequestParams,
    concurrency: int = 1,
) -> dict[str, ClassAcceptance]:
    """Acceptance of each prompt class of ``prompt_files`` on the speculative server, with
    up to ``concurrency`` requests of the same class in flight."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    by_class: dict[str, list[str]] = {}
    for prompt in load_prompts(list(prompt_files)):
        by_class.setdefault(prompt.prompt_class, []).append(prompt.text)
    result: dict[str, ClassAcceptance] = {}
    sender = _Sender(speculative_url, params)
    try:
        with requests.Session() as scrapes, ThreadPoolExecutor(concurrency) as pool:
            for name, texts in sorted(by_class.items()):
                records = [
                    RequestRecord(
                        arm=Arm.SPECULATIVE.value,
                        index=index,
                        prompt_id=f"{name}-{index}",
                        prompt_class=name,
                    )
                    for index in range(len(texts))
                ]
                before = scrape(speculative_url, scrapes)
                # map() returns only when every request of the class has finished (each is
                # bounded by params.timeout_s), so no request of the next class overlaps.
                failed = sum(not ok for ok in pool.map(sender.send, records, texts))
                block = acceptance_from_deltas(
                    before, scrape(speculative_url, scrapes), decode_tokens=decode_tokens(records)
                )
                result[name] = ClassAcceptance(
                    prompts=len(texts), failed=failed, **block.model_dump()
                )
    finally:
        sender.close()
    return result
