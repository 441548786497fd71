"""Publish a run's metrics to CloudWatch for the dashboard, after the run (off the request path).

Names come from ``config.loadtest``: namespace ``metric_namespace``, metric names
``metric_names.*``, dimensions ``variant_dimension`` (value ``variant_labels[arm]``) and
``prompt_class_dimension``. Per-request metrics are published as raw values
(``Values``/``Counts`` arrays, so CloudWatch percentiles such as p99 are computed from
the real distribution) twice: with {Variant, PromptClass} and with {Variant} alone.
Run-level rates go out the same two ways. Acceptance goes out by its source
(``Acceptance.source`` of the SD arm): measured by the server (each request's figures, or
the counters) as AcceptanceRate and MeanAcceptanceLength with {Variant}; the client-side
estimate (servers without counters) as
AcceptanceRateEstimate per class; nothing when not available (frozen counters), so neither
the dashboard nor an alarm ever sees a fake 0. Latencies in milliseconds.

Without AWS credentials publishing is skipped with one log line; a CloudWatch error is
logged and recorded in summary.json, never raised.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from experiment.config import Arm, ExperimentConfig
from loadtest.metrics import per_token_itl_s, tpot_s
from loadtest.records import RequestRecord, read_records
from loadtest.results import (
    AcceptanceSource,
    CloudWatchResult,
    MetricBlock,
    RunSummary,
    ScopeStatistics,
)

LOG = logging.getLogger("loadtest.cloudwatch")
MAX_VALUES_PER_DATUM = 150  # PutMetricData limit for Values/Counts
DATUMS_PER_CALL = 100  # well under the 1000-datum / 1 MB request limits
VALUE_DECIMALS = 3  # 1 microsecond: identical values share one Counts entry

_warned_no_credentials = False


def _value_datums(
    name: str,
    unit: str,
    dimensions: list[dict[str, str]],
    values: Iterable[float],
    timestamp: datetime,
) -> Iterator[dict[str, Any]]:
    counts = Counter(round(v, VALUE_DECIMALS) for v in values)
    items = sorted(counts.items())
    for start in range(0, len(items), MAX_VALUES_PER_DATUM):
        part = items[start : start + MAX_VALUES_PER_DATUM]
        yield {
            "MetricName": name,
            "Dimensions": dimensions,
            "Timestamp": timestamp,
            "Unit": unit,
            "Values": [v for v, _ in part],
            "Counts": [float(c) for _, c in part],
        }


def _scalar(
    name: str, unit: str, dimensions: list[dict[str, str]], value: float | None, timestamp: datetime
) -> list[dict[str, Any]]:
    if value is None:
        return []
    return [
        {
            "MetricName": name,
            "Dimensions": dimensions,
            "Timestamp": timestamp,
            "Unit": unit,
            "Value": float(value),
        }
    ]


def build_metric_data(
    config: ExperimentConfig,
    run_dir: Path,
    summary: RunSummary,
    timestamp: datetime | None = None,
) -> list[dict[str, Any]]:
    lt = config.loadtest
    names = lt.metric_names
    timestamp = timestamp or datetime.now(UTC)
    data: list[dict[str, Any]] = []
    for arm in Arm:
        arm_summary = summary.arms.get(arm.value)
        path = run_dir / f"records_{arm.value}.jsonl"
        if arm_summary is None or not path.is_file():
            continue
        records = [r for r in read_records(path) if not r.warmup]
        variant = {"Name": lt.variant_dimension, "Value": lt.variant_labels[arm]}
        scopes: list[tuple[list[dict[str, str]], list[RequestRecord], MetricBlock]] = [
            ([variant], records, arm_summary.overall)
        ]
        for cls, block in arm_summary.by_class.items():
            dims = [variant, {"Name": lt.prompt_class_dimension, "Value": cls}]
            scopes.append((dims, [r for r in records if r.prompt_class == cls], block))
        for dims, scoped, block in scopes:
            ok = [r for r in scoped if r.ok]
            per_request = [
                (names.ttft, "Milliseconds", [r.ttft_s * 1000 for r in ok if r.ttft_s is not None]),
                (
                    names.inter_token_latency,
                    "Milliseconds",
                    [v * 1000 for r in ok for v in per_token_itl_s(r)],
                ),
                (
                    names.time_per_output_token,
                    "Milliseconds",
                    [t * 1000 for r in ok if (t := tpot_s(r)) is not None],
                ),
                (names.e2e_latency, "Milliseconds", [(r.e2e_s or 0.0) * 1000 for r in ok]),
                (
                    names.output_tokens_per_second,
                    "Count/Second",
                    [(r.output_tokens or 0) / r.e2e_s for r in ok if r.e2e_s],
                ),
            ]
            for name, unit, values in per_request:
                data.extend(_value_datums(name, unit, dims, values, timestamp))
            data += _scalar(
                names.output_throughput,
                "Count/Second",
                dims,
                block.output_throughput_tok_s,
                timestamp,
            )
            data += _scalar(
                names.request_throughput,
                "Count/Second",
                dims,
                block.request_throughput_rps,
                timestamp,
            )
            data += _scalar(names.goodput, "Count/Second", dims, block.goodput_rps, timestamp)
            data += _scalar(names.failed_requests, "Count", dims, block.failed, timestamp)
        acceptance = arm_summary.acceptance
        if acceptance.source.from_server:  # per request or counters: measured by the server
            data += _scalar(
                names.acceptance_rate, "None", [variant], acceptance.acceptance_rate, timestamp
            )
            data += _scalar(
                names.mean_acceptance_length,
                "None",
                [variant],
                acceptance.mean_acceptance_length,
                timestamp,
            )
    return data + guardrail_metric_data(config, summary, timestamp)


def guardrail_metric_data(
    config: ExperimentConfig, summary: RunSummary, timestamp: datetime
) -> list[dict[str, Any]]:
    """What the guardrail alarms (stacks/alarms.py) and the cost graphs watch: failed share
    and cost per 1M output tokens per arm (and class), the SD arm's acceptance estimate per
    class when its server has no counters, and the lossless mismatch count and prefix
    agreement. Only values the run has (never a fake 0)."""
    lt = config.loadtest
    names = lt.metric_names
    data: list[dict[str, Any]] = []

    def dims(arm: Arm, prompt_class: str | None) -> list[dict[str, str]]:
        variant = [{"Name": lt.variant_dimension, "Value": lt.variant_labels[arm]}]
        if prompt_class is None:
            return variant
        return [*variant, {"Name": lt.prompt_class_dimension, "Value": prompt_class}]

    cost = summary.cost
    for arm in Arm:
        arm_summary = summary.arms.get(arm.value)
        if arm_summary is None:
            continue
        scopes: dict[str | None, MetricBlock] = {None: arm_summary.overall}
        scopes.update(arm_summary.by_class)
        for prompt_class, block in scopes.items():
            share = block.failed / block.requests if block.requests else None
            data += _scalar(
                names.failed_request_share, "None", dims(arm, prompt_class), share, timestamp
            )
            if cost is not None:
                scope_cost = (
                    cost.overall if prompt_class is None else cost.by_class.get(prompt_class)
                )
                usd = None if scope_cost is None else scope_cost.usd_per_million_output_tokens
                data += _scalar(
                    names.cost_per_million_output_tokens,
                    "None",
                    dims(arm, prompt_class),
                    None if usd is None else usd.get(arm.value),
                    timestamp,
                )
    sd_arm = summary.arms.get(Arm.SPECULATIVE.value)
    estimated = sd_arm is not None and sd_arm.acceptance.source is AcceptanceSource.ESTIMATED
    # The estimate stands in only for a server without counters: next to live counters it
    # would be a second, less exact figure, and next to frozen ones it would hide that the
    # server's acceptance is not available.
    if summary.statistics is not None and estimated:
        scopes_stats: dict[str | None, ScopeStatistics] = {None: summary.statistics.overall}
        scopes_stats.update(summary.statistics.by_class)
        for prompt_class, scope in scopes_stats.items():
            data += _scalar(
                names.acceptance_rate_estimate,
                "None",
                dims(Arm.SPECULATIVE, prompt_class),
                scope.acceptance_rate_estimate.estimate,
                timestamp,
            )
    if summary.lossless.applicable and summary.lossless.prompts_compared:
        data += _scalar(
            names.lossless_mismatches,
            "Count",
            dims(Arm.SPECULATIVE, None),
            len(summary.lossless.mismatches),
            timestamp,
        )
        data += _scalar(
            names.lossless_prefix_agreement,
            "None",
            dims(Arm.SPECULATIVE, None),
            summary.lossless.prefix_agreement_rate,
            timestamp,
        )
    return data


def _has_credentials(session: boto3.Session) -> bool:
    try:
        return session.get_credentials() is not None
    except BotoCoreError:
        return False


def publish_run(
    config: ExperimentConfig, run_dir: Path, summary: RunSummary, client: Any = None
) -> CloudWatchResult:
    """Publish the run; returns what happened (stored under "cloudwatch" in summary.json).

    ``client``: a boto3 CloudWatch client (tests pass a stub); boto3 has no type stubs here."""
    global _warned_no_credentials
    if client is None:
        session = boto3.Session(region_name=config.region)
        if not _has_credentials(session):
            if not _warned_no_credentials:
                LOG.warning("CloudWatch publishing disabled: no AWS credentials found")
                _warned_no_credentials = True
            return CloudWatchResult(published=False, reason="no AWS credentials")
        client = session.client(
            "cloudwatch",
            config=Config(
                connect_timeout=5, read_timeout=20, retries={"max_attempts": 3, "mode": "standard"}
            ),
        )
    data = build_metric_data(config, Path(run_dir), summary)
    namespace = config.loadtest.metric_namespace
    calls = 0
    try:
        for start in range(0, len(data), DATUMS_PER_CALL):
            client.put_metric_data(
                Namespace=namespace, MetricData=data[start : start + DATUMS_PER_CALL]
            )
            calls += 1
    except (BotoCoreError, ClientError) as err:
        LOG.warning("CloudWatch publishing failed after %d calls: %s", calls, err)
        return CloudWatchResult(
            published=False, reason=str(err)[:500], calls=calls, namespace=namespace
        )
    LOG.info("published %d metric data to CloudWatch %s in %d calls", len(data), namespace, calls)
    return CloudWatchResult(published=True, namespace=namespace, datums=len(data), calls=calls)
