"""The EKS cluster (aws_eks_v2): managed node groups only, add-ons, Neuron DRA, workloads."""

from __future__ import annotations

import importlib
import json
import re
from typing import cast

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from constructs import Construct, IConstruct

from charts.gateway import gateway_url
from experiment import ExperimentConfig
from experiment.config import EndpointAccess
from stacks.addons import ClusterAddons
from stacks.gateway import TieredRouting
from stacks.guardrails import GuardrailCollector, GuardrailWorkspace
from stacks.log_encryption import EncryptLogGroups
from stacks.nag import acknowledge, managed_policy_finding
from stacks.neuron_dra import add_neuron_dra_driver
from stacks.node_groups import NeuronNodeGroup, add_system_nodes
from stacks.pod_identity import associate, pod_identity_role
from stacks.workloads import add_experiment_charts, loadtest_image

CLUSTER_ADMIN_POLICY = "AmazonEKSClusterAdminPolicy"
NODE_POLICIES = (
    "AmazonEKSWorkerNodePolicy",
    "AmazonEKS_CNI_Policy",
    "AmazonEC2ContainerRegistryReadOnly",
)
ECR_PUBLIC_POLICY = "AmazonElasticContainerRegistryPublicReadOnly"
KUBECTL_POLICIES = (
    "service-role/AWSLambdaBasicExecutionRole",
    "service-role/AWSLambdaVPCAccessExecutionRole",
    "AmazonEC2ContainerRegistryReadOnly",
)


def kubectl_layer(scope: Construct, minor: int) -> lambda_.ILayerVersion:
    """The kubectl/helm layer matching the cluster's Kubernetes minor version."""
    module_name = f"aws_cdk.lambda_layer_kubectl_v{minor}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError:
        raise ValueError(
            f"cluster.kubernetes_version 1.{minor} needs the kubectl layer package "
            f"'aws-cdk.lambda-layer-kubectl-v{minor}': add it to the infra extra in "
            "pyproject.toml (replacing the current one) and reinstall"
        ) from None
    return getattr(module, f"KubectlV{minor}Layer")(scope, "KubectlLayer")


def _log_type(name: str) -> eks.ClusterLoggingTypes:
    # EKS names (controllerManager) -> the CDK enum (CONTROLLER_MANAGER).
    return eks.ClusterLoggingTypes[re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()]


class ClusterStack(cdk.Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: ExperimentConfig,
        vpc: ec2.IVpc,
        logs_key: kms.IKey,
        bucket_name: str,
        mountpoint_role: iam.IRole,
        bucket_key_arn: str | None = None,
        model_import_role: iam.IRole | None = None,
        guardrail_workspace: GuardrailWorkspace | None = None,
        **kwargs,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        settings = config.cluster
        # The kubectl provider's log groups (aws_eks_v2 creates them) use the network's logs key.
        cdk.Aspects.of(self).add(EncryptLogGroups(logs_key))
        private_subnets = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)

        secrets_key = kms.Key(
            self,
            "SecretsKey",
            description=f"{config.project}: EKS secrets envelope encryption",
            enable_key_rotation=True,
        )
        endpoint = (
            eks.EndpointAccess.PRIVATE
            if settings.endpoint_access == EndpointAccess.PRIVATE
            else eks.EndpointAccess.PUBLIC_AND_PRIVATE.only_from(*settings.public_access_cidrs)
        )
        self.cluster = eks.Cluster(
            self,
            "Cluster",
            cluster_name=settings.name,
            version=eks.KubernetesVersion.of(settings.kubernetes_version),
            vpc=vpc,
            vpc_subnets=[private_subnets],
            endpoint_access=endpoint,
            secrets_encryption_key=secrets_key,
            cluster_logging=[_log_type(name) for name in settings.control_plane_log_types],
            # Managed node groups only: the Neuron DRA driver does not support EKS Auto Mode.
            default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
            default_capacity=0,
            kubectl_provider_options=eks.KubectlProviderOptions(
                kubectl_layer=kubectl_layer(self, settings.kubernetes_minor),
                # The endpoint may be private: the kubectl handler runs inside the VPC.
                private_subnets=vpc.select_subnets(
                    subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS
                ).subnets,
            ),
        )
        for index, arn in enumerate(settings.admin_principal_arns):
            self.cluster.grant_access(
                f"Admin{index}",
                arn,
                [
                    eks.AccessPolicy.from_access_policy_name(
                        CLUSTER_ADMIN_POLICY, access_scope_type=eks.AccessScopeType.CLUSTER
                    )
                ],
            )

        # The jsii Python class lacks one property of its own ICluster protocol
        # (kubectl_provider_options), so mypy rejects it where ICluster is expected.
        cluster_ref = cast(eks.ICluster, self.cluster)
        self.system_nodes = add_system_nodes(self.cluster, settings.system_nodes)
        self.neuron_nodes = NeuronNodeGroup(
            self,
            "NeuronNodes",
            cluster=self.cluster,
            nodes=settings.neuron_nodes,
            name_prefix=config.project,
        )

        self.addons = ClusterAddons(
            self,
            "Addons",
            cluster=cluster_ref,
            mountpoint_role=mountpoint_role,
            settings=settings,
        )
        for addon in self.addons.addons:
            # Add-on pods need somewhere to run before the add-on can become ACTIVE.
            addon.node.add_dependency(self.system_nodes)

        self.neuron_dra = add_neuron_dra_driver(self.cluster, settings)
        self.neuron_dra.node.add_dependency(self.system_nodes)

        self.loadtest_role = pod_identity_role(
            self, "LoadTestRole", "Load test: publish its metrics to one CloudWatch namespace"
        )
        self.loadtest_role.add_to_policy(
            iam.PolicyStatement(
                actions=["cloudwatch:PutMetricData"],
                resources=["*"],  # PutMetricData has no resource type; the condition scopes it
                conditions={
                    "StringEquals": {"cloudwatch:namespace": config.loadtest.metric_namespace}
                },
            )
        )
        acknowledge(
            self.loadtest_role,
            "AwsSolutions-IAM5[Resource::*]",
            "cloudwatch:PutMetricData supports no resource-level permissions; the "
            "cloudwatch:namespace condition limits it to the load test's own namespace.",
        )
        self._grant_traffic_read(config, bucket_name, bucket_key_arn)
        self.loadtest_association = associate(
            self,
            "LoadTestIdentity",
            cluster=cluster_ref,
            namespace=config.serving.namespace,
            service_account=config.loadtest.service_account,
            role=self.loadtest_role,
        )

        # The import Job's volume mounts with its service account's credentials (pod-level).
        self.model_import_association = (
            associate(
                self,
                "ModelImportIdentity",
                cluster=cluster_ref,
                namespace=config.serving.namespace,
                service_account=config.model_store.import_service_account,
                role=model_import_role,
            )
            if model_import_role is not None
            else None
        )

        self.routing = TieredRouting(
            self,
            "TieredRouting",
            cluster=self.cluster,
            config=config,
            guardrail_workspace=guardrail_workspace,
        )
        self.routing.node.add_dependency(self.system_nodes)

        # The live guardrails' collector: the cluster's private subnets, into the workspace.
        self.guardrail_collector = (
            GuardrailCollector(
                self,
                "GuardrailCollector",
                config=config,
                vpc=vpc,
                cluster_arn=self.cluster.cluster_arn,
                cluster_security_group=self.cluster.cluster_security_group,
                workspace_arn=guardrail_workspace.arn,
            )
            if guardrail_workspace is not None
            else None
        )

        self.loadtest_image = loadtest_image(self, config)
        self.charts = add_experiment_charts(
            self.cluster,
            config,
            bucket_name=bucket_name,
            loadtest_image_uri=self.loadtest_image.image_uri,
            prometheus_url=guardrail_workspace.query_url if guardrail_workspace else None,
            prerequisites=[
                *self.addons.addons,
                self.neuron_dra,
                self.loadtest_association,
                *self.routing.charts,  # the routing chart's CRDs
                *filter(None, [self.model_import_association]),
            ],
        )
        # What the kubectl path takes from the stacks (python -m charts --loadtest-image,
        # --prometheus-url; charts/__main__.py, docs/serving.md), as outputs of this stack.
        cdk.CfnOutput(
            self,
            "LoadTestImageUri",
            value=self.loadtest_image.image_uri,
            description="The load-test image (python -m charts --loadtest-image)",
        )
        if guardrail_workspace is not None:
            cdk.CfnOutput(
                self,
                "PrometheusQueryUrl",
                value=guardrail_workspace.query_url,
                description="The live guardrails' AMP query URL (python -m charts "
                "--prometheus-url)",
            )
        # Envoy Gateway creates the gateway's Service at run time, under the name the chart's
        # EnvoyProxy gives it (charts/gateway.py, envoy_proxy), so its address is known now.
        cdk.CfnOutput(
            self,
            "GatewayInternalUrl",
            value=gateway_url(config),
            description="The tiered gateway inside the cluster (ClusterIP; from outside: "
            "kubectl port-forward to its Service)",
        )
        self._acknowledge_eks_internals()

    def _grant_traffic_read(
        self, config: ExperimentConfig, bucket_name: str, bucket_key_arn: str | None
    ) -> None:
        """A replayed traffic file (loadtest.traffic.file): the load test may read that one
        object of the model-store bucket and decrypt it through S3 only; nothing without one."""
        key = config.loadtest.traffic.bucket_key()
        if key is None:
            return
        if bucket_key_arn is None:
            raise ValueError(
                "loadtest.traffic.file is set but the cluster stack was given no model-store "
                "key: pass bucket_key_arn (stacks/app.py) or unset loadtest.traffic.file"
            )
        self.loadtest_role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:GetObject"],
                resources=[f"arn:{cdk.Aws.PARTITION}:s3:::{bucket_name}/{key}"],
            )
        )
        self.loadtest_role.add_to_policy(
            iam.PolicyStatement(
                actions=["kms:Decrypt"],
                resources=[bucket_key_arn],
                # Only when S3 asks on the role's behalf (AWS KMS Developer Guide,
                # policy-conditions: kms:ViaService).
                conditions={
                    "StringEquals": {"kms:ViaService": f"s3.{config.region}.amazonaws.com"}
                },
            )
        )

    def _acknowledge_eks_internals(self) -> None:
        """Findings on roles and functions aws_eks_v2 creates for itself, each with why."""
        acknowledge(
            self.cluster.role,
            managed_policy_finding("AmazonEKSClusterPolicy"),
            "The EKS service role requires this AWS managed policy by design.",
        )
        for nodegroup in (self.system_nodes, self.neuron_nodes.nodegroup):
            for policy in NODE_POLICIES:
                acknowledge(
                    nodegroup.role,
                    managed_policy_finding(policy),
                    "EKS managed node groups require the worker-node, VPC CNI and ECR read-only "
                    "AWS managed policies on the node role.",
                )
        kubectl = self.cluster.node.find_child("KubectlProvider")
        handler = kubectl.node.find_child("Handler")
        for policy in KUBECTL_POLICIES:
            acknowledge(
                kubectl,
                managed_policy_finding(policy),
                "aws_eks_v2's kubectl provider (Lambda in the VPC, pulls the Neuron chart from "
                "public ECR) attaches these AWS managed policies itself.",
            )
        acknowledge(
            kubectl,
            f"AwsSolutions-IAM4[Policy::{self._ecr_public_policy(handler)}]",
            "aws_eks_v2 grants public ECR read access (Neuron Helm chart pull) to the kubectl "
            "handler in the aws partition.",
        )
        acknowledge(
            kubectl,
            f"AwsSolutions-IAM5[Resource::<{self._logical_id(handler)}.Arn>:*]",
            "The custom-resource framework invokes any version of the kubectl handler it owns.",
        )
        acknowledge(
            kubectl,
            "AwsSolutions-L1",
            "aws-cdk-lib pins the kubectl handler's Python runtime to the latest it supports.",
        )

    def _logical_id(self, construct: IConstruct) -> str:
        return self.get_logical_id(construct.node.default_child)  # type: ignore[arg-type]

    def _ecr_public_policy(self, handler: IConstruct) -> str:
        """How cdk-nag prints the handler's partition-conditional public ECR policy."""
        condition = self.get_logical_id(handler.node.find_child("HasEcrPublic"))  # type: ignore[arg-type]
        arn = {
            "Fn::Join": [
                "",
                ["arn:", {"Ref": "AWS::Partition"}, f":iam::aws:policy/{ECR_PUBLIC_POLICY}"],
            ]
        }
        return json.dumps(
            {"Fn::If": [condition, arn, {"Ref": "AWS::NoValue"}]}, separators=(",", ":")
        )
