"""Speculative acceptance from vLLM's Prometheus counters, scraped around the measured window.

vLLM v1 exports ``vllm:spec_decode_num_drafts_total``, ``..._num_draft_tokens_total``,
``..._num_accepted_tokens_total`` and ``..._num_accepted_tokens_per_pos_total{position}``,
one series per engine. We sum over every label except ``position``, ignore the
``*_created`` series, and take after-minus-before deltas:

- acceptance rate = d(accepted) / d(draft_tokens)
- mean acceptance length = 1 + d(accepted) / d(drafts)   (tokens per target step)
- per-position rate i = d(per_pos[i]) / d(drafts)

Where the figure comes from is explicit (``Acceptance.source``), because there are four
kinds of server:

- a speculating server started with ``--per-request-spec-decode-metrics`` (runtime/render.py)
  returns each request's own figures on its final usage chunk (loadtest.client keeps them on
  the record): **per request** when every measured request that succeeded carried them, the
  best source, since it splits by prompt class however the classes were mixed. Their sums are
  reconciled with the counter deltas of the same window (``reconcile``); a response without
  figures is counted, and while any is missing the arm's figure stays the counters';
- counters that move (vLLM V1, vllm-neuron 1.x): **measured**;
- no ``vllm:spec_decode_*`` counters at all (the published vLLM 0.9 fork, V0 engine):
  **estimated**, the client-side estimate from tokens per chunk (loadtest.stats);
- counters registered but frozen while the arm generated tokens (vllm-neuron 0.2.x:
  vllm-project/vllm-neuron:vllm_neuron/worker/neuronx_distributed_model_runner.py never sets
  the draft token ids the scheduler's statistics read): **not available**, since a frozen 0
  is not a 0% acceptance. So is an unreadable /metrics or a window without decode steps.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import requests
from prometheus_client.parser import text_string_to_metric_families

from experiment.config import Arm
from guardrails import vllm_metrics
from loadtest.records import RequestRecord
from loadtest.results import (
    Acceptance,
    AcceptanceReconciliation,
    AcceptanceSource,
    ArmRequestAcceptance,
    RequestAcceptance,
    RunSummary,
)

# The keys of ``Counters``: the counters' names without the common prefix.
PREFIX = vllm_metrics.SPEC_DECODE_PREFIX
DRAFTS = vllm_metrics.SPEC_DECODE_DRAFTS.removeprefix(PREFIX)
DRAFT_TOKENS = vllm_metrics.SPEC_DECODE_DRAFT_TOKENS.removeprefix(PREFIX)
ACCEPTED = vllm_metrics.SPEC_DECODE_ACCEPTED.removeprefix(PREFIX)
PER_POSITION = vllm_metrics.SPEC_DECODE_ACCEPTED_PER_POSITION.removeprefix(PREFIX)
SCRAPE_TIMEOUT_S = 10.0

Counters = dict[str, Any]  # {"num_drafts": float, ..., "num_accepted_tokens_per_pos": {pos: v}}


def parse_counters(text: str) -> Counters:
    """Spec-decode counters from Prometheus text, summed over engines; {} when absent."""
    counters: Counters = {}
    # Go by sample names, not family names: prometheus_client writes each label set's
    # ``_total`` and ``_created`` samples interleaved, which splits the parsed families.
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            suffix = vllm_metrics.COUNTER_SUFFIX
            if not sample.name.startswith(PREFIX) or not sample.name.endswith(suffix):
                continue  # ignores *_created and anything else
            short = sample.name[len(PREFIX) : -len(suffix)]
            if short == PER_POSITION:
                position = int(sample.labels.get("position", "0"))
                per_pos = counters.setdefault(PER_POSITION, {})
                per_pos[position] = per_pos.get(position, 0.0) + sample.value
            elif short in (DRAFTS, DRAFT_TOKENS, ACCEPTED):
                counters[short] = counters.get(short, 0.0) + sample.value
    return counters


def scrape(base_url: str, session: requests.Session | None = None) -> Counters | None:
    """The counters of ``base_url/metrics``; None when the endpoint cannot be read."""
    getter = session or requests
    try:
        response = getter.get(base_url.rstrip("/") + "/metrics", timeout=SCRAPE_TIMEOUT_S)
        response.raise_for_status()
        return parse_counters(response.text)
    except (requests.RequestException, ValueError):
        return None


def decode_tokens(records: Iterable[RequestRecord]) -> int:
    """Output tokens after each measured request's first: the decode steps in which a
    speculating server drafts (the first token comes from the prefill)."""
    return sum(max((r.output_tokens or 0) - 1, 0) for r in records if r.ok and not r.warmup)


NO_COUNTERS = (
    "no vllm:spec_decode_* counters on /metrics (a V0-engine server such as the published "
    "vLLM 0.9 fork exports none)"
)


def _not_available(reason: str, drafts: float | None = None) -> Acceptance:
    return Acceptance(
        available=False, source=AcceptanceSource.NOT_AVAILABLE, reason=reason, drafts=drafts
    )


def acceptance_from_deltas(
    before: Counters | None,
    after: Counters | None,
    *,
    speculative: bool = True,
    decode_tokens: int | None = None,
) -> Acceptance:
    """The acceptance block of the summary; values are None unless measured.

    ``speculative``: the arm runs a drafter (the baseline does not, so absent counters are
    no estimate there). ``decode_tokens``: output tokens the arm generated after each
    request's first during the window (decode steps, where a speculating server drafts);
    counters that stay put while it is above 0 are frozen, not a 0% acceptance."""
    if before is None and after is None:
        return _not_available("/metrics could not be scraped before and after the window")
    if not before and not after:
        if not speculative:
            return _not_available("the baseline arm does not speculate")
        return Acceptance(
            available=False,
            source=AcceptanceSource.ESTIMATED,
            reason=f"{NO_COUNTERS}: acceptance is the client-side estimate from tokens per chunk",
        )
    if before is None or after is None:
        return _not_available("/metrics could not be scraped before and after the window")
    needed = (DRAFTS, DRAFT_TOKENS, ACCEPTED)
    if any(name not in after for name in needed):
        missing = [n for n in needed if n not in after]
        return _not_available(f"counters missing on /metrics: {missing}")
    delta = {name: after[name] - before.get(name, 0.0) for name in needed}
    if delta[DRAFTS] <= 0 or delta[DRAFT_TOKENS] <= 0:
        if speculative and decode_tokens:
            return _not_available(
                f"vllm:spec_decode_* counters are exported but did not move while the arm "
                f"generated {decode_tokens} decode tokens: frozen counters (vllm-neuron 0.2.x "
                "registers them and never increments them), not a 0% acceptance",
                drafts=delta[DRAFTS],
            )
        return _not_available("no speculative steps during the measured window", delta[DRAFTS])
    # JSON round trips turn the position keys into strings: normalise to int.
    per_pos_after = {int(k): v for k, v in after.get(PER_POSITION, {}).items()}
    per_pos_before = {int(k): v for k, v in before.get(PER_POSITION, {}).items()}
    per_position = [
        (per_pos_after[pos] - per_pos_before.get(pos, 0.0)) / delta[DRAFTS]
        for pos in sorted(per_pos_after)
    ]
    return Acceptance(
        available=True,
        source=AcceptanceSource.MEASURED,
        acceptance_rate=delta[ACCEPTED] / delta[DRAFT_TOKENS],
        mean_acceptance_length=1.0 + delta[ACCEPTED] / delta[DRAFTS],
        per_position_rate=per_position or None,
        drafts=delta[DRAFTS],
        draft_tokens=delta[DRAFT_TOKENS],
        accepted_tokens=delta[ACCEPTED],
    )


# Per-request figures (vLLM --per-request-spec-decode-metrics).


def scope_acceptance(records: Iterable[RequestRecord]) -> RequestAcceptance:
    """The figures of the succeeded measured ``records`` of one scope, summed; the requests
    without figures are counted (``missing``), never filled in."""
    scope = [r for r in records if r.ok and not r.warmup]
    with_figures = [r for r in scope if r.has_spec_figures]
    histograms = [r.spec_histogram for r in with_figures]
    histogram: list[int] | None = None
    if with_figures and all(h is not None for h in histograms):
        histogram = [0] * max(len(h or ()) for h in histograms)
        for h in histograms:
            for j, count in enumerate(h or ()):
                histogram[j] += count
    return RequestAcceptance(
        requests=len(scope),
        with_figures=len(with_figures),
        spec_steps=sum(r.spec_steps or 0 for r in with_figures),
        draft_tokens=sum(r.spec_draft_tokens or 0 for r in with_figures),
        accepted_tokens=sum(r.spec_accepted_tokens or 0 for r in with_figures),
        histogram=histogram,
    )


def _largest_k(records: Iterable[RequestRecord]) -> int | None:
    """k the server drafts up to: its histograms' length - 1 (None: no histogram)."""
    lengths = [len(r.spec_histogram) for r in records if r.spec_histogram]
    return max(lengths) - 1 if lengths else None


def _step_room(record: RequestRecord) -> int:
    """The most verify steps a request can have made: every step emits at least one token
    after the prefill's first, so output tokens - 1 (max_tokens - 1 when unknown)."""
    tokens = record.output_tokens if record.ok and record.output_tokens else record.max_tokens
    return max(tokens - 1, 0)


def reconcile(
    overall: RequestAcceptance,
    counters: Acceptance,
    records: Sequence[RequestRecord],
    *,
    unfinished: int = 0,
    workers_lost: bool = False,
) -> AcceptanceReconciliation | None:
    """The per-request sums against the counter deltas of the same window (None unless the
    counters measured it). Equal when every request in the window carried figures (vLLM
    counts both in one place: AcceptanceReconciliation); otherwise the counters may exceed
    the sums by what the window's requests without figures can hold, and never fall short."""
    if counters.source is not AcceptanceSource.MEASURED:
        return None
    measured = [r for r in records if not r.warmup]
    without = [r for r in measured if not (r.ok and r.has_spec_figures)]
    failed = sum(not r.ok for r in without)
    missing = len(without) - failed
    longest = max((r.max_tokens for r in measured), default=0)
    allowance = None if workers_lost else (
        sum(_step_room(r) for r in without) + unfinished * max(longest - 1, 0)
    )  # fmt: skip
    d_steps = (counters.drafts or 0.0) - overall.spec_steps
    d_drafted = (counters.draft_tokens or 0.0) - overall.draft_tokens
    d_accepted = (counters.accepted_tokens or 0.0) - overall.accepted_tokens
    outside = len(without) + unfinished
    k = _largest_k(measured)
    sums = (
        f"{overall.spec_steps} verify steps, {overall.draft_tokens} drafted and "
        f"{overall.accepted_tokens} accepted tokens over {overall.with_figures} requests"
    )
    difference = (
        f"counters minus per-request sums: {d_steps:+g} steps, {d_drafted:+g} drafted and "
        f"{d_accepted:+g} accepted tokens"
    )
    elsewhere = (
        "something else reached the server during the window (another client, the guardrail "
        "probe), or its counters and its responses no longer count alike"
    )
    if outside == 0 and not workers_lost:
        agrees = d_steps == d_drafted == d_accepted == 0
        reason = (
            f"the counter deltas equal the per-request sums ({sums}): every request in the "
            "window carried figures, so the tolerance is 0"
            if agrees
            else f"{difference}, where every request in the window carried figures and the "
            f"tolerance is 0: {elsewhere}"
        )
    else:
        within = d_steps >= 0 and 0 <= d_accepted <= d_drafted
        within = within and (allowance is None or d_steps <= allowance)
        within = within and (k is None or d_drafted <= k * d_steps)
        room = "an unknown number of steps (a Locust worker was lost)" if allowance is None else (
            f"at most {allowance} steps"
        )  # fmt: skip
        per_step = "" if k is None else f", at most {k} drafts each"
        who = (
            f"the window's {outside} {'request' if outside == 1 else 'requests'} without "
            f"figures ({failed} failed, {missing} answered without figures, {unfinished} in "
            f"flight at its close) can hold: {room}{per_step}"
        )
        agrees = within
        reason = (
            f"{difference}, within what {who} (per-request sums: {sums})"
            if agrees
            else f"{difference}, beyond what {who}: {elsewhere}"
        )
    return AcceptanceReconciliation(
        counter_drafts=counters.drafts or 0.0,
        counter_draft_tokens=counters.draft_tokens or 0.0,
        counter_accepted_tokens=counters.accepted_tokens or 0.0,
        request_steps=overall.spec_steps,
        request_draft_tokens=overall.draft_tokens,
        request_accepted_tokens=overall.accepted_tokens,
        requests_without_figures=outside,
        allowance_steps=allowance,
        agrees=agrees,
        reason=reason,
    )


def request_acceptance(
    records: Sequence[RequestRecord],
    counters: Acceptance,
    *,
    unfinished: int = 0,
    workers_lost: bool = False,
) -> ArmRequestAcceptance | None:
    """The arm's per-request acceptance, overall and per prompt class (None: no measured
    request that succeeded carried figures). ``counters``: the arm's counter block over the
    same window (``acceptance_from_deltas``); ``unfinished``: measured requests in flight when
    the window closed; ``workers_lost``: a Locust worker was lost with its records."""
    measured = [r for r in records if not r.warmup and r.ok]
    if not any(r.has_spec_figures for r in measured):
        return None
    overall = scope_acceptance(measured)
    classes = sorted({r.prompt_class for r in measured})
    return ArmRequestAcceptance(
        overall=overall,
        by_class={
            name: scope_acceptance(r for r in measured if r.prompt_class == name)
            for name in classes
        },
        counters=counters,
        reconciliation=reconcile(
            overall, counters, records, unfinished=unfinished, workers_lost=workers_lost
        ),
    )


def best_acceptance(counters: Acceptance, per_request: ArmRequestAcceptance | None) -> Acceptance:
    """The arm's acceptance: the per-request sums when every measured request that succeeded
    carried figures (and the server drafted), else the counters' block (measured, estimated or
    not available) as it is: incomplete figures are never mixed with another source."""
    if per_request is None or not per_request.overall.complete:
        return counters
    overall = per_request.overall
    return Acceptance(
        available=True,
        source=AcceptanceSource.PER_REQUEST,
        acceptance_rate=overall.acceptance_rate,
        mean_acceptance_length=overall.mean_acceptance_length,
        per_position_rate=overall.per_position_rate,
        drafts=float(overall.spec_steps),
        draft_tokens=float(overall.draft_tokens),
        accepted_tokens=float(overall.accepted_tokens),
    )


def measured_class_acceptance(summary: RunSummary) -> dict[str, RequestAcceptance] | None:
    """The speculative arm's acceptance per prompt class from its requests' own figures,
    when every measured request of every class carried them (the arm's source is "per
    request"); None otherwise, and the caller probes the classes one at a time instead."""
    arm = summary.arms.get(Arm.SPECULATIVE)
    if arm is None or arm.acceptance.source is not AcceptanceSource.PER_REQUEST:
        return None
    found = arm.request_acceptance
    if found is None or not found.by_class:
        return None
    if any(block.missing or block.acceptance_rate is None for block in found.by_class.values()):
        return None
    return dict(found.by_class)
