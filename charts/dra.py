"""The Neuron DRA resource claim template (resource.k8s.io/v1, the GA shape)."""

from __future__ import annotations

from typing import Any

from charts.naming import claim_template_name, labels, metadata
from experiment.config import ExperimentConfig

DEVICE_CLASS = "neuron.aws.com"
DRIVER = "neuron.aws.com"
REQUEST_NAME = "neurons"
# The pod-level claim name containers refer to.
CLAIM_NAME = "neuron"


def connected_group_attribute(devices: int) -> str:
    """Devices sharing this attribute's value are NeuronLink-connected (group of N)."""
    return f"resource.aws.com/devicegroup{devices}_id"


def resource_claim_template(config: ExperimentConfig) -> dict[str, Any]:
    serving = config.serving
    instance_type = config.cluster.neuron_nodes.instance_type
    selector = f"device.attributes['{DEVICE_CLASS}'].instanceType == '{instance_type}'"
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": metadata(
            config, claim_template_name(config), labels(config, "neuron-claim", config.project)
        ),
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": REQUEST_NAME,
                            "exactly": {
                                "deviceClassName": DEVICE_CLASS,
                                "allocationMode": "ExactCount",
                                "count": serving.neuron_devices,
                                "selectors": [{"cel": {"expression": selector}}],
                            },
                        }
                    ],
                    "constraints": [
                        {
                            "requests": [REQUEST_NAME],
                            "matchAttribute": connected_group_attribute(serving.neuron_devices),
                        }
                    ],
                    "config": [
                        {
                            "requests": [REQUEST_NAME],
                            "opaque": {
                                "driver": DRIVER,
                                "parameters": {
                                    "apiVersion": "neuron.aws.com/v1",
                                    "kind": "NeuronConfig",
                                    "logicalNeuronCore": serving.logical_neuron_cores,
                                },
                            },
                        }
                    ],
                }
            }
        },
    }
