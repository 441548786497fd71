"""Guardrail alarms (stacks/alarms.py): thresholds from config, SNS when configured, and
every alarm watching a metric the load test really publishes (moto)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import boto3
import pytest
from aws_cdk import aws_kms as kms
from moto import mock_aws

from experiment import Arm, ExperimentConfig, build_config
from guardrails.cloudwatch import prompt_classes
from loadtest import cloudwatch
from loadtest.analysis import analysis_info
from loadtest.prompts import load_prompts
from loadtest.records import RequestRecord, write_records
from loadtest.runner import summarize
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
    logs_key = kms.Key(cdk.Stack(app, "Keys"), "LogsKey", enable_key_rotation=True)
    stack = ObservabilityStack(app, "Observability", config=config, logs_key=logs_key)
    return app.synth().get_stack_artifact(stack.artifact_id).template


def _resources(template: dict[str, Any], type_name: str) -> list[dict[str, Any]]:
    return [r for r in template["Resources"].values() if r["Type"] == type_name]


@pytest.fixture(scope="module")
def default_template() -> dict[str, Any]:
    return _synth(build_config({}))


@pytest.fixture(scope="module")
def quiet_template() -> dict[str, Any]:
    """No e-mail and no live guardrails: nothing notifies anyone."""
    return _synth(build_config({"experiment.guardrails.live.enabled": "false"}))


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
        f"{config.project}-sd-acceptance-measured",
        *(f"{config.project}-sd-acceptance-{c.replace('_', '-')}" for c in classes),
        *(f"{config.project}-failed-share-{arm.value}" for arm in Arm),
        f"{config.project}-lossless-agreement",
    }
    assert set(alarms) == expected
    acceptance = alarms[f"{config.project}-sd-acceptance-structured"]
    assert acceptance["Threshold"] == guard.min_acceptance_rate
    assert acceptance["ComparisonOperator"] == "LessThanThreshold"
    assert acceptance["MetricName"] == lt.metric_names.acceptance_rate_estimate
    measured = alarms[f"{config.project}-sd-acceptance-measured"]
    assert measured["MetricName"] == lt.metric_names.acceptance_rate
    assert measured["Threshold"] == guard.min_acceptance_rate
    assert measured["ComparisonOperator"] == "LessThanThreshold"
    assert measured["Dimensions"] == [{"Name": lt.variant_dimension, "Value": "SD"}]
    assert alarms[f"{config.project}-failed-share-baseline"]["Threshold"] == (
        guard.max_failed_request_share
    )
    lossless = alarms[f"{config.project}-lossless-agreement"]
    assert lossless["MetricName"] == lt.metric_names.lossless_prefix_agreement
    assert lossless["Threshold"] == guard.lossless_min_prefix_agreement < 1  # a tolerance
    assert lossless["ComparisonOperator"] == "LessThanThreshold"
    for props in alarms.values():
        # Missing data is within the threshold: no run, no alarm, and an acceptance that is
        # not available (nothing published) cannot fire one.
        assert props["TreatMissingData"] == "notBreaching"
        # The live guardrails (on by default) notify the topic, so it exists without e-mail.
        assert props["AlarmActions"] and props["OKActions"], props["AlarmName"]
    (topic,) = _resources(default_template, "AWS::SNS::Topic")
    assert "KmsMasterKeyId" in topic["Properties"]
    assert not _resources(default_template, "AWS::SNS::Subscription")


def test_without_email_or_live_guardrails_there_is_no_topic(quiet_template) -> None:
    assert not _resources(quiet_template, "AWS::SNS::Topic")
    for alarm in _resources(quiet_template, ALARM):
        assert "AlarmActions" not in alarm["Properties"]


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
    assert thresholds[names.acceptance_rate] == 0.45
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


# The SD arm's /metrics around its window for the three kinds of server (the baseline shows
# no spec-decode counters): the fork has none, vllm-neuron 0.2.x has them frozen, and
# vllm-neuron 1.x has them live (here at 20% acceptance, under the default 0.3).
FROZEN = {"num_drafts": 0.0, "num_draft_tokens": 0.0, "num_accepted_tokens": 0.0}
LIVE = (
    {"num_drafts": 0.0, "num_draft_tokens": 0.0, "num_accepted_tokens": 0.0},
    {"num_drafts": 50.0, "num_draft_tokens": 350.0, "num_accepted_tokens": 70.0},
)
SERVERS = {"fork": ({}, {}), "vllm-neuron-0.2": (FROZEN, FROZEN), "vllm-neuron-1.x": LIVE}


def _write_run(
    root: Path, write_run_json, server: str, *, lossless_mismatch: bool, sd_per_chunk: int = 4
) -> Path:
    """A run directory as the runner writes it: both classes, a failure, and (optionally) one
    prompt whose SD output diverges from the baseline at its first token."""
    config = build_config({})
    lt = config.loadtest
    root.mkdir(parents=True, exist_ok=True)
    write_run_json(
        root,
        variant_labels={arm.value: lt.variant_labels[arm] for arm in Arm},
        prompt_files=list(lt.prompts.files),
        analysis=analysis_info(config).model_dump(mode="json"),
    )
    for arm, per_chunk in (("baseline", 1), ("speculative", sd_per_chunk)):
        records = [
            _record(arm, i, "structured" if i % 2 else "open_ended", per_chunk=per_chunk)
            for i in range(12)
        ]
        records[0].error = "http_5xx" if arm == "speculative" else None
        if arm == "speculative" and lossless_mismatch:
            records[3].chunk_texts = ["changed", *records[3].chunk_texts[1:]]
        write_records(root / f"records_{arm}.jsonl", records)
        before, after = SERVERS[server] if arm == "speculative" else ({}, {})
        window = {"arm": arm, "metrics_before": before, "metrics_after": after}
        (root / f"window_{arm}.json").write_text(json.dumps(window))
    return root


@pytest.fixture
def run_dir(tmp_path: Path, write_run_json) -> Path:
    return _write_run(tmp_path, write_run_json, "fork", lossless_mismatch=True)


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
    default_template, tmp_path, write_run_json, aws_env
) -> None:
    """Over the servers with an acceptance figure (the fork's estimate, 1.x's counters), every
    alarm's metric and dimensions are published: to CloudWatch (moto), as the Job does."""
    config = build_config({})
    published: set[tuple[str, str, tuple[tuple[str, str], ...]]] = set()
    with mock_aws():
        for server in ("fork", "vllm-neuron-1.x"):
            run_dir = _write_run(tmp_path / server, write_run_json, server, lossless_mismatch=True)
            assert cloudwatch.publish_run(config, run_dir, summarize(run_dir)).published
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
    alarms = _resources(default_template, ALARM)
    assert alarms
    for alarm in alarms:
        namespace, name, dims = _watched(alarm)
        key = (namespace, name, tuple(sorted(dims.items())))
        assert key in published, f"{alarm['Properties']['AlarmName']} watches {key}: not published"


def _firing(template: dict[str, Any], datums: list[dict[str, Any]]) -> set[str]:
    """The alarms that a run's datums breach, evaluated as CloudWatch does for one period of
    one run: an alarm without a datum has missing data, which notBreaching treats as OK."""
    operators = {
        "LessThanThreshold": lambda value, threshold: value < threshold,
        "GreaterThanThreshold": lambda value, threshold: value > threshold,
    }
    firing = set()
    for alarm in _resources(template, ALARM):
        props = alarm["Properties"]
        _, name, dims = _watched(alarm)
        values = [
            d["Value"]
            for d in datums
            if d["MetricName"] == name
            and {x["Name"]: x["Value"] for x in d["Dimensions"]} == dims
            and "Value" in d
        ]
        assert props["Statistic"] in ("Minimum", "Maximum")
        if not values:
            assert props["TreatMissingData"] == "notBreaching"
            continue
        value = min(values) if props["Statistic"] == "Minimum" else max(values)
        if operators[props["ComparisonOperator"]](value, props["Threshold"]):
            firing.add(props["AlarmName"])
    return firing


@pytest.mark.parametrize(
    ("server", "acceptance_alarms"),
    [
        ("fork", set()),  # the estimate (3 extra tokens per chunk at k) is above 0.3
        # frozen: not available, so nothing fires, though a 0 from the counters or the
        # client-side estimate (one token per chunk here: 0) would
        ("vllm-neuron-0.2", set()),
        ("vllm-neuron-1.x", {"sd-acceptance-measured"}),  # live counters at 20%
    ],
)
def test_acceptance_alarms_fire_on_measured_or_estimated_never_on_not_available(
    default_template, tmp_path, write_run_json, server, acceptance_alarms
) -> None:
    config = build_config({})
    sd_per_chunk = 1 if server == "vllm-neuron-0.2" else 4
    run_dir = _write_run(
        tmp_path, write_run_json, server, lossless_mismatch=False, sd_per_chunk=sd_per_chunk
    )
    if server == "vllm-neuron-0.2":
        stats = summarize(run_dir).statistics
        assert stats is not None and stats.overall.acceptance_rate_estimate.estimate == 0.0
    summary = summarize(run_dir)
    firing = _firing(default_template, cloudwatch.build_metric_data(config, run_dir, summary))
    prefix = f"{config.project}-"
    acceptance = {n.removeprefix(prefix) for n in firing if "acceptance" in n}
    assert acceptance == acceptance_alarms
    assert f"{prefix}lossless-agreement" not in firing  # identical outputs


def test_lossless_alarm_fires_on_the_configured_tolerance_not_the_first_mismatch(
    tmp_path, write_run_json
) -> None:
    """One of six prompts diverging at its first token is 5/6 agreement: below the default
    0.95, above a tolerance of 0.8. The alarm's threshold is the config's."""
    run_dir = _write_run(tmp_path, write_run_json, "vllm-neuron-1.x", lossless_mismatch=True)
    summary = summarize(run_dir)
    assert len(summary.lossless.mismatches) == 1
    assert summary.lossless.prefix_agreement_rate == pytest.approx(5 / 6)
    for tolerance, fires in (("0.95", True), ("0.8", False)):
        config = build_config({"experiment.guardrails.lossless_min_prefix_agreement": tolerance})
        firing = _firing(_synth(config), cloudwatch.build_metric_data(config, run_dir, summary))
        assert (f"{config.project}-lossless-agreement" in firing) is fires, tolerance


def test_dashboard_labels_acceptance_by_source_and_shows_the_lossless_tolerance(
    default_template,
) -> None:
    config = build_config({})
    names, guard = config.loadtest.metric_names, config.guardrails
    (dashboard,) = _resources(default_template, "AWS::CloudWatch::Dashboard")
    # The body is a Fn::Join of JSON text around the region token: its literal parts suffice.
    parts = dashboard["Properties"]["DashboardBody"]["Fn::Join"][1]
    body = "".join(part for part in parts if isinstance(part, str))
    assert "Draft acceptance rate (measured: server counters)" in body
    assert "SD acceptance estimate (client-side, servers without counters)" in body
    assert names.lossless_prefix_agreement in body
    # The thresholds the alarms use are drawn on the graphs they watch.
    for label, value in (
        ("guardrails.lossless_min_prefix_agreement", guard.lossless_min_prefix_agreement),
        ("guardrails.min_acceptance_rate", guard.min_acceptance_rate),
    ):
        assert f'{{"value":{value},"label":"{label}"' in body, label
