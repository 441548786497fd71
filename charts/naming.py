"""Names and labels shared by every manifest, all derived from the configuration."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from experiment.config import Arm, ExperimentConfig

PART_OF = "app.kubernetes.io/part-of"
NAME = "app.kubernetes.io/name"
INSTANCE = "app.kubernetes.io/instance"
COMPONENT = "app.kubernetes.io/component"
ARM_LABEL = "specdecode.aws/arm"
RUNTIME_DIR = "/opt/specdecode"  # PYTHONPATH root; the package is mounted below it
SPEC_DIR = "/etc/specdecode"
SPEC_FILE = "spec.json"


def labels(config: ExperimentConfig, component: str, instance: str) -> dict[str, str]:
    return {
        PART_OF: config.project,
        NAME: component,
        INSTANCE: instance,
        COMPONENT: component,
    }


def arm_labels(config: ExperimentConfig, arm: Arm) -> dict[str, str]:
    return {**labels(config, "vllm", config.serving.service_name(arm)), ARM_LABEL: arm.value}


def selector(config: ExperimentConfig, arm: Arm) -> dict[str, str]:
    return {INSTANCE: config.serving.service_name(arm), NAME: "vllm"}


def runtime_configmap_name(config: ExperimentConfig) -> str:
    return f"{config.project}-runtime"


def spec_configmap_name(config: ExperimentConfig, arm: Arm) -> str:
    return f"{config.serving.service_name(arm)}-spec"


def claim_template_name(config: ExperimentConfig) -> str:
    return f"{config.project}-neuron-{config.serving.neuron_devices}"


def models_pv_name(config: ExperimentConfig) -> str:
    return f"{config.project}-models-ro"


def compiled_pv_name(config: ExperimentConfig) -> str:
    return f"{config.project}-compiled-rw"


def short_hash(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:10]


def metadata(config: ExperimentConfig, name: str, obj_labels: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "namespace": config.serving.namespace, "labels": obj_labels}


RBAC_API = "rbac.authorization.k8s.io"


def role_with_binding(
    config: ExperimentConfig,
    name: str,
    component: str,
    rules: list[dict[str, Any]],
    subject: dict[str, str],
) -> list[dict[str, Any]]:
    """A namespaced Role granting ``rules`` and the RoleBinding giving it to ``subject``
    (a ServiceAccount or a Group), both named ``name``: least privilege in one place."""
    role = {
        "apiVersion": f"{RBAC_API}/v1",
        "kind": "Role",
        "metadata": metadata(config, name, labels(config, component, name)),
        "rules": rules,
    }
    binding = {
        "apiVersion": f"{RBAC_API}/v1",
        "kind": "RoleBinding",
        "metadata": metadata(config, name, labels(config, component, name)),
        "roleRef": {"apiGroup": RBAC_API, "kind": "Role", "name": name},
        "subjects": [subject],
    }
    return [role, binding]
