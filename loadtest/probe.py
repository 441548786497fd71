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
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import requests

from experiment.config import Arm
from loadtest.acceptance import acceptance_from_deltas, decode_tokens, scrape
from loadtest.client import RequestParams, stream_request
from loadtest.prompts import Prompt, load_prompts
from loadtest.records import RequestRecord
from loadtest.results import Acceptance, ClassAcceptance
from loadtest.transport import StreamSession


class _Sender:
    """Sends requests from a thread pool; each worker thread keeps its own streaming
    connection (a StreamSession is not shared across threads), all closed at the end."""

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

    def send(self, record: RequestRecord, text: str) -> RequestRecord:
        """The finished record; failures are in it, never raised (stream_request turns every
        server fault into the record's error)."""
        return stream_request(self._session(), self.url, text, self.params, record)

    def close(self) -> None:
        for session in self._sessions:
            session.close()


@dataclass
class ClassRequests:
    """One prompt class's finished requests and what the counters saw around them."""

    prompt_class: str
    records: list[RequestRecord]
    skipped: int  # not sent: the deadline had passed
    acceptance: Acceptance | None  # None: the counters were not scraped


def send_by_class(
    url: str,
    work: Mapping[str, Sequence[tuple[Prompt, int]]],
    params: RequestParams,
    *,
    concurrency: int,
    arm: str,
    counters: bool,
    deadline: float | None = None,
) -> Iterator[ClassRequests]:
    """Each class of ``work`` (class -> (prompt, record index) pairs) in turn, by name, with
    up to ``concurrency`` of its requests in flight and nothing of another class; with
    ``counters``, /metrics scraped around each class. Items not started by ``deadline``
    (``time.monotonic()``) are skipped."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    sender = _Sender(url, params)
    try:
        with requests.Session() as scrapes, ThreadPoolExecutor(concurrency) as pool:
            for name, items in sorted(work.items()):
                before = scrape(url, scrapes) if counters else None
                futures, skipped = [], 0
                for prompt, index in items:
                    if deadline is not None and time.monotonic() > deadline:
                        skipped += 1
                        continue
                    record = RequestRecord(
                        arm=arm, index=index, prompt_id=prompt.id, prompt_class=name
                    )
                    futures.append(pool.submit(sender.send, record, prompt.text))
                # Every request of the class has finished (each is bounded by
                # params.timeout_s) before the next class starts.
                records = [future.result() for future in futures]
                acceptance = (
                    acceptance_from_deltas(
                        before, scrape(url, scrapes), decode_tokens=decode_tokens(records)
                    )
                    if counters
                    else None
                )
                yield ClassRequests(name, records, skipped, acceptance)
    finally:
        sender.close()


def acceptance_by_class(
    prompt_files: Sequence[str],
    speculative_url: str,
    params: RequestParams,
    concurrency: int = 1,
) -> dict[str, ClassAcceptance]:
    """Acceptance of each prompt class of ``prompt_files`` on the speculative server, with
    up to ``concurrency`` requests of the same class in flight."""
    work: dict[str, list[tuple[Prompt, int]]] = {}
    for prompt in load_prompts(list(prompt_files)):
        members = work.setdefault(prompt.prompt_class, [])
        members.append((prompt, len(members)))
    result: dict[str, ClassAcceptance] = {}
    for done in send_by_class(
        speculative_url, work, params,
        concurrency=concurrency, arm=Arm.SPECULATIVE.value, counters=True,
    ):  # fmt: skip
        assert done.acceptance is not None  # counters=True scrapes them
        result[done.prompt_class] = ClassAcceptance(
            prompts=len(done.records),
            failed=sum(not record.ok for record in done.records),
            **done.acceptance.model_dump(),
        )
    return result
