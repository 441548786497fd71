"""Guardrail alarms (stacks/alarms.py): thresholds from config, SNS when configured, and
every alarm watching a metric the load test really publishes (moto)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import boto3
import pytest
from moto import mock_aws

from experiment import Arm, ExperimentConfig, build_config
from loadtest import cloudwatch
from loadtest.analysis import analysis_info
from loadtest.prompts import load_prompts
from loadtest.records import RequestRecord, write_records
from loadtest.runner import summarize
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


def test_alarmed_classes_are_the_load_tests_prompt_classes() -> None:
    config = build_config({})
    files = config.loadtest.prompts.files
    assert prompt_classes(config) == sorted({p.prompt_class for p in load_prompts(files)})


def test_bad_email_is_rejected_with_an_example() -> None:
    from experiment import ConfigError

    with pytest.raises(ConfigError, match=r"oncall@example\.com"):
        build_config({"experiment.guardrails.alarm_email": "not-an-address"})


def _record(arm: str, index: int, cls: str, *, per_chunk: int, error: str | None = None):
    chunks = 16 // per_chunk
    return RequestRecord(
        arm=arm,
        index=index,
        prompt_id=f"{cls}-{index % 3}",
        prompt_class=cls,
        max_tokens=16,
        wall_start=1_700_000_000.0 + index,
        start=index * 0.5,
        ttft_s=0.05,
        e2e_s=0.05 + 0.02 * chunks,
        chunk_times=[0.05 + 0.02 * j for j in range(chunks)],
        chunk_tokens=[per_chunk] * chunks,
        # the same text on both arms, however many tokens a chunk carries
        chunk_texts=[
            "".join(f"t{j * per_chunk + i}" for i in range(per_chunk)) for j in range(chunks)
        ],
        output_tokens=16,
        error=error,
    )


@pytest.fixture
def run_dir(tmp_path: Path, write_run_json) -> Path:
    """A run directory as the runner writes it: both classes, a failure, a lossless mismatch."""
    config = build_config({})
    lt = config.loadtest
    write_run_json(
        tmp_path,
        variant_labels={arm.value: lt.variant_labels[arm] for arm in Arm},
        prompt_files=list(lt.prompts.files),
        analysis=analysis_info(
            config, {"baseline": "http://b", "speculative": "http://s"}
        ).model_dump(mode="json"),
    )
    for arm, per_chunk in (("baseline", 1), ("speculative", 4)):
        records = [
            _record(arm, i, "structured" if i % 2 else "open_ended", per_chunk=per_chunk)
            for i in range(12)
        ]
        records[0].error = "http_5xx" if arm == "speculative" else None
        if arm == "speculative":
            records[3].chunk_texts = ["changed", *records[3].chunk_texts[1:]]
        write_records(tmp_path / f"records_{arm}.jsonl", records)
    return tmp_path


@pytest.fixture
def aws_env(monkeypatch) -> None:
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-2",
    }.items():
        monkeypatch.setenv(key, value)


def test_every_alarm_watches_a_metric_the_load_test_publishes(
    default_template, run_dir, aws_env
) -> None:
    config = build_config({})
    summary = summarize(run_dir)
    with mock_aws():
        result = cloudwatch.publish_run(config, run_dir, summary)
        client = boto3.client("cloudwatch", region_name=config.region)
        paginator = client.get_paginator("list_metrics")
        published = {
            (
                config.loadtest.metric_namespace,
                metric["MetricName"],
                tuple(sorted((d["Name"], d["Value"]) for d in metric["Dimensions"])),
            )
            for page in paginator.paginate(Namespace=config.loadtest.metric_namespace)
            for metric in page["Metrics"]
        }
        lossless = client.get_metric_statistics(
            Namespace=config.loadtest.metric_namespace,
            MetricName=config.loadtest.metric_names.lossless_mismatches,
            Dimensions=[{"Name": config.loadtest.variant_dimension, "Value": "SD"}],
            StartTime="2000-01-01T00:00:00Z",
            EndTime="2100-01-01T00:00:00Z",
            Period=86400,
            Statistics=["Maximum"],
        )["Datapoints"]
    # The run has one SD output differing from the baseline: above the default threshold 0.
    assert [point["Maximum"] for point in lossless] == [1.0]
    assert result.published
    alarms = _resources(default_template, ALARM)
    assert alarms
    for alarm in alarms:
        namespace, name, dims = _watched(alarm)
        key = (namespace, name, tuple(sorted(dims.items())))
        assert key in published, f"{alarm['Properties']['AlarmName']} watches {key}: not published"
