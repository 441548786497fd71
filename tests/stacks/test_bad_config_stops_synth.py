"""A bad configuration stops the CDK app before a single construct (let alone a stack)
exists. Which configurations are bad, and their messages, is tested without synth in
tests/experiment/test_config_rejections.py; here a few kinds (field, cross-field, serving
rule, unknown key) go through the app itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import aws_cdk as cdk
import pytest
from cdk_synth import app_context

from experiment import ConfigError
from experiment.loading import PROJECT_ROOT, cdk_json_context
from stacks import build_app

pytestmark = pytest.mark.infra

BAD_CONFIGS = {
    "unknown-key": (
        {"experiment.serving.num_speculative_token": "7"},
        r"serving\.num_speculative_token: unknown key",
    ),
    "k-above-range": (
        {"serving.num_speculative_tokens": "16"},
        r"serving\.num_speculative_tokens is 16; choose k between 1 and 15",
    ),
    "tp-times-lnc-mismatch": (
        {"experiment.serving.tensor_parallel_size": "64"},
        r"tensor_parallel_size 64 with LNC 2 does not use the 32 logical NeuronCores",
    ),
    "capacity-block-without-az": (
        {
            "cluster.neuron_nodes.capacity_type": "capacity-block",
            "cluster.neuron_nodes.capacity_reservation_id": "cr-0123456789abcdef0",
        },
        r"'capacity-block' needs availability_zone",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_CONFIGS))
def test_app_stops_before_creating_any_construct(name: str, tmp_path) -> None:
    overrides, message = BAD_CONFIGS[name]
    app = cdk.App(context=app_context(overrides), outdir=str(tmp_path))
    with pytest.raises(ConfigError, match=message):
        build_app(app)
    assert app.node.children == []


def test_the_app_requires_the_plugin_digest(tmp_path) -> None:
    """cdk.json alone does not synthesize: the controller would run an unverified plugin."""
    app = cdk.App(context=cdk_json_context(), outdir=str(tmp_path))
    message = r"routing\.eks\.gateway_api_plugin_sha256 is required.*releases/tag/v0\.15\.0"
    with pytest.raises(ConfigError, match=message):
        build_app(app)
    assert app.node.children == []


def test_cdk_app_entry_point_exits_non_zero_with_the_message(tmp_path) -> None:
    # What `cdk synth -c serving.num_speculative_tokens=16` runs: app.py with the context in
    # CDK_CONTEXT_JSON and the output directory in CDK_OUTDIR.
    overrides, _ = BAD_CONFIGS["k-above-range"]
    env = {
        **os.environ,
        "CDK_CONTEXT_JSON": json.dumps(app_context(overrides)),
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
