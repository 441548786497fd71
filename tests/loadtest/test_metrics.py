"""Metrics from raw records: definitions, exact percentiles, goodput, speedups, mismatches."""

from __future__ import annotations

import numpy as np
import pytest

from experiment import build_config
from loadtest.lossless import lossless_check
from loadtest.metrics import arm_metrics, compare_arms, describe, metric_block
from loadtest.records import RequestRecord

SLO = {"ttft_ms": 100.0, "tpot_ms": 50.0, "e2e_ms": 1000.0}


def make(
    index: int,
    *,
    ttft: float,
    gaps: list[float],
    tokens: list[int],
    start: float = 0.0,
    cls: str = "structured",
    error: str | None = None,
    arm: str = "baseline",
    texts: list[str] | None = None,
    max_tokens: int | None = None,
) -> RequestRecord:
    times = [ttft]
    for gap in gaps:
        times.append(times[-1] + gap)
    return RequestRecord(
        arm=arm,
        index=index,
        prompt_id=f"p{index}",
        prompt_class=cls,
        start=start,
        ttft_s=ttft,
        e2e_s=times[-1],
        chunk_times=times,
        chunk_tokens=tokens,
        chunk_texts=texts or [f"t{i}" for i in range(len(tokens))],
        output_tokens=sum(tokens),
        max_tokens=max_tokens or sum(tokens),
        error=error,
    )


def test_describe_uses_exact_percentiles() -> None:
    values = [float(v) for v in range(1, 1001)]
    stats = describe(values)
    assert stats.p99 == pytest.approx(np.percentile(values, 99)) == pytest.approx(990.01)
    assert stats.mean == 500.5 and stats.count == 1000
    assert describe([]).p50 is None


def test_block_definitions() -> None:
    # 1 + 4 + 3 tokens; gaps 40 ms (4 tokens) and 30 ms (3 tokens)
    record = make(0, ttft=0.05, gaps=[0.04, 0.03], tokens=[1, 4, 3])
    block = metric_block([record], window=0.12, slo=SLO)
    assert block.ttft_ms.mean == pytest.approx(50.0)
    assert block.itl_ms.count == 7
    assert block.itl_ms.p50 == pytest.approx(10.0)  # 4 x 10 ms, 3 x 10 ms
    assert block.chunk_gap_ms.mean == pytest.approx(35.0)
    assert block.tpot_ms.mean == pytest.approx(70.0 / 7)
    assert block.e2e_ms.mean == pytest.approx(120.0)
    assert block.tokens_per_chunk.mean == pytest.approx(8 / 3)
    assert block.output_tokens_per_s.mean == pytest.approx(8 / 0.12)
    assert block.output_throughput_tok_s == pytest.approx(8 / 0.12)
    assert block.goodput_rps == pytest.approx(1 / 0.12)


def test_failures_slo_and_length_mismatch() -> None:
    records = [
        make(0, ttft=0.05, gaps=[0.01], tokens=[1, 1]),
        make(1, ttft=0.5, gaps=[0.01], tokens=[1, 1]),  # misses the TTFT SLO
        make(2, ttft=0.05, gaps=[0.01], tokens=[1, 1], max_tokens=4),  # short output
        make(3, ttft=0.05, gaps=[], tokens=[1], error="http_5xx"),
        make(4, ttft=0.05, gaps=[], tokens=[1], error="timeout"),
        make(5, ttft=0.05, gaps=[], tokens=[1], error="timeout"),
    ]
    result = arm_metrics(records, SLO)
    overall = result.overall
    assert overall.failures_by_reason == {"http_5xx": 1, "timeout": 2}
    assert (overall.succeeded, overall.failed) == (3, 3)
    assert overall.slo_met == 2
    assert overall.length_mismatches == 1
    assert [m.model_dump() for m in result.length_mismatch_examples] == [
        {"index": 2, "prompt_id": "p2", "requested": 4, "got": 2}
    ]


def test_warmup_is_excluded_and_classes_are_split() -> None:
    records = [
        make(0, ttft=0.01, gaps=[0.01], tokens=[1, 1], cls="structured"),
        make(1, ttft=0.02, gaps=[0.01], tokens=[1, 1], cls="open_ended"),
        make(-1, ttft=9.0, gaps=[0.01], tokens=[1, 1]),
    ]
    records[2].warmup = True
    result = arm_metrics(records, SLO)
    assert result.warmup_excluded == 1
    assert result.overall.ttft_ms.max == pytest.approx(20.0)
    assert set(result.by_class) == {"structured", "open_ended"}


def test_speedups_point_the_right_way() -> None:
    base = arm_metrics(
        [make(i, ttft=0.05, gaps=[0.02] * 7, tokens=[1] * 8, start=i) for i in range(4)], SLO
    )
    sd = arm_metrics(
        [make(i, ttft=0.05, gaps=[0.04], tokens=[4, 4], start=i / 2) for i in range(4)], SLO
    )
    speedup = compare_arms({"baseline": base, "speculative": sd}).overall
    assert speedup.e2e_ms.mean == pytest.approx(0.19 / 0.09)  # > 1: SD faster
    assert speedup.itl_ms.mean == pytest.approx(2.0)
    assert speedup.output_throughput_tok_s > 1


def test_lossless_reports_first_differing_token() -> None:
    base = [
        make(0, ttft=0.1, gaps=[0.01] * 4, tokens=[1] * 5, texts=["a", " b", " c", " d", " e"]),
        make(1, ttft=0.1, gaps=[0.01], tokens=[1, 1], texts=["x", "y"]),
    ]
    sd = [
        make(0, ttft=0.1, gaps=[0.01], tokens=[2, 3], texts=["a b", " c Z e"], arm="speculative"),
        make(1, ttft=0.1, gaps=[], tokens=[2], texts=["xy"], arm="speculative"),
    ]
    result = lossless_check(base, sd, temperature=0.0)
    assert result.prompts_compared == 2 and result.exact_matches == 1
    assert result.exact_match_rate == 0.5
    (mismatch,) = result.mismatches
    assert mismatch.prompt_id == "p0"
    assert mismatch.first_diff_token == 3  # a, b, c match; the 4th token differs
    assert mismatch.baseline_token == " d"
    # The tolerance figures: 3 of p0's 5 tokens agree before the divergence, p1's 2 all do.
    assert mismatch.compared_tokens == 5 and mismatch.agreement == pytest.approx(3 / 5)
    assert result.tokens_compared == 7
    assert result.prefix_agreement_rate == pytest.approx((3 + 2) / 7)
    assert lossless_check(base, sd, temperature=0.7).applicable is False


def test_prefix_agreement_weighs_where_outputs_diverge() -> None:
    """One late divergence barely moves the agreement (the Neuron tolerance), an early one
    does; an output that is only a prefix of the other does not count as agreeing in full."""

    def pair(index: int, base_texts: list[str], sd_texts: list[str]):
        base = make(
            index,
            ttft=0.1,
            gaps=[0.01] * (len(base_texts) - 1),
            tokens=[1] * len(base_texts),
            texts=base_texts,
        )
        sd = make(
            index,
            ttft=0.1,
            gaps=[0.01] * (len(sd_texts) - 1),
            tokens=[1] * len(sd_texts),
            texts=sd_texts,
            arm="speculative",
        )
        return base, sd

    same = [f" w{i}" for i in range(100)]
    late = [*same[:99], " other"]
    early = [" other", *same[1:]]
    truncated = same[:60]
    cases = [
        pair(0, same, same),
        pair(1, same, late),
        pair(2, same, early),
        pair(3, same, truncated),
    ]
    result = lossless_check([b for b, _ in cases], [s for _, s in cases], temperature=0.0)
    assert result.exact_matches == 1 and result.exact_match_rate == 0.25
    by_prompt = {m.prompt_id: m for m in result.mismatches}
    assert by_prompt["p1"].first_diff_token == 99 and by_prompt["p1"].agreement == 0.99
    assert by_prompt["p2"].first_diff_token == 0 and by_prompt["p2"].agreement == 0.0
    assert by_prompt["p3"].first_diff_token == 60 and by_prompt["p3"].agreement == 0.6
    assert result.tokens_compared == 400
    assert result.prefix_agreement_rate == pytest.approx((100 + 99 + 0 + 60) / 400)
    # Only the late divergence: within the default tolerance, though not an exact match.
    only_late = lossless_check([cases[1][0]], [cases[1][1]], temperature=0.0)
    assert only_late.exact_match_rate == 0.0 and only_late.prefix_agreement_rate == 0.99
    tolerance = build_config({}).guardrails.lossless_min_prefix_agreement
    assert only_late.prefix_agreement_rate >= tolerance > result.prefix_agreement_rate


def test_burst_arrivals_are_measured() -> None:
    smooth = make(0, ttft=0.05, gaps=[0.01] * 9, tokens=[1] * 10)
    burst = make(1, ttft=0.05, gaps=[0.00001] * 9, tokens=[1] * 10)
    assert metric_block([smooth], 1.0, SLO).burst_gap_fraction == 0.0
    assert metric_block([smooth, burst], 1.0, SLO).burst_gap_fraction == 0.5


def test_baseline_self_consistency_counts_only_prompts_that_ran_more_than_once() -> None:
    def run(index: int, prompt: str, text: str, error: str | None = None) -> RequestRecord:
        record = make(index, ttft=0.1, gaps=[], tokens=[1], texts=[text], error=error)
        record.prompt_id = prompt
        return record

    records = [
        run(0, "same", "a"),
        run(1, "same", "a"),  # repeated, identical: consistent
        run(2, "differs", "a"),
        run(3, "differs", "b"),  # repeated, different: not
        run(4, "once", "a"),  # run once: says nothing
        run(5, "failed-repeat", "a"),
        run(6, "failed-repeat", "b", error="timeout"),  # the failure is not a second run
    ]
    result = lossless_check(records, records, temperature=0.0)
    assert result.baseline_self_consistency == 0.5
    assert lossless_check(records[4:6], records[4:6], 0.0).baseline_self_consistency is None
