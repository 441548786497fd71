"""NetworkPolicies: only the load-test pods may reach the vLLM services; nothing may
reach the load-test pods. Enforced when the VPC CNI network-policy agent is enabled."""

from __future__ import annotations

from typing import Any

from charts.loadtest_job import COMPONENT as LOADTEST_COMPONENT
from charts.naming import COMPONENT, NAME, PART_OF, labels, metadata
from experiment.config import ExperimentConfig


def _policy(config: ExperimentConfig, name: str, pods: dict[str, str], ingress: list) -> dict:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(config, name, labels(config, "network-policy", name)),
        "spec": {"podSelector": {"matchLabels": pods}, "policyTypes": ["Ingress"],
                 "ingress": ingress},
    }  # fmt: skip


def network_policies(config: ExperimentConfig) -> list[dict[str, Any]]:
    loadtest_pods = {PART_OF: config.project, COMPONENT: LOADTEST_COMPONENT}
    vllm_pods = {PART_OF: config.project, NAME: "vllm"}
    from_loadtest = {
        "from": [{"podSelector": {"matchLabels": loadtest_pods}}],
        "ports": [{"protocol": "TCP", "port": config.serving.port}],
    }
    return [
        _policy(config, f"{config.project}-vllm-from-loadtest", vllm_pods, [from_loadtest]),
        _policy(config, f"{config.project}-loadtest-no-ingress", loadtest_pods, []),
    ]
