"""The Neuron DRA driver from the Neuron Helm chart (OCI, public ECR).

DRA and the Neuron device plugin must not coexist on a node: the chart's device plugin (and
node problem detector) are disabled and only the DRA driver is enabled. The chart creates the
``neuron.aws.com`` DeviceClass that the serving pods' ResourceClaimTemplates name.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks

from experiment.config import ClusterConfig

DRA_HELM_VALUES: dict = {
    "devicePlugin": {"enabled": False},
    "npd": {"enabled": False},
    "draDriver": {"enabled": True},
}


def add_neuron_dra_driver(cluster: eks.Cluster, settings: ClusterConfig) -> eks.HelmChart:
    repository = settings.neuron_helm_chart
    return cluster.add_helm_chart(
        "NeuronDraDriver",
        repository=repository,
        chart=repository.rstrip("/").rsplit("/", 1)[-1],
        version=settings.neuron_helm_chart_version,
        namespace=settings.neuron_namespace,
        create_namespace=True,
        release="neuron-dra",
        values=DRA_HELM_VALUES,
        wait=True,
        timeout=cdk.Duration.minutes(10),
    )
