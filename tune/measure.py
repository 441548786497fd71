"""Measure one running server: every prompt class, at one concurrency, with the load test's
own streaming client and /metrics parser (so a tuning run measures what a comparison does).

At concurrency 1 the classes go one after the other with /metrics scraped around each, so
the spec-decode counter deltas (acceptance per position) belong to one class. Failed
requests are counted in the samples, never raised; a deadline bounds the whole measurement
(requests not sent by then are counted as skipped).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import requests

from loadtest.acceptance import Counters, acceptance_from_deltas, scrape
from loadtest.client import RequestParams, stream_request
from loadtest.prompts import Prompt
from loadtest.records import RequestRecord
from loadtest.transport import StreamSession
from tune.results import Acceptance, ClassRun, RequestSample

Log = Callable[[str], None]


def sample_of(record: RequestRecord, repeat: int) -> RequestSample:
    return RequestSample(
        prompt_id=record.prompt_id,
        repeat=repeat,
        ok=record.ok,
        error=record.error,
        ttft_s=record.ttft_s,
        e2e_s=record.e2e_s,
        output_tokens=record.output_tokens,
        chunk_tokens=list(record.chunk_tokens),
        chunk_times_s=list(record.chunk_times),
    )


class _Sessions(threading.local):
    # One connection pool per worker thread: StreamSession is not shared across threads.
    session: StreamSession | None = None


def _send(
    url: str, prompt: Prompt, repeat: int, params: RequestParams, sessions: _Sessions
) -> RequestSample:
    if sessions.session is None:
        sessions.session = StreamSession()
    record = RequestRecord(
        arm="tune", index=repeat, prompt_id=prompt.id, prompt_class=prompt.prompt_class
    )
    return sample_of(stream_request(sessions.session, url, prompt.text, params, record), repeat)


def _acceptance(
    before: Counters | None, after: Counters | None, samples: Sequence[RequestSample]
) -> tuple[Acceptance | None, str]:
    """Counter acceptance of one class; None (with the reason) unless measured, so frozen or
    absent counters fall back to the client's tokens per chunk (tune.analysis.acceptance_of),
    labelled, never a 0."""
    decode = sum(max((s.output_tokens or 0) - 1, 0) for s in samples if s.ok)
    block = acceptance_from_deltas(before, after, decode_tokens=decode)
    if not block.available or not block.per_position_rate:
        return None, block.reason or "no per-position counters on /metrics"
    return (
        Acceptance(
            source="counters",
            per_position_rate=block.per_position_rate,
            acceptance_rate=block.acceptance_rate,
            steps=block.drafts,
        ),
        "",
    )


def measure_classes(
    url: str,
    prompts: Sequence[Prompt],
    params: RequestParams,
    *,
    concurrency: int,
    repeats: int,
    deadline: float,
    speculative: bool,
    log: Log = print,
) -> tuple[dict[str, ClassRun], int]:
    """Every prompt ``repeats`` times per class; returns the class runs and skipped requests."""
    by_class: dict[str, list[Prompt]] = {}
    for prompt in prompts:
        by_class.setdefault(prompt.prompt_class, []).append(prompt)
    result: dict[str, ClassRun] = {}
    skipped = 0
    sessions = _Sessions()
    with requests.Session() as scrapes, ThreadPoolExecutor(concurrency) as pool:
        for name, members in sorted(by_class.items()):
            work = [(p, r) for r in range(repeats) for p in members]
            before = scrape(url, scrapes) if speculative and concurrency == 1 else None
            futures = []
            for prompt, repeat in work:
                if time.monotonic() > deadline:
                    skipped += 1
                    continue
                futures.append(pool.submit(_send, url, prompt, repeat, params, sessions))
            samples = [f.result() for f in futures]
            run = ClassRun(prompt_class=name, samples=samples)
            if speculative and concurrency == 1:
                acceptance, reason = _acceptance(before, scrape(url, scrapes), samples)
                run.acceptance = acceptance
                run.acceptance_note = reason or None
            failed = run.failed
            errors = sorted({str(s.error) for s in samples if not s.ok})
            log(
                f"  {name}: {len(samples) - failed}/{len(samples)} requests ok"
                + (f", {failed} failed ({', '.join(errors)})" if failed else "")
                + (
                    f", acceptance {run.acceptance.acceptance_rate:.0%}"
                    if run.acceptance and run.acceptance.acceptance_rate is not None
                    else ""
                )
            )
            result[name] = run
    return result, skipped
