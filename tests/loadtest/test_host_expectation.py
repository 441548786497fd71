"""What a run's step costs explain, and what a calibration before the load predicts,
against streams whose costs are known by construction."""

from __future__ import annotations

import dataclasses

import pytest

from experiment.config import StatisticsConfig
from loadtest.expected import calibration_costs, host_expectation, predicted_speedup
from loadtest.records import RequestRecord
from loadtest.render.headline import expectation_text
from loadtest.results import (
    AcceptanceSource,
    ClassAcceptance,
    HostExpectation,
    Interval,
    StepCosts,
)
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


def _expect(tau: float, calibration: dict[str, StepCosts] | None = None) -> HostExpectation:
    baseline, speculative = _records()
    (expectation,) = host_expectation(
        baseline,
        speculative,
        {"structured": _acceptance(tau)},
        {"structured": _measured(baseline, speculative)},
        settings=SETTINGS,
        calibration=calibration,
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
    text = expectation_text(expectation)
    assert "explained by a step ratio of 1.50" in text and "within its interval" in text
    assert "no prediction before the load" in text


def test_counters_that_overstate_acceptance_are_flagged() -> None:
    # tau = 5 from the counters: 60 + 10 x 30 / 5 = 120 ms, a 2.08x prediction against the
    # streams' 1.39x: the run must say so rather than print both quietly.
    expectation = _expect(5.0)
    assert expectation.predicted_e2e_speedup.estimate == pytest.approx(250 / 120, rel=0.02)
    assert expectation.agrees is False
    assert "OUTSIDE its interval" in expectation_text(expectation)


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


def test_the_calibration_reads_step_costs_and_tau_off_its_own_requests() -> None:
    baseline, speculative = _records(pairs=2)
    costs = calibration_costs(baseline, speculative, TAU)
    assert costs is not None
    assert costs.baseline_step_ms == pytest.approx(1000 * BASE_STEP_S, rel=0.06)
    assert costs.speculative_step_ms == pytest.approx(1000 * SD_STEP_S, rel=0.06)
    assert costs.tokens_per_step == TAU and costs.output_tokens == 11
    assert costs.baseline_ttft_ms == pytest.approx(50.0)
    # E2E_base = 50 + 10 x 20 = 250 ms; E2E_SD = 60 + 10 x 30 / 2.5 = 180 ms.
    assert predicted_speedup(costs) == pytest.approx(250 / 180, rel=0.06)
    assert calibration_costs(baseline, speculative, None) is None  # no counters: no tau
    failed = [dataclasses.replace(r, error="http_5xx") for r in baseline]
    assert calibration_costs(failed, speculative, TAU) is None


def _calibrated(step_ratio: float) -> StepCosts:
    return StepCosts(
        baseline_step_ms=20.0,
        speculative_step_ms=20.0 * step_ratio,
        tokens_per_step=TAU,
        baseline_ttft_ms=50.0,
        speculative_ttft_ms=60.0,
        output_tokens=11,
    )


def test_a_prediction_before_the_load_holds_or_misses_against_the_measured_interval() -> None:
    held = _expect(TAU, {"structured": _calibrated(1.5)})
    assert held.predicted_before_load == pytest.approx(250 / 180)
    assert held.prediction_holds is True
    text = expectation_text(held)
    assert "predicted before the load 1.39x (calibration: step ratio 1.50" in text
    assert "inside the measured interval" in text
    # A host whose calibration said a speculative step costs 3 plain steps: 60 + 10 x 60 /
    # 2.5 = 300 ms, a 0.83x prediction against the measured 1.39x: a miss, and said so.
    missed = _expect(TAU, {"structured": _calibrated(3.0)})
    assert missed.predicted_before_load == pytest.approx(250 / 300)
    assert missed.prediction_holds is False
    assert "MISSED: outside the measured interval" in expectation_text(missed)
    data = missed.model_dump(mode="json")
    data["prediction_holds"] = True  # derived, never trusted from input
    assert HostExpectation.model_validate(data).prediction_holds is False
