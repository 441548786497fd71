"""What the charts need from the CDK stacks (or from the command line for plain YAML)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ClusterInputs:
    """Values created by the CDK stacks; CDK token strings are fine (resolved at deploy)."""

    bucket_name: str
    loadtest_image: str
    # The Prometheus workspace's query URL (the AMP workspace's PrometheusEndpoint), which the
    # rollback analysis queries; required when guardrails.live.enabled.
    prometheus_url: str | None = None
