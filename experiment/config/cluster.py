"""``cluster``: the EKS cluster, its node groups and the Neuron DRA driver."""

from __future__ import annotations

import ipaddress
import re
from enum import StrEnum
from typing import Annotated

from pydantic import Field, field_validator, model_validator

from experiment.config import upstreams
from experiment.config.base import NamespaceName, Section

# Neuron instance shapes the experiment knows: devices (chips) and physical
# NeuronCores per device. DRA's connected-device groups come in these sizes.
NEURON_INSTANCE_TYPES: dict[str, dict[str, int]] = {
    "trn2.48xlarge": {"devices": 16, "physical_cores_per_device": 8, "efa_interfaces": 16},
    "trn2u.48xlarge": {"devices": 16, "physical_cores_per_device": 8, "efa_interfaces": 16},
    "trn2.3xlarge": {"devices": 1, "physical_cores_per_device": 8, "efa_interfaces": 1},
}
CONNECTED_DEVICE_GROUP_SIZES = (1, 4, 8, 16)
MIN_KUBERNETES_VERSION = (1, 34)  # Neuron DRA needs 1.34+


AddonVersion = str | None  # checked with the other deploy pins (experiment/config/addons.py)


class NodeGroupConfig(Section):
    instance_type: str = Field(description="EC2 instance type of the node group.")
    min_size: Annotated[int, Field(ge=0)] = Field(
        description="Fewest nodes of the group; 0 or more, at most max_size."
    )
    max_size: Annotated[int, Field(ge=1)] = Field(description="Most nodes of the group; 1 or more.")
    desired_size: Annotated[int, Field(ge=0)] = Field(
        description="Nodes the group starts with; between min_size and max_size."
    )
    root_volume_gib: Annotated[int, Field(ge=20)] = Field(
        description="Root EBS volume per node, GiB; 20 or more."
    )

    @model_validator(mode="after")
    def _sizes_in_order(self) -> NodeGroupConfig:
        if self.min_size > self.max_size:
            raise ValueError(
                f"node group min_size {self.min_size} is greater than max_size {self.max_size}; "
                "raise max_size or lower min_size"
            )
        if not self.min_size <= self.desired_size <= self.max_size:
            raise ValueError(
                f"node group desired_size {self.desired_size} must lie between min_size "
                f"{self.min_size} and max_size {self.max_size}"
            )
        return self


class CapacityType(StrEnum):
    ON_DEMAND = "on-demand"
    CAPACITY_BLOCK = "capacity-block"  # EC2 Capacity Blocks for ML
    RESERVATION = "reservation"  # an on-demand capacity reservation (ODCR)


class NeuronNodeGroupConfig(NodeGroupConfig):
    instance_type: str = Field(
        default="trn2.48xlarge",
        description="Neuron instance type: trn2.48xlarge, trn2u.48xlarge or trn2.3xlarge.",
    )
    min_size: Annotated[int, Field(ge=0)] = Field(
        default=0,
        description="Fewest Neuron nodes; 0 lets the group scale to zero. At most max_size.",
    )
    max_size: Annotated[int, Field(ge=1)] = Field(
        default=1, description="Most Neuron nodes; 1 or more."
    )
    desired_size: Annotated[int, Field(ge=0)] = Field(
        default=1, description="Neuron nodes the group starts with; between min_size and max_size."
    )
    root_volume_gib: Annotated[int, Field(ge=20)] = Field(
        default=512,
        description=(
            "Root EBS volume per Neuron node, GiB (the Neuron DLC image is large); 20 or more."
        ),
    )
    capacity_type: CapacityType = Field(
        default=CapacityType.ON_DEMAND,
        description=(
            "How the Neuron nodes are bought: on-demand, capacity-block (EC2 Capacity"
            " Blocks for ML) or reservation (an On-Demand Capacity Reservation)."
        ),
    )
    capacity_reservation_id: str | None = Field(
        default=None,
        description=(
            "The 'cr-...' id of your Capacity Block or reservation; required by "
            "capacity-block and reservation, not allowed with on-demand."
        ),
    )
    availability_zone: str | None = Field(
        default=None,
        description=(
            "The AZ of the Capacity Block or reservation (one of "
            "network.availability_zones); the node group's subnets are restricted to "
            "it. Required by capacity-block and reservation."
        ),
    )
    efa: bool = Field(
        default=False,
        description="Attach one EFA interface per EFA-capable network card of the instance type.",
    )
    placement_group: bool = Field(
        default=False, description="Launch the Neuron nodes into a cluster placement group."
    )

    @field_validator("instance_type")
    @classmethod
    def _neuron_type(cls, value: str) -> str:
        if value not in NEURON_INSTANCE_TYPES:
            raise ValueError(
                f"cluster.neuron_nodes.instance_type {value!r} is not a known Neuron type; "
                f"use one of {sorted(NEURON_INSTANCE_TYPES)}"
            )
        return value

    @model_validator(mode="after")
    def _reservation_has_its_id(self) -> NeuronNodeGroupConfig:
        if self.reserved and not self.capacity_reservation_id:
            raise ValueError(
                f"cluster.neuron_nodes.capacity_type {self.capacity_type.value!r} needs "
                "capacity_reservation_id (the 'cr-...' id of your Capacity Block or reservation)"
            )
        return self

    @model_validator(mode="after")
    def _reservation_id_looks_like_one(self) -> NeuronNodeGroupConfig:
        if self.capacity_reservation_id and not re.fullmatch(
            r"cr-[0-9a-f]{8,17}", self.capacity_reservation_id
        ):
            raise ValueError(
                f"cluster.neuron_nodes.capacity_reservation_id {self.capacity_reservation_id!r} "
                "does not look like 'cr-0123456789abcdef0'"
            )
        return self

    @model_validator(mode="after")
    def _on_demand_has_no_reservation_id(self) -> NeuronNodeGroupConfig:
        if self.capacity_reservation_id and self.capacity_type == CapacityType.ON_DEMAND:
            raise ValueError(
                "cluster.neuron_nodes.capacity_reservation_id is set but capacity_type is "
                "'on-demand'; set capacity_type to 'capacity-block' or 'reservation'"
            )
        return self

    @model_validator(mode="after")
    def _reservation_has_its_az(self) -> NeuronNodeGroupConfig:
        if self.reserved and not self.availability_zone:
            raise ValueError(
                f"cluster.neuron_nodes.capacity_type {self.capacity_type.value!r} needs "
                "availability_zone (the AZ your Capacity Block or reservation is in, e.g. "
                "'us-east-2b'; one of network.availability_zones)"
            )
        return self

    @property
    def reserved(self) -> bool:
        """Capacity bought ahead (a Capacity Block or a reservation), which has an id and an AZ."""
        return self.capacity_type in (CapacityType.CAPACITY_BLOCK, CapacityType.RESERVATION)

    @property
    def devices(self) -> int:
        return NEURON_INSTANCE_TYPES[self.instance_type]["devices"]

    @property
    def physical_cores_per_device(self) -> int:
        return NEURON_INSTANCE_TYPES[self.instance_type]["physical_cores_per_device"]

    @property
    def efa_interfaces(self) -> int:
        """EFA-capable network cards of the instance type (one interface per card)."""
        return NEURON_INSTANCE_TYPES[self.instance_type]["efa_interfaces"]


class SystemNodeGroupConfig(NodeGroupConfig):
    """Add-ons and the load test. Defaults per field, so one override (e.g. only
    ``max_size``) keeps the others."""

    instance_type: str = Field(
        default="m7i.2xlarge",
        description="EC2 instance type of the system nodes (add-ons and the load test).",
    )
    min_size: Annotated[int, Field(ge=0)] = Field(
        default=1, description="Fewest system nodes; at most max_size."
    )
    max_size: Annotated[int, Field(ge=1)] = Field(
        default=3, description="Most system nodes; 1 or more."
    )
    desired_size: Annotated[int, Field(ge=0)] = Field(
        default=2, description="System nodes the group starts with; between min_size and max_size."
    )
    root_volume_gib: Annotated[int, Field(ge=20)] = Field(
        default=100, description="Root EBS volume per system node, GiB; 20 or more."
    )


class EndpointAccess(StrEnum):
    PRIVATE = "private"
    PUBLIC_AND_PRIVATE = "public-and-private"


class ClusterConfig(Section):
    name: str = Field(
        default="qwen-sd",
        description=(
            "EKS cluster name: lowercase letters, digits and '-', starting with a "
            "letter, at most 39 characters."
        ),
    )
    # The versions, their end of standard support and why the default is the default:
    # experiment/config/upstreams.py (docs/upstreams.md). The kubectl layer follows the minor.
    kubernetes_version: str = Field(
        default=upstreams.DEFAULT_KUBERNETES_VERSION,
        description=(
            "Kubernetes version of the cluster, one of the support calendar's "
            f"{', '.join(upstreams.EKS_VERSIONS)} (docs/upstreams.md; the Neuron DRA driver "
            "needs 1.34 or newer); the infra extra must carry "
            "aws-cdk.lambda-layer-kubectl-v<minor>."
        ),
    )
    admin_principal_arns: list[str] = Field(
        default_factory=list,
        description="IAM role or user ARNs given cluster-admin through an EKS access entry.",
    )
    endpoint_access: EndpointAccess = Field(
        default=EndpointAccess.PRIVATE,
        description=(
            "Kubernetes API endpoint: private, or public-and-private (then list "
            "public_access_cidrs)."
        ),
    )
    public_access_cidrs: list[str] = Field(
        default_factory=list,
        description=(
            "CIDRs allowed to reach a public API endpoint; only with endpoint_access "
            "public-and-private, never /0."
        ),
    )
    control_plane_log_types: list[str] = Field(
        default_factory=lambda: ["api", "audit", "authenticator", "controllerManager", "scheduler"],
        description="EKS control plane log types sent to CloudWatch Logs.",
    )
    system_nodes: SystemNodeGroupConfig = Field(
        default_factory=SystemNodeGroupConfig,
        description="The node group for add-ons and the load test.",
    )
    neuron_nodes: NeuronNodeGroupConfig = Field(
        default_factory=NeuronNodeGroupConfig,
        description="The Neuron (Trainium) node group that serves both arms.",
    )
    neuron_helm_chart: str = Field(
        default="oci://public.ecr.aws/neuron/neuron-helm-chart",
        description="OCI address of the Neuron Helm chart (DRA driver and device plugin).",
    )
    neuron_helm_chart_version: str = Field(
        default=upstreams.pin("neuron-helm-chart"),
        description=(
            "Neuron Helm chart version; a DRA-capable release (aws-neuron/neuron-"
            "helm-charts 1.9.0 carries DRA driver 1.1.0, 1.10.0 carries 1.2.0)."
        ),
    )
    s3_csi_addon_version: AddonVersion = Field(
        default=None,
        description=(
            "Version of the aws-mountpoint-s3-csi-driver EKS add-on, e.g. 'v2.1.0-eksbuild.1', "
            "one listed for the cluster's Kubernetes version; required by cdk synth."
        ),
    )
    cloudwatch_addon_version: AddonVersion = Field(
        default=None,
        description=(
            "Version of the amazon-cloudwatch-observability EKS add-on, e.g. "
            "'v4.1.0-eksbuild.1', one listed for the cluster's Kubernetes version; required by "
            "cdk synth."
        ),
    )
    neuron_namespace: NamespaceName = Field(
        default="neuron-dra-driver",
        description=(
            "Namespace the Neuron DRA driver's DaemonSet lands in (the chart's "
            "draDriver.namespaceOverride default)."
        ),
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not re.fullmatch(r"[a-z][a-z0-9-]{0,38}", value):
            raise ValueError(
                f"cluster.name {value!r}: use lowercase letters, digits and '-' (max 39 chars)"
            )
        return value

    @field_validator("kubernetes_version")
    @classmethod
    def _kubernetes_version_has_dra(cls, value: str) -> str:
        match = re.fullmatch(r"1\.(\d+)", value)
        if not match or (1, int(match.group(1))) < MIN_KUBERNETES_VERSION:
            raise ValueError(
                f"cluster.kubernetes_version {value!r}: the Neuron DRA driver needs Kubernetes "
                f"1.34 or newer; set e.g. '{upstreams.DEFAULT_KUBERNETES_VERSION}'"
            )
        if value not in upstreams.EKS_VERSIONS:
            raise ValueError(
                f"cluster.kubernetes_version {value!r} is not in the support calendar "
                f"(experiment/config/upstreams.py): use one of {list(upstreams.EKS_VERSIONS)}, "
                "or add its row with its source and end of standard support"
            )
        return value

    @field_validator("admin_principal_arns")
    @classmethod
    def _arns(cls, value: list[str]) -> list[str]:
        for arn in value:
            if not re.fullmatch(r"arn:aws[a-z-]*:iam::\d{12}:(role|user)/.+", arn):
                raise ValueError(
                    f"cluster.admin_principal_arns: {arn!r} is not an IAM role or user ARN "
                    "like 'arn:aws:iam::123456789012:role/Admin'"
                )
        return value

    @field_validator("public_access_cidrs")
    @classmethod
    def _public_cidrs(cls, value: list[str]) -> list[str]:
        for cidr in value:
            try:
                network = ipaddress.ip_network(cidr, strict=True)
            except ValueError as err:
                raise ValueError(
                    f"cluster.public_access_cidrs: {cidr!r} is not a CIDR such as "
                    f"'203.0.113.0/24' ({err})"
                ) from None
            if network.prefixlen == 0:
                raise ValueError(
                    f"cluster.public_access_cidrs: {cidr!r} opens the API endpoint to the whole "
                    "internet; list your own egress CIDRs instead"
                )
        return value

    @model_validator(mode="after")
    def _public_cidrs_match_endpoint_access(self) -> ClusterConfig:
        public = self.endpoint_access == EndpointAccess.PUBLIC_AND_PRIVATE
        if public and not self.public_access_cidrs:
            raise ValueError(
                "cluster.endpoint_access is 'public-and-private' but public_access_cidrs is "
                "empty; list the CIDRs allowed to reach the API (e.g. ['203.0.113.0/24'])"
            )
        if not public and self.public_access_cidrs:
            raise ValueError(
                "cluster.public_access_cidrs is set but endpoint_access is 'private'; set "
                "endpoint_access to 'public-and-private' or remove the CIDRs"
            )
        return self

    @property
    def kubernetes_minor(self) -> int:
        return int(self.kubernetes_version.split(".")[1])
