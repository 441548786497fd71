"""Guardrail rollback on Argo Rollouts: its analysis reads the guardrail alarms' metrics.

- ``guardrail_checks``: one check per guardrail alarm of stacks/alarms.py that concerns the
  speculative arm (measured acceptance, the client-side estimate of each speculative class
  against its ``routing.acceptance_floors`` floor, the SD arm's failed-request share, the
  lossless prefix agreement), with the alarm's namespace, metric, dimensions, statistic,
  period and threshold. Both the AnalysisTemplate and the tests are built from it.
- the AnalysisTemplate: each check as a CloudWatch GetMetricData query (argoproj/argo-rollouts
  v1.9.0 ``docs/analysis/cloudwatch.md``). No data is a pass, as the alarms treat missing
  data as not breaching: a run publishes once, and an acceptance that is not available is no 0.
- RBAC: only ``routing.eks.operators_group`` may patch ``rollouts/status``, which is what
  ``kubectl argo rollouts abort`` and ``retry`` patch (``{"status":{"abort":true|false}}``,
  argo-rollouts v1.9.0 ``pkg/kubectl-argo-rollouts/cmd/{abort,retry}``), and a
  ValidatingAdmissionPolicy rejects every other status change from anyone but the controller:
  ``promote`` also patches status (``pauseConditions``, ``promoteFull``,
  ``currentStepIndex``; ``cmd/promote/promote.go``), so RBAC verbs alone cannot tell them
  apart. No one is granted ``patch`` on ``rollouts`` itself (``spec.paused``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from charts.naming import labels, metadata
from experiment.config import Arm, ExperimentConfig

ROLLOUTS_API = "argoproj.io/v1alpha1"
# The statuses `abort`/`retry` change; everything else in .status is the controller's.
OPERATOR_STATUS_FIELDS = ("abort",)


@dataclass(frozen=True)
class GuardrailCheck:
    """One guardrail as a CloudWatch query: the analysis fails when any datapoint of
    ``statistic`` over ``period_s`` is on the wrong side of ``threshold``."""

    name: str
    metric: str
    dimensions: tuple[tuple[str, str], ...]
    statistic: str
    period_s: int
    threshold: float
    must_be: Literal["at_least", "at_most"]

    def passes(self, values: list[float]) -> bool:
        """The check's verdict on the values GetMetricData returned (none: a pass)."""
        if self.must_be == "at_least":
            return all(value >= self.threshold for value in values)
        return all(value <= self.threshold for value in values)

    def condition(self) -> str:
        """The same verdict in Argo's expr language (``result`` is GetMetricData's
        MetricDataResults; ``all`` of an empty list is true)."""
        op = ">=" if self.must_be == "at_least" else "<="
        return f"all(result[0].Values, {{# {op} {self.threshold!r}}})"


def guardrail_checks(config: ExperimentConfig) -> list[GuardrailCheck]:
    lt = config.loadtest
    names = lt.metric_names
    guard = config.guardrails
    sd = lt.variant_labels[Arm.SPECULATIVE]
    period = guard.period_minutes * 60
    variant = ((lt.variant_dimension, sd),)

    def check(
        name: str,
        metric: str,
        dims: tuple[tuple[str, str], ...],
        statistic: str,
        threshold: float,
        must_be: Literal["at_least", "at_most"],
    ) -> GuardrailCheck:
        return GuardrailCheck(name, metric, dims, statistic, period, threshold, must_be)

    checks = [
        check("acceptance-measured", names.acceptance_rate, variant, "Minimum",
              guard.min_acceptance_rate, "at_least"),
    ]  # fmt: skip
    for prompt_class in config.routing.speculative_classes:
        floor = config.routing.acceptance_floor(prompt_class, guard.min_acceptance_rate)
        dims = (*variant, (lt.prompt_class_dimension, prompt_class))
        checks.append(
            check(f"acceptance-{prompt_class.replace('_', '-')}", names.acceptance_rate_estimate,
                  dims, "Minimum", floor, "at_least")
        )  # fmt: skip
    checks.append(
        check("failed-share", names.failed_request_share, variant, "Maximum",
              guard.max_failed_request_share, "at_most")
    )  # fmt: skip
    checks.append(
        check("lossless", names.lossless_prefix_agreement, variant, "Minimum",
              guard.lossless_min_prefix_agreement, "at_least")
    )  # fmt: skip
    return checks


def metric_data_query(config: ExperimentConfig, check: GuardrailCheck) -> dict[str, Any]:
    """A MetricDataQuery as Argo's AnalysisTemplate spells it (lower-case keys)."""
    return {
        "id": check.name.replace("-", "_"),  # GetMetricData ids: [a-z][a-zA-Z0-9_]*
        "metricStat": {
            "metric": {
                "namespace": config.loadtest.metric_namespace,
                "metricName": check.metric,
                "dimensions": [{"name": n, "value": v} for n, v in check.dimensions],
            },
            "period": check.period_s,
            "stat": check.statistic,
        },
    }


def analysis_template_name(config: ExperimentConfig) -> str:
    return f"{config.project}-guardrails"


def analysis_template(config: ExperimentConfig) -> dict[str, Any]:
    eks = config.routing.eks
    metrics = [
        {
            "name": check.name,
            "interval": f"{check.period_s}s",
            "successCondition": check.condition(),
            "failureLimit": config.guardrails.evaluation_periods - 1,
            "provider": {
                "cloudWatch": {
                    "interval": f"{check.period_s * eks.analysis_window_periods}s",
                    "metricDataQueries": [metric_data_query(config, check)],
                }
            },
        }
        for check in guardrail_checks(config)
    ]
    name = analysis_template_name(config)
    return {
        "apiVersion": ROLLOUTS_API,
        "kind": "AnalysisTemplate",
        "metadata": metadata(config, name, labels(config, "rollout", name)),
        "spec": {"metrics": metrics},
    }


def operator_role(config: ExperimentConfig) -> list[dict[str, Any]]:
    """A Role and its binding: read rollouts, patch their status (abort, retry), nothing else."""
    name = f"{config.project}-rollout-operators"
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": metadata(config, name, labels(config, "rollout", name)),
        "rules": [
            {"apiGroups": ["argoproj.io"], "resources": ["rollouts", "analysisruns"],
             "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["argoproj.io"], "resources": ["rollouts/status"], "verbs": ["patch"]},
        ],
    }  # fmt: skip
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": metadata(config, name, labels(config, "rollout", name)),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [
            {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Group",
                "name": config.routing.eks.operators_group,
            }
        ],
    }
    return [role, binding]


def controller_username(config: ExperimentConfig) -> str:
    eks = config.routing.eks
    return f"system:serviceaccount:{eks.rollouts_namespace}:{eks.rollouts_service_account}"


def no_promote_policy(config: ExperimentConfig) -> list[dict[str, Any]]:
    """Status changes other than ``abort`` are the controller's alone: a person can abort a
    rollout and retry it (abort=false), never promote it or skip its pause."""
    name = f"{config.project}-rollouts-no-promote"
    kept = " && ".join(
        f"object.?status.?{key} == oldObject.?status.?{key}"
        for key in ("pauseConditions", "promoteFull", "currentStepIndex", "controllerPause")
    )
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": labels(config, "rollout", name)},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["argoproj.io"],
                        "apiVersions": ["*"],
                        "operations": ["UPDATE"],
                        "resources": ["rollouts", "rollouts/status"],
                    }
                ]
            },
            "matchConditions": [
                {
                    "name": "not-the-controller",
                    "expression": f"request.userInfo.username != '{controller_username(config)}'",
                }
            ],
            "validations": [
                {
                    "expression": kept,
                    "message": (
                        "only the Argo Rollouts controller may promote or unpause a rollout; "
                        "people may abort it or retry it (kubectl argo rollouts abort|retry)"
                    ),
                },
                {
                    "expression": "object.?spec.?paused == oldObject.?spec.?paused",
                    "message": "spec.paused is changed only by the Argo Rollouts controller",
                },
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": labels(config, "rollout", name)},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": config.serving.namespace}
                }
            },
        },
    }
    return [policy, binding]


def rollout_manifests(config: ExperimentConfig) -> list[dict[str, Any]]:
    return [analysis_template(config), *operator_role(config), *no_promote_policy(config)]
