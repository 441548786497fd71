"""The kubectl path of docs/serving.md ("Deploying with kubectl"): what `python -m charts`
writes, followed in the documented order, yields the Rollout `cdk deploy` yields: created
with the baseline template, merge-patched into the speculative revision after its stable
revision is set, and back with the restore patch."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from merge_patch import merge_patch
from workspace import DEPLOY_PINS, PROMETHEUS_URL

from charts.rollout import (
    CANARY_PATCH_FILE,
    RESTORE_PATCH_FILE,
    ROLLOUT_ENV_FILE,
    STABLE_REVISION_FIELD,
    revision_template,
)
from experiment import build_config
from experiment.config import Arm

pytestmark = pytest.mark.infra

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"
SERVING_DOC = ROOT / "docs" / "serving.md"
SECTION = "## Deploying with kubectl"
ARGS = [
    "--bucket", "example-model-store", "--loadtest-image", "123456789012.dkr.ecr.x/lt:1",
    *DEPLOY_PINS,
]  # fmt: skip


def render(out: Path, *extra: str) -> int:
    from charts.__main__ import main

    # jsii needs a supported Node: the venv's (tests/charts/conftest.py).
    os.environ["PATH"] = f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    return main(["--out", str(out), *ARGS, *extra])


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    (out / "0001-qwen-sd-loadtest.k8s.yaml").write_text("kind: Job\n")  # an older layout
    assert render(out, "--prometheus-url", PROMETHEUS_URL) == 0
    return out


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def env_file(path: Path) -> dict[str, str]:
    lines = path.read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def section() -> str:
    text = SERVING_DOC.read_text()
    start = text.index(SECTION)
    return text[start : text.index("\n## ", start + 1)]


def commands() -> list[str]:
    """The section's shell block, one command per entry (continuations joined)."""
    (block,) = re.findall(r"```bash\n(.*?)```", section(), re.DOTALL)
    joined = block.replace("\\\n", " ")
    lines = [re.sub(r"\s+", " ", line).strip() for line in joined.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def test_the_documented_order_makes_the_speculative_revision(dist: Path) -> None:
    config = build_config({})
    env = env_file(dist / ROLLOUT_ENV_FILE)
    (rollout,) = [
        doc for path in sorted(dist.glob("*.k8s.yaml")) for doc in documents(path)
        if doc["kind"] == "Rollout"
    ]  # fmt: skip
    assert rollout["metadata"]["name"] == env["ROLLOUT"]
    assert rollout["metadata"]["namespace"] == env["NAMESPACE"] == config.serving.namespace
    timeout = config.routing.eks.initial_revision_timeout_minutes
    assert env["STABLE_TIMEOUT"] == f"{timeout}m"  # as long as cdk deploy waits
    # Applied, the Rollout is the baseline (Argo makes it stable at once) ...
    assert rollout["spec"]["template"] == revision_template(config, Arm.BASELINE)
    # ... the canary patch makes its template the speculative revision, and nothing else ...
    canary = json.loads((dist / CANARY_PATCH_FILE).read_text())
    patched = merge_patch(rollout, canary)
    assert patched["spec"]["template"] == revision_template(config, Arm.SPECULATIVE)
    assert patched["spec"]["template"] != rollout["spec"]["template"]
    assert {**patched, "spec": {**patched["spec"], "template": None}} == {
        **rollout, "spec": {**rollout["spec"], "template": None}
    }  # fmt: skip
    # ... and the restore patch gives the baseline back.
    restore = json.loads((dist / RESTORE_PATCH_FILE).read_text())
    assert merge_patch(patched, restore) == rollout


def test_the_docs_name_what_make_dist_writes_and_it_holds_what_they_say(dist: Path) -> None:
    named = set(re.findall(r"dist/([\w.-]+\.(?:yaml|json|env))", section()))
    written = {path.name for path in dist.iterdir()}
    assert named == written, "docs/serving.md's kubectl section and python -m charts disagree"
    assert "0001-qwen-sd-loadtest.k8s.yaml" not in written  # the stale file was removed
    kinds = {path.name: {doc["kind"] for doc in documents(path)} for path in dist.glob("*.yaml")}
    serving, routing, loadtest = sorted(kinds)
    # The serving file has the arms' Services but no vLLM pods: they are the Rollout's.
    assert {"Service", "PodDisruptionBudget", "Job"} <= kinds[serving]
    assert not {"Deployment", "StatefulSet", "Rollout"} & kinds[serving]
    assert {"Rollout", "AnalysisTemplate", "HTTPRoute", "Gateway"} <= kinds[routing]
    assert "Job" in kinds[loadtest]


def test_the_documented_commands_follow_the_stack_order(dist: Path) -> None:
    """Serving, routing, wait for the stable revision (the field stacks/workloads.py waits
    for), the canary patch, then the load test."""
    steps = commands()
    assert steps[0] == f". dist/{ROLLOUT_ENV_FILE}"
    applies = [s.removeprefix("kubectl apply -f dist/") for s in steps if "kubectl apply" in s]
    assert applies == sorted(path.name for path in dist.glob("*.k8s.yaml"))
    (wait,) = [s for s in steps if s.startswith("kubectl wait")]
    (patch,) = [s for s in steps if s.startswith("kubectl patch")]
    assert f"--for=jsonpath='{{{STABLE_REVISION_FIELD}}}'" in wait
    assert '--timeout="$STABLE_TIMEOUT"' in wait
    assert f"--type merge --patch-file dist/{CANARY_PATCH_FILE}" in patch
    for command in (wait, patch):
        assert '"$ROLLOUT"' in command and '-n "$NAMESPACE"' in command
    (routing,) = [i for i, s in enumerate(steps) if "routing" in s]
    (loadtest,) = [i for i, s in enumerate(steps) if "loadtest" in s]
    assert routing < steps.index(wait) < steps.index(patch) < loadtest


def test_the_waited_field_is_in_the_rollout_status_schema() -> None:
    crd = yaml.safe_load((ROOT / "charts" / "crds" / "rollout-crd.yaml").read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v.get("storage")]
    schema = version["schema"]["openAPIV3Schema"]
    for key in STABLE_REVISION_FIELD.strip(".").split("."):
        schema = schema["properties"][key]
    assert schema["type"] == "string"


def test_without_a_workspace_the_documented_override_renders(tmp_path: Path) -> None:
    text = re.sub(r"\s+", " ", section())
    assert "DIST_ARGS='-c guardrails.live.enabled=false'" in text
    assert "--prometheus-url" in text or "PROMETHEUS_URL" in text
    assert render(tmp_path, "-c", "guardrails.live.enabled=false") == 0
    (analysis,) = [
        doc for path in tmp_path.glob("*.k8s.yaml") for doc in documents(path)
        if doc["kind"] == "AnalysisTemplate"
    ]  # fmt: skip
    assert all("cloudWatch" in m["provider"] for m in analysis["spec"]["metrics"])
    assert (tmp_path / CANARY_PATCH_FILE).exists()
