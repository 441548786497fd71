"""`cdk synth -c experiment.serving.profile=new-deployment` from a fresh clone: nothing but the
one setting (and the traffic-router plugin digest every synth needs), and the app synthesizes
the vllm-neuron 1.x pair (its pinned DLC, EAGLE3, no NxD Inference key); an invalid plugin
combination stops synth with the setting named."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cdk_synth import CALENDAR_AS_OF, CHART_RESOURCE, app_context, decode_manifest

from charts.vllm_service import COMMAND_ANNOTATION
from experiment.config import PLUGIN_IMAGE
from experiment.loading import PROJECT_ROOT

pytestmark = pytest.mark.infra

PROFILE = {"experiment.serving.profile": "new-deployment"}
NXDI_ONLY = ("override_neuron_config", "save_sharded_checkpoint", "enable_fused_speculation")


def _run_app(overrides: dict[str, str], outdir: Path) -> subprocess.CompletedProcess[str]:
    # What `cdk synth -c KEY=VALUE` runs: app.py with the context in CDK_CONTEXT_JSON.
    env = {
        **os.environ,
        "CDK_CONTEXT_JSON": json.dumps(app_context({**CALENDAR_AS_OF, **overrides})),
        "CDK_OUTDIR": str(outdir),
    }
    return subprocess.run(
        [sys.executable, "app.py"],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )


def _manifests(outdir: Path) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    for template in outdir.glob("*.template.json"):
        for resource in json.loads(template.read_text())["Resources"].values():
            if resource["Type"] == CHART_RESOURCE:
                objects.extend(decode_manifest(resource["Properties"]["Manifest"]))
    return objects


def test_the_plugin_profile_synthesizes_with_only_the_one_setting(tmp_path: Path) -> None:
    result = _run_app(PROFILE, tmp_path)
    assert result.returncode == 0, result.stderr
    # The two arms are the Rollout's revisions: the baseline as created, the speculative
    # template as the KubernetesPatch applies it.
    (rollout,) = [obj for obj in _manifests(tmp_path) if obj["kind"] == "Rollout"]
    (patch,) = [
        resource["Properties"]
        for template in tmp_path.glob("*.template.json")
        for resource in json.loads(template.read_text())["Resources"].values()
        if resource["Type"] == "Custom::AWSCDK-EKS-KubernetesPatch"
    ]
    arms = {
        "qwen-vllm": rollout["spec"]["template"],
        "qwen-sd-vllm": json.loads(patch["ApplyPatchJson"])["spec"]["template"],
    }
    for name, pod in arms.items():
        command = pod["metadata"]["annotations"][COMMAND_ANNOTATION]
        assert pod["spec"]["containers"][0]["image"] == PLUGIN_IMAGE, name
        assert '"neuron_config"' in command, name
        assert "--no-enable-prefix-caching" in command, name
        assert [key for key in NXDI_ONLY if key in command] == [], name
    assert arms["qwen-sd-vllm"]["metadata"]["labels"]["app.kubernetes.io/instance"] == (
        "qwen-sd-vllm"
    )
    speculative = arms["qwen-sd-vllm"]["metadata"]["annotations"]
    assert '"method":"eagle3"' in speculative[COMMAND_ANNOTATION]
    assert "RedHatAI/Qwen3-32B-speculator.eagle3" in speculative[COMMAND_ANNOTATION]


def test_a_plain_draft_on_the_plugin_profile_stops_synth(tmp_path: Path) -> None:
    result = _run_app({**PROFILE, "experiment.serving.draft_model": "Qwen/Qwen3-1.7B"}, tmp_path)
    assert result.returncode == 1
    assert "serving.draft_model Qwen/Qwen3-1.7B is a plain model" in result.stderr
    assert "Traceback" not in result.stderr
    assert not list(tmp_path.glob("*.template.json"))
