"""Shared fixtures for the CDK tests: the app is synthesized once per session (jsii is slow)."""

from __future__ import annotations

import pytest
from cdk_synth import Synthesized, synthesize


@pytest.fixture(scope="session")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The default app (what `cdk deploy` with the shipped cdk.json deploys, given the
    plugin digest it requires: a placeholder here)."""
    return synthesize({}, tmp_path_factory.mktemp("cdk.out"))


OPERATOR_ARN = "arn:aws:iam::123456789012:role/Oncall"
TRAFFIC_FILE = "runs/pilot/traffic.jsonl"  # a replayed trace: the load test reads its copy


@pytest.fixture(scope="session")
def synth_options(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """Every non-default option at once: Capacity Block in one AZ, EFA, placement group,
    public endpoint restricted to a CIDR, an explicit account, an admin principal, a
    rollout operator."""
    overrides = {
        "experiment.account": "123456789012",
        "experiment.cluster.neuron_nodes.capacity_type": "capacity-block",
        "experiment.cluster.neuron_nodes.capacity_reservation_id": "cr-0123456789abcdef0",
        "experiment.cluster.neuron_nodes.availability_zone": "us-east-2b",
        "experiment.cluster.neuron_nodes.efa": "true",
        "experiment.cluster.neuron_nodes.placement_group": "true",
        "experiment.cluster.endpoint_access": "public-and-private",
        "experiment.cluster.public_access_cidrs": '["203.0.113.0/24"]',
        "experiment.cluster.admin_principal_arns": '["arn:aws:iam::123456789012:role/Admin"]',
        "experiment.routing.eks.operator_principal_arns": f'["{OPERATOR_ARN}"]',
        "experiment.model_store.retain_on_delete": "false",
        "experiment.loadtest.traffic.file": TRAFFIC_FILE,
    }
    return synthesize(overrides, tmp_path_factory.mktemp("cdk.out-options"))


@pytest.fixture(scope="session")
def synth_reservation(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The Neuron nodes on an on-demand capacity reservation (ODCR) in one AZ."""
    overrides = {
        "experiment.cluster.neuron_nodes.capacity_type": "reservation",
        "experiment.cluster.neuron_nodes.capacity_reservation_id": "cr-0fedcba9876543210",
        "experiment.cluster.neuron_nodes.availability_zone": "us-east-2c",
    }
    return synthesize(overrides, tmp_path_factory.mktemp("cdk.out-reservation"))
