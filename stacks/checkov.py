"""checkov (cloudformation framework) acknowledgments: every accepted finding, with its reason.

checkov reads a resource's ``Metadata.checkov.skip`` list of ``{"id", "comment"}`` (checkov
``cloudformation/context_parser.py``, ``collect_skip_comments``); the tests fail on any finding
not acknowledged here, and on an acknowledgment without a reason.

Two kinds of findings are accepted:
- on the Lambda handlers aws-cdk-lib creates for its own custom resources (matched by the
  construct that owns them, so a Lambda of our own is still checked in full);
- on resources of ours, acknowledged where they are defined with ``acknowledge_checkov``.
"""

from __future__ import annotations

from typing import Any

import jsii
from aws_cdk import CfnResource, IAspect
from constructs import IConstruct

METADATA_KEY = "checkov"
LAMBDA_FUNCTION = "AWS::Lambda::Function"

# Construct ids under which aws-cdk-lib creates handler Lambdas of its own.
CDK_HANDLER_OWNERS = (
    "KubectlProvider",  # aws_eks_v2: kubectl/helm handler and its provider framework
    "Custom::VpcRestrictDefaultSGCustomResourceProvider",  # ec2.Vpc restrict_default_sg
    "Custom::S3AutoDeleteObjectsCustomResourceProvider",  # s3.Bucket auto_delete_objects
)

CDK_HANDLER_FINDINGS: dict[str, str] = {
    "CKV_AWS_115": "aws-cdk-lib custom-resource handler, invoked only by CloudFormation during "
    "deploys; a reserved-concurrency limit could only throttle deploys",
    "CKV_AWS_116": "aws-cdk-lib custom-resource handler, invoked synchronously by the "
    "CloudFormation provider framework, which reports failures to the stack; a DLQ only "
    "applies to asynchronous invocations",
    "CKV_AWS_117": "aws-cdk-lib singleton provider handler that only calls AWS APIs (EC2, S3); "
    "aws-cdk-lib offers no option to place it in a VPC (the kubectl handler is in the VPC)",
    "CKV_AWS_173": "environment set by aws-cdk-lib holds names and ARNs, no secrets; Lambda "
    "encrypts environment variables at rest with an AWS owned key",
}


def acknowledge_checkov(resource: CfnResource, check_id: str, reason: str) -> None:
    """Accept one checkov finding on one CloudFormation resource, saying why."""
    existing: dict[str, Any] = resource.get_metadata(METADATA_KEY) or {}
    skips = [
        *(s for s in existing.get("skip", []) if s["id"] != check_id),
        {"id": check_id, "comment": reason},
    ]
    resource.add_metadata(METADATA_KEY, {"skip": skips})


def _owned_by_cdk(node: IConstruct) -> bool:
    return any(part in CDK_HANDLER_OWNERS for part in node.node.path.split("/"))


@jsii.implements(IAspect)
class AcknowledgeCdkHandlers:
    """Applies ``CDK_HANDLER_FINDINGS`` to aws-cdk-lib's own handler Lambdas."""

    def visit(self, node: IConstruct) -> None:
        if (
            isinstance(node, CfnResource)
            and node.cfn_resource_type == LAMBDA_FUNCTION
            and _owned_by_cdk(node)
        ):
            for check_id, reason in CDK_HANDLER_FINDINGS.items():
                acknowledge_checkov(node, check_id, reason)
