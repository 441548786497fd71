"""The canary's life through Prometheus' rule engine (promtool) and Argo's semantics
(guardrails/lifecycle.py): healthy timelines never abort, faults abort within two windows,
query errors end as Argo documents, and the analysis as rendered before this shape aborted a
first deploy at its start."""

from __future__ import annotations

import dataclasses

import pytest

from charts.rollout import analysis_template, rollout
from experiment import build_config
from experiment.config import Arm
from guardrails.analysis import first_measurement_s
from guardrails.argo import Phase
from guardrails.lifecycle import (
    PodState,
    Result,
    Timeline,
    as_rendered_before,
    evaluate,
    timelines,
)

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
    delay = first_measurement_s(CONFIG)  # the metrics' initialDelay
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


def test_the_first_measurement_judges_only_what_was_served_after_the_run_started() -> None:
    """The speculative arm drafted nothing (a mislabelled mix) until the analysis run started,
    then healthily. A measurement reads the rules' last evaluation, up to one interval old: with
    an initialDelay of one window (as rendered before), the first measurement judged the window
    before the run and aborted; a window plus an evaluation interval holds. A window as short as
    the evaluation interval (valid) and a start just before an evaluation make the old reach
    the whole window."""
    config = build_config(
        {
            "experiment.serving.profile": "new-deployment",
            "experiment.guardrails.live.window_s": "60",
        }
    )
    live = config.guardrails.live
    assert live.window_s == live.evaluation_interval_s == 60 and live.scrape_interval_s == 30
    start = 11 * 60 - 1  # one second before an evaluation; the scrape after it is still drifted

    def pods(t: float) -> dict[str, tuple[Arm, PodState]]:
        return {
            "baseline-0:8000": (Arm.BASELINE, PodState("serving")),
            "speculative-0:8000": (
                Arm.SPECULATIVE,
                PodState("serving", 0.0 if t <= start + 1 else 0.75),
            ),
        }

    timeline = Timeline(
        "served before the run",
        "healthy",
        "acceptance 0 until the run starts, 0.75 after",
        start + 1800,
        start,
        pods,
        probe_runs=[(t, 1.0, 0.8) for t in range(0, start + 1800, 900)],
    )
    template = analysis_template(config, URL)
    held = evaluate(config, timeline, template)
    assert not held.aborted, held.as_record()
    one_window = {
        **template,
        "spec": {
            "metrics": [
                {**metric, "initialDelay": f"{live.window_s}s"}
                for metric in template["spec"]["metrics"]
            ]
        },
    }
    before = evaluate(config, timeline, one_window)
    assert before.aborted and before.outcome.at_s == start + live.window_s, before.as_record()
    assert before.outcome.metric is not None and "acceptance" in before.outcome.metric
