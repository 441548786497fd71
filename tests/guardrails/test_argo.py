"""Argo Rollouts' analysis semantics (guardrails/argo.py) against the rules read in
argo-rollouts v1.9.1 analysis/analysis.go, utils/evaluate/evaluate.go and the defaults."""

from __future__ import annotations

from typing import Any

import pytest

from guardrails.analysis import LIVE_FAILURE, LIVE_SUCCESS
from guardrails.argo import (
    AnalysisRun,
    Condition,
    Metric,
    Phase,
    duration_s,
    judge,
)


def _metric(**fields: Any) -> Metric:
    body = {"name": "m", "interval": "60s", "successCondition": LIVE_SUCCESS,
            "failureCondition": LIVE_FAILURE, "provider": {"prometheus": {"query": "q"}},
            **fields}  # fmt: skip
    return Metric.from_template(body)


def _values(series: dict[float, float | Exception]) -> Any:
    def measure(metric: Metric, at: float) -> list[float]:
        value = series.get(at, 0.0)
        if isinstance(value, Exception):
            raise value
        return [value]

    return measure


def test_conditions_judge_like_evaluate_result() -> None:
    success, failure = Condition(LIVE_SUCCESS), Condition(LIVE_FAILURE)
    assert judge([0.0], success, failure) is Phase.SUCCESSFUL
    assert judge([2.0], success, failure) is Phase.FAILED
    assert judge([], success, failure) is Phase.INCONCLUSIVE  # neither holds
    assert judge([1.0], success, None) is Phase.FAILED  # failure = not success
    assert judge([1.0], None, failure) is Phase.FAILED
    assert judge([0.0], None, failure) is Phase.SUCCESSFUL
    assert judge([0.0], None, None) is Phase.SUCCESSFUL
    assert judge([], Condition("result[0] == 0"), None) is Phase.ERROR  # index past the end


def test_a_condition_outside_the_parsed_language_is_refused() -> None:
    with pytest.raises(ValueError, match=r"not supported|cannot read"):
        Condition("all(result, {# > 0})")
    with pytest.raises(ValueError):
        Condition("len(result) ==")


def test_durations() -> None:
    assert duration_s("90s") == 90 and duration_s("1m30s") == 90 and duration_s("2h") == 7200
    with pytest.raises(ValueError):
        duration_s("ninety")


def test_failures_must_exceed_the_limit() -> None:
    """failureLimit 1: the first failure is tolerated, the second fails the run."""
    run = AnalysisRun([_metric(failureLimit=1)], 0.0)
    outcome = run.run(_values({60.0: 1, 240.0: 1}), 600.0)
    assert outcome.phase is Phase.FAILED and outcome.at_s == 240.0
    assert outcome.message == "failed (2) > failureLimit (1)"
    assert outcome.aborts


def test_failure_limit_zero_fails_at_the_first_failure_and_counts_for_life() -> None:
    run = AnalysisRun([_metric(failureLimit=0)], 0.0)
    assert run.run(_values({3600.0: 1}), 7200.0).at_s == 3600.0
    # Counted over the run's life: two failures hours apart exceed a limit of 1.
    run = AnalysisRun([_metric(failureLimit=1)], 0.0)
    outcome = run.run(_values({600.0: 1, 7200.0: 1}), 9000.0)
    assert outcome.phase is Phase.FAILED and outcome.at_s == 7200.0


def test_initial_delay_and_interval_set_the_measurement_times() -> None:
    run = AnalysisRun([_metric(initialDelay="300s")], 100.0)
    outcome = run.run(_values({}), 700.0)
    assert outcome.phase is Phase.RUNNING
    assert [m.at_s for m in outcome.measurements["m"]] == [400.0, 460.0, 520.0, 580.0, 640.0, 700.0]


def test_errors_retry_after_ten_seconds_and_exceeding_the_limit_is_an_error() -> None:
    error = ConnectionError("no credentials")
    series: dict[float, float | Exception] = {t: error for t in (0.0, 10.0, 20.0, 30.0)}
    run = AnalysisRun([_metric(consecutiveErrorLimit=2)], 0.0)
    outcome = run.run(_values(series), 600.0)
    assert outcome.phase is Phase.ERROR and outcome.at_s == 20.0  # 3 > 2
    assert [m.at_s for m in outcome.measurements["m"]] == [0.0, 10.0, 20.0]
    assert outcome.aborts  # Error aborts the rollout as Failed does


def test_a_success_resets_the_consecutive_errors() -> None:
    error = ConnectionError("unreachable")
    series: dict[float, float | Exception] = {0.0: error, 10.0: error}
    run = AnalysisRun([_metric(consecutiveErrorLimit=2)], 0.0)
    outcome = run.run(_values(series), 600.0)
    assert outcome.phase is Phase.RUNNING
    assert [m.at_s for m in outcome.measurements["m"]][:4] == [0.0, 10.0, 20.0, 80.0]


def test_the_default_error_limit_is_four() -> None:
    assert _metric().consecutive_error_limit == 4


def test_count_ends_a_metric_successful_and_consecutive_success_ends_it_early() -> None:
    run = AnalysisRun([_metric(count=3)], 0.0)
    assert run.run(_values({}), 600.0).phase is Phase.SUCCESSFUL
    # The start probe's shape: up to 3 attempts, done at the first success.
    probe = {"name": "probe", "interval": "300s", "count": 3, "consecutiveSuccessLimit": 1,
             "failureLimit": 2, "provider": {"job": {}}}  # fmt: skip
    no_interval = Metric.from_template({"name": "once", "provider": {"job": {}}})
    assert no_interval.count == 1  # EffectiveCount: neither count nor interval is one
    assert Metric.from_template(probe).count == 3


def test_inconclusive_pauses_rather_than_aborts() -> None:
    run = AnalysisRun([_metric()], 0.0)

    def empty(metric: Metric, at: float) -> list[float]:
        return []

    outcome = run.run(empty, 600.0)
    assert outcome.phase is Phase.INCONCLUSIVE and not outcome.aborts
