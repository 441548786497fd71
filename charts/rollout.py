"""Guardrail rollback on Argo Rollouts: its analysis watches the live traffic.

- ``live_checks`` (``guardrails.live.enabled``, the default): one check per alert of
  ``guardrails.rules.rule_set`` marked ``analysis`` (those about the speculative arm), read
  from the Prometheus workspace the managed collector fills (Argo's Prometheus provider with
  SigV4, argoproj/argo-rollouts ``docs/analysis/prometheus.md``, "Utilizing Amazon Managed
  Prometheus"). Each query is ``count(<alert expr>) or vector(0)``: one sample, the number of
  series the alert's condition holds for. 0 is a success, more is a failure; anything else
  (no sample) is inconclusive and a query error is an error, each counted by its own limit
  (``guardrails.live``). The query itself can never come back empty, so "no data" is not
  judged here: the rule set's missing-data alerts (an arm's or the gateway's target absent,
  stale or down; the speculative arm finishing requests with frozen speculation counters;
  the probe's results absent or too old) fire on it, and they are analysis checks like the
  others, so missing telemetry fails the analysis instead of passing it. An idle arm fires
  nothing. The alerts read recorded series the workspace's rule groups write
  (stacks/guardrails.py renders the same rule set). The ``for`` of the rule groups does not
  apply here: ``failureLimit`` is the analysis' persistence.
- ``guardrails.cloudwatch.analysis_guardrails`` (live guardrails disabled only): the
  guardrails of the one CloudWatch list (the alarms of stacks/alarms.py render the same list)
  that concern the speculative arm (measured acceptance, the client-side estimate of each
  speculative class against its floor, the SD arm's failed-request share, the lossless prefix
  agreement), as CloudWatch GetMetricData queries (argoproj/argo-rollouts v1.9.1
  ``docs/analysis/cloudwatch.md``). Only the load-test Job
  publishes these, so no data is a pass there and nothing is watched once the Job ended: the
  reason the live checks replace them whenever they are enabled.
- RBAC: only ``routing.eks.operators_group`` may patch ``rollouts/status``, which is what
  ``kubectl argo rollouts abort`` and ``retry`` patch (``{"status":{"abort":true|false}}``,
  argo-rollouts v1.9.1 ``pkg/kubectl-argo-rollouts/cmd/{abort,retry}``), and a
  ValidatingAdmissionPolicy rejects every other status change from anyone but the controller:
  ``promote`` also patches status (``pauseConditions``, ``promoteFull``,
  ``currentStepIndex``; ``cmd/promote/promote.go``), so RBAC verbs alone cannot tell them
  apart. No one is granted ``patch`` on ``rollouts`` itself (``spec.paused``).
- the Rollout, the actuator: one workload whose stable revision is the baseline pod template
  and whose canary revision is the speculative one, both from ``charts.vllm_service``
  (``pod_template``), so ``charts.symmetry`` proves they differ only in decoding. Its
  stableService and canaryService are the two arms' Services: Argo adds each revision's
  ``rollouts-pod-template-hash`` to their selectors, so the HTTPRoute and the load test keep
  addressing ``<baseline>`` and ``<speculative>`` by name. On abort (a failed analysis) Argo
  points the speculative Service at the stable (baseline) pods and scales the canary down:
  every speculative class reaches the baseline without a deploy, through the same HTTPRoute
  rules and their fallback. ``kubectl argo rollouts retry`` re-runs the steps.
- ``canary_patches``: the merge patch that turns the Rollout's template from the baseline into
  the speculative revision after Argo made the baseline stable (stacks/workloads.py applies it;
  docs/routing.md, "How the two revisions come to exist"); ``canary_step_files`` writes it for
  kubectl users (``python -m charts``).
"""

from __future__ import annotations

import json
from typing import Any

from charts.gateway import (
    GATEWAY_API,
    OWNING_GATEWAY_NAME,
    OWNING_GATEWAY_NAMESPACE,
    gateway_name,
)
from charts.naming import (
    ARM_LABEL,
    NAME,
    PART_OF,
    RBAC_API,
    labels,
    metadata,
    role_with_binding,
    short_hash,
)
from charts.vllm_service import (
    checkov_skips,
    disruption_budget,
    pod_template,
    service,
    spec_configmap,
)
from experiment.config import Arm, ExperimentConfig
from experiment.loading import ConfigError
from guardrails.analysis import live_metrics
from guardrails.cloudwatch import CloudWatchGuardrail, analysis_guardrails
from guardrails.scrape import eks_scrape_config

ROLLOUTS_API = "argoproj.io/v1alpha1"
# The Gateway API traffic-router plugin's name, the key of trafficRouting.plugins
# (argoproj-labs/rollouts-plugin-trafficrouter-gatewayapi v0.15.0 pkg/plugin/plugin.go,
# PluginName) and of the controller's trafficRouterPlugins (stacks/gateway.py).
GATEWAY_API_PLUGIN = "argoproj-labs/gatewayAPI"
# Shared by both revisions' pods: the Rollout's selector and the arms' Service selectors.
ROLLOUT_LABEL = "specdecode.aws/rollout"
# The statuses `abort`/`retry` change; everything else in .status is the controller's.
OPERATOR_STATUS_FIELDS = ("abort",)


def metric_data_query(config: ExperimentConfig, check: CloudWatchGuardrail) -> dict[str, Any]:
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


# Argo signs its queries with SigV4 only when the address names an AMP workspace
# (argo-rollouts metricproviders/prometheus/prometheus.go, NewPrometheusAPI: "aps-workspaces").
AMP_HOST_MARK = "aps-workspaces"
CDK_TOKEN_MARK = "${Token["  # an unresolved CDK token (the stack's output, resolved at deploy)


def check_prometheus_url(config: ExperimentConfig, prometheus_url: str | None) -> str:
    """The workspace URL the live analysis queries; refused when missing or not one Argo
    would sign. Live guardrails disabled: no URL is needed (``""``)."""
    if not config.guardrails.live.enabled:
        return ""
    if not prometheus_url:
        raise ConfigError(
            "guardrails.live.enabled is true but no Prometheus workspace URL was given: pass "
            "--prometheus-url <the stack's workspace query URL, "
            "https://aps-workspaces.<region>.amazonaws.com/workspaces/<id>/> or set "
            "guardrails.live.enabled=false"
        )
    token = CDK_TOKEN_MARK in prometheus_url
    if not token and (
        not prometheus_url.startswith("https://") or AMP_HOST_MARK not in prometheus_url
    ):
        raise ConfigError(
            f"--prometheus-url {prometheus_url!r} is not an Amazon Managed Prometheus "
            "workspace URL (https://aps-workspaces.<region>.amazonaws.com/workspaces/<id>/): "
            "Argo Rollouts signs its queries with SigV4 only for such an address"
        )
    return prometheus_url


def analysis_template(
    config: ExperimentConfig, prometheus_url: str | None = None
) -> dict[str, Any]:
    """The live checks against ``prometheus_url`` when live guardrails are enabled, else
    the load-test alarms' CloudWatch metrics."""
    name = analysis_template_name(config)
    if config.guardrails.live.enabled:
        address = check_prometheus_url(config, prometheus_url)
        return {
            "apiVersion": ROLLOUTS_API,
            "kind": "AnalysisTemplate",
            "metadata": metadata(config, name, labels(config, "rollout", name)),
            "spec": {"metrics": live_metrics(config, address)},
        }
    eks = config.routing.eks
    metrics = [
        {
            "name": check.name,
            "interval": f"{check.period_s}s",
            "successCondition": check.condition(),
            # The condition debounces like the alarm (evaluation_periods breaching datapoints
            # in the window), so the first failed measurement fails the run: a cumulative
            # failureLimit would add up unrelated breaches over the canary's life.
            "failureLimit": 0,
            "provider": {
                "cloudWatch": {
                    "interval": f"{check.period_s * eks.analysis_window_periods}s",
                    "metricDataQueries": [metric_data_query(config, check)],
                }
            },
        }
        for check in analysis_guardrails(config)
    ]
    return {
        "apiVersion": ROLLOUTS_API,
        "kind": "AnalysisTemplate",
        "metadata": metadata(config, name, labels(config, "rollout", name)),
        "spec": {"metrics": metrics},
    }


def operator_role(config: ExperimentConfig) -> list[dict[str, Any]]:
    """A Role and its binding: read rollouts, patch their status (abort, retry), nothing else."""
    name = f"{config.project}-rollout-operators"
    rules = [
        {"apiGroups": ["argoproj.io"], "resources": ["rollouts", "analysisruns"],
         "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["argoproj.io"], "resources": ["rollouts/status"], "verbs": ["patch"]},
    ]  # fmt: skip
    group = {"apiGroup": RBAC_API, "kind": "Group", "name": config.routing.eks.operators_group}
    return role_with_binding(config, name, "rollout", rules, group)


def controller_username(config: ExperimentConfig) -> str:
    eks = config.routing.eks
    return f"system:serviceaccount:{eks.rollouts_namespace}:{eks.rollouts_service_account}"


def no_promote_policy(config: ExperimentConfig) -> list[dict[str, Any]]:
    """Status changes other than ``abort`` are the controller's alone: a person can abort a
    rollout and retry it (abort=false), never promote it or skip its pause. Every other status
    key is kept, not only those ``promote`` patches: a status patch clearing ``stableRS`` or
    setting it to the canary's hash promotes too (argo-rollouts v1.9.1 rollout/sync.go,
    shouldFullPromote: no stable ReplicaSet is an "Initial deploy"; utils/replicaset/canary.go,
    GetStableRS)."""
    name = f"{config.project}-rollouts-no-promote"
    exempt = ", ".join(f"'{key}'" for key in OPERATOR_STATUS_FIELDS)
    same = f"k in [{exempt}] || object.?status[?k] == oldObject.?status[?k]"
    # Over the keys of both statuses: a key added, changed or removed is in one of them.
    kept = " && ".join(
        f"{side}.?status.orValue({{}}).all(k, {same})" for side in ("object", "oldObject")
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


def rollout_group(config: ExperimentConfig) -> str:
    """The value of ``ROLLOUT_LABEL``: fixed, so the Services' selectors never change."""
    return f"{config.project}-arms"


def rollout_name(config: ExperimentConfig) -> str:
    """``<project>-arms-<fingerprint of the baseline pod template>``. Argo promotes only a
    Rollout's first revision without steps, and promotion is nobody's to do here: a changed
    baseline (any setting both arms share) therefore becomes a new Rollout whose first
    revision is the new baseline, and the old Rollout is pruned with its pods."""
    return f"{rollout_group(config)}-{short_hash(pod_template(config, Arm.BASELINE))}"


def rollout_pods(config: ExperimentConfig) -> dict[str, str]:
    """Labels every pod of both revisions carries (and the NetworkPolicies' selectors)."""
    return {PART_OF: config.project, NAME: "vllm", ROLLOUT_LABEL: rollout_group(config)}


def revision_template(config: ExperimentConfig, arm: Arm) -> dict[str, Any]:
    """One revision of the Rollout: the arm's pod template plus the shared Rollout label."""
    template = pod_template(config, arm)
    template["metadata"]["labels"] = {**template["metadata"]["labels"], **rollout_pods(config)}
    return template


def rollout_arm_manifests(config: ExperimentConfig, arm: Arm) -> list[dict[str, Any]]:
    """The arm's spec ConfigMap, Service and PodDisruptionBudget; its pods are a revision of
    the Rollout. The Service selects by labels both revisions share: Argo requires each of
    its selector's labels in the Rollout's current template (argo-rollouts v1.9.1
    pkg/apis/rollouts/validation/validation_references.go, ValidateService) and adds the
    revision's rollouts-pod-template-hash itself."""
    return [
        spec_configmap(config, arm),
        service(config, arm, rollout_pods(config)),
        disruption_budget(config, arm),
    ]


def revision_manifests(config: ExperimentConfig, arm: Arm) -> list[dict[str, Any]]:
    """One revision of the Rollout with the arm's own objects, as ``charts.symmetry``
    compares arms (the Rollout object stands for that revision's template)."""
    revision = {
        "apiVersion": ROLLOUTS_API,
        "kind": "Rollout",
        "metadata": {"name": rollout_name(config)},
        "spec": {"template": revision_template(config, arm)},
    }
    return [*rollout_arm_manifests(config, arm), revision]


def weights_route_name(config: ExperimentConfig) -> str:
    return f"{config.project}-rollout-weights"


def weights_route(config: ExperimentConfig) -> dict[str, Any]:
    """The HTTPRoute the traffic-router plugin writes weights to, attached to no Gateway.

    setCanaryScale requires trafficRouting (argo-rollouts v1.9.1 validation.go,
    InvalidSetCanaryScaleTrafficPolicy), and the plugin's SetWeight needs a route naming both
    Services and sets the weight of every reference to the canary Service in it (plugin
    v0.15.0 pkg/plugin/httproute.go, setHTTPRouteWeight). On the tiered HTTPRoute that would
    zero the speculative classes' backend, so the plugin gets this route of its own."""
    name = weights_route_name(config)
    port = config.serving.port
    refs = [
        {"kind": "Service", "name": config.serving.service_name(arm), "port": port, "weight": w}
        for arm, w in ((Arm.BASELINE, 100), (Arm.SPECULATIVE, 0))
    ]
    return {
        "apiVersion": GATEWAY_API,
        "kind": "HTTPRoute",
        "metadata": metadata(config, name, labels(config, "rollout", name)),
        "spec": {"rules": [{"backendRefs": refs}]},
    }


def controller_route_access(config: ExperimentConfig) -> list[dict[str, Any]]:
    """The controller (running the plugin) may read and update that one HTTPRoute: the
    argo-rollouts chart grants nothing on gateway.networking.k8s.io (argoproj/argo-helm
    charts/argo-rollouts/templates/controller/clusterrole.yaml), and the plugin gets and
    updates the route (setHTTPRouteWeight)."""
    name = f"{config.project}-rollouts-controller-route"
    eks = config.routing.eks
    rules = [
        {"apiGroups": ["gateway.networking.k8s.io"], "resources": ["httproutes"],
         "resourceNames": [weights_route_name(config)], "verbs": ["get", "update"]},
    ]  # fmt: skip
    controller = {
        "kind": "ServiceAccount",
        "name": eks.rollouts_service_account,
        "namespace": eks.rollouts_namespace,
    }
    return role_with_binding(config, name, "rollout", rules, controller)


def probe_once_template_name(config: ExperimentConfig) -> str:
    """The start probe's AnalysisTemplate (charts/probe.py ``probe_once_template``)."""
    return f"{config.project}-probe-once"


def progress_deadline_s(config: ExperimentConfig) -> int:
    serving = config.serving
    return (serving.precompile_timeout_minutes + serving.startup_timeout_minutes) * 60


def canary_start_message(config: ExperimentConfig) -> str:
    """What is still starting when ``cdk deploy`` returns (a stack output) and the kubectl
    steps end: the canary precompiles and starts after the deploy; its analysis waits."""
    serving = config.serving
    probe = ", then runs the probe once" if config.guardrails.probe_runs else ""
    return (
        f"The speculative revision of Rollout {rollout_name(config)} now precompiles (up to "
        f"{serving.precompile_timeout_minutes} min on a first deploy) and starts (up to "
        f"{serving.startup_timeout_minutes} min){probe}; its guardrail analysis starts only "
        f"then, and a revision not available within {progress_deadline_s(config) // 60} min "
        f"is aborted. Watch it: kubectl argo rollouts get rollout {rollout_name(config)} "
        f"-n {serving.namespace} --watch"
    )


def canary_steps(config: ExperimentConfig) -> list[dict[str, Any]]:
    """Scale the canary, run the probe once (when the probe is on), then pause for ever."""
    steps: list[dict[str, Any]] = [
        # As many speculative pods as the baseline has, whatever the weight (which stays 0:
        # the tiered HTTPRoute, not a weight, decides which requests they serve).
        {"setCanaryScale": {"replicas": config.serving.replicas}},
    ]
    if config.guardrails.probe_runs:
        steps.append(
            {"analysis": {"templates": [{"templateName": probe_once_template_name(config)}]}}
        )
    steps.append({"pause": {}})  # indefinite: only the controller or an abort ends it
    return steps


def analysis_starting_step(config: ExperimentConfig) -> int:
    """The index of the pause: every step before it (the canary available, the probe's
    first results pushed) has completed when the background analysis starts."""
    return len(canary_steps(config)) - 1


def rollout(config: ExperimentConfig) -> dict[str, Any]:
    """The Rollout as ``cdk deploy`` creates it: the baseline template, which Argo makes the
    stable revision at once ("Initial deploy": rollout/sync.go shouldFullPromote, v1.9.1).
    Every field below is in argo-rollouts v1.9.1 pkg/apis/rollouts/v1alpha1/types.go."""
    serving = config.serving
    eks = config.routing.eks
    name = rollout_name(config)
    canary = {
        "stableService": serving.service_name(Arm.BASELINE),
        "canaryService": serving.service_name(Arm.SPECULATIVE),
        # docs/features/scaledown-aborted-rs.md: with traffic routing the canary is scaled
        # down this long after an abort (0 would keep it up for ever).
        "abortScaleDownDelaySeconds": eks.abort_scale_down_delay_s,
        "trafficRouting": {
            "plugins": {
                GATEWAY_API_PLUGIN: {
                    # plugin v0.15.0 pkg/plugin/types.go, GatewayAPITrafficRouting
                    "httpRoute": weights_route_name(config),
                    "namespace": serving.namespace,
                }
            }
        },
        # Background analysis (types.go RolloutAnalysisBackground) while the canary lives; a
        # Failed or Error run aborts the Rollout. It starts at ``startingStep``: Argo creates
        # no background run while the current step index is below it (utils/replicaset/
        # canary.go BeforeStartingStep, rollout/analysis.go reconcileBackgroundAnalysisRun),
        # and the steps before it complete only once the canary's pods are *available*
        # (setCanaryScale: rollout/canary.go completedCurrentCanaryStep ->
        # AtDesiredReplicaCountsForCanary) and the start probe succeeded (an analysis step
        # completes when its run is Successful). A pod in its init container (hours of
        # precompile on a first deploy) is not available: nothing is measured before.
        "analysis": {
            "templates": [{"templateName": analysis_template_name(config)}],
            "startingStep": analysis_starting_step(config),
        },
        "steps": canary_steps(config),
    }
    return {
        "apiVersion": ROLLOUTS_API,
        "kind": "Rollout",
        "metadata": {
            **metadata(config, name, labels(config, "rollout", rollout_group(config))),
            "annotations": checkov_skips(config),
        },
        "spec": {
            "replicas": serving.replicas,
            # A revision whose pods do not become available within their precompile and
            # start-up budgets aborts (types.go ProgressDeadlineAbort): a canary that never
            # became ready is the deploy's fault to report, not a guardrail's.
            "progressDeadlineSeconds": progress_deadline_s(config),
            "progressDeadlineAbort": True,
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": rollout_pods(config)},
            "template": revision_template(config, Arm.BASELINE),
            "strategy": {"canary": canary},
        },
    }


def managed_scrape_config(config: ExperimentConfig) -> dict[str, Any]:
    """The managed collector's scrape configuration (the stacks' ``AWS::APS::Scraper``) with
    this rendering's labels: both arms are the Rollout's pods, told apart by the arm label;
    the gateway's Envoy pods by the labels Envoy Gateway gives them. ``charts.symmetry``
    proves it scrapes both arms alike and no other pod as an arm."""
    envoy_pods = {
        OWNING_GATEWAY_NAME: gateway_name(config),
        OWNING_GATEWAY_NAMESPACE: config.serving.namespace,
    }
    return eks_scrape_config(
        config, arm_label=ARM_LABEL, arm_pods=rollout_pods(config), gateway_selector=envoy_pods
    )


def canary_patches(config: ExperimentConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """(apply, restore) JSON merge patches (RFC 7386) of the Rollout: the speculative
    template, and back to the baseline. Both templates have the same keys (the symmetry
    check), so merging one over the other yields it exactly."""
    return tuple(  # type: ignore[return-value]
        {"spec": {"template": revision_template(config, arm)}}
        for arm in (Arm.SPECULATIVE, Arm.BASELINE)
    )


# What `python -m charts` writes next to the manifests for kubectl users: the canary step
# that stacks/workloads.py (add_canary_revision) runs on `cdk deploy` (docs/serving.md).
# Set by Argo once a revision is stable (argo-rollouts v1.9.1 types.go RolloutStatus.StableRS;
# a string in charts/crds/rollout-crd.yaml): both paths wait for it before the canary patch.
STABLE_REVISION_FIELD = ".status.stableRS"
CANARY_PATCH_FILE = "canary-patch.json"
RESTORE_PATCH_FILE = "restore-patch.json"
ROLLOUT_ENV_FILE = "rollout.env"


def canary_step_files(config: ExperimentConfig) -> dict[str, str]:
    """File name -> text: the two merge patches of ``canary_patches`` and a shell-sourceable
    file naming the Rollout they target, its namespace and how long to wait for its stable
    revision (``routing.eks.initial_revision_timeout_minutes``, as ``cdk deploy`` waits)."""
    apply, restore = canary_patches(config)
    timeout = config.routing.eks.initial_revision_timeout_minutes
    env = (
        "# The Rollout the canary patch targets (docs/serving.md, kubectl steps).\n"
        f"ROLLOUT={rollout_name(config)}\n"
        f"NAMESPACE={config.serving.namespace}\n"
        f"STABLE_TIMEOUT={timeout}m\n"
    )
    return {
        CANARY_PATCH_FILE: json.dumps(apply, indent=2, sort_keys=True) + "\n",
        RESTORE_PATCH_FILE: json.dumps(restore, indent=2, sort_keys=True) + "\n",
        ROLLOUT_ENV_FILE: env,
    }


def rollout_manifests(
    config: ExperimentConfig, *, prometheus_url: str | None
) -> list[dict[str, Any]]:
    """In apply order: what the Rollout references exists before it (the start probe's
    template, charts/probe.py, is applied before these by the routing chart).
    ``prometheus_url``: the workspace the live analysis queries (required when
    ``guardrails.live.enabled``)."""
    return [
        analysis_template(config, prometheus_url),
        *operator_role(config),
        *no_promote_policy(config),
        weights_route(config),
        *controller_route_access(config),
        rollout(config),
    ]
