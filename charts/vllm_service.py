"""One vLLM service (spec ConfigMap, Deployment, Service, PodDisruptionBudget) per arm.

Both arms come from the same functions, parameterized only by the ``Arm``: everything
that is not a name, a label or the arm's ServingSpec is shared by construction, and
``charts.symmetry`` checks that it stays that way. Plain dicts, no cdk8s: the ``VllmService``
construct (charts/app.py) and the guardrail Rollout (charts/rollout.py) are built from them.
"""

from __future__ import annotations

import shlex
from typing import Any

from charts import dra
from charts.model_import_job import wait_command
from charts.naming import (
    RUNTIME_DIR,
    SPEC_DIR,
    SPEC_FILE,
    arm_labels,
    claim_template_name,
    compiled_pv_name,
    labels,
    metadata,
    models_pv_name,
    runtime_configmap_name,
    selector,
    short_hash,
    spec_configmap_name,
)
from charts.runtime_package import PACKAGE_NAME, package_files
from experiment.config import Arm, ExperimentConfig, SecurityProfile
from runtime.render import render

NEURON_TAINT = "aws.amazon.com/neuron"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
COMMAND_ANNOTATION = "specdecode.aws/vllm-command"
CHECKSUM_ANNOTATION = "specdecode.aws/config-checksum"
HEALTH_PATH = "/health"
PORT_NAME = "http"
PROBE_PERIOD_S = 10
LIVENESS_PERIOD_S = 30
PROBE_FAILURES = 3
# Seconds the endpoint stays in rotation after termination starts, so kube-proxy and
# clients stop sending new requests before vLLM begins draining.
PRE_STOP_SLEEP_S = 10
SCRATCH_DIR = "/scratch"


def spec_configmap(config: ExperimentConfig, arm: Arm) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(config, spec_configmap_name(config, arm), arm_labels(config, arm)),
        "data": {SPEC_FILE: config.serving_spec(arm).to_json()},
    }


def runtime_configmap(config: ExperimentConfig) -> dict[str, Any]:
    name = runtime_configmap_name(config)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(config, name, labels(config, "vllm-runtime", config.project)),
        "data": package_files(),
    }


def _container_security(config: ExperimentConfig) -> dict[str, Any]:
    # Root stays (the DLC runs as root and reaches the DRA-injected /dev/neuron* nodes as
    # such); everything else is locked down. See the checkov skips on the Deployment.
    if config.serving.security_profile == SecurityProfile.SAMPLE:
        return {}
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def _pod_security(config: ExperimentConfig) -> dict[str, Any]:
    # RuntimeDefault (containerd's profile) allows mbind/set_mempolicy only with CAP_SYS_NICE,
    # which "strict" drops; "sample" sets nothing, like the experiment's sample
    # (aws-neuron/aws-neuron-eks-samples, speculative_decoding_trn2_vllm).
    if config.serving.security_profile == SecurityProfile.SAMPLE:
        return {}
    return {"seccompProfile": {"type": "RuntimeDefault"}}


def _resources(config: ExperimentConfig) -> dict[str, Any]:
    amounts = {"cpu": str(config.serving.cpu), "memory": f"{config.serving.memory_gib}Gi"}
    return {"requests": amounts, "limits": dict(amounts), "claims": [{"name": dra.CLAIM_NAME}]}


def _mounts(config: ExperimentConfig) -> list[dict[str, Any]]:
    return [
        {"name": "runtime", "mountPath": f"{RUNTIME_DIR}/{PACKAGE_NAME}", "readOnly": True},
        {"name": "spec", "mountPath": SPEC_DIR, "readOnly": True},
        {"name": "models", "mountPath": config.model_store.mount_path, "readOnly": True},
        {"name": "shm", "mountPath": "/dev/shm"},
    ]


def _env() -> list[dict[str, str]]:
    return [
        {"name": "PYTHONPATH", "value": RUNTIME_DIR},
        {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},  # the package mount is read-only
        {"name": "PYTHONUNBUFFERED", "value": "1"},
    ]


def _probe(config: ExperimentConfig, period: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": HEALTH_PATH, "port": PORT_NAME},
        "periodSeconds": period,
        "timeoutSeconds": PROBE_PERIOD_S,
        "failureThreshold": failures,
    }


# The checkpoint wait only polls the read-only store.
WAIT_RESOURCES = {"cpu": "100m", "memory": "128Mi"}


def wait_checkpoints_container(config: ExperimentConfig) -> dict[str, Any]:
    """Waits for the model-import Job's finished import of this arm's models (first init
    container, before the precompile one reads them)."""
    return {
        "name": "wait-checkpoints",
        "image": config.serving.image,
        "imagePullPolicy": "IfNotPresent",
        "command": wait_command(config),
        "env": _env(),
        "resources": {"requests": dict(WAIT_RESOURCES), "limits": dict(WAIT_RESOURCES)},
        "securityContext": _container_security(config),
        "volumeMounts": [m for m in _mounts(config) if m["name"] != "shm"],
    }


def init_containers(config: ExperimentConfig) -> list[dict[str, Any]]:
    waits = [wait_checkpoints_container(config)] if config.model_store.import_checkpoints else []
    return [*waits, precompile_container(config)]


def precompile_container(config: ExperimentConfig) -> dict[str, Any]:
    """Compiles the arm once into the store if its artifacts are not there yet."""
    serving = config.serving
    compiled = f"{config.model_store.mount_path}/{config.model_store.compiled_prefix}"
    return {
        "name": "precompile",
        "image": serving.image,
        "imagePullPolicy": "IfNotPresent",
        "command": [
            "python3",
            "-m",
            f"{PACKAGE_NAME}.precompile",
            "--spec",
            f"{SPEC_DIR}/{SPEC_FILE}",
            "--scratch",
            SCRATCH_DIR,
            "--timeout-s",
            str(serving.precompile_timeout_minutes * 60),
            "--if-missing",
        ],
        "env": _env(),
        "resources": _resources(config),
        "securityContext": _container_security(config),
        "volumeMounts": [
            *_mounts(config),
            {"name": "compiled", "mountPath": compiled},
            {"name": "scratch", "mountPath": SCRATCH_DIR},
        ],
    }


def vllm_container(config: ExperimentConfig) -> dict[str, Any]:
    serving = config.serving
    startup_failures = serving.startup_timeout_minutes * 60 // PROBE_PERIOD_S
    return {
        "name": "vllm",
        "image": serving.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python3", "-m", f"{PACKAGE_NAME}.serve", "--spec", f"{SPEC_DIR}/{SPEC_FILE}"],
        "env": _env(),
        "ports": [{"name": PORT_NAME, "containerPort": serving.port, "protocol": "TCP"}],
        "resources": _resources(config),
        "securityContext": _container_security(config),
        "volumeMounts": _mounts(config),
        "startupProbe": _probe(config, PROBE_PERIOD_S, startup_failures),
        "readinessProbe": _probe(config, PROBE_PERIOD_S, PROBE_FAILURES),
        "livenessProbe": _probe(config, LIVENESS_PERIOD_S, PROBE_FAILURES),
        "lifecycle": {"preStop": {"sleep": {"seconds": PRE_STOP_SLEEP_S}}},
    }


def pod_spec(config: ExperimentConfig, arm: Arm) -> dict[str, Any]:
    serving = config.serving
    return {
        "automountServiceAccountToken": False,  # vLLM never talks to the Kubernetes API
        "terminationGracePeriodSeconds": serving.termination_grace_seconds,
        "nodeSelector": {INSTANCE_TYPE_LABEL: config.cluster.neuron_nodes.instance_type},
        "tolerations": [{"key": NEURON_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
        "securityContext": _pod_security(config),
        "resourceClaims": [
            {"name": dra.CLAIM_NAME, "resourceClaimTemplateName": claim_template_name(config)}
        ],
        "initContainers": init_containers(config),
        "containers": [vllm_container(config)],
        "volumes": [
            {"name": "runtime", "configMap": {"name": runtime_configmap_name(config)}},
            {"name": "spec", "configMap": {"name": spec_configmap_name(config, arm)}},
            {
                "name": "models",
                "persistentVolumeClaim": {"claimName": models_pv_name(config), "readOnly": True},
            },
            {"name": "compiled", "persistentVolumeClaim": {"claimName": compiled_pv_name(config)}},
            {
                "name": "shm",
                "emptyDir": {"medium": "Memory", "sizeLimit": f"{serving.shm_size_gib}Gi"},
            },
            {"name": "scratch", "emptyDir": {"sizeLimit": f"{serving.compile_scratch_gib}Gi"}},
        ],
    }


def vllm_command_text(config: ExperimentConfig, arm: Arm) -> str:
    command = render(config.serving_spec(arm))
    return shlex.join(command.args)


def pod_template(config: ExperimentConfig, arm: Arm) -> dict[str, Any]:
    """The arm's pod template: the Deployment's, and one revision of the guardrail Rollout
    (charts/rollout.py), so both are proven symmetric by the same checker."""
    checksum = short_hash({"runtime": package_files(), "spec": config.serving_spec(arm).to_json()})
    return {
        "metadata": {
            "labels": arm_labels(config, arm),
            "annotations": {
                COMMAND_ANNOTATION: vllm_command_text(config, arm),
                CHECKSUM_ANNOTATION: checksum,
            },
        },
        "spec": pod_spec(config, arm),
    }


def deployment(config: ExperimentConfig, arm: Arm) -> dict[str, Any]:
    name = config.serving.service_name(arm)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            **metadata(config, name, arm_labels(config, arm)),
            "annotations": checkov_skips(config),
        },
        "spec": {
            "replicas": config.serving.replicas,
            "revisionHistoryLimit": 3,
            # No surge: a second pod would need a second set of Neuron devices.
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": selector(config, arm)},
            "template": pod_template(config, arm),
        },
    }


def service(
    config: ExperimentConfig, arm: Arm, pods: dict[str, str] | None = None
) -> dict[str, Any]:
    """The arm's Service; ``pods`` replaces its selector (the Rollout's arms select by labels
    both revisions share, and Argo adds the revision's hash)."""
    name = config.serving.service_name(arm)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(config, name, arm_labels(config, arm)),
        "spec": {
            "type": "ClusterIP",
            "selector": pods if pods is not None else selector(config, arm),
            "ports": [
                {
                    "name": PORT_NAME,
                    "port": config.serving.port,
                    "targetPort": PORT_NAME,
                    "protocol": "TCP",
                }
            ],
        },
    }


def disruption_budget(config: ExperimentConfig, arm: Arm) -> dict[str, Any]:
    name = config.serving.service_name(arm)
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(config, name, arm_labels(config, arm)),
        # A voluntary eviction mid-experiment would silently skew one arm's latencies.
        "spec": {
            "minAvailable": config.serving.replicas,
            "selector": {"matchLabels": selector(config, arm)},
        },
    }


def arm_manifests(config: ExperimentConfig, arm: Arm) -> list[dict[str, Any]]:
    return [
        spec_configmap(config, arm),
        deployment(config, arm),
        service(config, arm),
        disruption_budget(config, arm),
    ]


# checkov (kubernetes framework) findings accepted on the vLLM Deployment, with reasons.
CHECKOV_SKIPS: dict[str, str] = {
    "checkov.io/skip1": "CKV_K8S_23=The Neuron DLC runs as root; DRA-injected Neuron device "
    "nodes and the DLC's caches assume it. Privilege escalation and all capabilities are "
    "dropped instead",
    "checkov.io/skip2": "CKV_K8S_40=Same as CKV_K8S_23: the DLC image defines no non-root UID",
    "checkov.io/skip3": "CKV_K8S_22=vLLM and the Neuron compiler write caches under the root "
    "filesystem (HOME, /tmp, /var/tmp/neuron-compile-cache); the DLC is not built for a "
    "read-only root",
    "checkov.io/skip4": "CKV_K8S_43=The DLC is pinned by its immutable versioned tag from the "
    "configuration (serving.image); set a digest there to pin by digest",
    "checkov.io/skip5": "CKV_K8S_15=IfNotPresent on purpose: the multi-GB DLC tag is "
    "immutable, re-pulling it on every restart only adds minutes",
}


# What security_profile "sample" gives up, accepted with the reason (only on that profile).
# No "=" inside a reason: checkov splits the annotation value on it.
SAMPLE_PROFILE_FINDINGS: dict[str, str] = {
    "CKV_K8S_20": 'security_profile "sample": no security context, as in the experiment\'s '
    "sample; use it only when the strict profile denies the Neuron runtime (docs/serving.md)",
    "CKV_K8S_28": 'security_profile "sample": the runtime\'s default capabilities (NET_RAW '
    "included) are kept, as in the experiment's sample",
    "CKV_K8S_37": 'security_profile "sample": the runtime\'s default capabilities are kept, '
    "as in the experiment's sample",
    "CKV_K8S_31": 'security_profile "sample": no seccomp profile, so mbind/set_mempolicy '
    "work without CAP_SYS_NICE (RuntimeDefault denies them)",
}


def checkov_skips(config: ExperimentConfig) -> dict[str, str]:
    """The Deployment's checkov.io/skipN annotations for the configured security profile."""
    if config.serving.security_profile != SecurityProfile.SAMPLE:
        return dict(CHECKOV_SKIPS)
    extra = {
        f"checkov.io/skip{len(CHECKOV_SKIPS) + index}": f"{check}={reason}"
        for index, (check, reason) in enumerate(SAMPLE_PROFILE_FINDINGS.items(), start=1)
    }
    return {**CHECKOV_SKIPS, **extra}
