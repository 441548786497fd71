"""The Argo Rollouts controller's AWS credentials in the synthesized cluster stack: IRSA.

Its AMP queries are signed by prometheus/common sigv4 v0.1.0 on aws-sdk-go v1.44.116, below the
v1.47.11 that EKS Pod Identity needs (stacks/gateway.py has the sources), so the controller gets
an IAM role for its service account instead: trusted through the cluster's IAM OIDC provider for
exactly that service account, named in the chart's service-account annotation, and allowed to
read CloudWatch metric data and query the guardrail workspace, nothing more.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from cdk_synth import HELM_RESOURCE, Synthesized, decode_manifest

from stacks.gateway import ANALYSIS_QUERY_ACTIONS, ROLLOUTS_RELEASE, rollouts_values

pytestmark = pytest.mark.infra

OIDC_PROVIDER = "AWS::IAM::OIDCProvider"
# Written out, not imported: the EKS user guide's IRSA values (service-accounts.adoc, "Assign
# IAM roles to Kubernetes service accounts": the annotation and the trust's "aud").
IRSA_ROLE_ANNOTATION = "eks.amazonaws.com/role-arn"
STS_AUDIENCE = "sts.amazonaws.com"
CFN_JSON = "Custom::AWSCDKCfnJson"
ISSUER = "<issuer>"


def _resources(synth: Synthesized) -> dict[str, dict[str, Any]]:
    return synth.templates["Cluster"]["Resources"]


def _rollouts_release(synth: Synthesized) -> dict[str, Any]:
    (release,) = [
        r
        for r in _resources(synth).values()
        if r["Type"] == HELM_RESOURCE and r["Properties"]["Release"] == ROLLOUTS_RELEASE
    ]
    return release


def _role_id(synth: Synthesized) -> str:
    """The role whose ARN the release's values carry (their only references)."""
    values = _rollouts_release(synth)["Properties"]["Values"]
    references = [part for part in values["Fn::Join"][1] if not isinstance(part, str)]
    # The service-account annotation and the pod annotation: the same role's ARN.
    assert len(references) == 2 and references[0] == references[1]
    role_id, attribute = references[0]["Fn::GetAtt"]
    assert attribute == "Arn"
    assert _resources(synth)[role_id]["Type"] == "AWS::IAM::Role"
    return role_id


def _issuer_of(provider_id: str) -> dict[str, Any]:
    """How aws-cdk-lib writes an OIDC provider's issuer (its ARN after ``:oidc-provider/``)."""
    return {"Fn::Select": [1, {"Fn::Split": [":oidc-provider/", {"Ref": provider_id}]}]}


def test_the_chart_annotates_the_controllers_service_account_with_the_role(synth) -> None:
    values = decode_manifest(_rollouts_release(synth)["Properties"]["Values"])
    assert values == rollouts_values(synth.config, "TOKEN")
    service_account = values["serviceAccount"]
    # The chart creates the service account (its default, serviceAccount.create true) under
    # this name and puts these annotations on it.
    assert "create" not in service_account
    assert service_account["name"] == synth.config.routing.eks.rollouts_service_account
    assert service_account["annotations"] == {IRSA_ROLE_ANNOTATION: "TOKEN"}
    # The controller's pods roll when the role changes: the webhook only mutates new pods.
    assert list(values["controller"]["podAnnotations"].values()) == ["TOKEN"]
    _role_id(synth)  # the TOKEN is the role's ARN, the one reference in the values


def test_the_role_trusts_only_the_controllers_service_account_through_the_oidc_provider(
    synth,
) -> None:
    resources = _resources(synth)
    eks = synth.config.routing.eks
    trust = resources[_role_id(synth)]["Properties"]["AssumeRolePolicyDocument"]
    (statement,) = trust["Statement"]
    assert statement["Effect"] == "Allow"
    assert statement["Action"] == "sts:AssumeRoleWithWebIdentity"
    provider_id = statement["Principal"]["Federated"]["Ref"]
    provider = resources[provider_id]
    assert provider["Type"] == OIDC_PROVIDER
    assert provider["Properties"]["ClientIdList"] == [STS_AUDIENCE]
    (cluster_id,) = [k for k, r in resources.items() if r["Type"] == "AWS::EKS::Cluster"]
    assert provider["Properties"]["Url"] == {"Fn::GetAtt": [cluster_id, "OpenIdConnectIssuerUrl"]}
    (operator,) = statement["Condition"]
    assert operator == "StringEquals"  # exact match: no wildcard subject
    conditions_id, attribute = statement["Condition"]["StringEquals"]["Fn::GetAtt"]
    assert attribute == "Value"
    conditions = resources[conditions_id]
    assert conditions["Type"] == CFN_JSON
    separator, parts = conditions["Properties"]["Value"]["Fn::Join"]
    issuers = [part for part in parts if not isinstance(part, str)]
    assert issuers and all(issuer == _issuer_of(provider_id) for issuer in issuers)
    rendered = separator.join(part if isinstance(part, str) else ISSUER for part in parts)
    assert json.loads(rendered) == {
        f"{ISSUER}:aud": STS_AUDIENCE,
        f"{ISSUER}:sub": f"system:serviceaccount:{eks.rollouts_namespace}:"
        f"{eks.rollouts_service_account}",
    }


def test_no_pod_identity_association_names_the_controller(synth) -> None:
    eks = synth.config.routing.eks
    associations = [
        r["Properties"]
        for r in _resources(synth).values()
        if r["Type"] == "AWS::EKS::PodIdentityAssociation"
    ]
    assert associations  # the other clients keep theirs (tests/stacks/test_cluster.py)
    assert not [
        a
        for a in associations
        if a["Namespace"] == eks.rollouts_namespace
        or a["ServiceAccount"] == eks.rollouts_service_account
    ]
    # Nor does the controller's role trust the Pod Identity service.
    assert "pods.eks.amazonaws.com" not in json.dumps(
        _resources(synth)[_role_id(synth)]["Properties"]["AssumeRolePolicyDocument"]
    )


def test_the_role_may_only_read_metric_data_and_query_the_guardrail_workspace(synth) -> None:
    resources = _resources(synth)
    role_id = _role_id(synth)
    assert "ManagedPolicyArns" not in resources[role_id]["Properties"]
    statements = [
        statement
        for r in resources.values()
        if r["Type"] == "AWS::IAM::Policy" and {"Ref": role_id} in r["Properties"]["Roles"]
        for statement in r["Properties"]["PolicyDocument"]["Statement"]
    ]
    cloudwatch, workspace = statements
    assert cloudwatch == {"Action": "cloudwatch:GetMetricData", "Effect": "Allow", "Resource": "*"}
    assert workspace["Effect"] == "Allow"
    assert [workspace["Action"]] == list(ANALYSIS_QUERY_ACTIONS) == ["aps:QueryMetrics"]
    # The live guardrails' workspace ARN (a cross-stack output), never a wildcard.
    output = workspace["Resource"]["Fn::GetStackOutput"]
    (workspace_id,) = [
        k
        for k, r in synth.templates["Observability"]["Resources"].items()
        if r["Type"] == "AWS::APS::Workspace"
    ]
    assert output["OutputName"].startswith(f"PublishOutputFnGetAtt{workspace_id}Arn")
    assert output["StackName"] == f"{synth.config.project}-observability"
