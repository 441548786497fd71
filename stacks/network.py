"""VPC across the AZs that hold trn2 capacity: private subnets for nodes, S3 gateway endpoint,
flow logs."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from constructs import Construct

from experiment import ExperimentConfig
from stacks.log_encryption import EncryptLogGroups, log_group_key


class NetworkStack(cdk.Stack):
    def __init__(
        self, scope: Construct, construct_id: str, *, config: ExperimentConfig, **kwargs
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        network = config.network
        # Shared with the cluster stack: its handler log groups use the same key.
        self.logs_key = log_group_key(
            self, "LogsKey", f"{config.project}: CloudWatch log groups (flow logs, handlers)"
        )
        cdk.Aspects.of(self).add(EncryptLogGroups(self.logs_key))
        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(network.vpc_cidr),
            # AZs come from the config (no lookup): the ones with trn2 capacity.
            availability_zones=network.availability_zones,
            nat_gateways=network.nat_gateways,
            subnet_configuration=[
                ec2.SubnetConfiguration(
                    name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=24
                ),
                # Nodes, pods (VPC CNI) and the kubectl handler live here: give them room.
                ec2.SubnetConfiguration(
                    name="private", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, cidr_mask=20
                ),
            ],
            restrict_default_security_group=True,
        )
        # Checkpoints and compiled artifacts stream from S3 without crossing the NAT gateway.
        self.vpc.add_gateway_endpoint("S3Endpoint", service=ec2.GatewayVpcEndpointAwsService.S3)
        flow_log_group = logs.LogGroup(self, "FlowLogs", removal_policy=cdk.RemovalPolicy.DESTROY)
        # Days straight from the config (validated there against what CloudWatch accepts).
        cfn_group: logs.CfnLogGroup = flow_log_group.node.default_child  # type: ignore[assignment]
        cfn_group.retention_in_days = network.flow_logs_retention_days
        self.vpc.add_flow_log(
            "FlowLog",
            destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_log_group),
            traffic_type=ec2.FlowLogTrafficType.ALL,
        )
