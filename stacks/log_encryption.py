"""One customer-managed KMS key for every CloudWatch log group the app creates.

Log groups are ours (VPC flow logs) or created by aws-cdk-lib for its handlers (the kubectl
provider's Lambdas); an aspect encrypts every one of them that has no key yet, so a log group
added later is covered without anyone remembering to.

The key policy is the one the CloudWatch Logs guide documents ("Encrypt log data in CloudWatch
Logs using AWS KMS"): the regional logs service principal, limited by the
``kms:EncryptionContext:aws:logs:arn`` condition to log groups of this account and region.
"""

from __future__ import annotations

import jsii
from aws_cdk import Aws, IAspect, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct, IConstruct

LOGS_KEY_ACTIONS = [
    "kms:Encrypt*",
    "kms:Decrypt*",
    "kms:ReEncrypt*",
    "kms:GenerateDataKey*",
    "kms:Describe*",
]


def log_group_key(scope: Construct, construct_id: str, description: str) -> kms.Key:
    key = kms.Key(
        scope,
        construct_id,
        description=description,
        enable_key_rotation=True,
        removal_policy=RemovalPolicy.DESTROY,  # the log groups it protects are destroyed too
    )
    key.add_to_resource_policy(
        iam.PolicyStatement(
            principals=[iam.ServicePrincipal(f"logs.{Aws.REGION}.amazonaws.com")],
            actions=LOGS_KEY_ACTIONS,
            resources=["*"],  # in a key policy, "*" is this key
            conditions={
                "ArnLike": {
                    "kms:EncryptionContext:aws:logs:arn": (
                        f"arn:{Aws.PARTITION}:logs:{Aws.REGION}:{Aws.ACCOUNT_ID}:log-group:*"
                    )
                }
            },
        )
    )
    return key


@jsii.implements(IAspect)
class EncryptLogGroups:
    """Sets ``KmsKeyId`` on every log group in scope that has none."""

    def __init__(self, key: kms.IKey) -> None:
        self.key = key

    def visit(self, node: IConstruct) -> None:
        if isinstance(node, logs.CfnLogGroup) and node.kms_key_id is None:
            node.kms_key_id = self.key.key_arn
