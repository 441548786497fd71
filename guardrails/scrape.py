"""The scrape that feeds the rules: which targets, and the labels the rules rely on.

Written once for both places it runs: the workspace's managed collector on EKS
(``eks_scrape_config``, the ``AWS::APS::Scraper`` configuration blob) and the local Prometheus
(``local_scrape_config``). Both arms are scraped by one job with the same settings; only the
``arm`` label tells them apart (tests/charts/test_symmetry.py). The gateway's cluster
statistics are named after the gateway rule that sent the request (EKS: the EnvoyProxy's
``telemetry.metrics.clusterStatName``; locally: the Envoy cluster's name), copied into
``route``; every other Envoy statistic is dropped at the scrape, which keeps the workspace's
series (and its bill) small.
"""

from __future__ import annotations

from typing import Any

from experiment.config import Arm, ExperimentConfig
from guardrails.rules import (
    ARM,
    GATEWAY_REQUESTS,
    GATEWAY_RESPONSES,
    GATEWAY_RETRIES,
    PREFIX,
    ROUTE,
    jobs,
)

# Envoy's Prometheus endpoint (envoy docs, admin "/stats/prometheus"); Envoy Gateway serves it
# on the proxy's metrics port (gateway.envoyproxy.io v1.9 "Proxy Metrics": port 19001).
ENVOY_METRICS_PATH = "/stats/prometheus"
ENVOY_GATEWAY_METRICS_PORT = 19001
VLLM_METRICS_PATH = "/metrics"  # vLLM's OpenAI server (vllm/entrypoints/openai/api_server.py)
# The label carrying Envoy's cluster name in /stats/prometheus (Envoy's tag extraction,
# envoy/config/metrics/v3/stats.proto: "envoy.cluster_name" -> envoy_cluster_name).
ENVOY_CLUSTER_LABEL = "envoy_cluster_name"
# The Envoy Gateway cluster stat name: the HTTPRoute rule's name (EnvoyProxy CRD v1.9,
# telemetry.metrics.clusterStatName operators: %ROUTE_RULE_NAME%).
CLUSTER_STAT_NAME = "%ROUTE_RULE_NAME%"
# The only Envoy series the rules read, and `up`, which Prometheus writes itself.
GATEWAY_KEPT = "|".join((GATEWAY_REQUESTS, GATEWAY_RESPONSES, GATEWAY_RETRIES))


def gateway_metric_relabels() -> list[dict[str, Any]]:
    """Keep the rules' Envoy series only, each labelled with its rule (``route``)."""
    return [
        {"source_labels": ["__name__"], "regex": GATEWAY_KEPT, "action": "keep"},
        {"source_labels": [ENVOY_CLUSTER_LABEL], "target_label": ROUTE},
    ]


def vllm_metric_relabels() -> list[dict[str, Any]]:
    """Keep vLLM's own series (``vllm:``): the Python process metrics are not guardrails."""
    return [{"source_labels": ["__name__"], "regex": "vllm:.+", "action": "keep"}]


def pod_meta_label(label: str) -> str:
    """Prometheus' meta label of a pod label (kubernetes_sd_config, role pod: every character
    not valid in a label name becomes '_')."""
    return "__meta_kubernetes_pod_label_" + "".join(
        char if char.isalnum() else "_" for char in label
    )


def _common(config: ExperimentConfig) -> dict[str, Any]:
    return {"scrape_interval": f"{config.guardrails.live.scrape_interval_s}s"}


def eks_scrape_config(
    config: ExperimentConfig,
    *,
    arm_label: str,
    arm_pods: dict[str, str],
    gateway_selector: dict[str, str],
) -> dict[str, Any]:
    """The managed collector's Prometheus configuration (AMP user guide, "Scraper
    configuration": global, scrape_configs with kubernetes_sd_configs). ``arm_label``: the pod
    label holding the arm (charts/naming.py ARM_LABEL); ``arm_pods``: the labels every pod of
    both arms carries and no other pod does (the Rollout's, charts/rollout.py rollout_pods:
    the arm label alone is also on the load-test pods and the tuning candidates, whose
    counters would be summed into an arm); ``gateway_selector``: the labels of the gateway's
    Envoy pods. charts/rollout.py ``managed_scrape_config`` passes all three."""
    job = jobs(config)
    serving = config.serving
    live = config.guardrails.live
    arm_keep = [
        {"source_labels": [pod_meta_label(key)], "regex": value, "action": "keep"}
        for key, value in sorted(arm_pods.items())
    ]
    vllm = {
        "job_name": job["vllm"],
        "metrics_path": VLLM_METRICS_PATH,
        "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": [serving.namespace]}}],
        "relabel_configs": [
            # The arms' pods (both, by one rule), on the serving port only.
            *arm_keep,
            {"source_labels": [pod_meta_label(arm_label)], "regex": "|".join(a.value for a in Arm),
             "action": "keep"},
            {"source_labels": ["__meta_kubernetes_pod_container_port_number"],
             "regex": str(serving.port), "action": "keep"},
            {"source_labels": [pod_meta_label(arm_label)], "target_label": ARM},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        ],
        "metric_relabel_configs": vllm_metric_relabels(),
    }  # fmt: skip
    gateway_keep = [
        {"source_labels": [pod_meta_label(key)], "regex": value, "action": "keep"}
        for key, value in sorted(gateway_selector.items())
    ]
    gateway = {
        "job_name": job["gateway"],
        "metrics_path": ENVOY_METRICS_PATH,
        "kubernetes_sd_configs": [
            {"role": "pod", "namespaces": {"names": [config.routing.eks.namespace]}}
        ],
        "relabel_configs": [
            *gateway_keep,
            {"source_labels": ["__meta_kubernetes_pod_container_port_number"],
             "regex": str(ENVOY_GATEWAY_METRICS_PORT), "action": "keep"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        ],
        "metric_relabel_configs": gateway_metric_relabels(),
    }  # fmt: skip
    scrape_configs: list[dict[str, Any]] = [vllm, gateway]
    if config.guardrails.probe.enabled:
        scrape_configs.append(
            {
                "job_name": job["probe"],
                # The probe's pushed groups carry their own job label; keep it.
                "honor_labels": True,
                "kubernetes_sd_configs": [
                    {"role": "pod", "namespaces": {"names": [serving.namespace]}}
                ],
                "relabel_configs": [
                    {"source_labels": [pod_meta_label("app.kubernetes.io/name")],
                     "regex": PUSHGATEWAY_NAME, "action": "keep"},
                ],
                "metric_relabel_configs": [
                    {"source_labels": ["__name__"], "regex": f"{PREFIX}_probe_.+",
                     "action": "keep"},
                ],
            }
        )  # fmt: skip
    return {
        "global": {
            "scrape_interval": f"{live.scrape_interval_s}s",
            # The collector has no rules; the workspace evaluates them.
            "external_labels": {"cluster": config.cluster.name},
        },
        "scrape_configs": scrape_configs,
    }


# The Pushgateway's app.kubernetes.io/name (charts/probe.py), the probe's results' holder.
PUSHGATEWAY_NAME = "pushgateway"


def local_scrape_config(
    config: ExperimentConfig,
    *,
    servers: dict[Arm, str],
    gateway: str | None,
    pushgateway: str | None,
    rule_file: str,
) -> dict[str, Any]:
    """The local Prometheus' configuration: both servers (``host:port`` per arm), the local
    Envoy's admin address, and the Pushgateway the probe pushes to, with the rule file."""
    job = jobs(config)
    live = config.guardrails.live
    scrape_configs: list[dict[str, Any]] = [
        {
            "job_name": job["vllm"],
            "metrics_path": VLLM_METRICS_PATH,
            "static_configs": [
                {"targets": [servers[arm]], "labels": {ARM: arm.value}} for arm in Arm
            ],
            "metric_relabel_configs": vllm_metric_relabels(),
        }
    ]
    if gateway is not None:
        scrape_configs.append(
            {
                "job_name": job["gateway"],
                "metrics_path": ENVOY_METRICS_PATH,
                "static_configs": [{"targets": [gateway]}],
                "metric_relabel_configs": gateway_metric_relabels(),
            }
        )
    if pushgateway is not None:
        scrape_configs.append(
            {
                "job_name": job["probe"],
                "honor_labels": True,
                "static_configs": [{"targets": [pushgateway]}],
            }
        )
    return {
        "global": {
            "scrape_interval": f"{live.scrape_interval_s}s",
            "evaluation_interval": f"{live.evaluation_interval_s}s",
        },
        "rule_files": [rule_file],
        "scrape_configs": scrape_configs,
    }
