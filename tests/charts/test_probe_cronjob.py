"""The guardrail probe's manifests (charts/probe.py): the CronJob's bounds, the Pushgateway,
their NetworkPolicies, and when they are rendered."""

from __future__ import annotations

import pytest

from charts import ClusterInputs
from charts.gateway import gateway_url
from charts.loadtest_job import CONFIG_DIR, CONFIG_FILE, config_map_name
from charts.network_policy import collector_cidrs
from charts.probe import (
    PUSHGATEWAY_PORT,
    probe_manifests,
    probe_pod_labels,
    pushgateway_labels,
    pushgateway_url,
)
from experiment import build_config
from experiment.config import ExperimentConfig
from guardrails.scrape import PUSHGATEWAY_NAME

pytestmark = pytest.mark.infra

CONFIG = build_config({})
INPUTS = ClusterInputs(
    bucket_name="b", loadtest_image="image:tag", private_subnet_cidrs=("10.42.16.0/20",)
)


def _by_kind(config: ExperimentConfig = CONFIG, inputs: ClusterInputs = INPUTS) -> dict:
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in probe_manifests(config, inputs)}


def _one(kind: str, config: ExperimentConfig = CONFIG) -> dict:
    [doc] = [d for key, d in _by_kind(config).items() if key.startswith(f"{kind}/")]
    return doc


def test_cron_job_is_bounded_and_never_retried() -> None:
    probe = CONFIG.guardrails.probe
    spec = _one("CronJob")["spec"]
    assert spec["schedule"] == probe.schedule
    assert spec["concurrencyPolicy"] == "Forbid"
    assert spec["startingDeadlineSeconds"] > 0
    assert spec["successfulJobsHistoryLimit"] <= 1
    job = spec["jobTemplate"]["spec"]
    assert job["backoffLimit"] == 0
    assert job["activeDeadlineSeconds"] == probe.deadline_s
    pod = job["template"]["spec"]
    [container] = pod["containers"]
    assert container["image"] == INPUTS.loadtest_image
    assert container["command"] == [
        "python", "-m", "loadtest", "probe",
        "--gateway", gateway_url(CONFIG),
        "--pushgateway", pushgateway_url(CONFIG),
        "--config", f"{CONFIG_DIR}/{CONFIG_FILE}",
    ]  # fmt: skip
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"name": "config", "configMap": {"name": config_map_name(CONFIG)}} in pod["volumes"]
    # No AWS role, no API token, no reports: only the config and its scratch space.
    assert "serviceAccountName" not in pod and "initContainers" not in pod
    assert pod["automountServiceAccountToken"] is False
    assert {v["name"] for v in pod["volumes"]} == {"tmp", "config"}


def test_pushgateway_runs_as_nobody_read_only_with_limits() -> None:
    deployment = _one("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["image"].startswith("prom/pushgateway:v")
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert set(container["resources"]["limits"]) == {"cpu", "memory"}
    assert not any(arg.startswith("--persistence") for arg in container.get("args", []))
    # The collector keeps the Pushgateway's pods by this label (guardrails/scrape.py).
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/name"] == PUSHGATEWAY_NAME
    service = _one("Service")
    assert service["spec"]["selector"] == pushgateway_labels(CONFIG)
    assert [p["port"] for p in service["spec"]["ports"]] == [PUSHGATEWAY_PORT]
    assert pushgateway_url(CONFIG).endswith(f":{PUSHGATEWAY_PORT}")


def test_probe_pods_reach_only_dns_the_gateway_and_the_pushgateway() -> None:
    policies = {d["spec"]["podSelector"]["matchLabels"].get("app.kubernetes.io/name"): d
                for d in _by_kind().values() if d["kind"] == "NetworkPolicy"}  # fmt: skip
    probe = policies["probe"]["spec"]
    assert probe["podSelector"]["matchLabels"] == probe_pod_labels(CONFIG)
    assert probe["policyTypes"] == ["Ingress", "Egress"] and probe["ingress"] == []
    ports = sorted((rule["ports"][0]["port"], len(rule["to"])) for rule in probe["egress"])
    assert ports == sorted([(53, 1), (CONFIG.serving.port, 1), (PUSHGATEWAY_PORT, 1)])
    for rule in probe["egress"]:
        for peer in rule["to"]:
            assert "ipBlock" not in peer  # pods only, never an address range
    envoy = next(r for r in probe["egress"] if r["ports"][0]["port"] == CONFIG.serving.port)
    [peer] = envoy["to"]
    assert peer["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": CONFIG.routing.eks.namespace
    }


def test_pushgateway_admits_probe_pushes_and_collector_scrapes_only() -> None:
    selected = pushgateway_labels(CONFIG)
    policy = next(d for d in _by_kind().values()
                  if d["kind"] == "NetworkPolicy"
                  and d["spec"]["podSelector"]["matchLabels"] == selected)  # fmt: skip
    spec = policy["spec"]
    assert spec["egress"] == []
    [from_probe, from_collector] = spec["ingress"]
    assert from_probe["from"] == [{"podSelector": {"matchLabels": probe_pod_labels(CONFIG)}}]
    assert from_collector["from"] == [{"ipBlock": {"cidr": "10.42.16.0/20"}}]
    for rule in spec["ingress"]:
        assert rule["ports"] == [{"protocol": "TCP", "port": PUSHGATEWAY_PORT}]


def test_collector_cidrs_fall_back_to_the_vpc_without_the_stack() -> None:
    assert collector_cidrs(CONFIG, INPUTS) == ["10.42.16.0/20"]
    assert collector_cidrs(CONFIG, ClusterInputs("b", "i")) == [CONFIG.network.vpc_cidr]


@pytest.mark.parametrize("off", ["guardrails.live.enabled", "guardrails.probe.enabled"])
def test_nothing_is_rendered_when_live_guardrails_or_the_probe_are_off(off: str) -> None:
    assert probe_manifests(build_config({off: "false"}), INPUTS) == []
