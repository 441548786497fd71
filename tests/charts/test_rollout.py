"""The rollback's analysis queries the guardrail alarms' own metrics (moto), and its RBAC
lets people abort and retry but never promote."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import aws_cdk as cdk
import boto3
import pytest
from moto import mock_aws

from charts.rollout import (
    GuardrailCheck,
    analysis_template,
    guardrail_checks,
    no_promote_policy,
    operator_role,
)
from experiment import Arm, ExperimentConfig, build_config
from stacks.alarms import GuardrailAlarms

pytestmark = pytest.mark.infra  # synthesizes the alarms with the CDK

FLOORS = {
    "experiment.routing.speculative_classes": "structured,open_ended",
    "experiment.routing.acceptance_floors": '{"structured": 0.55}',
    "experiment.guardrails.min_acceptance_rate": "0.35",
}


def _alarm_metrics(config: ExperimentConfig) -> dict[tuple, tuple[str, float, str]]:
    """(namespace, metric, dims) -> (statistic, threshold, operator) of every guardrail alarm."""
    stack = cdk.Stack(cdk.App(), "Alarms")
    GuardrailAlarms(stack, "Guardrails", config=config)
    template = cdk.assertions.Template.from_stack(stack).to_json()
    alarms = {}
    for resource in template["Resources"].values():
        if resource["Type"] != "AWS::CloudWatch::Alarm":
            continue
        props = resource["Properties"]
        dims = tuple(sorted((d["Name"], d["Value"]) for d in props["Dimensions"]))
        alarms[(props["Namespace"], props["MetricName"], dims)] = (
            props["Statistic"],
            props["Threshold"],
            props["ComparisonOperator"],
            props["Period"],
        )
    return alarms


def test_every_check_is_a_guardrail_alarms_metric_statistic_and_period() -> None:
    """Same metric, dimensions, statistic and period as an alarm; the threshold is the
    alarm's, or the class's own floor where routing.acceptance_floors sets one."""
    config = build_config({"experiment.routing.speculative_classes": "structured,open_ended"})
    alarms = _alarm_metrics(config)
    namespace = config.loadtest.metric_namespace
    checks = guardrail_checks(config)
    assert len(checks) == 5  # measured, two class estimates, SD failed share, lossless
    operators = {"at_least": "LessThanThreshold", "at_most": "GreaterThanThreshold"}
    for check in checks:
        key = (namespace, check.metric, tuple(sorted(check.dimensions)))
        assert key in alarms, check
        statistic, threshold, operator, period = alarms[key]
        assert (check.statistic, check.threshold, operators[check.must_be], check.period_s) == (
            statistic, threshold, operator, period,
        )  # fmt: skip


def test_a_class_floor_replaces_the_global_floor_for_that_class_only() -> None:
    config = build_config(FLOORS)
    by_name = {check.name: check for check in guardrail_checks(config)}
    assert by_name["acceptance-structured"].threshold == 0.55
    assert by_name["acceptance-open-ended"].threshold == 0.35
    assert by_name["acceptance-measured"].threshold == 0.35
    assert "acceptance-open-ended" not in {c.name for c in guardrail_checks(build_config({}))}


@pytest.fixture
def aws_env(monkeypatch) -> None:
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-2",
    }.items():
        monkeypatch.setenv(key, value)


def _aws_query(query: dict[str, Any]) -> dict[str, Any]:
    """Argo's lower-case MetricDataQuery as the AWS SDK spells it (argo-rollouts v1.9.0
    metricproviders/cloudwatch: the fields are copied one to one)."""
    stat = query["metricStat"]
    metric = stat["metric"]
    dims = [{"Name": d["name"], "Value": d["value"]} for d in metric["dimensions"]]
    return {
        "Id": query["id"],
        "MetricStat": {
            "Metric": {
                "Namespace": metric["namespace"],
                "MetricName": metric["metricName"],
                "Dimensions": dims,
            },
            "Period": stat["period"],
            "Stat": stat["stat"],
        },
    }  # fmt: skip


def _verdicts(config: ExperimentConfig, values: dict[str, float]) -> dict[str, bool]:
    """Publish ``values`` (check name -> value) to moto, query every analysis metric as
    Argo does, and judge each result with its check."""
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    checks = {check.name: check for check in guardrail_checks(config)}
    client = boto3.client("cloudwatch", region_name=config.region)
    for name, value in values.items():
        check = checks[name]
        client.put_metric_data(
            Namespace=config.loadtest.metric_namespace,
            MetricData=[{
                "MetricName": check.metric,
                "Dimensions": [{"Name": n, "Value": v} for n, v in check.dimensions],
                "Value": value, "Unit": "None", "Timestamp": now - timedelta(minutes=1),
            }],
        )  # fmt: skip
    verdicts = {}
    for metric in analysis_template(config)["spec"]["metrics"]:
        (query,) = metric["provider"]["cloudWatch"]["metricDataQueries"]
        window = int(metric["provider"]["cloudWatch"]["interval"].removesuffix("s"))
        result = client.get_metric_data(
            MetricDataQueries=[_aws_query(query)],
            StartTime=now - timedelta(seconds=window),
            EndTime=now + timedelta(minutes=1),
        )["MetricDataResults"]
        check: GuardrailCheck = checks[metric["name"]]
        verdicts[metric["name"]] = check.passes(result[0]["Values"])
    return verdicts


HEALTHY = {"acceptance-measured": 0.6, "acceptance-structured": 0.7, "failed-share": 0.0,
           "lossless": 1.0}  # fmt: skip
BREACHES = {
    "acceptance-measured": 0.2,
    "acceptance-structured": 0.5,  # under its own 0.55 floor, above the global 0.35
    "failed-share": 0.5,
    "lossless": 0.5,
}


def test_healthy_metrics_pass_and_no_data_passes(aws_env) -> None:
    config = build_config(FLOORS)
    with mock_aws():
        assert all(_verdicts(config, {}).values())  # nothing published: not breaching
        verdicts = _verdicts(config, HEALTHY)
    assert verdicts and all(verdicts.values()), verdicts


@pytest.mark.parametrize("breached", sorted(BREACHES))
def test_each_breach_fails_its_check_only(aws_env, breached: str) -> None:
    config = build_config(FLOORS)
    with mock_aws():
        verdicts = _verdicts(config, {**HEALTHY, breached: BREACHES[breached]})
    assert {name for name, ok in verdicts.items() if not ok} == {breached}


def test_the_baseline_arms_failures_do_not_roll_back_the_speculative_arm() -> None:
    config = build_config({})
    sd = config.loadtest.variant_labels[Arm.SPECULATIVE]
    for check in guardrail_checks(config):
        assert (config.loadtest.variant_dimension, sd) in check.dimensions


def test_argo_conditions_state_the_same_verdict_as_the_checks() -> None:
    config = build_config(FLOORS)
    checks = {check.name: check for check in guardrail_checks(config)}
    for metric in analysis_template(config)["spec"]["metrics"]:
        check = checks[metric["name"]]
        op = ">=" if check.must_be == "at_least" else "<="
        assert metric["successCondition"] == f"all(result[0].Values, {{# {op} {check.threshold}}})"
        assert metric["failureLimit"] == config.guardrails.evaluation_periods - 1


def test_operators_may_patch_rollout_status_only_and_nothing_grants_promotion() -> None:
    config = build_config({})
    role, binding = operator_role(config)
    writes = [rule for rule in role["rules"] if set(rule["verbs"]) - {"get", "list", "watch"}]
    assert writes == [
        {"apiGroups": ["argoproj.io"], "resources": ["rollouts/status"], "verbs": ["patch"]}
    ]
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
         "name": config.routing.eks.operators_group}
    ]  # fmt: skip


def test_the_admission_policy_keeps_promotion_to_the_controller() -> None:
    config = build_config({})
    policy, binding = no_promote_policy(config)
    spec = policy["spec"]
    expressions = " ".join(v["expression"] for v in spec["validations"])
    for promote_field in ("pauseConditions", "promoteFull", "currentStepIndex", "paused"):
        assert promote_field in expressions
    assert "abort" not in expressions  # abort and retry stay possible
    eks = config.routing.eks
    controller = f"system:serviceaccount:{eks.rollouts_namespace}:{eks.rollouts_service_account}"
    assert (
        spec["matchConditions"][0]["expression"] == f"request.userInfo.username != '{controller}'"
    )
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
