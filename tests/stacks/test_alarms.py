"""Guardrail alarms (stacks/alarms.py): thresholds from config, SNS when configured, and
every alarm watching a metric the load test really publishes (moto)."""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
import pytest

from experiment import Arm, ExperimentConfig, build_config
from stacks.alarms import prompt_classes
from stacks.dashboard import ObservabilityStack
from stacks.nag import add_checks

pytestmark = pytest.mark.infra

ALARM = "AWS::CloudWatch::Alarm"
EMAIL = {
    "experiment.guardrails.alarm_email": "oncall@example.com",
    "experiment.guardrails.min_acceptance_rate": "0.45",
    "experiment.guardrails.max_failed_request_share": "0.05",
    "experiment.guardrails.period_minutes": "10",
}


def _synth(config: ExperimentConfig) -> dict[str, Any]:
    """The Observability stack alone, with cdk-nag (an unacknowledged finding fails synth)."""
    app = cdk.App()
    add_checks(app)
    stack = ObservabilityStack(app, "Observability", config=config)
    return app.synth().get_stack_artifact(stack.artifact_id).template


def _resources(template: dict[str, Any], type_name: str) -> list[dict[str, Any]]:
    return [r for r in template["Resources"].values() if r["Type"] == type_name]


@pytest.fixture(scope="module")
def default_template() -> dict[str, Any]:
    return _synth(build_config({}))


@pytest.fixture(scope="module")
def email_template() -> dict[str, Any]:
    return _synth(build_config(EMAIL))


def _watched(alarm: dict[str, Any]) -> tuple[str, str, dict[str, str]]:
    props = alarm["Properties"]
    dims = {d["Name"]: d["Value"] for d in props.get("Dimensions", [])}
    return props["Namespace"], props["MetricName"], dims


def test_one_acceptance_alarm_per_class_failed_share_per_arm_and_lossless(
    default_template,
) -> None:
    config = build_config({})
    lt, guard = config.loadtest, config.guardrails
    alarms = {
        a["Properties"]["AlarmName"]: a["Properties"] for a in _resources(default_template, ALARM)
    }
    classes = prompt_classes(config)
    assert classes == ["open_ended", "structured"]
    expected = {
        *(f"{config.project}-sd-acceptance-{c}" for c in classes),
        *(f"{config.project}-failed-share-{arm.value}" for arm in Arm),
        f"{config.project}-lossless-mismatch",
    }
    assert set(alarms) == expected
    acceptance = alarms[f"{config.project}-sd-acceptance-structured"]
    assert acceptance["Threshold"] == guard.min_acceptance_rate
    assert acceptance["ComparisonOperator"] == "LessThanThreshold"
    assert acceptance["MetricName"] == lt.metric_names.acceptance_rate_estimate
    assert alarms[f"{config.project}-failed-share-baseline"]["Threshold"] == (
        guard.max_failed_request_share
    )
    assert alarms[f"{config.project}-lossless-mismatch"]["Threshold"] == (
        guard.max_lossless_mismatches
    )
    for props in alarms.values():
        assert props["TreatMissingData"] == "notBreaching"  # no run, no alarm
        assert "AlarmActions" not in props  # no e-mail configured: no topic
    assert not _resources(default_template, "AWS::SNS::Topic")


def test_email_subscribes_a_kms_encrypted_topic_that_every_alarm_notifies(email_template) -> None:
    (topic,) = _resources(email_template, "AWS::SNS::Topic")
    assert "KmsMasterKeyId" in topic["Properties"]
    (subscription,) = _resources(email_template, "AWS::SNS::Subscription")
    assert subscription["Properties"]["Protocol"] == "email"
    assert subscription["Properties"]["Endpoint"] == "oncall@example.com"
    (key,) = _resources(email_template, "AWS::KMS::Key")
    assert key["Properties"]["EnableKeyRotation"] is True
    cloudwatch_grant = [
        s
        for s in key["Properties"]["KeyPolicy"]["Statement"]
        if s.get("Principal", {}).get("Service") == "cloudwatch.amazonaws.com"
    ]
    assert cloudwatch_grant and "aws:SourceAccount" in json.dumps(cloudwatch_grant)
    alarms = _resources(email_template, ALARM)
    for alarm in alarms:
        props = alarm["Properties"]
        assert props["AlarmActions"] and props["OKActions"], props["AlarmName"]
        assert props["Period"] == 600
    thresholds = {a["Properties"]["MetricName"]: a["Properties"]["Threshold"] for a in alarms}
    names = build_config({}).loadtest.metric_names
    assert thresholds[names.acceptance_rate_estimate] == 0.45
    assert thresholds[names.failed_request_share] == 0.05


def test_bad_email_is_rejected_with_an_example() -> None:
    from experiment import ConfigError

    with pytest.raises(ConfigError, match=r"oncall@example\.com"):
        build_config({"experiment.guardrails.alarm_email": "not-an-address"})
