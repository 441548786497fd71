"""Acceptance per prompt class: a small load test of one request at a time on the SD server.

The comparison's /metrics counters cover its whole mixed window, so they cannot tell
classes apart. Here each class's prompts are sent one after the other with nothing else in
flight, and the counter deltas around each class belong to that class alone. Run it after
the measured window (it needs the server to itself).
"""

from __future__ import annotations

from collections.abc import Sequence

import requests

from experiment.config import Arm
from loadtest.acceptance import acceptance_from_deltas, scrape
from loadtest.client import RequestParams, stream_request
from loadtest.prompts import load_prompts
from loadtest.records import RequestRecord
from loadtest.results import ClassAcceptance
from loadtest.transport import StreamSession


def acceptance_by_class(
    prompt_files: Sequence[str], speculative_url: str, params: RequestParams
) -> dict[str, ClassAcceptance]:
    """Acceptance of each prompt class of ``prompt_files`` on the speculative server."""
    by_class: dict[str, list[str]] = {}
    for prompt in load_prompts(list(prompt_files)):
        by_class.setdefault(prompt.prompt_class, []).append(prompt.text)
    result: dict[str, ClassAcceptance] = {}
    with requests.Session() as scrapes, StreamSession() as streams:
        for name, texts in sorted(by_class.items()):
            before = scrape(speculative_url, scrapes)
            failed = 0
            for index, text in enumerate(texts):
                record = RequestRecord(
                    arm=Arm.SPECULATIVE.value,
                    index=index,
                    prompt_id=f"{name}-{index}",
                    prompt_class=name,
                )
                failed += not stream_request(streams, speculative_url, text, params, record).ok
            block = acceptance_from_deltas(before, scrape(speculative_url, scrapes))
            result[name] = ClassAcceptance(prompts=len(texts), failed=failed, **block.model_dump())
    return result
