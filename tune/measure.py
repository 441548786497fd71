"""Measure one running server: every prompt class, at one concurrency, with the load test's
own streaming client and /metrics parser (so a tuning run measures what a comparison does).

At concurrency 1 the classes go one after the other with /metrics scraped around each, so
the spec-decode counter deltas (acceptance per position) belong to one class. Failed
requests are counted in the samples, never raised; a deadline bounds the whole measurement
(requests not sent by then are counted as skipped).
"""

from __future__ import annotations

from collections.abc import Sequence

from loadtest.client import RequestParams
from loadtest.probe import send_by_class
from loadtest.prompts import Prompt
from loadtest.records import RequestRecord
from loadtest.results import Acceptance as CounterAcceptance
from local_run.progress import Log
from tune.results import Acceptance, ClassRun, RequestSample


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


def _acceptance(block: CounterAcceptance) -> tuple[Acceptance | None, str]:
    """Counter acceptance of one class; None (with the reason) unless measured, so frozen or
    absent counters fall back to the client's tokens per chunk (tune.analysis.acceptance_of),
    labelled, never a 0."""
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
    work: dict[str, list[tuple[Prompt, int]]] = {}
    for repeat in range(repeats):
        for prompt in prompts:
            work.setdefault(prompt.prompt_class, []).append((prompt, repeat))
    # Per-class counters only when one request runs at a time: acceptance per position is
    # then each class's own (the model's r_i).
    counters = speculative and concurrency == 1
    result: dict[str, ClassRun] = {}
    skipped = 0
    for done in send_by_class(
        url, work, params,
        concurrency=concurrency, arm="tune", counters=counters, deadline=deadline,
    ):  # fmt: skip
        name = done.prompt_class
        skipped += done.skipped
        run = ClassRun(prompt_class=name, samples=[sample_of(r, r.index) for r in done.records])
        if done.acceptance is not None:
            acceptance, reason = _acceptance(done.acceptance)
            run.acceptance = acceptance
            run.acceptance_note = reason or None
        failed = run.failed
        errors = sorted({str(s.error) for s in run.samples if not s.ok})
        log(
            f"  {name}: {len(run.samples) - failed}/{len(run.samples)} requests ok"
            + (f", {failed} failed ({', '.join(errors)})" if failed else "")
            + (
                f", acceptance {run.acceptance.acceptance_rate:.0%}"
                if run.acceptance and run.acceptance.acceptance_rate is not None
                else ""
            )
        )
        result[name] = run
    return result, skipped
