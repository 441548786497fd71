"""The distributed load test in the cluster (loadtest.workers > 1): the masters' Job, N worker
pods per arm (arms at once, the default: one Job per arm, each on its arm's master port) or
one Job serving both arms in turn (sequential), a headless Service with one port per master,
NetworkPolicies that open each master port to its own workers only; strict Kubernetes schemas
and checkov with the same reasoned skips."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import cdk8s
import kubernetes_validate
import pytest
import yaml
from workspace import PROMETHEUS_URL

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
from charts.naming import ARM_LABEL
from charts.network_policy import network_policies
from experiment import build_config
from experiment.config import Arm
from loadtest.__main__ import _parser
from loadtest.worker_pod import parser as worker_pod_parser

pytestmark = pytest.mark.infra

ROOT = Path(__file__).resolve().parents[2]
CONFIG = build_config({"experiment.loadtest.workers": "3"})  # arms at once: the default
SEQUENTIAL = build_config(
    {"experiment.loadtest.workers": "3", "experiment.loadtest.arms_mode": "sequential"}
)
SINGLE = build_config({})
# A named port is an IANA_SVC_NAME (kubernetes/kubernetes: staging/src/k8s.io/apimachinery/
# pkg/util/validation/validation.go, IsValidPortName); the JSON schemas do not check it.
PORT_NAME = re.compile(r"^(?=.{1,15}$)(?=.*[a-z])(?!-)(?!.*--)[-a-z0-9]*[a-z0-9]$")
INPUTS = ClusterInputs(
    bucket_name="b",
    loadtest_image="123456789012.dkr.ecr.x/loadtest:abc",
    prometheus_url=PROMETHEUS_URL,
)


def _kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def _option(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def test_master_and_worker_jobs_share_image_size_and_deadline() -> None:
    docs = loadtest_manifests(CONFIG, INPUTS)
    master, workers, _ = _kind(docs, "Job")
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
        + CONFIG.loadtest.workers_connect_timeout_s  # both masters wait at the same time
        + CONFIG.loadtest.job_deadline_margin_s
    )
    # Arms in turn: each arm's master waits for the worker pods once.
    assert deadline_s(SEQUENTIAL) == deadline + CONFIG.loadtest.workers_connect_timeout_s
    # Only the master reports: it has the role (service account) and the results volume.
    assert master_pod["serviceAccountName"] == CONFIG.loadtest.service_account
    assert "serviceAccountName" not in worker_pod
    assert master_pod["terminationGracePeriodSeconds"] == CONFIG.loadtest.termination_grace_s
    # The master's command is the real CLI's, told that its workers are the other Job's pods.
    args = _parser().parse_args(mc["command"][3:])
    assert args.workers_external and args.wait_ready == CONFIG.loadtest.wait_ready_s
    worker_command = wc["command"]
    assert worker_command[:3] == ["python", "-m", "loadtest.worker_pod"]
    host = _option(worker_command, "--master-host")
    assert host == f"{master_service_name(CONFIG)}.{CONFIG.serving.namespace}.svc"
    assert float(_option(worker_command, "--deadline-s")) == deadline


def _worker_jobs(config) -> dict[str | None, dict]:
    jobs = [j for j in _kind(loadtest_manifests(config, INPUTS), "Job")
            if j["spec"]["template"]["metadata"]["labels"][ROLE_LABEL] == WORKER_ROLE]  # fmt: skip
    return {j["spec"]["template"]["metadata"]["labels"].get(ARM_LABEL): j for j in jobs}


def test_arms_at_once_get_a_worker_job_each_on_their_own_masters_port() -> None:
    jobs = _worker_jobs(CONFIG)
    assert set(jobs) == {arm.value for arm in Arm}  # one set of N pods per arm
    ports = {}
    for arm in Arm:
        job = jobs[arm.value]
        assert arm.value in job["metadata"]["name"]
        assert job["spec"]["parallelism"] == job["spec"]["completions"] == 3
        command = job["spec"]["template"]["spec"]["containers"][0]["command"]
        ports[arm] = int(_option(command, "--master-port"))
        assert _option(command, "--arms") == "1"  # its own arm's master, once
        # The worker pod's own parser takes the chart's command.
        args = worker_pod_parser().parse_args(command[3:])
        assert (args.master_port, args.arms) == (ports[arm], 1)
    # The one source of the ports: the config, as the runner's masters bind them.
    assert ports == {arm: CONFIG.loadtest.master_port_of(arm) for arm in Arm}
    assert len(set(ports.values())) == len(Arm)


def test_arms_in_turn_share_one_worker_job_and_one_port() -> None:
    (job,) = _worker_jobs(SEQUENTIAL).values()
    assert ARM_LABEL not in job["spec"]["template"]["metadata"]["labels"]
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert _option(command, "--master-port") == str(SEQUENTIAL.loadtest.master_port)
    assert _option(command, "--arms") == str(len(Arm))  # every arm's master in turn
    (service,) = _kind(loadtest_manifests(SEQUENTIAL, INPUTS), "Service")
    assert [p["port"] for p in service["spec"]["ports"]] == [SEQUENTIAL.loadtest.master_port]
    (rule,) = _master_policy(SEQUENTIAL)["ingress"]
    assert rule["from"][0]["podSelector"]["matchLabels"][ROLE_LABEL] == WORKER_ROLE
    assert ARM_LABEL not in rule["from"][0]["podSelector"]["matchLabels"]


@pytest.mark.parametrize("config", [CONFIG, SEQUENTIAL], ids=["concurrent", "sequential"])
def test_headless_service_exposes_every_masters_port_on_the_master_pod(config) -> None:
    docs = loadtest_manifests(config, INPUTS)
    (service,) = _kind(docs, "Service")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"][ROLE_LABEL] == MASTER_ROLE
    master = _kind(docs, "Job")[0]
    assert set(service["spec"]["selector"].items()) <= set(
        master["spec"]["template"]["metadata"]["labels"].items()
    )
    ports = {p["name"]: p["targetPort"] for p in service["spec"]["ports"]}
    container = master["spec"]["template"]["spec"]["containers"][0]
    assert ports == {p["name"]: p["containerPort"] for p in container["ports"]}
    assert all(PORT_NAME.match(name) for name in ports), ports
    workers = _worker_jobs(config).values()
    targets = {
        int(_option(job["spec"]["template"]["spec"]["containers"][0]["command"], "--master-port"))
        for job in workers
    }
    assert targets == set(ports.values())  # every worker's port is served, none extra


def _master_policy(config) -> dict:
    policies = {p["metadata"]["name"]: p["spec"] for p in network_policies(config)}
    return policies[f"{config.project}-loadtest-master-from-workers"]


def test_network_policies_allow_exactly_master_worker_and_loadtest_serving() -> None:
    policies = {p["metadata"]["name"]: p["spec"] for p in network_policies(CONFIG)}
    master = _master_policy(CONFIG)
    assert master["podSelector"]["matchLabels"][ROLE_LABEL] == MASTER_ROLE
    # Each arm's workers reach their own arm's master port, and no other.
    jobs = _worker_jobs(CONFIG)
    opened = {}
    for rule in master["ingress"]:
        (peer,) = rule["from"]
        selector = peer["podSelector"]["matchLabels"]
        assert selector[ROLE_LABEL] == WORKER_ROLE
        arm = selector[ARM_LABEL]
        pod_labels = jobs[arm]["spec"]["template"]["metadata"]["labels"]
        assert set(selector.items()) <= set(pod_labels.items())  # it selects that Job's pods
        (port,) = rule["ports"]
        opened[arm] = port
    assert opened == {
        arm.value: {"protocol": "TCP", "port": CONFIG.loadtest.master_port_of(arm)} for arm in Arm
    }
    assert policies["qwen-sd-loadtest-no-ingress"]["ingress"] == []  # workers: no ingress
    serving = policies["qwen-sd-vllm-from-loadtest"]["ingress"][0]
    assert serving["ports"] == [{"protocol": "TCP", "port": CONFIG.serving.port}]
    # One worker: no master, no Service, no extra policy (today's single Job); the third is
    # the guardrails' collector's (charts/network_policy.py).
    assert [p["metadata"]["name"] for p in network_policies(SINGLE)] == [
        "qwen-sd-vllm-from-loadtest",
        "qwen-sd-loadtest-no-ingress",
        "qwen-sd-vllm-metrics-from-collector",
    ]
    assert [d["kind"] for d in loadtest_manifests(SINGLE, INPUTS)] == [
        "ServiceAccount",
        "Role",  # the wait for both arms routed reads the Rollout and the Services
        "RoleBinding",
        "ConfigMap",
        "Job",
    ]


def test_workers_do_not_touch_the_serving_arms() -> None:
    check_arms(CONFIG)  # the identical-except-decoding proof holds with workers


def _synth(config, outdir: Path) -> list[dict]:
    os.environ["PATH"] = f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    app = cdk8s.App(outdir=str(outdir))
    build_charts(app, config, INPUTS)
    app.synth()
    return [
        doc
        for file in sorted(Path(app.outdir).glob("*.k8s.yaml"))
        for doc in yaml.safe_load_all(file.read_text())
        if doc
    ]


@pytest.fixture(scope="module")
def distributed_documents(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    return _synth(CONFIG, tmp_path_factory.mktemp("dist"))


@pytest.mark.infra
@pytest.mark.parametrize("mode", ["concurrent", "sequential"])
def test_distributed_manifests_pass_strict_schemas(distributed_documents, mode, tmp_path) -> None:
    config = CONFIG if mode == "concurrent" else SEQUENTIAL
    documents = distributed_documents if mode == "concurrent" else _synth(config, tmp_path)
    version = f"{config.cluster.kubernetes_version}.0"
    # Custom resources are validated against their CRDs in test_crd_schemas.py.
    custom_groups = {"gateway.networking.k8s.io", "gateway.envoyproxy.io", "argoproj.io"}
    for doc in documents:
        if doc["apiVersion"].split("/")[0] not in custom_groups:
            kubernetes_validate.validate(doc, version, strict=True)
    loadtest = [d for d in documents if "loadtest" in d["metadata"]["name"]]
    kinds = [d["kind"] for d in loadtest]
    # The masters' Job plus a worker Job per arm (at once) or one for both (in turn).
    jobs = 1 + (len(Arm) if mode == "concurrent" else 1)
    assert kinds.count("Job") == jobs and kinds.count("NetworkPolicy") == 3
    (service,) = [d for d in loadtest if d["kind"] == "Service"]
    assert len(service["spec"]["ports"]) == (len(Arm) if mode == "concurrent" else 1)


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
