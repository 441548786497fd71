"""Tiered routing's controllers: Envoy Gateway (with the Gateway API CRDs) and Argo Rollouts.

- Envoy Gateway from its OCI Helm chart (``routing.eks.envoy_gateway_chart`` at
  ``routing.eks.envoy_gateway_version``; envoyproxy/gateway
  ``site/content/en/latest/install/install-helm.md``: ``helm install eg
  oci://docker.io/envoyproxy/gateway-helm --version v1.9.0 -n envoy-gateway-system``). The
  chart's ``crds`` subchart installs the Gateway API CRDs (bundle v1.6.1) and Envoy Gateway's
  own. ``config.envoyGateway.extensionApis.enableBackend`` turns on the Backend kind, which
  carries ``fallback: true`` (``tasks/traffic/backend.md``, "Enable Backend"; Helm merges
  this map into the chart's default EnvoyGateway configuration).
- Argo Rollouts from the argo-helm chart, with the Gateway API traffic-router plugin
  (argoproj-labs/rollouts-plugin-trafficrouter-gatewayapi ``docs/installation.md``:
  ``controller.trafficRouterPlugins``; its release is pinned in
  experiment/config/gateway_plugin.py, the binary checked against
  ``routing.eks.gateway_api_plugin_sha256``) and ``AWS_REGION`` set, which its CloudWatch
  provider needs (argo-rollouts ``docs/analysis/cloudwatch.md``). Its service account reads
  CloudWatch through a Pod Identity role allowed ``cloudwatch:GetMetricData`` and, with the
  live guardrails on, the read-only query actions on their workspace only
  (stacks/guardrails.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from charts.rollout import GATEWAY_API_PLUGIN
from experiment import ExperimentConfig
from experiment.config import GATEWAY_API_PLUGIN_URL, plugin_sha256
from stacks.nag import acknowledge
from stacks.pod_identity import associate, pod_identity_role

if TYPE_CHECKING:
    from stacks.guardrails import GuardrailWorkspace

ENVOY_GATEWAY_RELEASE = "eg"
ROLLOUTS_RELEASE = "argo-rollouts"  # the chart's full name, hence its service account's name
ROLLOUTS_CHART = "argo-rollouts"


def envoy_gateway_values() -> dict[str, Any]:
    return {"config": {"envoyGateway": {"extensionApis": {"enableBackend": True}}}}


def rollouts_values(config: ExperimentConfig) -> dict[str, Any]:
    return {
        "installCRDs": True,
        "serviceAccount": {"name": config.routing.eks.rollouts_service_account},
        "controller": {
            # The controller refuses a download whose SHA-256 differs (argo-rollouts v1.9.1
            # utils/plugin/types/types.go PluginItem.Sha256, utils/plugin/downloader.go).
            "trafficRouterPlugins": [
                {
                    "name": GATEWAY_API_PLUGIN,
                    "location": GATEWAY_API_PLUGIN_URL,
                    "sha256": plugin_sha256(config.routing.eks.gateway_api_plugin_sha256),
                }
            ],
            "extraEnv": [{"name": "AWS_REGION", "value": config.region}],
        },
    }


class TieredRouting(Construct):
    """The two controllers; the routing chart's custom resources depend on ``charts``."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.Cluster,
        config: ExperimentConfig,
        guardrail_workspace: GuardrailWorkspace | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        eks_routing = config.routing.eks
        repository = eks_routing.envoy_gateway_chart
        self.envoy_gateway = cluster.add_helm_chart(
            "EnvoyGateway",
            repository=repository,
            chart=repository.rstrip("/").rsplit("/", 1)[-1],
            version=eks_routing.envoy_gateway_version,
            namespace=eks_routing.namespace,
            create_namespace=True,
            release=ENVOY_GATEWAY_RELEASE,
            values=envoy_gateway_values(),
            wait=True,
            timeout=cdk.Duration.minutes(10),
        )

        self.rollouts_role = pod_identity_role(
            self, "RolloutsRole", "Argo Rollouts: read the guardrail metrics from CloudWatch"
        )
        self.rollouts_role.add_to_policy(
            iam.PolicyStatement(
                actions=["cloudwatch:GetMetricData"],
                resources=["*"],  # GetMetricData has no resource type (Service Authorization)
            )
        )
        acknowledge(
            self.rollouts_role,
            "AwsSolutions-IAM5[Resource::*]",
            "cloudwatch:GetMetricData supports no resource-level permissions or namespace "
            "condition; the role allows that read-only action and nothing else.",
        )
        if guardrail_workspace is not None:
            # The analysis' Prometheus provider queries the live guardrails' workspace.
            guardrail_workspace.grant_query(self.rollouts_role)
        self.rollouts_association = associate(
            self,
            "RolloutsIdentity",
            # jsii's Python Cluster lacks a property of its own ICluster protocol
            cluster=cast(eks.ICluster, cluster),
            namespace=eks_routing.rollouts_namespace,
            service_account=eks_routing.rollouts_service_account,
            role=self.rollouts_role,
        )
        self.rollouts = cluster.add_helm_chart(
            "ArgoRollouts",
            repository=eks_routing.rollouts_chart_repository,
            chart=ROLLOUTS_CHART,
            version=eks_routing.rollouts_chart_version,
            namespace=eks_routing.rollouts_namespace,
            create_namespace=True,
            release=ROLLOUTS_RELEASE,
            values=rollouts_values(config),
            wait=True,
            timeout=cdk.Duration.minutes(10),
        )
        # Credentials exist before the controller first queries CloudWatch.
        self.rollouts.node.add_dependency(self.rollouts_association)

        self.operator_entries = self._operator_access(cluster, config)

    def _operator_access(
        self, cluster: eks.Cluster, config: ExperimentConfig
    ) -> list[eks.CfnAccessEntry]:
        """Each operator principal joins ``operators_group`` and gets nothing else: the
        routing chart's Role is its only grant (abort and retry, never promote)."""
        eks_routing = config.routing.eks
        entries = []
        for index, arn in enumerate(eks_routing.operator_principal_arns):
            entries.append(
                eks.CfnAccessEntry(
                    self,
                    f"OperatorAccess{index}",
                    cluster_name=cluster.cluster_name,
                    principal_arn=arn,
                    kubernetes_groups=[eks_routing.operators_group],
                    type="STANDARD",
                )
            )
        return entries

    @property
    def charts(self) -> list[eks.HelmChart]:
        return [self.envoy_gateway, self.rollouts]
