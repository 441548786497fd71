"""Every bad configuration the issue lists is rejected by the config AND stops the app before a
single construct (let alone a stack) exists."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import aws_cdk as cdk
import pytest

from experiment import ConfigError, build_config
from experiment.loading import PROJECT_ROOT, cdk_json_context
from stacks import build_app

pytestmark = pytest.mark.infra

BAD_CONFIGS = {
    "unknown-key": (
        {"experiment.serving.num_speculative_token": "7"},
        r"serving\.num_speculative_token: unknown key",
    ),
    "k-below-range": (
        {"experiment.serving.num_speculative_tokens": "0"},
        r"choose k between 1 and 15",
    ),
    "k-above-range": (
        {"experiment.serving.num_speculative_tokens": "16"},
        r"choose k between 1 and 15",
    ),
    "tp-times-lnc-mismatch": (
        {"experiment.serving.tensor_parallel_size": "64"},
        r"tensor_parallel_size 64 with LNC 2 does not use the 32 logical NeuronCores",
    ),
    "capacity-block-without-reservation": (
        {"experiment.cluster.neuron_nodes.capacity_type": "capacity-block"},
        r"needs capacity_reservation_id",
    ),
    "capacity-block-without-az": (
        {
            "experiment.cluster.neuron_nodes.capacity_type": "capacity-block",
            "experiment.cluster.neuron_nodes.capacity_reservation_id": "cr-0123456789abcdef0",
        },
        r"'capacity-block' needs availability_zone",
    ),
    "reservation-without-az": (
        {
            "experiment.cluster.neuron_nodes.capacity_type": "reservation",
            "experiment.cluster.neuron_nodes.capacity_reservation_id": "cr-0123456789abcdef0",
        },
        r"'reservation' needs availability_zone",
    ),
    "capacity-az-outside-the-network": (
        {
            "experiment.cluster.neuron_nodes.capacity_type": "capacity-block",
            "experiment.cluster.neuron_nodes.capacity_reservation_id": "cr-0123456789abcdef0",
            "experiment.cluster.neuron_nodes.availability_zone": "us-east-2d",
        },
        r"availability_zone 'us-east-2d' is not one of network\.availability_zones",
    ),
    "empty-az-list": (
        {"experiment.network.availability_zones": "[]"},
        r"availability_zones must list at least 2 AZs",
    ),
    "bad-cidr": (
        {"experiment.network.vpc_cidr": "10.42.0.0/33"},
        r"vpc_cidr '10\.42\.0\.0/33' is not an IPv4 network",
    ),
    "node-group-min-above-max": (
        {
            "experiment.cluster.system_nodes.min_size": "4",
            "experiment.cluster.system_nodes.max_size": "3",
        },
        r"min_size 4 is greater than max_size 3",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_CONFIGS))
def test_config_rejects(name: str) -> None:
    overrides, message = BAD_CONFIGS[name]
    with pytest.raises(ConfigError, match=message):
        build_config({**cdk_json_context(), **overrides})


@pytest.mark.parametrize("name", sorted(BAD_CONFIGS))
def test_app_stops_before_creating_any_construct(name: str, tmp_path) -> None:
    overrides, message = BAD_CONFIGS[name]
    app = cdk.App(context={**cdk_json_context(), **overrides}, outdir=str(tmp_path))
    with pytest.raises(ConfigError, match=message):
        build_app(app)
    assert app.node.children == []


def test_cdk_app_entry_point_exits_non_zero_with_the_message(tmp_path) -> None:
    # What `cdk synth -c experiment.serving.num_speculative_tokens=16` runs: app.py with the
    # context in CDK_CONTEXT_JSON and the output directory in CDK_OUTDIR.
    overrides, _ = BAD_CONFIGS["k-above-range"]
    env = {
        **os.environ,
        "CDK_CONTEXT_JSON": json.dumps({**cdk_json_context(), **overrides}),
        "CDK_OUTDIR": str(tmp_path),
    }
    result = subprocess.run(
        [sys.executable, "app.py"],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1
    assert "cdk synth stopped: invalid experiment configuration" in result.stderr
    assert "choose k between 1 and 15" in result.stderr
    assert "Traceback" not in result.stderr
    assert not list(tmp_path.glob("*.template.json"))


def test_one_node_group_field_can_be_overridden_alone() -> None:
    # `-c experiment.cluster.system_nodes.max_size=5` must keep the other defaults.
    nodes = build_config({"experiment.cluster.system_nodes.max_size": "5"}).cluster.system_nodes
    assert nodes.max_size == 5 and nodes.instance_type and nodes.desired_size >= nodes.min_size
