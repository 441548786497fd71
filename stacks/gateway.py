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
  provider needs (argo-rollouts ``docs/analysis/cloudwatch.md``).

The controller's AWS credentials come from IRSA (IAM roles for service accounts), not EKS Pod
Identity. Its Prometheus provider signs AMP queries with ``github.com/prometheus/common/sigv4``
v0.1.0 (argo-rollouts v1.9.1 ``metricproviders/prometheus/prometheus.go``,
``sigv4.NewSigV4RoundTripper``), which resolves credentials with aws-sdk-go v1
``session.NewSessionWithOptions`` (prometheus/common ``sigv4/sigv4.go`` at tag sigv4/v0.1.0);
the release's ``go.mod`` resolves that SDK to ``github.com/aws/aws-sdk-go v1.44.116 //
indirect``. EKS Pod Identity needs aws-sdk-go v1 v1.47.11 or later (EKS user guide,
``manage-access/aws-access/service-accounts.adoc``, "Use pod identity with the AWS SDK"):
v1.44.116's HTTP credential provider refuses the agent's 169.254.170.23 address ("only
loopback hosts are allowed", aws-sdk-go v1.44.116 ``aws/defaults/defaults.go``; v1.47.11 added
it and ``AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE``). Web identity, which IRSA uses, is in that
SDK's default chain (v1.44.116 ``aws/session/credentials.go``, ``AWS_WEB_IDENTITY_TOKEN_FILE``;
IRSA minimum for Go: 1.23.13, same guide, "Use IRSA with the AWS SDK"), and in the
aws-sdk-go-v2 its CloudWatch provider uses (``metricproviders/cloudwatch/cloudwatch.go``,
``config.LoadDefaultConfig``; aws-sdk-go-v2 ``config/resolve_credentials.go``,
``resolveCredentialChain`` -> ``assumeWebIdentity``), so one role serves both. The role trusts the
cluster's IAM OIDC provider for exactly ``system:serviceaccount:<rollouts namespace>:<its
service account>`` with audience ``sts.amazonaws.com`` (same guide, "Assign IAM roles to
Kubernetes service accounts"), and the chart annotates that service account with
``eks.amazonaws.com/role-arn`` (argo-helm ``charts/argo-rollouts/values.yaml``
``serviceAccount.annotations``, rendered by ``templates/controller/serviceaccount.yaml``;
read at tag argo-rollouts-2.41.0, unchanged since 2.40.0). It may call
``cloudwatch:GetMetricData`` and, with the live guardrails on, ``aps:QueryMetrics`` on their
workspace only: the provider calls only the query and query_range endpoints
(``prometheus.go``, ``p.api.Query`` / ``p.api.QueryRange``), both the QueryMetrics action (AMP
user guide, "QueryMetrics").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from charts.rollout import GATEWAY_API_PLUGIN
from experiment import ExperimentConfig
from experiment.config import GATEWAY_API_PLUGIN_URL, plugin_sha256
from stacks.checkov import acknowledge_checkov
from stacks.nag import acknowledge

if TYPE_CHECKING:
    from stacks.guardrails import GuardrailWorkspace

ENVOY_GATEWAY_RELEASE = "eg"
ROLLOUTS_RELEASE = "argo-rollouts"  # the chart's full name, hence its service account's name
ROLLOUTS_CHART = "argo-rollouts"
# IRSA: the service-account annotation EKS's pod identity webhook reads, and the audience of the
# projected token the SDK exchanges (EKS user guide, service-accounts.adoc, "Assign IAM roles to
# Kubernetes service accounts": kubectl annotate ... eks.amazonaws.com/role-arn=...; trust
# condition "<provider>:aud": "sts.amazonaws.com").
IRSA_ROLE_ANNOTATION = "eks.amazonaws.com/role-arn"
STS_AUDIENCE = "sts.amazonaws.com"
# The webhook injects AWS_ROLE_ARN and the token mount when a pod is created, never into a
# running one (aws/amazon-eks-pod-identity-webhook deploy/mutatingwebhook.yaml: operations
# CREATE on pods). The same ARN as a pod-template annotation (argo-helm
# controller.podAnnotations, templates/controller/deployment.yaml) makes Helm roll the
# controller whenever the role changes, including the first deploy that replaces its Pod
# Identity association: the pods it started with hold Pod Identity's variables, not IRSA's.
CONTROLLER_ROLE_POD_ANNOTATION = "specdecode.aws/irsa-role-arn"
# What the analysis' Prometheus provider calls: /api/v1/query (and /api/v1/query_range with a
# range query), both authorized by aps:QueryMetrics (AMP user guide, API reference,
# "QueryMetrics"). No series, label or metadata endpoint is called.
ANALYSIS_QUERY_ACTIONS = ("aps:QueryMetrics",)
# CfnJson's handler: aws-cdk-lib's stack-wide singleton CustomResourceProvider
# (aws-cdk-lib 2.275.0 core/lib/cfn-json.ts -> private/cfn-utils-provider.ts,
# getOrCreate(scope, "AWSCDKCfnUtilsProvider"); getOrCreateProvider appends
# "CustomResourceProvider"; its Lambda is the CfnResource "Handler"). The handler only returns
# JSON.parse of its input (dist/core/cfn-utils-provider/index.js): no AWS call, no secret.
CFN_JSON_PROVIDER = "AWSCDKCfnUtilsProviderCustomResourceProvider"
CFN_JSON_HANDLER_FINDINGS = {
    "CKV_AWS_115": "aws-cdk-lib's CfnJson handler, invoked only by CloudFormation while it "
    "deploys the stack; a reserved-concurrency limit could only throttle deploys",
    "CKV_AWS_116": "aws-cdk-lib's CfnJson handler reports every result to CloudFormation's "
    "response URL, which fails the stack operation on an error; a DLQ would hold events "
    "nothing replays",
    "CKV_AWS_117": "aws-cdk-lib's CfnJson handler calls no AWS API and no address but "
    "CloudFormation's response URL; aws-cdk-lib's CustomResourceProvider has no VPC option",
}


def envoy_gateway_values() -> dict[str, Any]:
    return {"config": {"envoyGateway": {"extensionApis": {"enableBackend": True}}}}


def service_account_subject(namespace: str, service_account: str) -> str:
    """The ``sub`` claim of a service account's projected token."""
    return f"system:serviceaccount:{namespace}:{service_account}"


def rollouts_values(config: ExperimentConfig, role_arn: str) -> dict[str, Any]:
    return {
        "installCRDs": True,
        "serviceAccount": {
            "name": config.routing.eks.rollouts_service_account,
            # IRSA: the webhook injects AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE.
            "annotations": {IRSA_ROLE_ANNOTATION: role_arn},
        },
        "controller": {
            "podAnnotations": {CONTROLLER_ROLE_POD_ANNOTATION: role_arn},
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


def irsa_role(
    scope: Construct,
    construct_id: str,
    *,
    cluster: eks.Cluster,
    namespace: str,
    service_account: str,
    description: str,
) -> iam.Role:
    """A role that only ``namespace/service_account`` of ``cluster`` can assume, with IRSA.

    The trust is the one aws_eks_v2's own ``ServiceAccount`` builds for ``IdentityType.IRSA``
    (aws-cdk-lib 2.275.0 ``aws-eks-v2/lib/service-account.ts``: an ``OpenIdConnectPrincipal`` of
    ``cluster.openIdConnectProvider`` with ``StringEquals`` on ``<issuer>:aud`` and
    ``<issuer>:sub``, the keys in a ``CfnJson`` because the issuer is only known at deploy).
    That construct is not used because it also applies the ServiceAccount itself, which the
    chart owns here. The provider is the cluster's ``AWS::IAM::OIDCProvider``
    (``OidcProviderNative``, client id sts.amazonaws.com: cdk.json sets
    ``@aws-cdk/aws-eks:useNativeOidcProvider``).
    """
    provider = cluster.open_id_connect_provider
    issuer = provider.open_id_connect_provider_issuer
    conditions = cdk.CfnJson(
        scope,
        f"{construct_id}TrustConditions",
        value={
            f"{issuer}:aud": STS_AUDIENCE,
            f"{issuer}:sub": service_account_subject(namespace, service_account),
        },
    )
    principal = iam.OpenIdConnectPrincipal(provider).with_conditions({"StringEquals": conditions})
    _acknowledge_cfn_json_handler(scope)
    return iam.Role(scope, construct_id, description=description, assumed_by=principal)


def _acknowledge_cfn_json_handler(scope: Construct) -> None:
    """checkov's findings on the Lambda behind every CfnJson of the stack, each with why."""
    provider = cdk.Stack.of(scope).node.find_child(CFN_JSON_PROVIDER)
    handler = provider.node.find_child("Handler")
    if not isinstance(handler, cdk.CfnResource):
        raise TypeError(f"{handler.node.path} is not the CfnJson handler's CfnResource")
    for check_id, reason in CFN_JSON_HANDLER_FINDINGS.items():
        acknowledge_checkov(handler, check_id, reason)


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

        self.rollouts_role = irsa_role(
            self,
            "RolloutsRole",
            cluster=cluster,
            namespace=eks_routing.rollouts_namespace,
            service_account=eks_routing.rollouts_service_account,
            description="Argo Rollouts (IRSA): read the guardrail metrics",
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
            self.rollouts_role.add_to_policy(
                iam.PolicyStatement(
                    actions=list(ANALYSIS_QUERY_ACTIONS), resources=[guardrail_workspace.arn]
                )
            )
        self.rollouts = cluster.add_helm_chart(
            "ArgoRollouts",
            repository=eks_routing.rollouts_chart_repository,
            chart=ROLLOUTS_CHART,
            version=eks_routing.rollouts_chart_version,
            namespace=eks_routing.rollouts_namespace,
            create_namespace=True,
            release=ROLLOUTS_RELEASE,
            # The role's ARN in the values: the release installs after the role (and its
            # trust in the OIDC provider) exists.
            values=rollouts_values(config, self.rollouts_role.role_arn),
            wait=True,
            timeout=cdk.Duration.minutes(10),
        )

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
