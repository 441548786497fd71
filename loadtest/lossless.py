"""Lossless check: at temperature 0 speculative decoding must not change the output.

For each prompt, the first successful measured output of the SD arm is compared with the
baseline's. A mismatch reports the first differing token: its index is counted on the
baseline's stream, whose chunks carry one token each without speculation (exact then; at
chunk granularity otherwise), with both arms' text around it. Repeats of the same prompt
within the baseline arm are compared too: if the baseline does not even agree with itself
(batching non-determinism), SD mismatches are not evidence of a lossy implementation.

Next to the all-or-nothing exact match, each mismatch records where the outputs first diverge
and the share of the output before it, and the run gets a prefix agreement rate (tokens
before each first divergence / tokens compared). Greedy decoding on Neuron is not bit-exact:
vllm-neuron's own DFlash bench notes report greedy outputs diverging between two baseline
configurations that differ only in KV-cache settings, so the guardrail alarm compares the
agreement with a configured tolerance (guardrails.lossless_min_prefix_agreement) instead of
firing on the first mismatch. The local CPU run is bit-exact and keeps exact match as its bar.
"""

from __future__ import annotations

from loadtest.records import RequestRecord
from loadtest.results import Lossless, LosslessMismatch

CONTEXT_CHARS = 40


def _first_ok(records: list[RequestRecord]) -> dict[str, RequestRecord]:
    firsts: dict[str, RequestRecord] = {}
    for record in sorted(records, key=lambda r: r.index):
        if record.ok and not record.warmup and record.prompt_id not in firsts:
            firsts[record.prompt_id] = record
    return firsts


def _token_at(record: RequestRecord, char_offset: int) -> tuple[int, str]:
    """(token index, chunk text) of the chunk holding ``char_offset``."""
    position = 0
    tokens_before = 0
    for text, tokens in zip(record.chunk_texts, record.chunk_tokens, strict=False):
        if position + len(text) > char_offset:
            return tokens_before, text
        position += len(text)
        tokens_before += tokens
    return tokens_before, ""


def output_tokens(record: RequestRecord) -> int:
    """The record's output tokens: the server's usage, else the tokens its chunks carried."""
    return record.output_tokens if record.output_tokens is not None else sum(record.chunk_tokens)


def compared_tokens(baseline: RequestRecord, speculative: RequestRecord) -> int:
    """What one prompt's comparison covers: the longer output, so an output that is only a
    prefix of the other does not count as agreeing in full."""
    return max(output_tokens(baseline), output_tokens(speculative))


def first_difference(baseline: RequestRecord, speculative: RequestRecord) -> LosslessMismatch:
    a, b = baseline.text, speculative.text
    offset = next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )
    token_index, baseline_token = _token_at(baseline, offset)
    _, speculative_token = _token_at(speculative, offset)
    compared = compared_tokens(baseline, speculative)
    return LosslessMismatch(
        prompt_id=baseline.prompt_id,
        prompt_class=baseline.prompt_class,
        first_diff_char=offset,
        first_diff_token=token_index,
        compared_tokens=compared,
        agreement=min(token_index / compared, 1.0) if compared else None,
        baseline_token=baseline_token,
        speculative_token=speculative_token,
        baseline_context=a[max(0, offset - CONTEXT_CHARS) : offset + CONTEXT_CHARS],
        speculative_context=b[max(0, offset - CONTEXT_CHARS) : offset + CONTEXT_CHARS],
    )


def _self_consistency(records: list[RequestRecord]) -> float | None:
    """Share of the prompts run more than once whose outputs were all identical."""
    texts: dict[str, set[str]] = {}
    runs: dict[str, int] = {}
    for record in records:
        if record.ok and not record.warmup:
            texts.setdefault(record.prompt_id, set()).add(record.text)
            runs[record.prompt_id] = runs.get(record.prompt_id, 0) + 1
    repeated = [variants for pid, variants in texts.items() if runs[pid] > 1]
    if not repeated:
        return None
    return sum(1 for variants in repeated if len(variants) == 1) / len(repeated)


def lossless_check(
    baseline: list[RequestRecord], speculative: list[RequestRecord], temperature: float
) -> Lossless:
    base, sd = _first_ok(baseline), _first_ok(speculative)
    common = sorted(set(base) & set(sd))
    mismatches = [first_difference(base[p], sd[p]) for p in common if base[p].text != sd[p].text]
    tokens = sum(compared_tokens(base[p], sd[p]) for p in common)
    # A mismatch agrees up to its first divergence; an exact match over all its tokens.
    lost = sum(m.compared_tokens - min(m.first_diff_token, m.compared_tokens) for m in mismatches)
    return Lossless(
        applicable=temperature == 0.0,
        note=None
        if temperature == 0.0
        else f"temperature {temperature} > 0: outputs may differ legitimately",
        prompts_compared=len(common),
        exact_matches=len(common) - len(mismatches),
        exact_match_rate=(len(common) - len(mismatches)) / len(common) if common else None,
        tokens_compared=tokens,
        prefix_agreement_rate=(tokens - lost) / tokens if tokens else None,
        baseline_self_consistency=_self_consistency(baseline),
        mismatches=mismatches,
    )
