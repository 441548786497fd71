"""Every command line reads `-c KEY=VALUE` through the one parser of experiment/loading.py:
same syntax, same prefixes (`experiment.` optional), same errors, and the value reaches what
the command produces. Runs the real CLIs as a user would (subprocesses)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from experiment.config.upstreams import last_checked
from experiment.loading import PROJECT_ROOT, cdk_json_context

pytestmark = [pytest.mark.integration, pytest.mark.timeout(360)]

# Each CLI with the arguments it needs besides the override (none of them reaches a server:
# the configuration is built, and rejected, before anything starts).
CLIS: dict[str, list[str]] = {
    "charts": [
        "-m",
        "charts",
        "--out",
        "{tmp}/dist",
        "--bucket",
        "b",
        "--loadtest-image",
        "i",
        "--prometheus-url",
        "https://aps-workspaces.us-east-2.amazonaws.com/workspaces/w/",
    ],
    "loadtest": ["-m", "loadtest", "run", "--local", "--no-cloudwatch", "--out", "{tmp}/run"],
    "local_run": ["-m", "local_run", "--smoke"],
    "tune": ["-m", "tune", "--target", "trn2"],
}
BAD_OVERRIDES = {
    "serving.num_speculative_tokens=16": "serving.num_speculative_tokens is 16; choose k",
    "experiment.local.num_speculative_tokens=0": "local.num_speculative_tokens is 0; choose k",
    "servng.port=8000": "servng: unknown key",
}


def _k_values(text: str) -> set[str]:
    """Every k written in the output: in the spec JSON, in the rendered vLLM command, escaped
    or not (a CloudFormation template holds the manifests as JSON strings)."""
    return set(re.findall(r'num_speculative_tokens[\\"]*: ?(\d+)', text))


def _run(
    args: list[str], tmp_path: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, *(arg.replace("{tmp}", str(tmp_path)) for arg in args)]
    return subprocess.run(
        argv,
        cwd=PROJECT_ROOT,
        env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize("override", sorted(BAD_OVERRIDES))
@pytest.mark.parametrize("cli", sorted(CLIS))
def test_every_cli_rejects_the_same_override_with_the_same_message(
    cli: str, override: str, tmp_path: Path
) -> None:
    result = _run([*CLIS[cli], "-c", override], tmp_path)
    assert result.returncode == 2, result.stderr
    assert BAD_OVERRIDES[override] in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()  # nothing started, nothing written


# What python -m charts and the CDK app require besides the configuration, as cdk synth does:
# the deploy pins (placeholders of the right form; nothing is downloaded), and the calendar
# read on the tests' fixed day (tests/conftest.py, calendar_clock).
DEPLOY = {
    "routing.eks.gateway_api_plugin_sha256": "0" * 64,
    "cluster.s3_csi_addon_version": "v2.1.0-eksbuild.1",
    "cluster.cloudwatch_addon_version": "v4.1.0-eksbuild.1",
    "model_store.hub_revisions": json.dumps(
        {"Qwen/Qwen3-32B": "1" * 40, "Qwen/Qwen3-1.7B": "2" * 40}
    ),
    "upstreams.as_of": str(last_checked()),
}


def test_charts_renders_the_overridden_k(tmp_path: Path) -> None:
    # The defect of issue 14: python -m charts silently ignored -c serving.* before.
    deploy = [arg for key, value in DEPLOY.items() for arg in ("-c", f"{key}={value}")]
    result = _run([*CLIS["charts"], *deploy, "-c", "serving.num_speculative_tokens=5"], tmp_path)
    assert result.returncode == 0, result.stderr
    serving = next((tmp_path / "dist").glob("*serving.k8s.yaml")).read_text()
    assert _k_values(serving) == {"5"}


def test_tune_plan_reads_the_override(tmp_path: Path) -> None:
    result = _run(
        [*CLIS["tune"], "-c", "cluster.neuron_nodes.instance_type=trn2u.48xlarge"], tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert "trn2u.48xlarge" in result.stdout


@pytest.mark.infra
def test_cdk_app_renders_the_overridden_k(tmp_path: Path) -> None:
    # What `cdk synth -c serving.num_speculative_tokens=5` runs: app.py with the context in
    # CDK_CONTEXT_JSON (the CLI's -c values arrive as strings) and the output in CDK_OUTDIR.
    context = {**cdk_json_context(), **DEPLOY, "serving.num_speculative_tokens": "5"}
    result = _run(
        ["app.py"],
        tmp_path,
        env={"CDK_CONTEXT_JSON": json.dumps(context), "CDK_OUTDIR": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr
    assert _k_values((tmp_path / "Cluster.template.json").read_text()) == {"5"}
