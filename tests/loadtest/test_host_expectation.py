"""What a run's step costs predict, against streams whose costs are known by construction."""

from __future__ import annotations

import pytest

from experiment.config import StatisticsConfig
from loadtest.expected import host_expectation
from loadtest.records import RequestRecord
from loadtest.render.headline import expectation_text
from loadtest.results import AcceptanceSource, ClassAcceptance, HostExpectation, Interval
from loadtest.stats import pair_records, scope_statistics

SETTINGS = StatisticsConfig(resamples=2000)
K = 4
# Baseline: first token at 50 ms, then one token every 20 ms (10 more tokens).
# Speculative: first token at 60 ms, then a 30 ms target step carrying 2 or 3 tokens,
# alternately: tau = 2.5, four steps for the 10 tokens after the first.
BASE_STEP_S, SD_STEP_S, TAU = 0.020, 0.030, 2.5


def _stream(arm: str, index: int, ttft: float, step: float, tokens: list[int], jitter: float):
    times, now = [], ttft
    for _ in tokens:
        times.append(now)
        # Each request a little slower or faster, so the resamples differ (the mean holds).
        now += step * (1 + jitter)
    return RequestRecord(
        arm=arm,
        index=index,
        prompt_id=f"p{index}",
        prompt_class="structured",
        max_tokens=sum(tokens),
        ttft_s=ttft,
        e2e_s=times[-1],
        chunk_times=times,
        chunk_tokens=tokens,
        output_tokens=sum(tokens),
    )


def _records(pairs: int = 16) -> tuple[list[RequestRecord], list[RequestRecord]]:
    baseline, speculative = [], []
    for i in range(pairs):
        jitter = 0.05 * ((i % 3) - 1)
        baseline.append(_stream("baseline", i, 0.050, BASE_STEP_S, [1] * 11, jitter))
        speculative.append(_stream("speculative", i, 0.060, SD_STEP_S, [1, 2, 3, 2, 3], jitter))
    return baseline, speculative


def _acceptance(tau: float) -> ClassAcceptance:
    return ClassAcceptance(
        prompts=8,
        failed=0,
        available=True,
        source=AcceptanceSource.MEASURED,
        acceptance_rate=(tau - 1) / K,
        mean_acceptance_length=tau,
    )


def _measured(baseline: list[RequestRecord], speculative: list[RequestRecord]) -> Interval:
    scope = scope_statistics(
        pair_records(baseline, speculative), num_speculative_tokens=K, settings=SETTINGS
    )
    return scope.speedup["e2e_ms"]["mean"]


def _expect(tau: float) -> HostExpectation:
    baseline, speculative = _records()
    (expectation,) = host_expectation(
        baseline,
        speculative,
        {"structured": _acceptance(tau)},
        {"structured": _measured(baseline, speculative)},
        settings=SETTINGS,
    )
    return expectation


def test_step_costs_are_read_off_the_streams() -> None:
    costs = _expect(TAU).costs
    assert costs.baseline_step_ms == pytest.approx(1000 * BASE_STEP_S, rel=0.02)
    assert costs.speculative_step_ms == pytest.approx(1000 * SD_STEP_S, rel=0.02)
    assert costs.draft_cost_per_step_ms == pytest.approx(10.0, rel=0.05)
    assert costs.step_ratio == pytest.approx(1.5, rel=0.03)
    assert costs.output_tokens == 11
    assert costs.baseline_ttft_ms == pytest.approx(50.0)


def test_counters_that_match_the_streams_predict_the_measured_speedup() -> None:
    expectation = _expect(TAU)
    # E2E_base = 50 + 10 x 20 = 250 ms; E2E_SD = 60 + 10 x 30 / 2.5 = 180 ms.
    assert expectation.predicted_e2e_speedup.estimate == pytest.approx(250 / 180, rel=0.02)
    assert expectation.agrees is True
    assert "agrees" in expectation_text(expectation)


def test_counters_that_overstate_acceptance_are_flagged() -> None:
    # tau = 5 from the counters: 60 + 10 x 30 / 5 = 120 ms, a 2.08x prediction against the
    # streams' 1.39x: the run must say so rather than print both quietly.
    expectation = _expect(5.0)
    assert expectation.predicted_e2e_speedup.estimate == pytest.approx(250 / 120, rel=0.02)
    assert expectation.agrees is False
    assert "DISAGREES" in expectation_text(expectation)


def test_a_class_without_probed_acceptance_is_left_out() -> None:
    baseline, speculative = _records()
    assert (
        host_expectation(
            baseline,
            speculative,
            {},
            {"structured": _measured(baseline, speculative)},
            settings=SETTINGS,
        )
        == []
    )


def test_derived_fields_survive_a_round_trip_and_are_never_trusted_from_input() -> None:
    expectation = _expect(TAU)
    data = expectation.model_dump(mode="json")
    data["agrees"] = False
    data["costs"]["step_ratio"] = 9.0
    again = HostExpectation.model_validate(data)
    assert again.agrees is True
    assert again.costs.step_ratio == pytest.approx(expectation.costs.step_ratio)
