"""EKS add-ons and the Pod Identity associations of their service accounts.

- vpc-cni: the managed add-on, with its network policy agent on. Without the agent EKS
  accepts NetworkPolicies but enforces none (EKS user guide, cni-network-policy-configure:
  managed add-on configuration ``{"enableNetworkPolicy": "true"}``, a string).
- eks-pod-identity-agent: the credential path for every association below.
- aws-mountpoint-s3-csi-driver: kube-system/s3-csi-driver-sa -> the model-store role (scoped to
  the one bucket, defined in ``model_store.py``).
- amazon-cloudwatch-observability: amazon-cloudwatch/cloudwatch-agent (Container Insights).
"""

from __future__ import annotations

from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from experiment.config import ClusterConfig
from stacks.nag import acknowledge, managed_policy_finding
from stacks.node_groups import NEURON_TAINT_KEY
from stacks.pod_identity import associate, pod_identity_role

VPC_CNI = "vpc-cni"
VPC_CNI_CONFIGURATION = {"enableNetworkPolicy": "true"}
# EKS installs vpc-cni self-managed on every new cluster; OVERWRITE lets the managed add-on
# take it over (CloudFormation AWS::EKS::Addon ResolveConflicts: NONE | OVERWRITE | PRESERVE).
VPC_CNI_RESOLVE_CONFLICTS = "OVERWRITE"
POD_IDENTITY_AGENT = "eks-pod-identity-agent"
S3_CSI_DRIVER = "aws-mountpoint-s3-csi-driver"
S3_CSI_NAMESPACE = "kube-system"
S3_CSI_SERVICE_ACCOUNT = "s3-csi-driver-sa"
CLOUDWATCH_OBSERVABILITY = "amazon-cloudwatch-observability"
CLOUDWATCH_NAMESPACE = "amazon-cloudwatch"
CLOUDWATCH_SERVICE_ACCOUNT = "cloudwatch-agent"
# An AWS managed policy, but not a *FullAccess one: metric/log writes plus tag reads.
CLOUDWATCH_AGENT_POLICY = "CloudWatchAgentServerPolicy"

# The CSI node plugin must also run on the tainted trn2 nodes, where the models are mounted.
NEURON_TOLERATION = {"key": NEURON_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}


class ClusterAddons(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.ICluster,
        mountpoint_role: iam.IRole,
        settings: ClusterConfig,
    ) -> None:
        super().__init__(scope, construct_id)
        self.vpc_cni = eks.Addon(
            self,
            "VpcCni",
            cluster=cluster,
            addon_name=VPC_CNI,
            configuration_values=VPC_CNI_CONFIGURATION,
        )
        cfn_vpc_cni: eks.CfnAddon = self.vpc_cni.node.default_child  # type: ignore[assignment]
        cfn_vpc_cni.resolve_conflicts = VPC_CNI_RESOLVE_CONFLICTS
        self.pod_identity_agent = eks.Addon(
            self, "PodIdentityAgent", cluster=cluster, addon_name=POD_IDENTITY_AGENT
        )

        self.s3_csi_association = associate(
            self,
            "S3CsiDriverIdentity",
            cluster=cluster,
            namespace=S3_CSI_NAMESPACE,
            service_account=S3_CSI_SERVICE_ACCOUNT,
            role=mountpoint_role,
        )
        self.s3_csi_driver = eks.Addon(
            self,
            "S3CsiDriver",
            cluster=cluster,
            addon_name=S3_CSI_DRIVER,
            # Pinned (experiment/config/upstreams.py, row aws-mountpoint-s3-csi-driver).
            addon_version=settings.s3_csi_addon_version,
            configuration_values={"node": {"tolerations": [NEURON_TOLERATION]}},
        )

        self.cloudwatch_role = pod_identity_role(
            self, "CloudWatchAgentRole", "CloudWatch agent: Container Insights metrics and logs"
        )
        self.cloudwatch_role.add_managed_policy(
            iam.ManagedPolicy.from_aws_managed_policy_name(CLOUDWATCH_AGENT_POLICY)
        )
        acknowledge(
            self.cloudwatch_role,
            managed_policy_finding(CLOUDWATCH_AGENT_POLICY),
            "The AWS-maintained policy documented for the CloudWatch agent (Container "
            "Insights); it is scoped to metric/log writes, not a *FullAccess policy.",
        )
        self.cloudwatch_association = associate(
            self,
            "CloudWatchAgentIdentity",
            cluster=cluster,
            namespace=CLOUDWATCH_NAMESPACE,
            service_account=CLOUDWATCH_SERVICE_ACCOUNT,
            role=self.cloudwatch_role,
        )
        self.cloudwatch_observability = eks.Addon(
            self,
            "CloudWatchObservability",
            cluster=cluster,
            addon_name=CLOUDWATCH_OBSERVABILITY,
            # Pinned (experiment/config/upstreams.py, row amazon-cloudwatch-observability).
            addon_version=settings.cloudwatch_addon_version,
        )

        # Credentials come from the agent and the associations: both exist before the drivers.
        for addon, association in (
            (self.s3_csi_driver, self.s3_csi_association),
            (self.cloudwatch_observability, self.cloudwatch_association),
        ):
            addon.node.add_dependency(self.pod_identity_agent)
            addon.node.add_dependency(association)

    @property
    def addons(self) -> list[eks.Addon]:
        return [
            self.vpc_cni,
            self.pod_identity_agent,
            self.s3_csi_driver,
            self.cloudwatch_observability,
        ]
