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
    private_subnet_cidrs: tuple[str, ...] = ()
