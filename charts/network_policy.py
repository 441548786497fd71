"""NetworkPolicies: only the load-test pods may reach the vLLM services; nothing may
reach the load-test pods, except the Locust masters from their workers (``loadtest.workers``
> 1), each master port only from its own workers (arms at once: each arm's workers reach
only their arm's master, charts/loadtest_job.py ``worker_sets``). Enforced when the VPC CNI
network-policy agent is enabled.

The master talks to the services too (``/health`` before the run, ``/metrics`` around the
window), so the serving policy admits every load-test pod, master and workers. Workers
connect to the master (ZeroMQ; the master answers on the same connection), so workers
themselves need no ingress.

The tiered arm (``loadtest.drive_gateway``) needs nothing more: no policy here limits the load-test
pods' egress, none selects the gateway's Envoy pods in Envoy Gateway's namespace (neither
this project nor the Envoy Gateway chart installs one there), and the Envoy pods reach the
vLLM pods through ``<project>-vllm-from-gateway`` (charts/gateway.py).

The guardrails' managed collector (``guardrails.live.enabled``) is no pod: the AMP scraper
reaches the pods from network interfaces it places in the cluster's subnets, so a
NetworkPolicy can name it only by address (``ipBlock``; its security group cannot appear in
a policy). ``<project>-vllm-metrics-from-collector`` admits the private subnets the collector
scrapes from (``collector_cidrs``: the stacks pass their CIDRs; plain YAML falls back to
``network.vpc_cidr``) to the serving port and nothing else. vLLM serves ``/metrics`` on its
API port, so this admits the API as well, and to every address in those subnets (nodes and,
under the VPC CNI, pods), not only the collector: a port-level policy cannot separate a path.
It is still the least reach available: nothing outside the private subnets gets in (the
Services are ClusterIP, the gateway is internal, no endpoint is public). The Envoy metrics
port 19001 needs no policy: no policy selects the Envoy pods (above), so it is reachable
already, and a policy selecting them would cut every client of the gateway's listener that is
not ours to enumerate."""

from __future__ import annotations

from typing import Any

from charts.inputs import ClusterInputs
from charts.loadtest_job import COMPONENT as LOADTEST_COMPONENT
from charts.loadtest_job import (
    MASTER_ROLE,
    ROLE_LABEL,
    distributed,
    worker_pod_labels,
    worker_sets,
)
from charts.naming import COMPONENT, NAME, PART_OF, labels, metadata
from experiment.config import ExperimentConfig


def collector_cidrs(config: ExperimentConfig, inputs: ClusterInputs) -> list[str]:
    """Where the managed Prometheus collector scrapes from: its network interfaces are in
    the subnets the scraper is given, the VPC's private subnets (stacks pass their CIDRs);
    without them (plain YAML) the VPC's CIDR, which holds them."""
    return list(inputs.private_subnet_cidrs) or [config.network.vpc_cidr]


def _policy(config: ExperimentConfig, name: str, pods: dict[str, str], ingress: list) -> dict:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(config, name, labels(config, "network-policy", name)),
        "spec": {"podSelector": {"matchLabels": pods}, "policyTypes": ["Ingress"],
                 "ingress": ingress},
    }  # fmt: skip


def network_policies(
    config: ExperimentConfig, inputs: ClusterInputs | None = None
) -> list[dict[str, Any]]:
    loadtest_pods = {PART_OF: config.project, COMPONENT: LOADTEST_COMPONENT}
    vllm_pods = {PART_OF: config.project, NAME: "vllm"}
    from_loadtest = {
        "from": [{"podSelector": {"matchLabels": loadtest_pods}}],
        "ports": [{"protocol": "TCP", "port": config.serving.port}],
    }
    policies = [
        _policy(config, f"{config.project}-vllm-from-loadtest", vllm_pods, [from_loadtest]),
        _policy(config, f"{config.project}-loadtest-no-ingress", loadtest_pods, []),
    ]
    if config.guardrails.live.enabled:
        from_collector = {
            "from": [
                {"ipBlock": {"cidr": cidr}}
                for cidr in collector_cidrs(config, inputs or ClusterInputs("", ""))
            ],
            "ports": [{"protocol": "TCP", "port": config.serving.port}],
        }
        name = f"{config.project}-vllm-metrics-from-collector"
        policies.append(_policy(config, name, vllm_pods, [from_collector]))
    if distributed(config):
        # Policies add up: this opens only the masters' ports, each only to its own workers
        # (the workers' labels select them: project, component, role and arm).
        from_workers = [
            {
                "from": [{"podSelector": {"matchLabels": worker_pod_labels(config, workers)}}],
                "ports": [{"protocol": "TCP", "port": workers.port}],
            }
            for workers in worker_sets(config)
        ]
        master_pods = {**loadtest_pods, ROLE_LABEL: MASTER_ROLE}
        name = f"{config.project}-loadtest-master-from-workers"
        policies.append(_policy(config, name, master_pods, from_workers))
    return policies
