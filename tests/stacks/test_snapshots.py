"""Syrupy snapshots of every synthesized template (reviewed on change; say why in the commit).

Masked: asset hashes (change with any source file) and the content of the cdk8s chart
manifests, which charts/ owns and snapshots in tests/charts (a chart change must not break the
infra snapshot). The chart resources themselves, their dependencies and properties stay.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from cdk_synth import CHART_RESOURCE, decode_manifest
from syrupy.extensions.json import JSONSnapshotExtension

pytestmark = pytest.mark.infra

STACKS = ("Network", "ModelStore", "Cluster", "Observability")
ASSET_HASH = re.compile(r"[0-9a-f]{64}")


def _mask(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _mask(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_mask(item) for item in value]
    if isinstance(value, str):
        return ASSET_HASH.sub("<asset-hash>", value)
    return value


def _summarize_charts(template: dict[str, Any]) -> dict[str, Any]:
    template = json.loads(json.dumps(template))
    for logical_id, resource in template["Resources"].items():
        # cdk8s charts only (`Chart-<name>` in stacks/workloads.py); manifests the stacks
        # write themselves (the DRA driver's namespace) stay in the snapshot.
        if resource["Type"] == CHART_RESOURCE and logical_id.startswith("ClusterChart"):
            assert decode_manifest(resource["Properties"]["Manifest"])  # parses, not empty
            resource["Properties"]["Manifest"] = "<cdk8s chart: see tests/charts>"
    return template


@pytest.fixture
def json_snapshot(snapshot):
    return snapshot.use_extension(JSONSnapshotExtension)


@pytest.mark.parametrize("stack", STACKS)
def test_template_snapshot(synth, json_snapshot, stack: str) -> None:
    assert _mask(_summarize_charts(synth.templates[stack])) == json_snapshot


def test_masking_keeps_everything_but_hashes() -> None:
    digest = "a" * 64
    masked = _mask({"Key": f"{digest}.zip", "Count": 3, "List": ["x", digest]})
    assert masked == {"Key": "<asset-hash>.zip", "Count": 3, "List": ["x", "<asset-hash>"]}
