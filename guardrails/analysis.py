"""The rollback analysis' metrics, one per guardrail alert about the speculative arm: what
Argo Rollouts measures (charts/rollout.py wraps them into the AnalysisTemplate) and what the
local run and the lifecycle drill evaluate with Argo's semantics (guardrails/argo.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from experiment.config import ExperimentConfig
from guardrails.rules import CLASS, Alert, rule_set
from runtime.spec import Generation

# Argo's verdict on a Prometheus vector (``result`` is its values as floats; argo-rollouts
# utils/evaluate/evaluate.go: neither condition true is Inconclusive).
LIVE_SUCCESS = "len(result) == 1 && result[0] == 0"
LIVE_FAILURE = "len(result) == 1 && result[0] > 0"


@dataclass(frozen=True)
class LiveCheck:
    """One alert of the rule set as an analysis metric: fails while the alert *fires*.

    The query reads the rule evaluator's own ``ALERTS`` series (Prometheus docs, "Alerting
    rules", inspecting alerts; the AMP user guide, "Troubleshoot rule evaluations": the
    workspace's ruler writes ``ALERTS{alertname, alertstate}``, 1 while pending or firing), so
    the rule's ``for`` (``guardrails.live.pending_s``) debounces the analysis exactly as it
    debounces the alert: one missed scrape or one odd window never fails a measurement."""

    name: str
    alert: Alert

    @property
    def query(self) -> str:
        matchers = {"alertname": self.alert.name, "alertstate": "firing", **self.alert.labels}
        selector = ", ".join(f'{key}="{value}"' for key, value in matchers.items())
        return f"count(ALERTS{{{selector}}}) or vector(0)"


def _kebab(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "-", name).replace("_", "-").lower()


def live_checks(config: ExperimentConfig, generation: Generation | None = None) -> list[LiveCheck]:
    """The rule set's ``analysis`` alerts for servers of ``generation`` (default: the
    cluster's, ``serving.generation``; the local run's is ``local-cpu``), named after the
    alert and, for per-class alerts, the class."""
    checks = []
    for alert in rule_set(config, generation or config.serving.generation).alerts:
        if not alert.analysis:
            continue
        name = _kebab(alert.name)
        if CLASS in alert.labels:
            name = f"{name}-{_kebab(alert.labels[CLASS])}"
        checks.append(LiveCheck(name, alert))
    names = [check.name for check in checks]
    if len(set(names)) != len(names):  # Argo keys measurements by metric name
        raise ValueError(f"two guardrail analysis metrics share a name: {sorted(names)}")
    return checks


def first_measurement_s(config: ExperimentConfig) -> int:
    """Seconds from the analysis run's start to its first measurement: a window, so every rate
    covers the available canary only (not the minutes its route fell back while it started),
    plus an evaluation interval, because a measurement reads the *last* evaluation, up to one
    interval old, whose window reaches that much further back. With one window only, the first
    measurement could still see what the arm served before the run: on the drill's real
    Prometheus, a drifted mix that ended as the run started still fired its floor alert 16 s
    (one window) later, since the drifted seconds carry most of the window's draft tokens."""
    live = config.guardrails.live
    return live.window_s + live.evaluation_interval_s


def live_metric(config: ExperimentConfig, check: LiveCheck, address: str) -> dict[str, Any]:
    live = config.guardrails.live
    # Field names: the vendored AnalysisTemplate CRD (charts/crds/analysis-template-crd.yaml,
    # argo-rollouts v1.9.0) and docs/features/analysis.md. No roleArn: the controller's own
    # credentials (its service account's, from the SDK's default chain) sign the queries;
    # a roleArn would only add an AssumeRole on top (prometheus/sigv4, NewSigV4RoundTripper).
    return {
        "name": check.name,
        "interval": f"{live.evaluation_interval_s}s",
        # analysis/analysis.go generateMetricTasks: initialDelay from the run's start.
        "initialDelay": f"{first_measurement_s(config)}s",
        "successCondition": LIVE_SUCCESS,
        "failureCondition": LIVE_FAILURE,
        # Argo fails the metric when its failed measurements *exceed* failureLimit, counted
        # over the run's life (analysis/analysis.go assessMetricFailureInconclusiveOrError,
        # v1.9.1): 0, the default, aborts at the first measurement that sees the alert fire.
        "failureLimit": live.failure_limit,
        # The query cannot come back empty (`or vector(0)`), so no measurement is inconclusive
        # and no setting would take effect; 0 (Argo's default, written out) stops the analysis
        # for a person at the first one a changed query might give, never a pass.
        "inconclusiveLimit": 0,
        "consecutiveErrorLimit": live.consecutive_error_limit,
        "provider": {
            "prometheus": {
                "address": address,
                "query": check.query,
                "authentication": {"sigv4": {"region": config.region}},
            }
        },
    }


def live_metrics(
    config: ExperimentConfig, address: str, generation: Generation | None = None
) -> list[dict[str, Any]]:
    """The AnalysisTemplate's ``spec.metrics``: one metric per check, querying ``address``;
    the cluster's (charts/rollout.py), the lifecycle drill's and the local run's alike."""
    return [live_metric(config, check, address) for check in live_checks(config, generation)]
