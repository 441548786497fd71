"""CloudWatch publishing against moto, and clean disabling without credentials."""

from __future__ import annotations

import logging

import boto3
import pytest
from moto import mock_aws

from experiment import build_config
from loadtest import cloudwatch
from loadtest.results import CloudWatchResult
from loadtest.summary import summarize


@pytest.fixture
def aws_env(monkeypatch):
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-2",
    }.items():
        monkeypatch.setenv(key, value)


def test_publishes_raw_values_with_config_names(fake_run_dir, aws_env) -> None:
    config = build_config({})
    lt = config.loadtest
    summary = summarize(fake_run_dir)
    with mock_aws():
        result = cloudwatch.publish_run(config, fake_run_dir, summary)
        client = boto3.client("cloudwatch", region_name=config.region)
        metrics = client.list_metrics(Namespace=lt.metric_namespace)["Metrics"]
        by_name: dict[str, list[dict[str, str]]] = {}
        for metric in metrics:
            dims = {d["Name"]: d["Value"] for d in metric["Dimensions"]}
            by_name.setdefault(metric["MetricName"], []).append(dims)
        stats = client.get_metric_statistics(
            Namespace=lt.metric_namespace,
            MetricName=lt.metric_names.ttft,
            Dimensions=[
                {"Name": lt.variant_dimension, "Value": "SD"},
                {"Name": lt.prompt_class_dimension, "Value": "structured"},
            ],
            StartTime="2000-01-01T00:00:00Z",
            EndTime="2100-01-01T00:00:00Z",
            Period=86400,
            Statistics=["SampleCount", "Maximum"],
        )
    assert result.published is True and result.calls is not None and result.calls >= 1
    names = lt.metric_names
    for name in (
        names.ttft,
        names.inter_token_latency,
        names.time_per_output_token,
        names.e2e_latency,
        names.output_tokens_per_second,
        names.output_throughput,
        names.request_throughput,
        names.goodput,
        names.failed_requests,
    ):
        dims = by_name[name]
        assert {"Variant": "Base"} in dims and {"Variant": "SD"} in dims, name
        assert {"Variant": "SD", "PromptClass": "structured"} in dims, name
    # acceptance: Variant only, and only for the arm that exports it (never a fake 0)
    assert by_name[names.acceptance_rate] == [{"Variant": "SD"}]
    assert by_name[names.mean_acceptance_length] == [{"Variant": "SD"}]
    (point,) = stats["Datapoints"]
    # one TTFT value per successful structured SD request (moto matches dimension subsets,
    # so the Variant-only series is checked through build_metric_data below)
    assert point["SampleCount"] == 5
    assert point["Maximum"] == pytest.approx(59.0)


def test_value_arrays_respect_the_api_limits(fake_run_dir) -> None:
    config = build_config({})
    data = cloudwatch.build_metric_data(config, fake_run_dir, summarize(fake_run_dir))
    for datum in data:
        assert len(datum.get("Values", [])) <= cloudwatch.MAX_VALUES_PER_DATUM
        assert len(datum.get("Values", [])) == len(datum.get("Counts", []))
        assert datum["Unit"] in ("Milliseconds", "Count/Second", "Count", "None")
    many = list(
        cloudwatch._value_datums(
            "X", "Milliseconds", [], [i * 0.5 for i in range(400)], timestamp=None
        )
    )  # type: ignore[arg-type]
    assert [len(d["Values"]) for d in many] == [150, 150, 100]
    variant_only = [
        d
        for d in data
        if d["MetricName"] == config.loadtest.metric_names.ttft
        and d["Dimensions"] == [{"Name": "Variant", "Value": "SD"}]
    ]
    assert sum(sum(d["Counts"]) for d in variant_only) == 10  # every successful SD request
    assert sum(sum(d["Counts"]) for d in many) == 400


def test_no_credentials_disables_publishing_once(fake_run_dir, monkeypatch, caplog) -> None:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/config")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setattr(cloudwatch, "_warned_no_credentials", False)
    config = build_config({})
    summary = summarize(fake_run_dir)
    with caplog.at_level(logging.WARNING, logger="loadtest.cloudwatch"):
        first = cloudwatch.publish_run(config, fake_run_dir, summary)
        second = cloudwatch.publish_run(config, fake_run_dir, summary)
    assert first == second == CloudWatchResult(published=False, reason="no AWS credentials")
    assert sum("no AWS credentials" in r.message for r in caplog.records) == 1


def test_cloudwatch_errors_are_reported_not_raised(fake_run_dir) -> None:
    from botocore.exceptions import EndpointConnectionError

    class Failing:
        def put_metric_data(self, **_: object) -> None:
            raise EndpointConnectionError(endpoint_url="https://monitoring.invalid")

    result = cloudwatch.publish_run(
        build_config({}), fake_run_dir, summarize(fake_run_dir), client=Failing()
    )
    assert result.published is False and "monitoring.invalid" in (result.reason or "")


def test_lossless_figures_go_out_only_when_the_check_applies(fake_run_dir) -> None:
    """The lossless alarm's datum: the prefix agreement and the mismatch count, for the SD
    Variant; none at temperature > 0, where outputs may differ. Here each SD text is the
    baseline's first 4 of 16 tokens (one word per chunk on both arms): 6 mismatches at 0.25."""
    config = build_config({})
    names = config.loadtest.metric_names
    summary = summarize(fake_run_dir)
    sd = [{"Name": config.loadtest.variant_dimension, "Value": "SD"}]

    def lossless(data: list[dict]) -> dict[str, float]:
        return {
            d["MetricName"]: d["Value"]
            for d in data
            if d["MetricName"] in (names.lossless_prefix_agreement, names.lossless_mismatches)
            and d["Dimensions"] == sd
        }

    data = cloudwatch.build_metric_data(config, fake_run_dir, summary)
    assert summary.lossless.prefix_agreement_rate == pytest.approx(4 / 16)
    assert lossless(data) == {
        names.lossless_prefix_agreement: pytest.approx(4 / 16),
        names.lossless_mismatches: 6,
    }
    warm = summary.model_copy(
        update={"lossless": summary.lossless.model_copy(update={"applicable": False})}
    )
    assert lossless(cloudwatch.build_metric_data(config, fake_run_dir, warm)) == {}
