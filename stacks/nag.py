"""cdk-nag (v3) wiring: the AwsSolutions pack as a CDK validation plugin, and acknowledgments.

cdk-nag 3 uses CDK's native ``Validations.of(...).acknowledge``; every acknowledgment names
one finding and says why it is acceptable.
"""

from __future__ import annotations

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks
from constructs import IConstruct


def add_checks(app: cdk.App) -> None:
    """Run AwsSolutions over every template; an unacknowledged finding fails synth."""
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))


PACK = "AwsSolutions"


def acknowledge(scope: IConstruct, finding: str, reason: str) -> None:
    """Acknowledge one AwsSolutions finding (e.g. ``AwsSolutions-IAM5[Resource::*]``) on
    ``scope`` and everything below it."""
    cdk.Validations.of(scope).acknowledge(
        cdk.Acknowledgment(id=f"{PACK}::{finding}", reason=reason)
    )


def managed_policy_finding(policy_name: str) -> str:
    return f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{policy_name}]"
