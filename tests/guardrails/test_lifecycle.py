"""The canary's life through Prometheus' rule engine (promtool) and Argo's semantics
(guardrails/lifecycle.py): healthy timelines never abort, faults abort within two windows,
query errors end as Argo documents, and the analysis as rendered before this shape aborted a
first deploy at its start."""

from __future__ import annotations

import dataclasses

import pytest

from charts.rollout import analysis_template, rollout
from experiment import build_config
from guardrails.argo import Phase
from guardrails.lifecycle import Result, Timeline, as_rendered_before, evaluate, timelines

pytestmark = pytest.mark.process  # runs promtool

URL = "https://aps-workspaces.us-east-2.amazonaws.com/workspaces/ws-0123456789/"
CONFIG = build_config({"experiment.serving.profile": "new-deployment"})
TEMPLATE = analysis_template(CONFIG, URL)
TIMELINES = {timeline.name: timeline for timeline in timelines(CONFIG)}


def _run(timeline: Timeline) -> Result:
    return evaluate(CONFIG, timeline, TEMPLATE)


def test_the_rendered_rollout_starts_its_analysis_after_the_canary_and_the_probe() -> None:
    """Argo creates the background run only once the current step reaches startingStep
    (utils/replicaset/canary.go BeforeStartingStep): every step before it, the canary's
    scale-up (done when its pods are available) and the start probe, has completed."""
    canary = rollout(CONFIG)["spec"]["strategy"]["canary"]
    before = canary["steps"][: canary["analysis"]["startingStep"]]
    assert [next(iter(step)) for step in before] == ["setCanaryScale", "analysis"]
    # The timelines start the analysis after the canary is ready and the probe ran.
    first = TIMELINES["first deploy"]
    assert first.analysis_start_s > 2 * 3600


@pytest.mark.parametrize("name", [n for n, t in TIMELINES.items() if t.kind == "healthy"])
def test_a_healthy_timeline_never_aborts(name: str) -> None:
    result = _run(TIMELINES[name])
    assert not result.aborted, result.as_record()


@pytest.mark.parametrize("name", [n for n, t in TIMELINES.items() if t.kind == "fault"])
def test_a_fault_aborts_within_two_windows(name: str) -> None:
    result = _run(TIMELINES[name])
    assert result.aborted and result.outcome.phase is Phase.FAILED, result.as_record()
    windows = result.windows_to_abort
    assert windows is not None and 0 < windows <= 2, result.as_record()


def test_queries_that_cannot_be_signed_error_the_run_and_abort() -> None:
    """Each error is retried after 10 s; consecutive errors past consecutiveErrorLimit make
    the metric Error, and an Error run aborts the Rollout as a Failed one does."""
    result = _run(TIMELINES["no credentials"])
    limit = CONFIG.guardrails.live.consecutive_error_limit
    assert result.outcome.phase is Phase.ERROR and result.aborted
    assert (
        result.outcome.message
        == f"consecutiveErrors ({limit + 1}) > consecutiveErrorLimit ({limit})"
    )
    start = TIMELINES["no credentials"].analysis_start_s
    delay = CONFIG.guardrails.live.window_s  # the metrics' initialDelay
    assert result.outcome.at_s == start + delay + 10 * limit


def test_a_short_outage_of_the_workspace_does_not_abort() -> None:
    assert not _run(TIMELINES["workspace unreachable 30 s"]).aborted


def test_the_analysis_as_rendered_before_aborted_a_first_deploy_at_its_start() -> None:
    """Raw alert expressions (no ``for``) measured from the Rollout's first step: the
    speculative route falls back while its pod precompiles, and the run fails at once."""
    first = dataclasses.replace(TIMELINES["first deploy"], analysis_start_s=0.0)
    for template in (TEMPLATE, as_rendered_before(TEMPLATE, CONFIG)):
        result = evaluate(CONFIG, first, template)
        assert result.aborted, "a first deploy analysed from its first step must abort"
        assert result.outcome.at_s is not None and result.outcome.at_s < 3600
