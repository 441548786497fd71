"""Managed node groups: a small system group and the trn2 group (Neuron AMI, launch template).

aws-cdk-lib's instance table does not know trn2 and rejects it together with the Neuron AMI
type, so the trn2 instance type lives in the launch template. Without ``instance_types`` the
cluster also does not install its bundled Neuron device plugin, which must never coexist with
the DRA driver.
"""

from __future__ import annotations

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from experiment.config import CapacityType, NeuronNodeGroupConfig, NodeGroupConfig

NEURON_TAINT_KEY = "aws.amazon.com/neuron"
CAPACITY_BLOCK_MARKET_TYPE = "capacity-block"
ROOT_DEVICE = "/dev/xvda"  # the AL2023 EKS AMIs' root device


def add_system_nodes(cluster: eks.Cluster, nodes: NodeGroupConfig) -> eks.Nodegroup:
    return cluster.add_nodegroup_capacity(
        "System",
        instance_types=[ec2.InstanceType(nodes.instance_type)],
        ami_type=eks.NodegroupAmiType.AL2023_X86_64_STANDARD,
        min_size=nodes.min_size,
        max_size=nodes.max_size,
        desired_size=nodes.desired_size,
        disk_size=nodes.root_volume_gib,
        labels={"role": "system"},
        subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
    )


def neuron_subnets(nodes: NeuronNodeGroupConfig) -> ec2.SubnetSelection:
    """Private subnets; only the reservation's AZ when the capacity is reserved.

    Instances of a Capacity Block or ODCR exist in one AZ: a group spanning others may try to
    launch there and fail (EKS Blueprints, "EKS w/ ML Capacity Block Reservation": restrict the
    node group's subnets to the block's AZ).
    """
    zones = [nodes.availability_zone] if nodes.availability_zone else None
    return ec2.SubnetSelection(
        subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, availability_zones=zones
    )


class NeuronNodeGroup(Construct):
    """The trn2 managed node group, tainted so only pods that claim Neuron devices land there."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.Cluster,
        nodes: NeuronNodeGroupConfig,
        name_prefix: str,
    ) -> None:
        super().__init__(scope, construct_id)
        data: dict = {
            "instanceType": nodes.instance_type,
            "blockDeviceMappings": [
                {
                    "deviceName": ROOT_DEVICE,
                    "ebs": {
                        "volumeSize": nodes.root_volume_gib,
                        "volumeType": "gp3",
                        "encrypted": True,
                        "deleteOnTermination": True,
                    },
                }
            ],
            # IMDSv2 only; hop limit 2 so pods (Mountpoint) can reach instance metadata.
            "metadataOptions": {
                "httpTokens": "required",
                "httpPutResponseHopLimit": 2,
                "httpEndpoint": "enabled",
            },
        }
        if nodes.capacity_reservation_id:
            data["capacityReservationSpecification"] = {
                "capacityReservationTarget": {
                    "capacityReservationId": nodes.capacity_reservation_id
                }
            }
        if nodes.capacity_type == CapacityType.CAPACITY_BLOCK:
            # EKS user guide (capacity-blocks-mng): a Capacity Block node group's launch template
            # sets this market type next to the reservation target (CloudFormation
            # LaunchTemplateData.InstanceMarketOptions.MarketType: spot | capacity-block).
            data["instanceMarketOptions"] = {"marketType": CAPACITY_BLOCK_MARKET_TYPE}
        if nodes.placement_group:
            self.placement_group = ec2.CfnPlacementGroup(self, "PlacementGroup", strategy="cluster")
            data["placement"] = {"groupName": self.placement_group.ref}
        if nodes.efa:
            data["networkInterfaces"] = self._efa_interfaces(cluster, nodes)
        self.launch_template = ec2.CfnLaunchTemplate(
            self,
            "LaunchTemplate",
            launch_template_name=f"{name_prefix}-neuron",
            launch_template_data=data,  # camelCase keys, as the L1 expects
        )
        self.nodegroup = cluster.add_nodegroup_capacity(
            "Neuron",
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_NEURON,
            launch_template_spec=eks.LaunchTemplateSpec(
                id=self.launch_template.ref,
                version=self.launch_template.attr_latest_version_number,
            ),
            capacity_type=(
                eks.CapacityType.CAPACITY_BLOCK
                if nodes.capacity_type == CapacityType.CAPACITY_BLOCK
                else eks.CapacityType.ON_DEMAND
            ),
            min_size=nodes.min_size,
            max_size=nodes.max_size,
            desired_size=nodes.desired_size,
            labels={"role": "neuron"},
            taints=[
                eks.TaintSpec(key=NEURON_TAINT_KEY, effect=eks.TaintEffect.NO_SCHEDULE),
            ],
            subnets=neuron_subnets(nodes),
        )

    def _efa_interfaces(self, cluster: eks.Cluster, nodes: NeuronNodeGroupConfig) -> list[dict]:
        # EFA traffic must be allowed to and from the group itself.
        self.efa_security_group = ec2.SecurityGroup(
            self,
            "EfaSecurityGroup",
            vpc=cluster.vpc,
            description="EFA: all traffic within the Neuron node group",
            allow_all_outbound=False,
        )
        self.efa_security_group.add_ingress_rule(
            self.efa_security_group, ec2.Port.all_traffic(), "EFA within the group"
        )
        self.efa_security_group.add_egress_rule(
            self.efa_security_group, ec2.Port.all_traffic(), "EFA within the group"
        )
        groups = [cluster.cluster_security_group_id, self.efa_security_group.security_group_id]
        return [
            {
                "networkCardIndex": card,
                # The primary interface is device 0; EFA-only interfaces on other cards are 1.
                "deviceIndex": 0 if card == 0 else 1,
                "interfaceType": "efa" if card == 0 else "efa-only",
                "groups": groups,
                "deleteOnTermination": True,
            }
            for card in range(nodes.efa_interfaces)
        ]
