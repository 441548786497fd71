"""The Neuron DRA driver from the Neuron Helm chart (OCI, public ECR).

DRA and the Neuron device plugin must not coexist on a node: the chart's device plugin, node
problem detector, scheduler extension and UltraServer operator are disabled and only the DRA
driver is enabled. The chart creates the ``neuron.aws.com`` DeviceClass that the serving pods'
ResourceClaimTemplates name.

Chart 1.10.0 (the pin in ``cluster.neuron_helm_chart_version``) installs Neuron DRA driver
1.2.0 (``public.ecr.aws/neuron/neuron-dra-driver``; the chart's values.yaml,
``draDriver.image.tag: "1.2.0"``, as pulled from the chart 1.10.0 OCI artifact); 1.9.0 installed
1.1.0 (aws-neuron/neuron-helm-charts, release notes of 1.9.0, "Component image tags"). The driver
needs Kubernetes 1.34 or newer and names no upper bound (EKS user guide,
device-management-neuron; Neuron docs, deploy/eks/dra).

Sources (checked for chart 1.10.0):
- values: ``helm show values oci://public.ecr.aws/neuron/neuron-helm-chart --version 1.10.0``
  (draDriver/devicePlugin/npd/scheduler/ultraserverOperator keys, ``draDriver.namespaceOverride``
  defaulting to ``neuron-dra-driver``); install flags as in the EKS user guide
  (device-management-neuron, "Install the Neuron DRA driver").
- templates (aws-neuron/neuron-helm-charts, ``charts/neuron-helm-chart/templates/``):
  ``dra-driver/dra-driver-namespace.yaml`` renders the driver's Namespace itself, and every
  ``npd/*.yaml`` is gated on ``npd.enabled``, so with npd off nothing lands in
  ``neuron-healthcheck-system`` (the 1.5.0 lab failure came from flat duplicate templates that
  1.9.0 removed).

Namespace: the driver's namespace exists before the chart installs (an ordinary manifest, so
the DaemonSet never waits on Helm creating it), and it carries Helm's ownership metadata so the
chart's own Namespace template adopts it instead of failing with "exists and cannot be imported
into the current release" (helm ``pkg/action/validate.go``, ``checkOwnership``).
"""

from __future__ import annotations

from typing import Any, cast

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks

from experiment.config import ClusterConfig

RELEASE = "neuron-dra"
HELM_MANAGED_BY_LABEL = {"app.kubernetes.io/managed-by": "Helm"}


def dra_helm_values(settings: ClusterConfig) -> dict[str, Any]:
    """Every component the chart can install, set explicitly: only the DRA driver is on."""
    return {
        "devicePlugin": {"enabled": False},
        "scheduler": {"enabled": False},
        "npd": {"enabled": False},
        "ultraserverOperator": {"enabled": False},
        "draDriver": {"enabled": True, "namespaceOverride": settings.neuron_namespace},
    }


def driver_namespace(settings: ClusterConfig) -> dict[str, Any]:
    """The driver's namespace, pre-created with the ownership Helm requires to adopt it."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": settings.neuron_namespace,
            "labels": dict(HELM_MANAGED_BY_LABEL),
            "annotations": {
                "meta.helm.sh/release-name": RELEASE,
                "meta.helm.sh/release-namespace": settings.neuron_namespace,
            },
        },
    }


def add_neuron_dra_driver(cluster: eks.Cluster, settings: ClusterConfig) -> eks.HelmChart:
    namespace = eks.KubernetesManifest(
        cluster,
        "NeuronDraNamespace",
        # jsii's Python Cluster lacks kubectl_provider_options of its own ICluster protocol
        cluster=cast(eks.ICluster, cluster),
        manifest=[driver_namespace(settings)],
        overwrite=True,  # apply, not create: a retried deploy finds it already there
    )
    repository = settings.neuron_helm_chart
    chart = cluster.add_helm_chart(
        "NeuronDraDriver",
        repository=repository,
        chart=repository.rstrip("/").rsplit("/", 1)[-1],
        version=settings.neuron_helm_chart_version,
        namespace=settings.neuron_namespace,
        create_namespace=False,  # created above, with Helm's ownership metadata
        release=RELEASE,
        values=dra_helm_values(settings),
        wait=True,
        timeout=cdk.Duration.minutes(10),
    )
    chart.node.add_dependency(namespace)
    return chart
