"""IAM roles that one Kubernetes service account assumes through EKS Pod Identity.

The role and its association are separate so a role can live next to what it grants access to
(the model-store role lives in the model-store stack) while the association lives with the
cluster.
"""

from __future__ import annotations

from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"


def pod_identity_role(scope: Construct, construct_id: str, description: str) -> iam.Role:
    """A role only the EKS Pod Identity service can assume (AssumeRole + TagSession)."""
    principal = iam.ServicePrincipal(POD_IDENTITY_PRINCIPAL)
    role = iam.Role(scope, construct_id, description=description, assumed_by=principal)
    role.assume_role_policy.add_statements(  # type: ignore[union-attr]
        iam.PolicyStatement(actions=["sts:TagSession"], principals=[principal])
    )
    return role


def associate(
    scope: Construct,
    construct_id: str,
    *,
    cluster: eks.ICluster,
    namespace: str,
    service_account: str,
    role: iam.IRole,
) -> eks.CfnPodIdentityAssociation:
    return eks.CfnPodIdentityAssociation(
        scope,
        construct_id,
        cluster_name=cluster.cluster_name,
        namespace=namespace,
        service_account=service_account,
        role_arn=role.role_arn,
    )
