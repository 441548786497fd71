"""The no-promote ValidatingAdmissionPolicy's CEL, evaluated for real: people may abort and
retry the guardrail Rollout, never promote or unpause it; the controller may.

The API server evaluates the policy with cel-go; here Google's cel-cpp bindings
(cel-expr-python) evaluate the same expressions, ``object``, ``oldObject`` and ``request`` as
dyn (Kubernetes declares the objects so and hands them over as unstructured maps:
apiserver admission/plugin/cel/filter.go, objectToResolveVal) with the optional-syntax
extension on (``object.?status.?key``). The decision is Kubernetes': every matchCondition true
or the policy does not apply; then the first validation that is not true denies with its
message; an expression that errs denies under ``failurePolicy: Fail``.

Each request is the exact merge patch an ``kubectl argo rollouts`` command sends
(argoproj/argo-rollouts v1.9.1, cited per case) to a Rollout the chart renders, holding the
status Argo keeps for a canary paused at its pause step. The patch is applied as the API
server does before validating admission (apiserver registry/generic/registry/store.go,
Update: BeforeUpdate, then updateValidation): RFC 7386 merge, then the CRD's update strategy
(apiextensions-apiserver registry/customresource/status_strategy.go and strategy.go,
PrepareForUpdate): a patch of ``rollouts/status`` changes the status only, a patch of
``rollouts`` everything but the status (the Rollout CRD has the status subresource).
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from cel_expr_python import cel
from cel_expr_python.ext import ext_optional
from merge_patch import merge_patch
from workspace import PROMETHEUS_URL

import charts.rollout
from charts.rollout import (
    canary_patches,
    canary_steps,
    controller_username,
    no_promote_policy,
    rollout,
    rollout_manifests,
)
from experiment import Arm, ExperimentConfig, build_config

CRD = Path(__file__).resolve().parents[2] / "charts" / "crds" / "rollout-crd.yaml"
ENV = cel.NewEnv(
    variables={name: cel.Type.DYN for name in ("object", "oldObject", "request")},
    extensions=[ext_optional.ExtOptional()],
)

# Who sends the request: a member of routing.eks.operators_group (an EKS access entry's
# default username for an assumed IAM role), and the CDK's kubectl role applying the Rollout.
PERSON = "arn:aws:sts::123456789012:assumed-role/Oncall/alice"
DEPLOYER = "arn:aws:sts::123456789012:assumed-role/Workloads-KubectlRole/deploy"
STABLE, CANARY = "6d8c9f7b54", "7f5b6c9d48"  # the two revisions' rollouts-pod-template-hash
T = "2026-05-04T10:15:00Z"


def _updated(old: dict[str, Any], patch: dict[str, Any], subresource: str) -> dict[str, Any]:
    """The ``object`` admission sees: the patch applied, then the update strategy's reset."""
    patched = merge_patch(old, patch)
    kept_from, status_from = (old, patched) if subresource == "status" else (patched, old)
    updated = {key: value for key, value in kept_from.items() if key != "status"}
    if "status" in status_from:
        updated["status"] = copy.deepcopy(status_from["status"])
    return updated


def _evaluate(expression: str, data: dict[str, Any]) -> bool | None:
    """The expression's value, None where it errs (or is no bool)."""
    value = ENV.compile(expression).eval(data=data)
    return bool(value.value()) if value.type() == cel.Type.BOOL else None


def _policy(config: ExperimentConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """The policy and its binding as the routing chart deploys them."""
    manifests = rollout_manifests(config, prometheus_url=PROMETHEUS_URL)
    (policy,) = [m for m in manifests if m["kind"] == "ValidatingAdmissionPolicy"]
    (binding,) = [m for m in manifests if m["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    return policy, binding


def admit(
    config: ExperimentConfig,
    old: dict[str, Any],
    patch: dict[str, Any],
    *,
    subresource: str,
    username: str,
    policy: dict[str, Any] | None = None,
) -> str | None:
    """None when the API server admits ``patch`` of ``old`` (``subresource`` "status" or ""
    for the Rollout itself) by ``username``, else the message it is denied with."""
    deployed, binding = _policy(config)
    spec = (policy or deployed)["spec"]
    # The request is one the policy and its binding select: the checks below are not vacuous.
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert "UPDATE" in rule["operations"] and "argoproj.io" in rule["apiGroups"]
    assert "/".join(filter(None, ("rollouts", subresource))) in rule["resources"]
    namespaces = binding["spec"]["matchResources"]["namespaceSelector"]["matchLabels"]
    assert namespaces == {"kubernetes.io/metadata.name": old["metadata"]["namespace"]}

    eks = config.routing.eks
    groups = (
        ["system:serviceaccounts", f"system:serviceaccounts:{eks.rollouts_namespace}"]
        if username == controller_username(config)
        else [eks.operators_group]
    )
    request = {
        "operation": "UPDATE",
        "resource": {"group": "argoproj.io", "version": "v1alpha1", "resource": "rollouts"},
        "subResource": subresource,
        "namespace": old["metadata"]["namespace"],
        "name": old["metadata"]["name"],
        "userInfo": {"username": username, "groups": [*groups, "system:authenticated"]},
    }
    data = {"object": _updated(old, patch, subresource), "oldObject": old, "request": request}
    assert spec["failurePolicy"] == "Fail"
    matches = [_evaluate(c["expression"], data) for c in spec["matchConditions"]]
    if False in matches:
        return None
    if None in matches:
        return "a matchCondition erred (failurePolicy: Fail)"
    for validation in spec["validations"]:
        verdict = _evaluate(validation["expression"], data)
        if verdict is not True:
            return validation["message"] if verdict is False else "a validation erred"
    return None


def _strict(schema: Any) -> Any:
    """A CRD schema that admits no field it does not list (catches a misspelt status key)."""
    if isinstance(schema, dict):
        schema = {key: _strict(value) for key, value in schema.items()}
        if schema.get("type") == "object" and "properties" in schema:
            schema.setdefault("additionalProperties", False)
    elif isinstance(schema, list):
        schema = [_strict(item) for item in schema]
    return schema


@functools.cache
def _status_schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    assert "status" in version["subresources"]  # what _updated's reset relies on
    return _strict(version["schema"]["openAPIV3Schema"]["properties"]["status"])


def _checked(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` after checking its status against the Rollout CRD's (charts/crds)."""
    jsonschema.validate(body["status"], _status_schema())
    return body


def healthy(config: ExperimentConfig) -> dict[str, Any]:
    """The Rollout after ``cdk deploy`` created it and Argo made the baseline stable."""
    body = rollout(config)
    steps = body["spec"]["strategy"]["canary"]["steps"]
    replicas = config.serving.replicas
    selector = body["spec"]["selector"]["matchLabels"]
    body["metadata"] |= {"generation": 1, "resourceVersion": "48113"}
    body["status"] = {
        "HPAReplicas": replicas, "availableReplicas": replicas, "readyReplicas": replicas,
        "replicas": replicas, "updatedReplicas": replicas,
        "blueGreen": {},
        "canary": {},
        "conditions": [
            {"type": "Available", "status": "True", "reason": "AvailableReason",
             "message": "Rollout has minimum availability", "lastTransitionTime": T,
             "lastUpdateTime": T},
            {"type": "Healthy", "status": "True", "reason": "RolloutHealthy",
             "message": "Rollout is healthy", "lastTransitionTime": T, "lastUpdateTime": T},
        ],
        "currentPodHash": STABLE,
        "currentStepHash": "5c4d8b7f9",
        "currentStepIndex": len(steps),
        "observedGeneration": "1",
        "phase": "Healthy",
        "selector": ",".join(f"{k}={v}" for k, v in sorted(selector.items())),
        "stableRS": STABLE,
    }  # fmt: skip
    return _checked(body)


def paused(config: ExperimentConfig) -> dict[str, Any]:
    """The Rollout once the speculative template is merged in (stacks/workloads.py), its
    canary scaled up and waiting at the indefinite pause step: a CanaryPauseStep pause
    condition and controllerPause (argo-rollouts v1.9.1 rollout/pause.go,
    CalculatePauseConditions), currentStepIndex at the pause step, weight 0."""
    body = merge_patch(healthy(config), canary_patches(config)[0])
    steps = body["spec"]["strategy"]["canary"]["steps"]
    (pause_step,) = [i for i, step in enumerate(steps) if "pause" in step]
    assert pause_step == len(steps) - 1 == AFTER_PAUSE - 1  # the step indexes PROMOTES names
    replicas = config.serving.replicas
    services = {arm: config.serving.service_name(arm) for arm in Arm}
    body["metadata"] |= {"generation": 2, "resourceVersion": "48213"}
    body["status"] |= {
        "HPAReplicas": 2 * replicas, "availableReplicas": 2 * replicas,
        "readyReplicas": 2 * replicas, "replicas": 2 * replicas,
        "canary": {
            "currentBackgroundAnalysisRunStatus": {
                "name": f"{body['metadata']['name']}-{CANARY}-2", "status": "Running"},
            "weights": {
                "canary": {"podTemplateHash": CANARY, "serviceName": services[Arm.SPECULATIVE],
                           "weight": 0},
                "stable": {"podTemplateHash": STABLE, "serviceName": services[Arm.BASELINE],
                           "weight": 100},
            },
        },
        "conditions": [
            {"type": "Paused", "status": "True", "reason": "RolloutPaused",
             "message": "Rollout is paused", "lastTransitionTime": T, "lastUpdateTime": T},
        ],
        "controllerPause": True,
        "currentPodHash": CANARY,
        "currentStepIndex": pause_step,
        "message": "CanaryPauseStep",
        "observedGeneration": "2",
        "pauseConditions": [{"reason": "CanaryPauseStep", "startTime": T}],
        "phase": "Paused",
    }  # fmt: skip
    return _checked(body)


def scaling(config: ExperimentConfig) -> dict[str, Any]:
    """The same Rollout one step earlier: the canary still scaling up, no pause condition."""
    body = paused(config)
    for key in ("pauseConditions", "controllerPause", "message"):
        del body["status"][key]
    body["status"] |= {"currentStepIndex": 0, "phase": "Progressing", "conditions": []}
    return _checked(body)


def paused_by_spec(config: ExperimentConfig) -> dict[str, Any]:
    """The paused canary with ``spec.paused`` set too (``kubectl argo rollouts pause``)."""
    body = paused(config)
    body["spec"]["paused"] = True
    return body


def aborted(config: ExperimentConfig) -> dict[str, Any]:
    """The paused canary after ``abort`` (or a failed analysis): abort and abortedAt, no pause
    condition (v1.9.1 rollout/pause.go, CalculateAbortStatus), back at step 0 (canary.go)."""
    body = paused(config)
    for key in ("pauseConditions", "controllerPause"):
        del body["status"][key]
    body["status"] |= {
        "abort": True, "abortedAt": T, "currentStepIndex": 0, "phase": "Degraded",
        "message": "RolloutAborted: Rollout aborted update to revision 2",
    }  # fmt: skip
    return _checked(body)


STATES = {
    "healthy": healthy,
    "paused": paused,
    "scaling": scaling,
    "paused_by_spec": paused_by_spec,
    "aborted": aborted,
}
# Each case: (state, merge patch, subresource: "status" or "" for the Rollout itself).
# argo-rollouts sends each with types.MergePatchType to the status subresource first, to the
# Rollout only where that subresource is missing (the "unified" patches) or for spec.paused.
CLI = "argoproj/argo-rollouts:v1.9.1:pkg/kubectl-argo-rollouts/cmd"
# {CLI}/abort/abort.go, abortPatch
ABORT = ("paused", {"status": {"abort": True}}, "status")
# {CLI}/retry/retry.go, retryRolloutPatch
RETRY = ("aborted", {"status": {"abort": False}}, "status")
# {CLI}/promote/promote.go, getPatches (the Rollout's steps: setCanaryScale, the start probe,
# pause; so the step after the pause is their count, and so is the step count
# --skip-all-steps sets).
AFTER_PAUSE = len(canary_steps(build_config({})))
PROMOTES = {
    # A canary with pause conditions: clearPauseConditionsPatch.
    "promote": ("paused", {"status": {"pauseConditions": None}}, "status"),
    # One inconclusive at a step analysis: clearPauseConditionsAndControllerPausePatch.
    "promote, inconclusive step": (
        "paused",
        {
            "status": {
                "pauseConditions": None,
                "controllerPause": False,
                "currentStepIndex": AFTER_PAUSE,
            }
        },
        "status",
    ),
    # One without pause conditions (mid-step): clearPauseConditionsPatchWithStep.
    "promote, mid-step": (
        "scaling",
        {"status": {"pauseConditions": None, "currentStepIndex": 1}},
        "status",
    ),
    # --full while currentPodHash != stableRS: promoteFullPatch.
    "promote --full": ("paused", {"status": {"promoteFull": True}}, "status"),
    # --skip-current-step and --skip-all-steps (deprecated): setCurrentStepIndex.
    "promote --skip-current-step": (
        "paused",
        {"status": {"currentStepIndex": AFTER_PAUSE}},
        "status",
    ),
    # spec.paused set: promote and promote --full also send unpausePatch, to the Rollout.
    "promote, spec.paused": ("paused_by_spec", {"spec": {"paused": False}}, ""),
    # No status subresource: unpauseAndClearPauseConditionsPatch and
    # unpauseAndPromoteFullPatch, to the Rollout.
    "promote, unified patch": (
        "paused_by_spec",
        {"spec": {"paused": False}, "status": {"pauseConditions": None}},
        "",
    ),
    "promote --full, unified patch": (
        "paused_by_spec",
        {"spec": {"paused": False}, "status": {"promoteFull": True}},
        "",
    ),
}
# Promotions by hand, which kubectl argo rollouts does not send but `kubectl patch
# --subresource=status --type=merge` can: with no stable ReplicaSet the controller promotes
# the canary as an "Initial deploy", and with the canary's hash as stableRS the canary is the
# stable (argoproj/argo-rollouts:v1.9.1:rollout/sync.go, shouldFullPromote;
# utils/replicaset/canary.go, GetStableRS).
BY_HAND = {
    "stableRS cleared": ("paused", {"status": {"stableRS": None}}, "status"),
    "stableRS set to the canary": ("paused", {"status": {"stableRS": CANARY}}, "status"),
    "status replaced": ("paused", {"status": None}, "status"),
}
MESSAGES = "only the Argo Rollouts controller", "spec.paused is changed only by"


@pytest.fixture(scope="module")
def config() -> ExperimentConfig:
    return build_config({})


def _send(config: ExperimentConfig, case: tuple, username: str, **kw: Any) -> str | None:
    state, patch, subresource = case
    old = STATES[state](config)
    return admit(config, old, patch, subresource=subresource, username=username, **kw)


def test_a_person_may_abort_the_paused_canary_and_retry_it(config: ExperimentConfig) -> None:
    assert _send(config, ABORT, PERSON) is None
    assert _send(config, RETRY, PERSON) is None


@pytest.mark.parametrize("command", [*sorted(PROMOTES), *sorted(BY_HAND)])
def test_every_promotion_is_denied_to_a_person(config: ExperimentConfig, command: str) -> None:
    denial = _send(config, {**PROMOTES, **BY_HAND}[command], PERSON)
    assert denial is not None and denial.startswith(MESSAGES), denial


@pytest.mark.parametrize("command", [*sorted(PROMOTES), *sorted(BY_HAND)])
def test_the_controller_may_make_the_same_changes(config: ExperimentConfig, command: str) -> None:
    assert _send(config, {**PROMOTES, **BY_HAND}[command], controller_username(config)) is None


def test_changes_outside_what_the_policy_guards_are_admitted(config: ExperimentConfig) -> None:
    label = {"metadata": {"labels": {"specdecode.aws/oncall": "alice"}}}
    assert _send(config, ("paused", label, ""), PERSON) is None
    # cdk deploy merges the speculative template into the stable Rollout, and its delete
    # restores the baseline (stacks/workloads.py): template changes, not promotions.
    apply, restore = canary_patches(config)
    assert _send(config, ("healthy", apply, ""), DEPLOYER) is None
    assert _send(config, ("paused", restore, ""), DEPLOYER) is None
    # A status patch sent to the Rollout itself changes nothing: the strategy drops it.
    assert _send(config, ("paused", {"status": {"promoteFull": True}}, ""), PERSON) is None


def test_a_weakened_policy_fails_these_cases(
    config: ExperimentConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mutation check: a policy that also leaves people promoteFull admits
    ``promote --full``, and one comparing only the keys ``promote`` patches (this policy
    before it compared every key) admits the promotions by hand, so the cases catch both."""
    monkeypatch.setattr(charts.rollout, "OPERATOR_STATUS_FIELDS", ("abort", "promoteFull"))
    policy, _ = no_promote_policy(config)
    assert _send(config, PROMOTES["promote --full"], PERSON, policy=policy) is None
    assert _send(config, PROMOTES["promote"], PERSON, policy=policy) is not None
    monkeypatch.undo()

    policy, _ = no_promote_policy(config)
    policy["spec"]["validations"][0]["expression"] = " && ".join(
        f"object.?status.?{key} == oldObject.?status.?{key}"
        for key in ("pauseConditions", "promoteFull", "currentStepIndex", "controllerPause")
    )
    for command, case in PROMOTES.items():
        assert _send(config, case, PERSON, policy=policy) is not None, command
    for command in ("stableRS cleared", "stableRS set to the canary"):
        assert _send(config, BY_HAND[command], PERSON, policy=policy) is None, command
