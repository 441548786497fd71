"""What the charts need from the CDK stacks (or from the command line for plain YAML)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ClusterInputs:
    """Values created by the CDK stacks; CDK token strings are fine (resolved at deploy).

    ``private_subnet_cidrs``: the VPC's private subnets, where the managed Prometheus
    collector's network interfaces are (charts/network_policy.py ``collector_cidrs``); empty
    when the caller does not know them (plain YAML): the VPC's CIDR is used instead."""

    bucket_name: str
    loadtest_image: str
    # The guardrail workspace's Prometheus query root (https://aps-workspaces.<region>.
    # amazonaws.com/workspaces/<id>, no trailing slash), which the rollback analysis queries
    # with SigV4 in ``config.region`` (stacks/guardrails.py GuardrailWorkspace.query_url);
    # None when guardrails.live is off or no workspace exists (plain YAML without one).
    prometheus_url: str | None = None
    private_subnet_cidrs: tuple[str, ...] = ()
