"""One validation for everything that deploys: ``cdk synth`` (stacks/app.py) and the kubectl
path (``python -m charts``) refuse the same configurations with the same message (deploy pins,
support calendar, configuration), and the kubectl path runs jsii on the venv's Node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import aws_cdk as cdk
import pytest

from experiment import ConfigError, loading
from experiment.loading import PROJECT_ROOT, cdk_json_context
from stacks import app as stacks_app
from stacks import build_app

pytestmark = pytest.mark.infra  # synthesizes the CDK app and the cdk8s charts

PINS = {
    "routing.eks.gateway_api_plugin_sha256": "0" * 64,
    "cluster.s3_csi_addon_version": "v2.1.0-eksbuild.1",
    "cluster.cloudwatch_addon_version": "v4.1.0-eksbuild.1",
    "model_store.hub_revisions": json.dumps(
        {"Qwen/Qwen3-32B": "1" * 40, "Qwen/Qwen3-1.7B": "2" * 40}
    ),
}
REFUSED = {
    "no pins": ({}, "model_store.hub_revisions needs a commit for"),
    "a malformed pin": (
        {**PINS, "cluster.cloudwatch_addon_version": "4.1.0"},
        "cluster.cloudwatch_addon_version '4.1.0' is not an EKS add-on version",
    ),
    "past its end of support": (
        {**PINS, "upstreams.as_of": "2027-03-01"},
        "envoy-gateway v1.9.3: support ended 2027-02-14",
    ),
    "a bad configuration": (
        {**PINS, "serving.num_speculative_tokens": "16"},
        "serving.num_speculative_tokens is 16",
    ),
}
CHARTS = ["--bucket", "b", "--loadtest-image", "i", "--prometheus-url",
          "https://aps-workspaces.us-east-2.amazonaws.com/workspaces/ws-example/"]  # fmt: skip
VENV_BIN = Path(sys.executable).parent


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_synth_and_the_kubectl_path_refuse_the_same(
    case: str, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    from charts.__main__ import main

    # Neither reads a cdk.context.json of this checkout: the pins are those of the case.
    monkeypatch.setattr(loading, "context_file_pins", lambda: {})
    overrides, message = REFUSED[case]
    app = cdk.App(context={**cdk_json_context(), **overrides}, outdir=str(tmp_path / "cdk.out"))
    with pytest.raises(ConfigError) as synth:
        build_app(app)
    assert message in str(synth.value)
    pairs = [arg for key, value in overrides.items() for arg in ("-c", f"{key}={value}")]
    assert main(["--out", str(tmp_path / "dist"), *CHARTS, *pairs]) == 2
    assert str(synth.value) in capsys.readouterr().err  # the very same message
    assert not (tmp_path / "dist").exists()


def test_both_accept_the_pins_recorded_in_the_context_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from charts.__main__ import main

    recorded = {
        "gateway_api_plugin": {
            "version": "v0.15.0",
            "asset": "gatewayapi-plugin-linux-amd64",
            "sha256": "f" * 64,
            "method": "release-api-digest",
            "source": "release API",
        },
        "eks_addons": {
            "kubernetes_version": "1.35",
            "region": "us-east-2",
            "versions": {
                "aws-mountpoint-s3-csi-driver": {"version": "v2.2.1-eksbuild.1", "source": "EKS"},
                "amazon-cloudwatch-observability": {
                    "version": "v4.5.0-eksbuild.2",
                    "source": "EKS",
                },
            },
        },
        "hub": {
            "endpoint": "https://huggingface.co",
            "revisions": {
                model: {"commit": commit, "source": "hub API"}
                for model, commit in json.loads(PINS["model_store.hub_revisions"]).items()
            },
        },
    }
    (tmp_path / "cdk.context.json").write_text(json.dumps({"experiment:pins": recorded}))
    read = loading.context_file_pins
    monkeypatch.setattr(loading, "context_file_pins", lambda: read(tmp_path))
    # The kubectl path reads the file; the import Job pulls the recorded commits.
    out = tmp_path / "dist"
    assert main(["--out", str(out), *CHARTS]) == 0
    serving = next(out.glob("*serving.k8s.yaml")).read_text()
    assert "Qwen/Qwen3-32B@" + "1" * 40 in serving
    # cdk synth gets the file's keys as context from the CDK CLI: the same values.
    monkeypatch.setattr(stacks_app, "create_stacks", lambda app, config: [])  # no constructs
    app = cdk.App(context={**cdk_json_context(), "experiment:pins": recorded})
    config, _ = build_app(app)
    assert config.routing.eks.gateway_api_plugin_sha256 == "f" * 64
    assert config.cluster.s3_csi_addon_version == "v2.2.1-eksbuild.1"


def test_the_kubectl_path_runs_the_venv_s_node_and_names_the_stack_outputs() -> None:
    # Started with only the system's directories on PATH (whose Node may be end-of-life), as
    # `python -m charts` is from a shell without the venv activated.
    result = subprocess.run(
        [sys.executable, "-m", "charts", "--help"],
        cwd=PROJECT_ROOT,
        env={**os.environ, "PATH": os.pathsep.join(["/usr/bin", "/bin"])},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "end-of-life" not in result.stdout + result.stderr
    for output in ("BucketName", "LoadTestImageUri", "PrometheusQueryUrl"):
        assert output in result.stdout
