"""Every pin in the synthesized app is a row of the support calendar, and the app says what the
calendar finds (experiment/config/upstreams.py)."""

from __future__ import annotations

import re
from datetime import date
from typing import Any

import aws_cdk as cdk
import pytest
from cdk_synth import HELM_RESOURCE, app_context

from experiment import ConfigError
from experiment.config import upstreams
from stacks import app as stacks_app

pytestmark = pytest.mark.infra

PINNED = {row.version for row in upstreams.UPSTREAMS if row.version}


def _images(objects: list[dict[str, Any]]) -> set[str]:
    found: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            image = value.get("image")
            if isinstance(image, str):
                found.add(image)
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(objects)
    return found


def test_every_pin_rendered_in_the_app_is_in_the_calendar(synth) -> None:
    cluster = synth.templates["Cluster"]["Resources"]
    versions = [
        r["Properties"]["Version"] for r in cluster.values() if r["Type"] == "AWS::EKS::Cluster"
    ]
    assert versions and set(versions) <= PINNED
    charts = [r["Properties"] for r in cluster.values() if r["Type"] == HELM_RESOURCE]
    assert charts and all(chart["Version"] in PINNED for chart in charts), charts
    addons = {
        r["Properties"]["AddonName"]: r["Properties"].get("AddonVersion")
        for r in cluster.values()
        if r["Type"] == "AWS::EKS::Addon"
    }
    for row in ("aws-mountpoint-s3-csi-driver", "amazon-cloudwatch-observability"):
        setting = upstreams.BY_NAME[row].setting
        assert setting is not None
        assert addons[row] == getattr(synth.config.cluster, setting.split(".")[1]), row
    # Container images with a tag (the load test's is a CDK asset, built from this repo).
    tagged = {image for image in _images(synth.manifests()) if ":" in image.rsplit("/", 1)[-1]}
    assert tagged
    for image in tagged:
        assert image.rsplit(":", 1)[1] in PINNED, f"{image} is not pinned in the calendar"
    # Every checkpoint the import Job pulls names a hub commit (the hub-checkpoints row).
    jobs = [o for o in synth.manifests() if o.get("kind") == "Job" and "model-import" in str(o)]
    assert jobs
    command = jobs[0]["spec"]["template"]["spec"]["containers"][0]["command"]
    models = [command[i + 1] for i, arg in enumerate(command) if arg == "--model"]
    assert [m.split("@")[0] for m in models] == synth.config.hub_models()
    assert all(re.fullmatch(r"[^@]+@[0-9a-f]{40}", model) for model in models), models


def test_synth_prints_the_calendar_s_warnings_and_refuses_a_pin_past_its_end(
    monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setattr(stacks_app, "create_stacks", lambda app, config: [])  # no constructs
    monkeypatch.setattr(upstreams, "today", lambda: date(2027, 2, 1))
    stacks_app.build_app(cdk.App(context=app_context({})))
    assert "support calendar: envoy-gateway v1.9.3: support ends 2027-02-14" in (
        capsys.readouterr().err
    )
    monkeypatch.setattr(upstreams, "today", lambda: date(2027, 3, 27))
    with pytest.raises(ConfigError, match=r"eks-1\.35 1\.35: support ended 2027-03-27.*extended"):
        stacks_app.build_app(cdk.App(context=app_context({})))
