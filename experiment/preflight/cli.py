"""``python -m experiment preflight``: read-only checks of what ``cdk deploy`` needs, before it
runs. Each line is a check: ✓ pass, ✗ fail (followed by the fix: the config key or the command
to change), - skipped (with the reason: nothing to check, or a check it depends on failed).
Exits 1 when a check fails (skips do not), 2 when the configuration itself is invalid.

- account: the credentials work (STS GetCallerIdentity) for `account` (any when null) in
  `region`;
- capacity: cluster.neuron_nodes.instance_type is offered in the AZs the node group uses (EC2
  DescribeInstanceTypeOfferings); a Capacity Block or reservation exists, is active or
  scheduled, and matches the type, AZ, node count and dates (EC2
  DescribeCapacityReservations); on demand, the Trn vCPU quota covers the nodes (Service Quotas
  GetServiceQuota, EC2 DescribeInstanceTypes);
- cluster: cluster.kubernetes_version is offered in the region (EKS DescribeClusterVersions)
  and the pinned add-on versions are compatible with it (EKS DescribeAddonVersions);
- this machine and the account: the CDK bootstrap stack and its version (CloudFormation
  DescribeStacks), model_store.bucket_name is free or this account's (S3 HeadBucket), Docker
  answers (`docker info`), the model hub answers for every imported checkpoint.

Nothing is written, in AWS or here.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from experiment.loading import (
    PROJECT_ROOT,
    ConfigError,
    add_config_arguments,
    config_from_arguments,
)
from experiment.pins import record as pins
from experiment.preflight.checks import DEFAULT_TOOLKIT_STACK, Check, Probes, Status, run_checks

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
Clients = Callable[[str, str], Any]  # (service name, region) -> boto3 client
SYMBOLS = {Status.PASS: "✓", Status.FAIL: "✗", Status.SKIP: "-"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument(
        "--context-file",
        type=Path,
        default=PROJECT_ROOT / pins.CONTEXT_FILE,
        help="the CDK context file holding the deploy pins `make pins` recorded (default: "
        "cdk.context.json next to cdk.json)",
    )
    parser.add_argument(
        "--toolkit-stack-name",
        default=DEFAULT_TOOLKIT_STACK,
        help="the CDK bootstrap stack's name, as given to `cdk bootstrap --toolkit-stack-name` "
        f"(default: {DEFAULT_TOOLKIT_STACK})",
    )


def default_clients(service: str, region: str) -> Any:
    import boto3
    from botocore.config import Config

    config = Config(
        retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=10, read_timeout=30
    )
    return boto3.client(service, region_name=region, config=config)  # type: ignore[call-overload]


def _record(path: Path) -> tuple[pins.PinRecord | None, str]:
    """The recorded deploy pins, or why they cannot be used (the add-on check says it)."""
    try:
        content = pins.read_file(path)
        return (pins.parse(content[pins.PINS_KEY]) if pins.PINS_KEY in content else None), ""
    except pins.PinRecordError as err:
        return None, str(err)


def render(check: Check) -> str:
    text = f"{SYMBOLS[check.status]} {check.title}: "
    text += f"skipped: {check.detail}" if check.status is Status.SKIP else check.detail
    return f"{text}\n    fix: {check.fix}" if check.status is Status.FAIL else text


def summary(checks: list[Check]) -> str:
    counts = {status: sum(c.status is status for c in checks) for status in Status}
    line = (
        f"preflight: {counts[Status.PASS]} passed, {counts[Status.FAIL]} failed, "
        f"{counts[Status.SKIP]} skipped"
    )
    if counts[Status.FAIL]:
        return f"{line}; fix the failures above before `cdk deploy`"
    return f"{line}; nothing found that stops `cdk deploy`"


def run(
    args: argparse.Namespace, clients: Clients | None = None, probes: Probes | None = None
) -> int:
    """``clients``: (service, region) -> boto3 client (tests pass stubbed ones); ``probes``:
    the clock, the command runner and the hub probe (tests pass fakes)."""
    try:
        config = config_from_arguments(args)
    except ConfigError as err:
        print(f"preflight: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    factory = clients or default_clients
    aws = functools.cache(lambda service: factory(service, config.region))
    record, record_error = _record(args.context_file)
    checks = run_checks(
        config,
        aws,
        probes or Probes(),
        record,
        record_error=record_error,
        toolkit_stack=args.toolkit_stack_name,
    )
    for check in checks:
        print(render(check))
    print(summary(checks))
    return EXIT_FAILED if any(c.status is Status.FAIL for c in checks) else 0
