"""Shared fixtures for the CDK tests: the app is synthesized once per session (jsii is slow)."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# jsii starts `node` from PATH: use the venv's supported Node, not an end-of-life system one.
_VENV_BIN = str(Path(sys.executable).parent)
if not os.environ.get("PATH", "").startswith(_VENV_BIN):
    os.environ["PATH"] = f"{_VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"

import aws_cdk as cdk  # noqa: E402

from experiment import ExperimentConfig  # noqa: E402
from experiment.loading import PROJECT_ROOT, cdk_json_context  # noqa: E402
from stacks import build_app  # noqa: E402

CHART_RESOURCE = "Custom::AWSCDK-EKS-KubernetesResource"
HELM_RESOURCE = "Custom::AWSCDK-EKS-HelmChart"


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
    """Synthesize the real app (cdk.json context + overrides) into ``outdir``."""
    context = {**cdk_json_context(), **context_overrides}
    app = cdk.App(context=context, outdir=str(outdir))
    config, stacks = build_app(app)
    assembly = app.synth()
    templates = {
        stack.node.id: assembly.get_stack_artifact(stack.artifact_id).template for stack in stacks
    }
    return Synthesized(config=config, outdir=outdir, templates=templates)


@pytest.fixture(scope="session")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The default app (what `cdk deploy` with the shipped cdk.json deploys)."""
    return synthesize({}, tmp_path_factory.mktemp("cdk.out"))


@pytest.fixture(scope="session")
def synth_options(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """Every non-default option at once: Capacity Block in one AZ, EFA, placement group,
    public endpoint restricted to a CIDR, an explicit account, an admin principal."""
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
        "experiment.model_store.retain_on_delete": "false",
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


__all__ = ["PROJECT_ROOT", "Synthesized", "synthesize"]
