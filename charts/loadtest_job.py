"""The load-test Job: Locust headless against both services, bounded in time.

Runs under its own service account, which EKS Pod Identity binds (CDK stack) to a role
that may only put metrics in the project's CloudWatch namespace.
"""

from __future__ import annotations

from typing import Any

from charts.inputs import ClusterInputs
from charts.naming import labels, metadata, short_hash
from experiment.config import Arm, ExperimentConfig

COMPONENT = "loadtest"
# The resolved experiment config the stack was synthesized with, so the Job measures with
# the same names, scale and metric namespace (its IAM condition) as cdk.json says.
CONFIG_DIR = "/etc/specdecode/experiment"
CONFIG_FILE = "config.json"
# The image's root filesystem is read-only in the pod; records and reports go here.
RESULTS_DIR = "/results"


def service_url(config: ExperimentConfig, arm: Arm) -> str:
    serving = config.serving
    return f"http://{serving.service_name(arm)}.{serving.namespace}.svc:{serving.port}"


def loadtest_command(config: ExperimentConfig) -> list[str]:
    return [
        "python", "-m", "loadtest", "run",
        "--baseline", service_url(config, Arm.BASELINE),
        "--speculative", service_url(config, Arm.SPECULATIVE),
        "--config", f"{CONFIG_DIR}/{CONFIG_FILE}",
        "--out", f"{RESULTS_DIR}/run",
    ]  # fmt: skip


def settings_json(config: ExperimentConfig) -> str:
    """Only what differs from the defaults: the image carries the same defaults (built from
    the same source), and an unrelated default changing elsewhere does not touch the Job."""
    return config.model_dump_json(indent=2, exclude_defaults=True)


def config_map_name(config: ExperimentConfig) -> str:
    return f"{config.project}-loadtest-config"


def config_map(config: ExperimentConfig) -> dict[str, Any]:
    name = config_map_name(config)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(config, name, labels(config, COMPONENT, name)),
        "data": {CONFIG_FILE: settings_json(config)},
    }


def service_account(config: ExperimentConfig) -> dict[str, Any]:
    name = config.loadtest.service_account
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(config, name, labels(config, COMPONENT, name)),
        "automountServiceAccountToken": False,  # Pod Identity injects its own token
    }


def job(config: ExperimentConfig, inputs: ClusterInputs) -> dict[str, Any]:
    command = loadtest_command(config)
    pod = config.loadtest.pod
    # Jobs are immutable: a changed command or config gets a new Job name, not a failed patch.
    name = f"{config.project}-loadtest-{short_hash([*command, settings_json(config)])}"
    job_labels = labels(config, COMPONENT, config.project)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            **metadata(config, name, job_labels),
            "annotations": CHECKOV_SKIPS,
        },
        "spec": {
            "backoffLimit": 0,  # a failed comparison is reported, never silently retried
            "activeDeadlineSeconds": int(config.loadtest.max_duration_s)
            + config.loadtest.job_deadline_margin_s,
            "template": {
                "metadata": {"labels": job_labels},
                "spec": {
                    "serviceAccountName": config.loadtest.service_account,
                    # No Kubernetes API access needed; Pod Identity mounts its own token.
                    "automountServiceAccountToken": False,
                    "restartPolicy": "Never",
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 10001,
                        "runAsGroup": 10001,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [
                        {
                            "name": COMPONENT,
                            "image": inputs.loadtest_image,
                            "imagePullPolicy": "Always",
                            "command": command,
                            "env": [{"name": "AWS_REGION", "value": config.region}],
                            "resources": {
                                "requests": {"cpu": str(pod.cpu), "memory": f"{pod.memory_gib}Gi"},
                                "limits": {
                                    "cpu": str(pod.cpu_limit),
                                    "memory": f"{pod.memory_limit_gib}Gi",
                                },
                            },
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]},
                            },
                            "volumeMounts": [
                                {"name": "tmp", "mountPath": "/tmp"},
                                {"name": "results", "mountPath": RESULTS_DIR},
                                {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
                            ],
                        }
                    ],
                    "volumes": [
                        {"name": "tmp", "emptyDir": {"sizeLimit": f"{pod.tmp_gib}Gi"}},
                        {"name": "results", "emptyDir": {"sizeLimit": f"{pod.results_gib}Gi"}},
                        {"name": "config", "configMap": {"name": config_map_name(config)}},
                    ],
                },
            },
        },
    }


CHECKOV_SKIPS: dict[str, str] = {
    "checkov.io/skip1": "CKV_K8S_43=The image is a CDK image asset whose ECR URI is only "
    "known at deploy time (a content-hash tag, immutable by construction)",
}


def loadtest_manifests(config: ExperimentConfig, inputs: ClusterInputs) -> list[dict[str, Any]]:
    return [service_account(config), config_map(config), job(config, inputs)]
