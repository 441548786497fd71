"""Static Mountpoint-for-S3 volumes: the whole store read-only, compiled/ writable.

Serving containers only ever see the read-only volume; the writable one (prefix
``compiled/``, no overwrite or delete) is mounted only where artifacts are published.
"""

from __future__ import annotations

from typing import Any

from charts.inputs import ClusterInputs
from charts.naming import compiled_pv_name, labels, metadata, models_pv_name
from experiment.config import ExperimentConfig

CSI_DRIVER = "s3.csi.aws.com"
# Required by the API, ignored by Mountpoint (S3 has no size).
NOMINAL_CAPACITY = "1Ti"


def _pv(
    config: ExperimentConfig, name: str, inputs: ClusterInputs, access: str, options: list[str]
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": labels(config, "model-store", name)},
        "spec": {
            "capacity": {"storage": NOMINAL_CAPACITY},
            "accessModes": [access],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "mountOptions": options,
            "csi": {
                "driver": CSI_DRIVER,
                "volumeHandle": name,  # unique per PV
                "volumeAttributes": {"bucketName": inputs.bucket_name},
            },
        },
    }


def _pvc(config: ExperimentConfig, name: str, access: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata(config, name, labels(config, "model-store", name)),
        "spec": {
            "accessModes": [access],
            "storageClassName": "",
            "volumeName": name,
            "resources": {"requests": {"storage": NOMINAL_CAPACITY}},
        },
    }


def model_store_volumes(config: ExperimentConfig, inputs: ClusterInputs) -> list[dict[str, Any]]:
    region = f"region {config.region}"
    read_only = models_pv_name(config)
    writable = compiled_pv_name(config)
    prefix = f"prefix {config.model_store.compiled_prefix}/"
    return [
        _pv(config, read_only, inputs, "ReadOnlyMany", [region, "read-only", "allow-other"]),
        _pvc(config, read_only, "ReadOnlyMany"),
        _pv(config, writable, inputs, "ReadWriteMany", [region, prefix, "allow-other"]),
        _pvc(config, writable, "ReadWriteMany"),
    ]
