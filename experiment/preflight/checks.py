"""The preflight checks: read-only questions to AWS, Docker and the model hub that say, before
``cdk deploy``, whether it can succeed from here. Each returns a ``Check``: pass; fail with the
fix (the config key or the command to change); or skip with the reason (nothing to check, or a
check it depends on failed).

Every AWS operation, parameter and response field used here was read in botocore's service
models (botocore/data/<service>/<version>/service-2.json, botocore 1.44.8): sts 2011-06-15
GetCallerIdentity; ec2 2016-11-15 DescribeInstanceTypeOfferings, DescribeCapacityReservations,
DescribeInstanceTypes; service-quotas 2019-06-24 GetServiceQuota, GetAWSDefaultServiceQuota;
eks 2017-11-01 DescribeClusterVersions, DescribeAddonVersions; cloudformation 2010-05-15
DescribeStacks; s3 2006-03-01 HeadBucket. Nothing here writes.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, ParamSpec

from experiment.config import CapacityType, ExperimentConfig, upstreams
from experiment.config.addons import PINNED_ADDONS
from experiment.pins import record as pins
from experiment.pins import resolve

Aws = Callable[[str], Any]  # service name ('ec2', 'eks', ...) -> boto3 client in config.region
Runner = Callable[[Sequence[str]], tuple[int, str]]  # argv -> (exit code, stdout + stderr)
HubProbe = Callable[[str, str, str], str]  # (endpoint, model, revision) -> what the hub answered
_P = ParamSpec("_P")

# "Running On-Demand Trn instances": the vCPU quota of every trn* instance (service code ec2).
# No AWS documentation page searched gives its code; the code is what `aws service-quotas
# list-service-quotas --service-code ec2` answers for that name, L-2C3B7624, as several
# independent public copies of that output record. The check compares the QuotaName AWS answers
# with this name, so a wrong code fails, saying how to find the right one, rather than passing
# on another quota.
TRN_ON_DEMAND_QUOTA_CODE = "L-2C3B7624"
TRN_ON_DEMAND_QUOTA_NAME = "Running On-Demand Trn instances"
# A Capacity Block shows as scheduled (or pending) until its start: all three can launch nodes
# by the time the deploy needs them (ec2 CapacityReservationState).
USABLE_RESERVATION_STATES = ("active", "scheduled", "pending")
# aws-cdk-lib 2.275.0 core/lib/stack-synthesizers/default-synthesizer.js:
# MIN_BOOTSTRAP_STACK_VERSION=6, the oldest bootstrap stack the DefaultStackSynthesizer (which
# every stack of this app uses) deploys with.
MIN_BOOTSTRAP_VERSION = 6
DEFAULT_TOOLKIT_STACK = "CDKToolkit"  # `cdk bootstrap --toolkit-stack-name`'s default
# A stack in one of these states works for a deploy; any other is failed or mid-operation.
_HEALTHY_STACK = (
    "CREATE_COMPLETE",
    "UPDATE_COMPLETE",
    "UPDATE_ROLLBACK_COMPLETE",
    "IMPORT_COMPLETE",
)
_DENIED = ("AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "Forbidden")
_NO_CREDENTIALS = ("NoCredentialsError", "PartialCredentialsError", "NoAuthTokenError")
_BAD_CREDENTIALS = ("InvalidClientTokenId", "SignatureDoesNotMatch", "UnrecognizedClientException")
_EXPIRED = ("ExpiredToken", "ExpiredTokenException", "RequestExpired")
CREDENTIALS_FIX = (
    "set AWS credentials for the account: AWS_PROFILE, `aws configure` or `aws sso login`"
)
DOCKER_TIMEOUT_S = 30.0


class Status(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"


@dataclass(frozen=True)
class Check:
    """One check's outcome: ``detail`` says what was found (or why it was skipped), ``fix``
    what to change when it failed."""

    title: str
    status: Status
    detail: str
    fix: str = ""


def passed(title: str, detail: str) -> Check:
    return Check(title, Status.PASS, detail)


def failed(title: str, detail: str, fix: str) -> Check:
    return Check(title, Status.FAIL, detail, fix)


def skipped(title: str, reason: str) -> Check:
    return Check(title, Status.SKIP, reason)


ACCOUNT = "account"
OFFERED = "capacity: instance type in the AZs"
RESERVATION = "capacity: reservation"
QUOTA = "capacity: on-demand vCPU quota"
EKS_VERSION = "cluster: EKS version"
ADDONS = "cluster: add-on versions"
BOOTSTRAP = "CDK bootstrap"
BUCKET = "model-store bucket name"
DOCKER = "Docker"
HUB = "model hub"
# The checks that ask AWS, in order: skipped together when there are no usable credentials.
AWS_CHECKS = (OFFERED, RESERVATION, QUOTA, EKS_VERSION, ADDONS, BOOTSTRAP, BUCKET)


# --- AWS calls: every failure becomes what was asked, what came back and what to change ---


class AwsFailure(Exception):
    def __init__(self, code: str, detail: str, fix: str) -> None:
        super().__init__(detail)
        self.code, self.detail, self.fix = code, detail, fix


def _failure(err: Exception, asked: str, region: str) -> AwsFailure:
    from botocore.exceptions import ClientError

    if isinstance(err, ClientError):
        error = err.response.get("Error", {})
        code, message = str(error.get("Code", "")), str(error.get("Message", ""))
    else:
        code, message = type(err).__name__, str(err)
    detail = f"{asked} in {region}: {code}: {message}" if message else f"{asked}: {code}"
    if code in _NO_CREDENTIALS:
        return AwsFailure(code, f"{asked}: no AWS credentials found", CREDENTIALS_FIX)
    if code in _EXPIRED:
        return AwsFailure(code, detail, "refresh the credentials (`aws sso login`, a new session)")
    if code in _BAD_CREDENTIALS:
        return AwsFailure(
            code,
            detail,
            f"{CREDENTIALS_FIX}; if they work elsewhere, region {region} may be an opt-in "
            "region not enabled for the account: enable it, or set `region`",
        )
    if code in _DENIED:
        return AwsFailure(code, detail, f"allow {asked} (read-only) to the identity running this")
    if isinstance(err, ClientError):
        return AwsFailure(code, detail, "fix what the error names and run preflight again")
    return AwsFailure(
        code, detail, f"check this machine reaches AWS in {region} (network, proxy, region name)"
    )


def _call(client: Any, operation: str, asked: str, **params: Any) -> dict[str, Any]:
    """``client.<operation>(**params)``; ``asked`` is the IAM action (ec2:DescribeX)."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        answer: dict[str, Any] = getattr(client, operation)(**params)
    except (BotoCoreError, ClientError) as err:
        raise _failure(err, asked, client.meta.region_name) from None
    return answer


def _pages(
    client: Any, operation: str, asked: str, key: str, **params: Any
) -> list[dict[str, Any]]:
    """Every item under ``key`` of every page (botocore's paginator: nextToken/NextToken)."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        pages = client.get_paginator(operation).paginate(**params)
        return [item for page in pages for item in page.get(key, [])]
    except (BotoCoreError, ClientError) as err:
        raise _failure(err, asked, client.meta.region_name) from None


def _reports(title: str) -> Callable[[Callable[_P, Check]], Callable[_P, Check]]:
    """A check whose AWS calls may fail: the failure is the check's result, never a crash."""

    def wrap(check: Callable[_P, Check]) -> Callable[_P, Check]:
        @functools.wraps(check)
        def guarded(*args: _P.args, **kwargs: _P.kwargs) -> Check:
            try:
                return check(*args, **kwargs)
            except AwsFailure as failure:
                return failed(title, failure.detail, failure.fix)

        return guarded

    return wrap


# --- account ---


def account(config: ExperimentConfig, aws: Aws) -> tuple[Check, str | None]:
    """STS GetCallerIdentity in the configured region (it needs no permission): the check and
    the account the credentials belong to, None when the later AWS checks cannot run."""
    try:
        identity = _call(aws("sts"), "get_caller_identity", "sts:GetCallerIdentity")
    except AwsFailure as failure:
        return failed(ACCOUNT, failure.detail, failure.fix), None
    found, arn = identity.get("Account", ""), identity.get("Arn", "")
    if config.account is not None and found != config.account:
        return failed(
            ACCOUNT,
            f"the credentials ({arn}) are for account {found}, and `account` is {config.account}",
            f"use credentials for account {config.account} (AWS_PROFILE, `aws sso login`), or "
            f"set account: '{found}'",
        ), None
    which = "" if config.account else " (`account` is null: cdk deploys to this one)"
    return passed(ACCOUNT, f"{arn}, account {found}{which}, region {config.region}"), found


# --- capacity ---


def nodes_needed(config: ExperimentConfig) -> int:
    """Neuron nodes the deploy starts: the node group's desired size, or more when the arms
    (and the deployed tuning candidates) need more (ExperimentConfig.neuron_nodes_for_arms,
    which charts/app.py check_capacity holds against max_size)."""
    return max(config.cluster.neuron_nodes.desired_size, config.neuron_nodes_for_arms())


@_reports(OFFERED)
def instance_offered(config: ExperimentConfig, aws: Aws) -> Check:
    """EC2 DescribeInstanceTypeOfferings (LocationType availability-zone): every AZ the Neuron
    node group launches in offers its instance type; that is every network.availability_zones
    for on-demand, the reservation's AZ for reserved capacity (stacks/node_groups.py)."""
    nodes, region = config.cluster.neuron_nodes, config.region
    instance_type = nodes.instance_type
    offerings = _pages(
        aws("ec2"),
        "describe_instance_type_offerings",
        "ec2:DescribeInstanceTypeOfferings",
        "InstanceTypeOfferings",
        LocationType="availability-zone",
        Filters=[{"Name": "instance-type", "Values": [instance_type]}],
    )
    offered = sorted(
        {
            str(o["Location"])
            for o in offerings
            if o.get("InstanceType") == instance_type and o.get("Location")
        }
    )
    if nodes.reserved and nodes.availability_zone:
        wanted, key = [nodes.availability_zone], "cluster.neuron_nodes.availability_zone"
    else:
        wanted, key = list(config.network.availability_zones), "network.availability_zones"
    missing = [zone for zone in wanted if zone not in offered]
    if not offered:
        return failed(
            OFFERED,
            f"{region} offers {instance_type} in no AZ",
            f"set region to one that offers {instance_type} (and its AZs in "
            "network.availability_zones), or another cluster.neuron_nodes.instance_type",
        )
    if missing:
        return failed(
            OFFERED,
            f"{instance_type} is not offered in {', '.join(missing)} ({key}); {region} offers "
            f"it in {', '.join(offered)}",
            f"set {key} to AZs that offer it: {offered}"
            + ("" if nodes.reserved else " (at least 2; EKS needs subnets in two)"),
        )
    return passed(OFFERED, f"{instance_type} is offered in {', '.join(wanted)} ({key})")


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _when(moment: datetime, now: datetime) -> str:
    """'2026-12-01 11:30 UTC (in 3 d 2 h)', or '(... ago)'."""
    delta = _aware(moment) - now
    days, rest = divmod(abs(int(delta.total_seconds())), 86400)
    span = f"{days} d {rest // 3600} h" if days else f"{rest // 3600} h {rest % 3600 // 60} min"
    relative = f"in {span}" if delta >= timedelta(0) else f"{span} ago"
    return f"{_aware(moment).astimezone(UTC):%Y-%m-%d %H:%M} UTC ({relative})"


@_reports(RESERVATION)
def reservation(config: ExperimentConfig, aws: Aws, now: datetime) -> Check:
    """EC2 DescribeCapacityReservations of cluster.neuron_nodes.capacity_reservation_id: it
    exists here, is usable (active, scheduled or pending), is of the configured kind, instance
    type and AZ, holds the nodes the deploy starts and has not ended."""
    nodes = config.cluster.neuron_nodes
    if not nodes.reserved or not nodes.capacity_reservation_id:
        return skipped(
            RESERVATION, "cluster.neuron_nodes.capacity_type is on-demand: no reservation to check"
        )
    wanted, region = nodes.capacity_reservation_id, config.region
    not_here = failed(
        RESERVATION,
        f"no capacity reservation {wanted} in this account in {region}",
        "set cluster.neuron_nodes.capacity_reservation_id to one `aws ec2 "
        f"describe-capacity-reservations --region {region}` lists, or `region` to the block's",
    )
    try:
        found = _pages(
            aws("ec2"),
            "describe_capacity_reservations",
            "ec2:DescribeCapacityReservations",
            "CapacityReservations",
            CapacityReservationIds=[wanted],
        )
    except AwsFailure as failure:
        # EC2 answers InvalidCapacityReservationId.NotFound (or .Malformed) for an id it
        # does not know here.
        if failure.code.startswith("InvalidCapacityReservationId"):
            return not_here
        raise
    match = next((r for r in found if r.get("CapacityReservationId") == wanted), None)
    if match is None:
        return not_here
    return _judge_reservation(config, match, now)


def _judge_reservation(config: ExperimentConfig, found: dict[str, Any], now: datetime) -> Check:
    nodes = config.cluster.neuron_nodes
    block = found.get("ReservationType") == "capacity-block"
    kind = "Capacity Block" if block else "capacity reservation"
    state, zone = found.get("State", "?"), found.get("AvailabilityZone", "?")
    instance_type, count = found.get("InstanceType", "?"), int(found.get("TotalInstanceCount", 0))
    needed = nodes_needed(config)
    problems: list[tuple[str, str]] = []  # (what is wrong, what to change)
    if state not in USABLE_RESERVATION_STATES:
        problems.append(
            (
                f"it is {state} (usable: {', '.join(USABLE_RESERVATION_STATES)})",
                "buy or renew the capacity and set cluster.neuron_nodes.capacity_reservation_id "
                "to it",
            )
        )
    if block != (nodes.capacity_type == CapacityType.CAPACITY_BLOCK):
        right = CapacityType.CAPACITY_BLOCK if block else CapacityType.RESERVATION
        problems.append(
            (
                f"it is a {kind}, and cluster.neuron_nodes.capacity_type is "
                f"{nodes.capacity_type.value}",
                f"set cluster.neuron_nodes.capacity_type to {right.value}",
            )
        )
    if instance_type != nodes.instance_type:
        problems.append(
            (
                f"it reserves {instance_type}, and cluster.neuron_nodes.instance_type is "
                f"{nodes.instance_type}",
                f"set cluster.neuron_nodes.instance_type to {instance_type}",
            )
        )
    if zone != nodes.availability_zone:
        problems.append(
            (
                f"it is in {zone}, and cluster.neuron_nodes.availability_zone is "
                f"{nodes.availability_zone}",
                f"set cluster.neuron_nodes.availability_zone to {zone} (one of "
                "network.availability_zones)",
            )
        )
    if count < needed:
        problems.append(
            (
                f"it holds {count} instances, and the deploy starts {needed} Neuron nodes",
                f"reserve {needed}, or need fewer (cluster.neuron_nodes.desired_size, "
                "serving.replicas, tuning.deploy)",
            )
        )
    start, end = found.get("StartDate"), found.get("EndDate")
    if isinstance(end, datetime) and _aware(end) <= now:
        problems.append((f"it ended {_when(end, now)}", "buy or extend the capacity"))
    timing = []
    if isinstance(start, datetime):
        starts = "starts" if _aware(start) > now else "started"
        timing.append(f"{starts} {_when(start, now)}")
        if block and _aware(start) > now:
            timing.append("the Neuron nodes launch only from its start")
    timing.append(f"ends {_when(end, now)}" if isinstance(end, datetime) else "no end date")
    summary = (
        f"{kind} {found.get('CapacityReservationId')}: {count} x {instance_type} in {zone}, "
        f"{state}; {'; '.join(timing)}"
    )
    if problems:
        return failed(
            RESERVATION,
            f"{summary}; but {'; '.join(p for p, _ in problems)}",
            "; ".join(f for _, f in problems),
        )
    return passed(RESERVATION, f"{summary}; the deploy starts {needed} node(s)")


@_reports(QUOTA)
def vcpu_quota(config: ExperimentConfig, aws: Aws) -> Check:
    """Service Quotas GetServiceQuota (ec2, TRN_ON_DEMAND_QUOTA_CODE) against the nodes the
    deploy starts times the instance type's vCPUs (EC2 DescribeInstanceTypes, DefaultVCpus).
    On-demand only: reserved capacity was bought within the quota already."""
    nodes, region = config.cluster.neuron_nodes, config.region
    if nodes.reserved:
        return skipped(
            QUOTA,
            f"cluster.neuron_nodes.capacity_type is {nodes.capacity_type.value}: the nodes run "
            f"in {nodes.capacity_reservation_id} (the reservation check)",
        )
    types = _call(
        aws("ec2"),
        "describe_instance_types",
        "ec2:DescribeInstanceTypes",
        InstanceTypes=[nodes.instance_type],
    ).get("InstanceTypes", [])
    vcpus = next(
        (
            t.get("VCpuInfo", {}).get("DefaultVCpus")
            for t in types
            if t.get("InstanceType") == nodes.instance_type
        ),
        None,
    )
    if not isinstance(vcpus, int):
        return failed(
            QUOTA,
            f"EC2 DescribeInstanceTypes in {region} does not describe {nodes.instance_type}",
            "set cluster.neuron_nodes.instance_type to a type this region offers",
        )
    quota = _trn_quota(aws("service-quotas"))
    name, value = quota.get("QuotaName"), float(quota.get("Value", 0.0))
    if name != TRN_ON_DEMAND_QUOTA_NAME:
        return failed(
            QUOTA,
            f"quota {TRN_ON_DEMAND_QUOTA_CODE} is {name!r}, not {TRN_ON_DEMAND_QUOTA_NAME!r}",
            f"find the code of {TRN_ON_DEMAND_QUOTA_NAME!r} (`aws service-quotas "
            f"list-service-quotas --service-code ec2 --region {region}`) and update "
            "TRN_ON_DEMAND_QUOTA_CODE in experiment/preflight/checks.py",
        )
    count = nodes_needed(config)
    needed = count * vcpus
    what = (
        f"{TRN_ON_DEMAND_QUOTA_NAME} ({TRN_ON_DEMAND_QUOTA_CODE}) in {region} is {value:g} "
        f"vCPUs; {count} x {nodes.instance_type} need {needed} ({vcpus} each)"
    )
    if value < needed:
        return failed(
            QUOTA,
            what,
            f"request {needed} vCPUs: `aws service-quotas request-service-quota-increase "
            f"--service-code ec2 --quota-code {TRN_ON_DEMAND_QUOTA_CODE} --desired-value "
            f"{needed} --region {region}`, or use a Capacity Block "
            "(cluster.neuron_nodes.capacity_type)",
        )
    return passed(QUOTA, f"{what} (Trn instances already running count against it too)")


def _trn_quota(client: Any) -> dict[str, Any]:
    """The applied value, or AWS's default when the account has none applied."""
    params = {"ServiceCode": "ec2", "QuotaCode": TRN_ON_DEMAND_QUOTA_CODE}
    try:
        found = _call(client, "get_service_quota", "servicequotas:GetServiceQuota", **params)
    except AwsFailure as failure:
        if failure.code != "NoSuchResourceException":
            raise
        found = _call(
            client,
            "get_aws_default_service_quota",
            "servicequotas:GetAWSDefaultServiceQuota",
            **params,
        )
    quota: dict[str, Any] = found.get("Quota", {})
    return quota


# --- cluster ---


@_reports(EKS_VERSION)
def eks_version(config: ExperimentConfig, aws: Aws) -> Check:
    """EKS DescribeClusterVersions: cluster.kubernetes_version is offered in the region and
    not unsupported (clusterVersions[].clusterVersion, versionStatus)."""
    wanted, region = config.cluster.kubernetes_version, config.region
    versions = _pages(
        aws("eks"), "describe_cluster_versions", "eks:DescribeClusterVersions", "clusterVersions"
    )
    listed = {
        v["clusterVersion"]: v
        for v in versions
        if v.get("clusterVersion") and v.get("versionStatus") != "UNSUPPORTED"
    }
    found = listed.get(wanted)
    if found is None:
        usable = [v for v in upstreams.EKS_VERSIONS if v in listed]
        return failed(
            EKS_VERSION,
            f"EKS in {region} does not offer Kubernetes {wanted} (it offers "
            f"{', '.join(sorted(listed, key=_minor)) or 'none'})",
            f"set cluster.kubernetes_version to one EKS offers here and the support calendar "
            f"knows: {usable}",
        )
    status = str(found.get("versionStatus", "?")).lower().replace("_", " ")
    ends = found.get("endOfStandardSupportDate")
    until = f", standard support until {ends:%Y-%m-%d}" if isinstance(ends, datetime) else ""
    return passed(EKS_VERSION, f"Kubernetes {wanted} is offered in {region} ({status}{until})")


def _minor(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".") if part.isdigit())


def pinned_addons(
    config: ExperimentConfig, record: pins.PinRecord | None
) -> tuple[dict[str, tuple[str, str]], dict[str, str]]:
    """addon -> (version, where it is set) for the pinned add-ons the deploy installs, and
    addon -> why it has none: the configuration's setting wins over the recorded pin, as at
    synth (PinRecord.overlay)."""
    data, notes = record.overlay(config) if record is not None else ({}, {})
    recorded = data.get("cluster", {})
    found, missing = {}, {}
    for addon, setting in PINNED_ADDONS.items():
        key = f"cluster.{setting}"
        value = getattr(config.cluster, setting)
        if value is not None:
            found[addon] = (value, key)
        elif setting in recorded:
            found[addon] = (recorded[setting], f"{pins.CONTEXT_FILE} {pins.PINS_KEY!r}")
        else:
            missing[addon] = notes.get(key, f"{key} is not set, and no version is recorded")
    return found, missing


@_reports(ADDONS)
def addon_versions(
    config: ExperimentConfig, aws: Aws, record: pins.PinRecord | None, record_error: str = ""
) -> Check:
    """EKS DescribeAddonVersions (addonName, kubernetesVersion) for each pinned add-on: its
    version lists cluster.kubernetes_version among its compatibilities[].clusterVersion."""
    if record_error:
        return failed(ADDONS, record_error, pins.REFRESH_HINT)
    found, missing = pinned_addons(config, record)
    if missing:
        return failed(
            ADDONS,
            "; ".join(f"{addon}: {why}" for addon, why in missing.items()),
            "`make pins` (python -m experiment pins) records the default version of each for "
            "cluster.kubernetes_version",
        )
    wanted, region, client = config.cluster.kubernetes_version, config.region, aws("eks")
    good, problems, fixes = [], [], []
    for addon, (version, where) in found.items():
        listed = _pages(
            client,
            "describe_addon_versions",
            "eks:DescribeAddonVersions",
            "addons",
            addonName=addon,
            kubernetesVersion=wanted,
        )
        clusters = {
            compatibility.get("clusterVersion")
            for info in listed
            if info.get("addonName") == addon
            for offered in info.get("addonVersions", [])
            if offered.get("addonVersion") == version
            for compatibility in offered.get("compatibilities", [])
        }
        if wanted in clusters:
            good.append(f"{addon} {version}")
            continue
        problems.append(
            f"{addon} {version} ({where}) is not listed for Kubernetes {wanted} in {region}"
        )
        fixes.append(
            pins.REFRESH_HINT
            if where.startswith(pins.CONTEXT_FILE)
            else f"set {where} to a version listed for Kubernetes {wanted} (`aws eks "
            f"describe-addon-versions --addon-name {addon} --kubernetes-version {wanted}`), or "
            "remove it to use the recorded pin"
        )
    if problems:
        return failed(ADDONS, "; ".join(problems), "; ".join(dict.fromkeys(fixes)))
    return passed(ADDONS, f"{', '.join(good)}: compatible with Kubernetes {wanted}")


# --- this machine and the account ---


def bootstrap_command(account_id: str, region: str) -> str:
    return f"npx aws-cdk@{upstreams.pin('cdk-cli')} bootstrap aws://{account_id}/{region}"


@_reports(BOOTSTRAP)
def bootstrap(
    config: ExperimentConfig, aws: Aws, account_id: str, stack_name: str = DEFAULT_TOOLKIT_STACK
) -> Check:
    """CloudFormation DescribeStacks of the CDK toolkit stack: present, settled, and its
    BootstrapVersion output at least MIN_BOOTSTRAP_VERSION."""
    command = bootstrap_command(account_id, config.region)
    where = f"aws://{account_id}/{config.region}"
    try:
        stacks = _call(
            aws("cloudformation"),
            "describe_stacks",
            "cloudformation:DescribeStacks",
            StackName=stack_name,
        ).get("Stacks", [])
    except AwsFailure as failure:
        # DescribeStacks answers ValidationError when the stack does not exist.
        if failure.code != "ValidationError":
            raise
        stacks = []
    if not stacks:
        return failed(
            BOOTSTRAP,
            f"no stack {stack_name} in {where}: the environment is not bootstrapped",
            f"{command} (with the venv's npx: export PATH=$PWD/.venv/bin:$PATH)",
        )
    stack = stacks[0]
    status = stack.get("StackStatus", "?")
    outputs = {o.get("OutputKey"): o.get("OutputValue") for o in stack.get("Outputs", [])}
    version = str(outputs.get("BootstrapVersion") or "")
    if status not in _HEALTHY_STACK:
        return failed(
            BOOTSTRAP,
            f"{stack_name} in {where} is {status}",
            f"repair or delete {stack_name} in the CloudFormation console, then {command}",
        )
    if not version.isdigit() or int(version) < MIN_BOOTSTRAP_VERSION:
        return failed(
            BOOTSTRAP,
            f"{stack_name} in {where} has BootstrapVersion {version or 'none'}; the app's "
            f"synthesizer needs {MIN_BOOTSTRAP_VERSION} or later",
            f"{command} (it upgrades the stack)",
        )
    return passed(BOOTSTRAP, f"{stack_name} in {where}: {status}, BootstrapVersion {version}")


@_reports(BUCKET)
def bucket_name(config: ExperimentConfig, aws: Aws, account_id: str) -> Check:
    """S3 HeadBucket with ExpectedBucketOwner: 404 is a free name, 200 one this account owns,
    403 one another account owns (or this one may not read)."""
    name = config.model_store.bucket_name
    if name is None:
        return skipped(BUCKET, "model_store.bucket_name is null: CloudFormation generates one")
    try:
        _call(
            aws("s3"),
            "head_bucket",
            "s3:ListBucket",
            Bucket=name,
            ExpectedBucketOwner=account_id,
        )
    except AwsFailure as failure:
        # HeadBucket has no body: the error code is the HTTP status.
        if failure.code in ("404", "NotFound", "NoSuchBucket"):
            return passed(BUCKET, f"{name} is free")
        if failure.code in ("403", "Forbidden", "AccessDenied"):
            return failed(
                BUCKET,
                f"{name} exists and another account owns it (HeadBucket with "
                f"ExpectedBucketOwner {account_id}: 403)",
                "set model_store.bucket_name to another name (bucket names are global), or "
                "null to let CloudFormation generate one",
            )
        raise
    return passed(
        BUCKET,
        f"{name} exists in this account ({account_id}): right when the {config.project}-"
        "model-store stack created it; a first deploy cannot create it again (delete it, or "
        "choose another name)",
    )


def docker_program() -> str:
    # The CDK builds container image assets with `docker`, or with the CLI CDK_DOCKER names
    # (AWS CDK developer guide, "Build and deploy container image assets": "you can replace
    # Docker through the CDK_DOCKER environment variable").
    return os.environ.get("CDK_DOCKER") or "docker"


def run_command(argv: Sequence[str]) -> tuple[int, str]:
    """Run ``argv`` to completion; FileNotFoundError when its program is not on PATH."""
    if shutil.which(argv[0]) is None:
        raise FileNotFoundError(argv[0])
    done = subprocess.run(
        list(argv), capture_output=True, text=True, timeout=DOCKER_TIMEOUT_S, check=False
    )
    return done.returncode, f"{done.stdout}{done.stderr}".strip()


def docker(run: Runner, program: str = "docker") -> Check:
    """``docker info`` answers: the CLI is on PATH and reaches a daemon, which builds the
    load-test image during `cdk deploy` (stacks/workloads.py, DockerImageAsset)."""
    argv = [program, "info", "--format", "{{.ServerVersion}}"]
    try:
        code, output = run(argv)
    except FileNotFoundError:
        return failed(
            DOCKER,
            f"{program} is not on PATH; cdk deploy builds the load-test image with it",
            "install Docker and put `docker` on PATH (or set CDK_DOCKER to a docker-compatible "
            "CLI such as finch)",
        )
    except subprocess.TimeoutExpired:
        return failed(
            DOCKER,
            f"`{' '.join(argv)}` did not answer within {DOCKER_TIMEOUT_S:g} s",
            "restart the Docker daemon until `docker info` answers",
        )
    last = output.splitlines()[-1] if output else ""
    if code != 0:
        return failed(
            DOCKER,
            f"`{program} info` exited {code}: {last}",
            "start the Docker daemon (Docker Desktop, or `sudo systemctl start docker`) and "
            "let this user reach it (the docker group), until `docker info` works",
        )
    return passed(DOCKER, f"{program} reaches a daemon (server {last or 'version unknown'})")


def hub_commit(endpoint: str, model: str, revision: str) -> str:
    """The hub's answer for ``model@revision``: GET {endpoint}/api/models/<id>/revision/<rev>,
    the request `make pins` and the import Job's client make (experiment/pins/resolve.py)."""
    found = resolve.hub_commit(endpoint, model, revision)
    return f"{model}@{revision} is commit {found.commit}"


def hub(config: ExperimentConfig, probe: HubProbe, record: pins.PinRecord | None) -> Check:
    """The model hub answers for every checkpoint the import Job pulls, at the revision it
    pulls (the configured or recorded commit, else main)."""
    store = config.model_store
    if not store.import_checkpoints:
        return skipped(
            HUB, "model_store.import_checkpoints is false: you upload the checkpoints yourself"
        )
    data, _ = record.overlay(config) if record is not None else ({}, {})
    revisions = {**data.get("model_store", {}).get("hub_revisions", {}), **store.hub_revisions}
    answers, problems = [], []
    for model in config.hub_models():
        try:
            answers.append(probe(store.hub_endpoint, model, revisions.get(model, "main")))
        except resolve.Unreachable as err:
            problems.append(str(err))
    if problems:
        return failed(
            HUB,
            "; ".join(problems),
            f"let this machine reach {store.hub_endpoint} over HTTPS (proxy, firewall) and check "
            "the model ids (serving.target_model, serving.draft_model) and commits "
            "(model_store.hub_revisions, `make pins`); a gated model needs HF_TOKEN here and "
            "model_store.hub_token_secret on the cluster; or set model_store.import_checkpoints "
            "false and upload the checkpoints yourself",
        )
    return passed(HUB, f"{store.hub_endpoint}: {'; '.join(answers)}")


# --- all of them, in order ---


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Probes:
    """What the checks ask besides AWS; tests replace each."""

    now: Callable[[], datetime] = _utc_now
    run: Runner = run_command
    hub: HubProbe = hub_commit
    docker_program: Callable[[], str] = docker_program


def run_checks(
    config: ExperimentConfig,
    aws: Aws,
    probes: Probes,
    record: pins.PinRecord | None,
    *,
    record_error: str = "",
    toolkit_stack: str = DEFAULT_TOOLKIT_STACK,
) -> list[Check]:
    """Every check once, in order; a check whose input failed is skipped, saying which."""
    first, account_id = account(config, aws)
    checks = [first]
    if account_id is None:
        reason = "needs working credentials for the configured account (the account check)"
        checks += [skipped(title, reason) for title in AWS_CHECKS]
    else:
        now = probes.now()
        checks += [
            instance_offered(config, aws),
            reservation(config, aws, now),
            vcpu_quota(config, aws),
        ]
        version = eks_version(config, aws)
        checks.append(version)
        if version.status is Status.PASS:
            checks.append(addon_versions(config, aws, record, record_error))
        else:
            checks.append(
                skipped(
                    ADDONS,
                    f"needs Kubernetes {config.cluster.kubernetes_version} offered in "
                    f"{config.region} (the EKS version check)",
                )
            )
        checks += [
            bootstrap(config, aws, account_id, toolkit_stack),
            bucket_name(config, aws, account_id),
        ]
    checks += [docker(probes.run, probes.docker_program()), hub(config, probes.hub, record)]
    return checks
