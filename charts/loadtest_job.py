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


def service_url(config: ExperimentConfig, arm: Arm) -> str:
    serving = config.serving
    return f"http://{serving.service_name(arm)}.{serving.namespace}.svc:{serving.port}"


def loadtest_command(config: ExperimentConfig) -> list[str]:
    return [
        "python", "-m", "loadtest", "run",
        "--baseline", service_url(config, Arm.BASELINE),
        "--speculative", service_url(config, Arm.SPECULATIVE),
    ]  # fmt: skip


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
    # Jobs are immutable: a changed command gets a new Job name instead of a failed patch.
    name = f"{config.project}-loadtest-{short_hash(command)}"
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
            "activeDeadlineSeconds": int(config.loadtest.max_duration_s),
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
                                "requests": {"cpu": "1", "memory": "1Gi"},
                                "limits": {"cpu": "2", "memory": "2Gi"},
                            },
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]},
                            },
                            "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                        }
                    ],
                    "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}],
                },
            },
        },
    }


CHECKOV_SKIPS: dict[str, str] = {
    "checkov.io/skip1": "CKV_K8S_43=The image is a CDK image asset whose ECR URI is only "
    "known at deploy time (a content-hash tag, immutable by construction)",
}


def loadtest_manifests(config: ExperimentConfig, inputs: ClusterInputs) -> list[dict[str, Any]]:
    return [service_account(config), job(config, inputs)]
