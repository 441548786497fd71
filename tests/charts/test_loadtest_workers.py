"""The distributed load test in the cluster (loadtest.workers > 1): a master Job, a Job of
N worker pods and a headless Service, NetworkPolicies that open exactly the master's port to
the workers; strict Kubernetes schemas and checkov with the same reasoned skips."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import cdk8s
import kubernetes_validate
import pytest
import yaml

from charts import ClusterInputs, build_charts
from charts.app import check_arms
from charts.loadtest_job import (
    MASTER_ROLE,
    ROLE_LABEL,
    WORKER_ROLE,
    deadline_s,
    loadtest_manifests,
    master_service_name,
)
from charts.network_policy import network_policies
from experiment import build_config
from loadtest.__main__ import _parser

pytestmark = pytest.mark.infra

ROOT = Path(__file__).resolve().parents[2]
CONFIG = build_config({"experiment.loadtest.workers": "3"})
SINGLE = build_config({})
INPUTS = ClusterInputs(bucket_name="b", loadtest_image="123456789012.dkr.ecr.x/loadtest:abc")


def _kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def test_master_and_worker_jobs_share_image_size_and_deadline() -> None:
    docs = loadtest_manifests(CONFIG, INPUTS)
    master, workers = _kind(docs, "Job")
    assert master["spec"]["template"]["metadata"]["labels"][ROLE_LABEL] == MASTER_ROLE
    assert workers["spec"]["template"]["metadata"]["labels"][ROLE_LABEL] == WORKER_ROLE
    assert workers["spec"]["parallelism"] == workers["spec"]["completions"] == 3
    master_pod, worker_pod = (job["spec"]["template"]["spec"] for job in (master, workers))
    mc, wc = master_pod["containers"][0], worker_pod["containers"][0]
    assert mc["image"] == wc["image"] == INPUTS.loadtest_image
    assert mc["resources"] == wc["resources"]  # loadtest.pod per worker
    assert mc["resources"]["limits"]["cpu"] == str(CONFIG.loadtest.pod.cpu_limit)
    deadline = deadline_s(CONFIG)
    assert master["spec"]["activeDeadlineSeconds"] == workers["spec"]["activeDeadlineSeconds"]
    assert deadline == (
        CONFIG.loadtest.wait_ready_s
        + int(CONFIG.loadtest.max_duration_s)
        + 2 * CONFIG.loadtest.workers_connect_timeout_s  # each arm's master waits once
        + CONFIG.loadtest.job_deadline_margin_s
    )
    # Only the master reports: it has the role (service account) and the results volume.
    assert master_pod["serviceAccountName"] == CONFIG.loadtest.service_account
    assert "serviceAccountName" not in worker_pod
    assert master_pod["terminationGracePeriodSeconds"] == CONFIG.loadtest.termination_grace_s
    # The master's command is the real CLI's, told that its workers are the other Job's pods.
    args = _parser().parse_args(mc["command"][3:])
    assert args.workers_external and args.wait_ready == CONFIG.loadtest.wait_ready_s
    worker_command = wc["command"]
    assert worker_command[:3] == ["python", "-m", "loadtest.worker_pod"]
    host = worker_command[worker_command.index("--master-host") + 1]
    assert host == f"{master_service_name(CONFIG)}.{CONFIG.serving.namespace}.svc"
    port = worker_command[worker_command.index("--master-port") + 1]
    assert port == str(CONFIG.loadtest.master_port)
    assert float(worker_command[worker_command.index("--deadline-s") + 1]) == deadline


def test_headless_service_selects_only_the_master() -> None:
    (service,) = _kind(loadtest_manifests(CONFIG, INPUTS), "Service")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"][ROLE_LABEL] == MASTER_ROLE
    assert service["spec"]["ports"][0]["port"] == CONFIG.loadtest.master_port


def test_network_policies_allow_exactly_master_worker_and_loadtest_serving() -> None:
    policies = {p["metadata"]["name"]: p["spec"] for p in network_policies(CONFIG)}
    master = policies["qwen-sd-loadtest-master-from-workers"]
    assert master["podSelector"]["matchLabels"][ROLE_LABEL] == MASTER_ROLE
    (rule,) = master["ingress"]
    assert rule["from"][0]["podSelector"]["matchLabels"][ROLE_LABEL] == WORKER_ROLE
    assert rule["ports"] == [{"protocol": "TCP", "port": CONFIG.loadtest.master_port}]
    assert policies["qwen-sd-loadtest-no-ingress"]["ingress"] == []  # workers: no ingress
    serving = policies["qwen-sd-vllm-from-loadtest"]["ingress"][0]
    assert serving["ports"] == [{"protocol": "TCP", "port": CONFIG.serving.port}]
    # One worker: no master, no Service, no extra policy (today's single Job).
    assert len(network_policies(SINGLE)) == 2
    assert [d["kind"] for d in loadtest_manifests(SINGLE, INPUTS)] == [
        "ServiceAccount",
        "Role",  # the wait for both arms routed reads the Rollout and the Services
        "RoleBinding",
        "ConfigMap",
        "Job",
    ]


def test_workers_do_not_touch_the_serving_arms() -> None:
    check_arms(CONFIG)  # the identical-except-decoding proof holds with workers


@pytest.fixture(scope="module")
def distributed_documents(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    os.environ["PATH"] = f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    app = cdk8s.App(outdir=str(tmp_path_factory.mktemp("dist")))
    build_charts(app, CONFIG, INPUTS)
    app.synth()
    return [
        doc
        for file in sorted(Path(app.outdir).glob("*.k8s.yaml"))
        for doc in yaml.safe_load_all(file.read_text())
        if doc
    ]


@pytest.mark.infra
def test_distributed_manifests_pass_strict_schemas(distributed_documents) -> None:
    version = f"{CONFIG.cluster.kubernetes_version}.0"
    # Custom resources are validated against their CRDs in test_crd_schemas.py.
    custom_groups = {"gateway.networking.k8s.io", "gateway.envoyproxy.io", "argoproj.io"}
    for doc in distributed_documents:
        if doc["apiVersion"].split("/")[0] not in custom_groups:
            kubernetes_validate.validate(doc, version, strict=True)
    loadtest = [d for d in distributed_documents if "loadtest" in d["metadata"]["name"]]
    kinds = [d["kind"] for d in loadtest]
    assert kinds.count("Job") == 2 and kinds.count("NetworkPolicy") == 3


@pytest.mark.integration
@pytest.mark.timeout(360)
def test_distributed_manifests_pass_checkov(distributed_documents, tmp_path) -> None:
    checkov = ROOT / ".venv-scan" / "bin" / "checkov"
    if not checkov.exists():
        pytest.fail(f"{checkov} is missing: run `make scan-install`")
    (tmp_path / "all.yaml").write_text(yaml.safe_dump_all(distributed_documents))
    result = subprocess.run(
        [str(checkov), "-d", str(tmp_path), "--framework", "kubernetes", "--skip-download",
         "--compact", "-o", "json"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "BC_SKIP_MAPPING": "TRUE"},
    )  # fmt: skip
    report = json.loads(result.stdout)
    failed = report["results"]["failed_checks"]
    assert failed == [], [(c["check_id"], c["resource"]) for c in failed]
    assert report["summary"]["passed"] > 0
