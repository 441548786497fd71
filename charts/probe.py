"""The guardrail probe on the cluster: a CronJob and the Pushgateway it pushes to.

- the CronJob runs ``python -m loadtest probe`` (loadtest/guardrail_probe.py) in the
  load-test image with the load test's config file, on ``guardrails.probe.schedule``: one
  run at a time (``Forbid``), never retried (``backoffLimit`` 0), stopped at
  ``guardrails.probe.deadline_s``. A missed or failed run pushes nothing, and the
  probe-missing rule sees its results age.
- a Pushgateway (one replica, no persistence: a restart loses the last push, and the
  probe-missing rule fires until the next run, a fault shown, not hidden) holds the last
  complete run's series; the managed collector scrapes it (guardrails/scrape.py, job
  ``<project>-probe``, pods named ``PUSHGATEWAY_NAME``).
- NetworkPolicies: probe pods reach DNS, the gateway's Envoy pods on the listener's port and
  the Pushgateway, nothing else, and admit nothing; the Pushgateway admits the probe's
  pushes and the collector's scrapes (its network interfaces are in the VPC's private
  subnets), on its port only.

Rendered only when ``guardrails.live.enabled`` and ``guardrails.probe.enabled``.
"""

from __future__ import annotations

from typing import Any

from charts.gateway import (
    NAMESPACE_NAME_LABEL,
    OWNING_GATEWAY_NAME,
    OWNING_GATEWAY_NAMESPACE,
    gateway_name,
    gateway_url,
)
from charts.inputs import ClusterInputs
from charts.loadtest_job import CHECKOV_SKIPS, CONFIG_DIR, CONFIG_FILE, pod_spec
from charts.model_import_job import DNS_PORT, KUBE_DNS, KUBE_SYSTEM
from charts.naming import labels, metadata
from charts.network_policy import collector_cidrs
from charts.rollout import ROLLOUTS_API, probe_once_template_name
from experiment.config import ExperimentConfig
from experiment.config.upstreams import pin
from guardrails.scrape import PUSHGATEWAY_NAME

COMPONENT = "probe"
# prometheus/pushgateway: VERSION and CHANGELOG.md, 1.11.3 / 2026-05-27, the newest release
# (tag v1.11.3); the Docker Hub image is tagged v<version> (Makefile.common DOCKER_IMAGE_TAG).
PUSHGATEWAY_IMAGE = f"prom/pushgateway:{pin('pushgateway')}"
# prometheus/pushgateway Dockerfile: EXPOSE 9091, USER 65534 (nobody); README: the default
# --web.listen-address is :9091, /-/healthy and /-/ready answer 200, no persistence unless
# --persistence.file is set.
PUSHGATEWAY_PORT = 9091
PUSHGATEWAY_USER = 65534
PUSHGATEWAY_RESOURCES = {"cpu": "100m", "memory": "64Mi"}
# Seconds after its time a missed run may still start (CronJob startingDeadlineSeconds):
# later, it is skipped and the next one runs on schedule.
STARTING_DEADLINE_S = 120
HISTORY = 1  # finished Jobs kept per outcome: the last success and the last failure


def enabled(config: ExperimentConfig) -> bool:
    return config.guardrails.probe_runs


def pushgateway_service_name(config: ExperimentConfig) -> str:
    return f"{config.project}-{PUSHGATEWAY_NAME}"


def pushgateway_url(config: ExperimentConfig) -> str:
    service = pushgateway_service_name(config)
    return f"http://{service}.{config.serving.namespace}.svc:{PUSHGATEWAY_PORT}"


def probe_command(config: ExperimentConfig) -> list[str]:
    return [
        "python", "-m", "loadtest", "probe",
        "--gateway", gateway_url(config),
        "--pushgateway", pushgateway_url(config),
        "--config", f"{CONFIG_DIR}/{CONFIG_FILE}",
    ]  # fmt: skip


def probe_pod_labels(config: ExperimentConfig) -> dict[str, str]:
    return labels(config, COMPONENT, f"{config.project}-{COMPONENT}")


def pushgateway_labels(config: ExperimentConfig) -> dict[str, str]:
    """``app.kubernetes.io/name`` is ``PUSHGATEWAY_NAME``: the collector's scrape keeps
    these pods by it."""
    return labels(config, PUSHGATEWAY_NAME, pushgateway_service_name(config))


def cron_job(config: ExperimentConfig, inputs: ClusterInputs) -> dict[str, Any]:
    probe = config.guardrails.probe
    command = probe_command(config)
    name = f"{config.project}-{COMPONENT}"
    pod_labels = probe_pod_labels(config)
    spec = pod_spec(config, inputs, command, reports=False, config_file=True)
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {**metadata(config, name, pod_labels), "annotations": CHECKOV_SKIPS},
        "spec": {
            "schedule": probe.schedule,
            "timeZone": "Etc/UTC",  # guardrails.probe.schedule says UTC
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": STARTING_DEADLINE_S,
            "successfulJobsHistoryLimit": HISTORY,
            "failedJobsHistoryLimit": HISTORY,
            "jobTemplate": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    "backoffLimit": 0,  # a failed run is the next run's to redo, on schedule
                    "activeDeadlineSeconds": probe.deadline_s,
                    # Each run's pod reads the ConfigMap when it starts: a changed config
                    # applies from the next run on.
                    "template": {
                        "metadata": {"labels": pod_labels},
                        "spec": spec,
                    },
                },
            },
        },
    }


PROBE_ONCE_METRIC = "probe-once"
# Attempts of the start probe before the step fails (the canary is then aborted): a run
# that meets a transient error is repeated after its deadline, not judged on one request.
PROBE_ONCE_ATTEMPTS = 3


def probe_once_template(config: ExperimentConfig, inputs: ClusterInputs) -> dict[str, Any]:
    """The AnalysisTemplate of the Rollout's start step: one probe run as a Kubernetes Job as
    soon as the canary is available, so the checks that need the probe's results have them
    before the background analysis starts (charts/rollout.py).

    Argo's Job provider (argo-rollouts v1.9.1 metricproviders/job/job.go: the Job is created
    in the AnalysisRun's namespace, a completed Job is a Successful measurement, a failed one
    Failed; the controller's ClusterRole creates and deletes jobs, manifests/role/
    argo-rollouts-clusterrole.yaml). The metric ends Successful at its first success
    (consecutiveSuccessLimit 1) and Failed when all ``PROBE_ONCE_ATTEMPTS`` fail
    (failureLimit attempts - 1; analysis/analysis.go assessMetricStatus), an attempt every
    ``deadline_s``."""
    probe = config.guardrails.probe
    pod_labels = probe_pod_labels(config)
    spec = pod_spec(config, inputs, probe_command(config), reports=False, config_file=True)
    name = probe_once_template_name(config)
    metric = {
        "name": PROBE_ONCE_METRIC,
        "interval": f"{probe.deadline_s}s",
        "count": PROBE_ONCE_ATTEMPTS,
        "consecutiveSuccessLimit": 1,
        "failureLimit": PROBE_ONCE_ATTEMPTS - 1,
        "provider": {
            "job": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    "backoffLimit": 0,
                    "activeDeadlineSeconds": probe.deadline_s,
                    "template": {"metadata": {"labels": pod_labels}, "spec": spec},
                },
            }
        },
    }
    return {
        "apiVersion": ROLLOUTS_API,
        "kind": "AnalysisTemplate",
        "metadata": metadata(config, name, pod_labels),
        "spec": {"metrics": [metric]},
    }


def pushgateway_deployment(config: ExperimentConfig) -> dict[str, Any]:
    name = pushgateway_service_name(config)
    pod_labels = pushgateway_labels(config)
    probe = {
        "initialDelaySeconds": 2,
        "periodSeconds": 10,
        "timeoutSeconds": 2,
    }
    container = {
        "name": PUSHGATEWAY_NAME,
        "image": PUSHGATEWAY_IMAGE,
        "imagePullPolicy": "Always",  # checkov CKV_K8S_15
        "args": [f"--web.listen-address=:{PUSHGATEWAY_PORT}"],
        "ports": [{"name": "push", "containerPort": PUSHGATEWAY_PORT, "protocol": "TCP"}],
        "resources": {
            "requests": dict(PUSHGATEWAY_RESOURCES),
            "limits": dict(PUSHGATEWAY_RESOURCES),
        },
        "livenessProbe": {"httpGet": {"path": "/-/healthy", "port": PUSHGATEWAY_PORT}, **probe},
        "readinessProbe": {"httpGet": {"path": "/-/ready", "port": PUSHGATEWAY_PORT}, **probe},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {**metadata(config, name, pod_labels), "annotations": PUSHGATEWAY_SKIPS},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": pod_labels},
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    "automountServiceAccountToken": False,  # it never calls the API
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": PUSHGATEWAY_USER,
                        "runAsGroup": PUSHGATEWAY_USER,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [container],
                },
            },
        },
    }


def pushgateway_service(config: ExperimentConfig) -> dict[str, Any]:
    name = pushgateway_service_name(config)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(config, name, pushgateway_labels(config)),
        "spec": {
            "selector": pushgateway_labels(config),
            "ports": [
                {"name": "push", "port": PUSHGATEWAY_PORT, "targetPort": PUSHGATEWAY_PORT,
                 "protocol": "TCP"}
            ],
        },
    }  # fmt: skip


def _policy(
    config: ExperimentConfig, name: str, pods: dict[str, str], spec: dict[str, Any]
) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(config, name, labels(config, "network-policy", name)),
        "spec": {"podSelector": {"matchLabels": pods}, **spec},
    }


def probe_network_policy(config: ExperimentConfig) -> dict[str, Any]:
    """No ingress; egress to DNS, the gateway's Envoy pods and the Pushgateway only."""
    envoy_pods = {
        OWNING_GATEWAY_NAME: gateway_name(config),
        OWNING_GATEWAY_NAMESPACE: config.serving.namespace,
    }
    eg_namespace = {NAMESPACE_NAME_LABEL: config.routing.eks.namespace}
    egress = [
        {
            "to": [{"namespaceSelector": {"matchLabels": KUBE_SYSTEM},
                    "podSelector": {"matchLabels": KUBE_DNS}}],
            "ports": [{"protocol": "UDP", "port": DNS_PORT}, {"protocol": "TCP", "port": DNS_PORT}],
        },
        {
            "to": [{"namespaceSelector": {"matchLabels": eg_namespace},
                    "podSelector": {"matchLabels": envoy_pods}}],
            # The Envoy container listens on the listener's port: envoyproxy/gateway
            # internal/gatewayapi/listener.go servicePortToContainerPort shifts only ports
            # below 1024, and serving.port is at least 1024.
            "ports": [{"protocol": "TCP", "port": config.serving.port}],
        },
        {
            "to": [{"podSelector": {"matchLabels": pushgateway_labels(config)}}],
            "ports": [{"protocol": "TCP", "port": PUSHGATEWAY_PORT}],
        },
    ]  # fmt: skip
    name = f"{config.project}-{COMPONENT}-egress"
    return _policy(
        config,
        name,
        probe_pod_labels(config),
        {"policyTypes": ["Ingress", "Egress"], "ingress": [], "egress": egress},
    )


def pushgateway_network_policy(
    config: ExperimentConfig, collector_cidrs: list[str]
) -> dict[str, Any]:
    """Pushes from probe pods, scrapes from the collector's subnets; on its port only."""
    port = [{"protocol": "TCP", "port": PUSHGATEWAY_PORT}]
    ingress = [
        {"from": [{"podSelector": {"matchLabels": probe_pod_labels(config)}}], "ports": port},
        {"from": [{"ipBlock": {"cidr": cidr}} for cidr in collector_cidrs], "ports": port},
    ]
    name = f"{config.project}-{PUSHGATEWAY_NAME}-ingress"
    return _policy(
        config,
        name,
        pushgateway_labels(config),
        # No egress: it answers on the connections it is given and opens none.
        {"policyTypes": ["Ingress", "Egress"], "ingress": ingress, "egress": []},
    )


# checkov (kubernetes framework) findings accepted on the Pushgateway, with reasons.
PUSHGATEWAY_SKIPS: dict[str, str] = {
    "checkov.io/skip1": "CKV_K8S_43=Pinned by its immutable release tag (prometheus/pushgateway "
    f"{pin('pushgateway')}); the digest differs per registry mirror",
}


def start_probe_manifests(config: ExperimentConfig, inputs: ClusterInputs) -> list[dict[str, Any]]:
    """The start probe's AnalysisTemplate, which the Rollout's steps name (the routing chart
    applies it before the Rollout), or none when the probe is off."""
    return [probe_once_template(config, inputs)] if enabled(config) else []


def probe_manifests(config: ExperimentConfig, inputs: ClusterInputs) -> list[dict[str, Any]]:
    """The probe's objects, or none when the live guardrails or the probe are off."""
    if not enabled(config):
        return []
    return [
        pushgateway_deployment(config),
        pushgateway_service(config),
        pushgateway_network_policy(config, collector_cidrs(config, inputs)),
        probe_network_policy(config),
        cron_job(config, inputs),
    ]
