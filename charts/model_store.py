"""Static Mountpoint-for-S3 volumes: the whole store read-only, compiled/ writable.

Serving containers only ever see the read-only volume; the writable one (prefix
``compiled/``, no overwrite or delete) is mounted only where artifacts are published. The
model-import Job's ``checkpoints/`` volume is built by the same functions
(``charts/model_import_job.py``).
"""

from __future__ import annotations

from typing import Any

from charts.inputs import ClusterInputs
from charts.naming import compiled_pv_name, labels, metadata, models_pv_name
from experiment.config import ExperimentConfig

CSI_DRIVER = "s3.csi.aws.com"
# Required by the API, ignored by Mountpoint (S3 has no size).
NOMINAL_CAPACITY = "1Ti"


def persistent_volume(
    config: ExperimentConfig,
    name: str,
    bucket_name: str,
    access: str,
    options: list[str],
    *,
    authentication_source: str | None = None,
) -> dict[str, Any]:
    """A static Mountpoint PV reserved for the PVC of the same name (``claimRef``: no other
    claim can bind it; awslabs/mountpoint-s3-csi-driver docs/CONFIGURATION.md, "Static
    Provisioning"). ``authentication_source`` "pod": the mounting pod's Pod Identity role
    instead of the driver's (same document, "Pod-Level Credentials")."""
    attributes = {"bucketName": bucket_name}
    if authentication_source is not None:
        attributes["authenticationSource"] = authentication_source
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": labels(config, "model-store", name)},
        "spec": {
            "capacity": {"storage": NOMINAL_CAPACITY},
            "accessModes": [access],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "claimRef": {"namespace": config.serving.namespace, "name": name},
            "mountOptions": options,
            "csi": {
                "driver": CSI_DRIVER,
                "volumeHandle": name,  # unique per PV
                "volumeAttributes": attributes,
            },
        },
    }


def persistent_volume_claim(config: ExperimentConfig, name: str, access: str) -> dict[str, Any]:
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
    bucket = inputs.bucket_name
    return [
        persistent_volume(
            config, read_only, bucket, "ReadOnlyMany", [region, "read-only", "allow-other"]
        ),
        persistent_volume_claim(config, read_only, "ReadOnlyMany"),
        persistent_volume(
            config, writable, bucket, "ReadWriteMany", [region, prefix, "allow-other"]
        ),
        persistent_volume_claim(config, writable, "ReadWriteMany"),
    ]
