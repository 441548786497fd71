"""The guardrails drill on real parts (bench/guardrails_drill.py): two real vLLM servers, the
real Envoy gateway and a real Prometheus evaluating the rendered rule file. A healthy tiered
run fires nothing; a drifted mix (open-ended prompts with the structured header) fires the
acceptance floor; a killed speculative server fires the missing-data rule; each fault within
two windows of its start. ``python -m bench.figures measure guardrails-drill`` records the
same drill with three healthy runs and the concurrency sweep."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.guardrails_drill import FLOOR, WINDOW_S, DrillResult, run_drill

pytestmark = [pytest.mark.integration, pytest.mark.process, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def drill(tmp_path_factory: pytest.TempPathFactory) -> DrillResult:
    # Two windows per analysed phase (the record takes three): the suite's time budget.
    short = 2 * WINDOW_S
    result = run_drill(Path(tmp_path_factory.mktemp("drill")), healthy_s=short, late_start_s=short)
    print(f"drill: {result}")
    return result


def test_a_healthy_tiered_run_fires_nothing(drill: DrillResult) -> None:
    assert drill.healthy_requests[0] > 0
    assert drill.failed_requests == 0
    assert drill.healthy_alerts == [[]]
    assert drill.acceptance_healthy is not None and drill.acceptance_healthy > FLOOR


def test_a_drifted_mix_fires_the_acceptance_floor_within_two_windows(drill: DrillResult) -> None:
    seconds = drill.time_to_fire_s["acceptance_below_floor"]
    assert seconds is not None and seconds <= 2 * WINDOW_S, drill
    assert drill.acceptance_drifted is not None and drill.acceptance_drifted < FLOOR


def test_a_killed_speculative_server_fires_missing_metrics_within_two_windows(
    drill: DrillResult,
) -> None:
    seconds = drill.time_to_fire_s["arm_metrics_missing"]
    assert seconds is not None and seconds <= 2 * WINDOW_S, drill


def test_the_clusters_rollback_analysis_holds_on_healthy_runs(drill: DrillResult) -> None:
    """The rendered analysis, run against the local Prometheus with Argo's semantics."""
    assert drill.healthy_analysis and all("no abort" in text for text in drill.healthy_analysis)


@pytest.mark.parametrize("fault", ["acceptance_below_floor", "arm_metrics_missing"])
def test_the_clusters_rollback_analysis_aborts_each_fault_within_two_windows(
    drill: DrillResult, fault: str
) -> None:
    seconds = drill.time_to_abort_s[fault]
    assert seconds is not None and seconds <= 2 * WINDOW_S, drill


def test_a_speculative_server_started_late_does_not_abort(drill: DrillResult) -> None:
    """Restarted under traffic after the kill (its route fell back meanwhile): the analysis,
    started once it is available as the Rollout's is, takes its measurements and holds."""
    assert "no abort" in drill.late_start_analysis, drill.late_start_analysis
