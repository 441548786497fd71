"""The model-import Job: checkpoints from the model hub into ``checkpoints/<id>/`` of the store.

``cdk deploy`` applies it with the serving chart; it runs ``runtime.model_import import`` (the
runtime ConfigMap, in the serving image the Neuron node pulls anyway) for the target, the draft
and, with ``tuning.deploy``, every candidate draft. The serving pods' first init container
(``wait_container``) returns once the import's marker for each model of its arm is complete, as
the precompile init container does for compiled artifacts.

Least privilege:
- the volume is its own static PV with prefix ``checkpoints/`` and ``authenticationSource:
  pod``: Mountpoint uses the Job's service account (EKS Pod Identity) instead of the driver's
  role, and that role may write only under ``checkpoints/`` (``stacks/model_store.py``);
  ``allow-delete`` so a damaged file can be replaced (awslabs/mountpoint-s3-csi-driver
  docs/CONFIGURATION.md, "Pod-Level Credentials"; examples/kubernetes/static_provisioning/
  pod_level_identity.yaml, non_root.yaml for ``uid``/``gid``);
- the hub token, if any, comes from a Secret the user creates (``model_store.hub_token_secret``,
  key ``token``), mounted as a file and optional: it is never in a manifest;
- its NetworkPolicy admits no ingress and only DNS plus HTTPS (443) to public addresses: the hub
  and its CDN have no fixed addresses, so private, link-local (instance metadata, Pod Identity
  agent) and other cluster addresses are excluded. S3 traffic is the Mountpoint pod's, not this
  pod's.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from charts.model_store import persistent_volume, persistent_volume_claim
from charts.naming import (
    RUNTIME_DIR,
    SPEC_DIR,
    SPEC_FILE,
    labels,
    metadata,
    runtime_configmap_name,
    short_hash,
)
from charts.runtime_package import PACKAGE_NAME
from experiment.config import ExperimentConfig

COMPONENT = "model-import"
CHECKPOINTS_DIR = "/checkpoints"
TOKEN_DIR = "/var/run/secrets/hub"
TOKEN_KEY = "token"
# The import pod's user; Mountpoint presents the volume's files as owned by it (uid/gid options).
RUN_AS = 10001
HTTPS_PORT = 443
DNS_PORT = 53
# Never reachable from the import pod: private (RFC 1918), carrier-grade NAT and link-local
# (instance metadata, the Pod Identity agent) ranges. The hub is on public addresses.
NON_PUBLIC_IPV4 = ["10.0.0.0/8", "100.64.0.0/10", "169.254.0.0/16", "172.16.0.0/12",
                   "192.168.0.0/16"]  # fmt: skip
KUBE_DNS = {"k8s-app": "kube-dns"}  # CoreDNS pods on EKS keep the kube-dns label
KUBE_SYSTEM = {"kubernetes.io/metadata.name": "kube-system"}


def imported_models(config: ExperimentConfig) -> list[str]:
    """The hub ids the Job imports, each once: target, draft, then candidate drafts."""
    return config.hub_models()


def _model_argument(config: ExperimentConfig, model: str) -> str:
    revision = config.model_store.hub_revisions.get(model)
    return f"{model}@{revision}" if revision else model


def import_command(config: ExperimentConfig) -> list[str]:
    store = config.model_store
    command = [
        "python3", "-m", f"{PACKAGE_NAME}.model_import", "import",
        "--endpoint", store.hub_endpoint,
        "--dest", CHECKPOINTS_DIR,
        "--timeout-s", str(store.import_timeout_minutes * 60),
    ]  # fmt: skip
    if store.hub_token_secret:
        command += ["--token-file", f"{TOKEN_DIR}/{TOKEN_KEY}"]
    for model in imported_models(config):
        command += ["--model", _model_argument(config, model)]
    return command


def checkpoints_pv_name(config: ExperimentConfig) -> str:
    return f"{config.project}-checkpoints-rw"


def checkpoints_volume(config: ExperimentConfig, bucket_name: str) -> list[dict[str, Any]]:
    """PV + PVC: ``checkpoints/`` only, written with the Job's own credentials."""
    name = checkpoints_pv_name(config)
    options = [
        f"region {config.region}",
        f"prefix {config.model_store.checkpoints_prefix}/",
        "allow-delete",
        f"uid {RUN_AS}",
        f"gid {RUN_AS}",
    ]
    return [
        persistent_volume(
            config, name, bucket_name, "ReadWriteMany", options, authentication_source="pod"
        ),
        persistent_volume_claim(config, name, "ReadWriteMany"),
    ]


def service_account(config: ExperimentConfig) -> dict[str, Any]:
    name = config.model_store.import_service_account
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(config, name, labels(config, COMPONENT, name)),
        "automountServiceAccountToken": False,  # Pod Identity and the CSI driver get their own
    }


def _pod_spec(config: ExperimentConfig) -> dict[str, Any]:
    store = config.model_store
    amounts = {"cpu": str(store.import_cpu), "memory": f"{store.import_memory_gib}Gi"}
    mounts: list[dict[str, Any]] = [
        {"name": "runtime", "mountPath": f"{RUNTIME_DIR}/{PACKAGE_NAME}", "readOnly": True},
        {"name": "checkpoints", "mountPath": CHECKPOINTS_DIR},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    volumes: list[dict[str, Any]] = [
        {"name": "runtime", "configMap": {"name": runtime_configmap_name(config)}},
        {
            "name": "checkpoints",
            "persistentVolumeClaim": {"claimName": checkpoints_pv_name(config)},
        },
        {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
    ]
    if store.hub_token_secret:
        mounts.append({"name": "hub-token", "mountPath": TOKEN_DIR, "readOnly": True})
        volumes.append(
            {
                "name": "hub-token",
                "secret": {
                    "secretName": store.hub_token_secret,
                    "items": [{"key": TOKEN_KEY, "path": TOKEN_KEY}],
                    "optional": True,  # public models need none
                },
            }
        )
    return {
        "serviceAccountName": store.import_service_account,
        "automountServiceAccountToken": False,
        "restartPolicy": "Never",
        # On the Neuron node: it pulls the serving image for the arms anyway, and its disk is
        # sized for it. No Neuron devices are claimed.
        "nodeSelector": {
            "node.kubernetes.io/instance-type": config.cluster.neuron_nodes.instance_type
        },
        "tolerations": [
            {"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"}
        ],
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS,
            "runAsGroup": RUN_AS,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": COMPONENT,
                "image": config.serving.image,
                "imagePullPolicy": "IfNotPresent",
                "command": import_command(config),
                "env": [
                    {"name": "PYTHONPATH", "value": RUNTIME_DIR},
                    {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
                    {"name": "PYTHONUNBUFFERED", "value": "1"},
                ],
                "resources": {"requests": amounts, "limits": dict(amounts)},
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
                "volumeMounts": mounts,
            }
        ],
        "volumes": volumes,
    }


def job_name(config: ExperimentConfig) -> str:
    # Jobs are immutable: other models or settings make a new Job, not a failed patch.
    pod = _pod_spec(config)
    return f"{config.project}-{COMPONENT}-{short_hash(pod)}"


def job(config: ExperimentConfig) -> dict[str, Any]:
    store = config.model_store
    name = job_name(config)
    job_labels = labels(config, COMPONENT, config.project)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {**metadata(config, name, job_labels), "annotations": CHECKOV_SKIPS},
        "spec": {
            # A retry resumes: verified files are kept, only the rest is fetched again.
            "backoffLimit": store.import_retries,
            "activeDeadlineSeconds": store.import_timeout_minutes * 60,
            "template": {"metadata": {"labels": job_labels}, "spec": _pod_spec(config)},
        },
    }


def non_public_ranges(config: ExperimentConfig) -> list[str]:
    """The ranges the import pod may not reach on 443, the VPC's own included even when it
    lies outside the private ranges."""
    vpc = ipaddress.IPv4Network(config.network.vpc_cidr)  # the config accepts IPv4 only
    covered = any(vpc.subnet_of(ipaddress.IPv4Network(block)) for block in NON_PUBLIC_IPV4)
    return NON_PUBLIC_IPV4 if covered else [*NON_PUBLIC_IPV4, str(vpc)]


def network_policy(config: ExperimentConfig) -> dict[str, Any]:
    name = f"{config.project}-{COMPONENT}-hub-only"
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(config, name, labels(config, "network-policy", name)),
        "spec": {
            "podSelector": {"matchLabels": labels(config, COMPONENT, config.project)},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": [
                {
                    "to": [
                        {
                            "namespaceSelector": {"matchLabels": KUBE_SYSTEM},
                            "podSelector": {"matchLabels": KUBE_DNS},
                        }
                    ],
                    "ports": [
                        {"protocol": "UDP", "port": DNS_PORT},
                        {"protocol": "TCP", "port": DNS_PORT},
                    ],
                },
                {
                    "to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": non_public_ranges(config)}}],
                    "ports": [{"protocol": "TCP", "port": HTTPS_PORT}],
                },
            ],
        },
    }


def wait_command(config: ExperimentConfig) -> list[str]:
    """The serving pods' first init container: the arm's models are imported, or it waits.
    It reads the models from the arm's spec, so both arms run the very same command."""
    return [
        "python3", "-m", f"{PACKAGE_NAME}.model_import", "wait",
        "--spec", f"{SPEC_DIR}/{SPEC_FILE}",
        "--timeout-s", str(config.model_store.import_timeout_minutes * 60),
    ]  # fmt: skip


# checkov (kubernetes framework) findings accepted on the import Job, with reasons.
CHECKOV_SKIPS: dict[str, str] = {
    "checkov.io/skip1": "CKV_K8S_43=The serving DLC pinned by its immutable versioned tag from "
    "the configuration (serving.image); set a digest there to pin by digest",
    "checkov.io/skip2": "CKV_K8S_15=IfNotPresent on purpose: the node pulls the multi-GB DLC "
    "for serving anyway and the tag is immutable",
}


def model_import_manifests(config: ExperimentConfig, bucket_name: str) -> list[dict[str, Any]]:
    if not config.model_store.import_checkpoints:
        return []
    return [
        service_account(config),
        *checkpoints_volume(config, bucket_name),
        network_policy(config),
        job(config),
    ]
