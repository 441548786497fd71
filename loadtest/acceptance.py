"""Speculative acceptance from vLLM's Prometheus counters, scraped around the measured window.

vLLM v1 exports ``vllm:spec_decode_num_drafts_total``, ``..._num_draft_tokens_total``,
``..._num_accepted_tokens_total`` and ``..._num_accepted_tokens_per_pos_total{position}``,
one series per engine. We sum over every label except ``position``, ignore the
``*_created`` series, and take after-minus-before deltas:

- acceptance rate = d(accepted) / d(draft_tokens)
- mean acceptance length = 1 + d(accepted) / d(drafts)   (tokens per target step)
- per-position rate i = d(per_pos[i]) / d(drafts)

Where the figure comes from is explicit (``Acceptance.source``), because there are three
kinds of server:

- counters that move (vLLM V1, vllm-neuron 1.x): **measured**;
- no ``vllm:spec_decode_*`` counters at all (the published vLLM 0.9 fork, V0 engine):
  **estimated**, the client-side estimate from tokens per chunk (loadtest.stats);
- counters registered but frozen while the arm generated tokens (vllm-neuron 0.2.x:
  vllm-project/vllm-neuron:vllm_neuron/worker/neuronx_distributed_model_runner.py never sets
  the draft token ids the scheduler's statistics read): **not available**, since a frozen 0
  is not a 0% acceptance. So is an unreadable /metrics or a window without decode steps.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import requests
from prometheus_client.parser import text_string_to_metric_families

from guardrails import vllm_metrics
from loadtest.records import RequestRecord
from loadtest.results import Acceptance, AcceptanceSource

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
