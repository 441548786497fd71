"""Synthesizing the real CDK app for tests, and reading the result.

A module of its own (not conftest.py): test modules import it by a name no other test
directory uses, which ``from conftest import ...`` cannot guarantee when the whole suite runs."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# jsii starts `node` from PATH: use the venv's supported Node, not an end-of-life system one.
_VENV_BIN = str(Path(sys.executable).parent)
if not os.environ.get("PATH", "").startswith(_VENV_BIN):
    os.environ["PATH"] = f"{_VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"

import aws_cdk as cdk  # noqa: E402

from experiment import ExperimentConfig  # noqa: E402
from experiment.config.upstreams import last_checked  # noqa: E402
from experiment.loading import cdk_json_context  # noqa: E402
from stacks import build_app  # noqa: E402

CHART_RESOURCE = "Custom::AWSCDK-EKS-KubernetesResource"
HELM_RESOURCE = "Custom::AWSCDK-EKS-HelmChart"
# The app requires routing.eks.gateway_api_plugin_sha256, which has no default (the operator
# reads it on the plugin's release page). No test downloads the plugin: a placeholder digest.
PLUGIN_SHA256 = "0" * 64
PLUGIN_SHA256_KEY = "experiment.routing.eks.gateway_api_plugin_sha256"
# The app also requires the two add-on versions (read with aws eks describe-addon-versions);
# placeholders of the right form here.
ADDON_VERSIONS = {
    "experiment.cluster.s3_csi_addon_version": "v2.1.0-eksbuild.1",
    "experiment.cluster.cloudwatch_addon_version": "v4.1.0-eksbuild.1",
}
# And a hub commit for every checkpoint the import Job pulls (the operator reads them on the
# models' hub pages): placeholders for the models any profile or tuning test imports. One JSON
# value, as on the command line: the drafter's id holds dots.
HUB_MODELS = ("Qwen/Qwen3-32B", "Qwen/Qwen3-1.7B", "Qwen/Qwen3-0.6B",
              "RedHatAI/Qwen3-32B-speculator.eagle3")  # fmt: skip
HUB_COMMITS = {model: f"{index:x}" * 40 for index, model in enumerate(HUB_MODELS, start=1)}
HUB_REVISIONS = {"experiment.model_store.hub_revisions": json.dumps(HUB_COMMITS)}


# A synth in another process (the CDK CLI, app.py) reads the calendar on this fixed day, the
# one tests/conftest.py gives every in-process synth (calendar_clock).
CALENDAR_AS_OF = {"experiment.upstreams.as_of": str(last_checked())}


def app_context(overrides: dict[str, Any]) -> dict[str, Any]:
    """cdk.json's context, the placeholder plugin digest, add-on versions and hub commits, then
    ``overrides``."""
    return {
        **cdk_json_context(),
        PLUGIN_SHA256_KEY: PLUGIN_SHA256,
        **ADDON_VERSIONS,
        **HUB_REVISIONS,
        **overrides,
    }


@dataclass
class Synthesized:
    config: ExperimentConfig
    outdir: Path
    templates: dict[str, dict[str, Any]]  # stack construct id -> CloudFormation template

    def resources(self, stack: str, type_name: str) -> dict[str, dict[str, Any]]:
        return {
            logical_id: resource
            for logical_id, resource in self.templates[stack]["Resources"].items()
            if resource["Type"] == type_name
        }

    def manifests(self) -> list[dict[str, Any]]:
        """Every Kubernetes object the app applies through kubectl (charts, add-on manifests)."""
        objects = []
        for template in self.templates.values():
            for resource in template["Resources"].values():
                if resource["Type"] == CHART_RESOURCE:
                    objects.extend(decode_manifest(resource["Properties"]["Manifest"]))
        return objects


def decode_manifest(manifest: Any) -> list[dict[str, Any]]:
    # A manifest with CDK tokens is an Fn::Join of literal pieces and references; replace the
    # references with a placeholder string so the JSON parses.
    if isinstance(manifest, dict) and "Fn::Join" in manifest:
        separator, parts = manifest["Fn::Join"]
        manifest = separator.join(part if isinstance(part, str) else "TOKEN" for part in parts)
    return json.loads(manifest)


def synthesize(context_overrides: dict[str, Any], outdir: Path) -> Synthesized:
    """Synthesize the real app (``app_context(context_overrides)``) into ``outdir``."""
    context = app_context(context_overrides)
    app = cdk.App(context=context, outdir=str(outdir))
    config, stacks = build_app(app)
    assembly = app.synth()
    templates = {
        stack.node.id: assembly.get_stack_artifact(stack.artifact_id).template for stack in stacks
    }
    return Synthesized(config=config, outdir=outdir, templates=templates)
