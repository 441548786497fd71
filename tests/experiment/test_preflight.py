"""``python -m experiment preflight`` without AWS, Docker or the network: every AWS call goes to
a real botocore client behind botocore's Stubber, answered with the response shapes of
botocore's service models (sts, ec2, service-quotas, eks, cloudformation, s3) and realistic
values; Docker and the hub are fakes; the clock is the support calendar's fixed day. Each
check passes once and fails at least once, with the fix it prints."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import NoCredentialsError
from botocore.stub import Stubber

from experiment import build_config
from experiment.__main__ import main
from experiment.config import ExperimentConfig
from experiment.pins import record as pins
from experiment.pins import resolve
from experiment.preflight import checks
from experiment.preflight import cli as preflight
from experiment.preflight.checks import Probes, Status

REGION, ACCOUNT, OTHER_ACCOUNT = "us-east-2", "123456789012", "210987654321"
ARN = f"arn:aws:sts::{ACCOUNT}:assumed-role/Admin/alice"
TRN2, VCPUS = "trn2.48xlarge", 192
RESERVATION_ID, BLOCK_AZ = "cr-0a1b2c3d4e5f67890", "us-east-2b"
TARGET, DRAFT = "Qwen/Qwen3-32B", "Qwen/Qwen3-1.7B"
S3_CSI, CLOUDWATCH = "aws-mountpoint-s3-csi-driver", "amazon-cloudwatch-observability"
ADDON_PINS = {S3_CSI: "v2.2.1-eksbuild.1", CLOUDWATCH: "v4.5.0-eksbuild.2"}
BOOTSTRAP = "npx aws-cdk@2.1148.1 bootstrap aws://123456789012/us-east-2"


@pytest.fixture
def now(calendar_clock: date) -> datetime:
    """Noon UTC of the calendar's fixed day: no test reads today's date."""
    return datetime.combine(calendar_clock, time(12), tzinfo=UTC)


class Aws:
    """service -> a real botocore client in REGION behind a Stubber (no request leaves)."""

    def __init__(self) -> None:
        self.clients: dict[str, Any] = {}
        self.stubs: dict[str, Stubber] = {}

    def __call__(self, service: str) -> Any:
        if service not in self.clients:
            client = boto3.client(
                service,  # type: ignore[call-overload]
                region_name=REGION,
                aws_access_key_id="AKIAIOSFODNN7EXAMPLE",
                aws_secret_access_key="wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            )
            self.stubs[service] = Stubber(client)
            self.stubs[service].activate()
            self.clients[service] = client
        return self.clients[service]

    def answer(
        self, service: str, method: str, response: dict[str, Any], params: Any = None
    ) -> None:
        self(service)
        self.stubs[service].add_response(method, response, params)

    def error(self, service: str, method: str, code: str, message: str, status: int) -> None:
        self(service)
        self.stubs[service].add_client_error(
            method, service_error_code=code, service_message=message, http_status_code=status
        )

    def all_asked(self) -> None:
        for stub in self.stubs.values():
            stub.assert_no_pending_responses()


def config(**overrides: Any) -> ExperimentConfig:
    return build_config({f"experiment.{key}": value for key, value in overrides.items()})


def block_config(**overrides: Any) -> ExperimentConfig:
    return config(
        **{
            "cluster.neuron_nodes.capacity_type": "capacity-block",
            "cluster.neuron_nodes.capacity_reservation_id": RESERVATION_ID,
            "cluster.neuron_nodes.availability_zone": BLOCK_AZ,
            **overrides,
        }
    )


def record(kubernetes_version: str = "1.35") -> pins.PinRecord:
    return pins.parse(
        {
            "eks_addons": {
                "kubernetes_version": kubernetes_version,
                "region": REGION,
                "versions": {
                    addon: {"version": version, "source": "EKS DescribeAddonVersions"}
                    for addon, version in ADDON_PINS.items()
                },
            }
        }
    )


# --- the AWS answers, in the shapes of botocore's service models ---


def identity(aws: Aws, account: str = ACCOUNT) -> None:
    aws.answer(
        "sts",
        "get_caller_identity",
        {
            "UserId": "AROA3XFRBF23EXAMPLE:alice",
            "Account": account,
            "Arn": ARN.replace(ACCOUNT, account),
        },
        {},
    )


def offerings(aws: Aws, zones: Sequence[str]) -> None:
    aws.answer(
        "ec2",
        "describe_instance_type_offerings",
        {
            "InstanceTypeOfferings": [
                {"InstanceType": TRN2, "LocationType": "availability-zone", "Location": zone}
                for zone in zones
            ]
        },
        {
            "LocationType": "availability-zone",
            "Filters": [{"Name": "instance-type", "Values": [TRN2]}],
        },
    )


def capacity_block(now: datetime, **changes: Any) -> dict[str, Any]:
    found = {
        "CapacityReservationId": RESERVATION_ID,
        "OwnerId": ACCOUNT,
        "CapacityReservationArn": (
            f"arn:aws:ec2:{REGION}:{ACCOUNT}:capacity-reservation/{RESERVATION_ID}"
        ),
        "AvailabilityZoneId": "use2-az2",
        "InstanceType": TRN2,
        "InstancePlatform": "Linux/UNIX",
        "AvailabilityZone": BLOCK_AZ,
        "Tenancy": "default",
        "TotalInstanceCount": 1,
        "AvailableInstanceCount": 1,
        "EbsOptimized": True,
        "EphemeralStorage": False,
        "State": "scheduled",
        "StartDate": now + timedelta(days=2, hours=3),
        "EndDate": now + timedelta(days=9, hours=3),
        "EndDateType": "limited",
        "InstanceMatchCriteria": "targeted",
        "CreateDate": now - timedelta(days=1),
        "Tags": [],
        "CapacityAllocations": [],
        "ReservationType": "capacity-block",
    }
    return {**found, **changes}


def reservations(aws: Aws, *found: dict[str, Any]) -> None:
    aws.answer(
        "ec2",
        "describe_capacity_reservations",
        {"CapacityReservations": list(found)},
        {"CapacityReservationIds": [RESERVATION_ID]},
    )


def instance_types(aws: Aws) -> None:
    aws.answer(
        "ec2",
        "describe_instance_types",
        {
            "InstanceTypes": [
                {
                    "InstanceType": TRN2,
                    "CurrentGeneration": True,
                    "SupportedUsageClasses": ["on-demand", "capacity-block"],
                    "SupportedRootDeviceTypes": ["ebs"],
                    "SupportedVirtualizationTypes": ["hvm"],
                    "BareMetal": False,
                    "Hypervisor": "nitro",
                    "VCpuInfo": {
                        "DefaultVCpus": VCPUS,
                        "DefaultCores": 96,
                        "DefaultThreadsPerCore": 2,
                    },
                    "MemoryInfo": {"SizeInMiB": 2097152},
                }
            ]
        },
        {"InstanceTypes": [TRN2]},
    )


def trn_quota(value: float, name: str = checks.TRN_ON_DEMAND_QUOTA_NAME) -> dict[str, Any]:
    code = checks.TRN_ON_DEMAND_QUOTA_CODE
    return {
        "Quota": {
            "ServiceCode": "ec2",
            "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
            "QuotaArn": f"arn:aws:servicequotas:{REGION}:{ACCOUNT}:ec2/{code}",
            "QuotaCode": code,
            "QuotaName": name,
            "Value": value,
            "Unit": "None",
            "Adjustable": True,
            "GlobalQuota": False,
            "QuotaAppliedAtLevel": "ACCOUNT",
        }
    }


QUOTA_PARAMS = {"ServiceCode": "ec2", "QuotaCode": checks.TRN_ON_DEMAND_QUOTA_CODE}


def cluster_versions(aws: Aws, *offered: str) -> None:
    def version(minor: int) -> dict[str, Any]:
        released = datetime(2024 + (minor - 31) // 3, 1 + 4 * ((minor - 31) % 3), 20, tzinfo=UTC)
        return {
            "clusterVersion": f"1.{minor}",
            "clusterType": "eks",
            "defaultPlatformVersion": "eks.4",
            "defaultVersion": minor == 35,
            "releaseDate": released,
            "endOfStandardSupportDate": released + timedelta(days=427),
            "endOfExtendedSupportDate": released + timedelta(days=792),
            "status": "standard-support",
            "versionStatus": "STANDARD_SUPPORT",
            "kubernetesPatchVersion": f"1.{minor}.2",
        }

    minors = [int(v.split(".")[1]) for v in offered]
    aws.answer(
        "eks", "describe_cluster_versions", {"clusterVersions": [version(m) for m in minors]}, {}
    )


def addon_versions(aws: Aws, addon: str, *listed: str, kubernetes: str = "1.35") -> None:
    aws.answer(
        "eks",
        "describe_addon_versions",
        {
            "addons": [
                {
                    "addonName": addon,
                    "type": "storage" if addon == S3_CSI else "observability",
                    "addonVersions": [
                        {
                            "addonVersion": version,
                            "architecture": ["amd64", "arm64"],
                            "computeTypes": ["ec2"],
                            "compatibilities": [
                                {
                                    "clusterVersion": kubernetes,
                                    "platformVersions": ["*"],
                                    "defaultVersion": index == 0,
                                }
                            ],
                            "requiresConfiguration": False,
                            "requiresIamPermissions": True,
                        }
                        for index, version in enumerate(listed)
                    ],
                    "publisher": "eks",
                    "owner": "aws",
                    "defaultNamespace": "kube-system",
                }
            ]
        },
        {"addonName": addon, "kubernetesVersion": kubernetes},
    )


def toolkit(aws: Aws, status: str = "UPDATE_COMPLETE", version: str = "30") -> None:
    aws.answer(
        "cloudformation",
        "describe_stacks",
        {
            "Stacks": [
                {
                    "StackId": (
                        f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/CDKToolkit/"
                        "7d1e3f40-9c2b-11ef-8a3e-0a1b2c3d4e5f"
                    ),
                    "StackName": "CDKToolkit",
                    "Description": "This stack includes resources needed to deploy AWS CDK apps "
                    "into this environment",
                    "CreationTime": datetime(2025, 3, 4, 9, 30, tzinfo=UTC),
                    "LastUpdatedTime": datetime(2026, 6, 1, 8, 0, tzinfo=UTC),
                    "StackStatus": status,
                    "DisableRollback": False,
                    "NotificationARNs": [],
                    "Capabilities": ["CAPABILITY_NAMED_IAM"],
                    "Outputs": [
                        {
                            "OutputKey": "BucketName",
                            "OutputValue": f"cdk-hnb659fds-assets-{ACCOUNT}-{REGION}",
                        },
                        {
                            "OutputKey": "BootstrapVersion",
                            "OutputValue": version,
                            "Description": "The version of the bootstrap resources that are "
                            "currently mastered in this stack",
                        },
                    ],
                    "Tags": [],
                    "EnableTerminationProtection": False,
                    "DriftInformation": {"StackDriftStatus": "NOT_CHECKED"},
                }
            ]
        },
        {"StackName": "CDKToolkit"},
    )


def all_pass(aws: Aws) -> None:
    """The answers under which the default configuration passes every AWS check."""
    identity(aws)
    offerings(aws, ["us-east-2a", "us-east-2b", "us-east-2c"])
    instance_types(aws)
    aws.answer("service-quotas", "get_service_quota", trn_quota(384.0), QUOTA_PARAMS)
    cluster_versions(aws, "1.34", "1.35", "1.36")
    addon_versions(aws, S3_CSI, "v2.2.1-eksbuild.1", "v2.1.0-eksbuild.1")
    addon_versions(aws, CLOUDWATCH, "v4.5.0-eksbuild.2")
    toolkit(aws)


def docker_ok(argv: Sequence[str]) -> tuple[int, str]:
    assert list(argv) == ["docker", "info", "--format", "{{.ServerVersion}}"]
    return 0, "28.3.2"


def hub_ok(endpoint: str, model: str, revision: str) -> str:
    return f"{model}@{revision} is commit {'a' * 40}"


def probes(now: datetime, **changes: Any) -> Probes:
    return Probes(
        now=lambda: now, run=docker_ok, hub=hub_ok, docker_program=lambda: "docker", **changes
    )


def by_title(found: list[checks.Check]) -> dict[str, checks.Check]:
    return {check.title: check for check in found}


# --- account ---


def test_account_passes_and_names_the_identity() -> None:
    aws = Aws()
    identity(aws)
    check, account = checks.account(config(account=ACCOUNT), aws)
    assert (check.status, account) == (Status.PASS, ACCOUNT)
    assert check.detail == f"{ARN}, account {ACCOUNT}, region {REGION}"
    aws.all_asked()


def test_account_of_other_credentials_fails_and_the_aws_checks_are_skipped(
    now: datetime,
) -> None:
    aws = Aws()
    identity(aws, OTHER_ACCOUNT)
    found = by_title(checks.run_checks(config(account=ACCOUNT), aws, probes(now), record()))
    first = found[checks.ACCOUNT]
    assert first.status is Status.FAIL
    assert f"are for account {OTHER_ACCOUNT}, and `account` is {ACCOUNT}" in first.detail
    assert first.fix == (
        f"use credentials for account {ACCOUNT} (AWS_PROFILE, `aws sso login`), or set "
        f"account: '{OTHER_ACCOUNT}'"
    )
    for title in checks.AWS_CHECKS:
        assert found[title].status is Status.SKIP
        assert "needs working credentials" in found[title].detail
    aws.all_asked()  # nothing else was asked of AWS


class NoCredentials:
    """An STS client as botocore behaves without any credentials."""

    class meta:  # botocore names it so: client.meta.region_name
        region_name = REGION

    def get_caller_identity(self) -> dict[str, Any]:
        raise NoCredentialsError()


def test_without_credentials_every_aws_check_is_skipped_and_the_rest_run(
    now: datetime, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    asked: list[str] = []

    def clients(service: str, region: str) -> Any:
        asked.append(service)
        return NoCredentials()

    code = preflight.run(arguments(tmp_path), clients=clients, probes=probes(now))
    out = capsys.readouterr().out
    assert code == preflight.EXIT_FAILED
    assert asked == ["sts"]
    assert (
        "✗ account: sts:GetCallerIdentity: no AWS credentials found\n"
        f"    fix: {checks.CREDENTIALS_FIX}\n"
    ) in out
    for title in checks.AWS_CHECKS:
        assert f"- {title}: skipped: needs working credentials for the configured account" in out
    assert "✓ Docker: docker reaches a daemon (server 28.3.2)" in out
    assert "✓ model hub: https://huggingface.co:" in out
    summary = "preflight: 2 passed, 1 failed, 7 skipped; fix the failures above before `cdk deploy`"
    assert out.splitlines()[-1] == summary


def test_rejected_credentials_say_what_to_change() -> None:
    aws = Aws()
    aws.error(
        "sts",
        "get_caller_identity",
        "InvalidClientTokenId",
        "The security token included in the request is invalid.",
        403,
    )
    check, account = checks.account(config(), aws)
    assert account is None and check.status is Status.FAIL
    assert check.detail == (
        "sts:GetCallerIdentity in us-east-2: InvalidClientTokenId: The security token included "
        "in the request is invalid."
    )
    assert "opt-in region not enabled for the account" in check.fix


# --- capacity: the instance type in the AZs ---


def test_instance_type_offered_in_every_configured_az() -> None:
    aws = Aws()
    offerings(aws, ["us-east-2a", "us-east-2b", "us-east-2c"])
    check = checks.instance_offered(config(), aws)
    assert check == checks.passed(
        checks.OFFERED,
        f"{TRN2} is offered in us-east-2a, us-east-2b, us-east-2c (network.availability_zones)",
    )


def test_an_az_without_the_instance_type_fails_naming_those_that_have_it() -> None:
    aws = Aws()
    offerings(aws, ["us-east-2b", "us-east-2a"])
    check = checks.instance_offered(config(), aws)
    assert check.status is Status.FAIL
    assert check.detail == (
        f"{TRN2} is not offered in us-east-2c (network.availability_zones); us-east-2 offers "
        "it in us-east-2a, us-east-2b"
    )
    assert check.fix == (
        "set network.availability_zones to AZs that offer it: ['us-east-2a', 'us-east-2b'] "
        "(at least 2; EKS needs subnets in two)"
    )


def test_reserved_capacity_needs_only_its_own_az_offered() -> None:
    aws = Aws()
    offerings(aws, ["us-east-2a"])
    check = checks.instance_offered(block_config(), aws)
    assert check.status is Status.FAIL
    assert "not offered in us-east-2b (cluster.neuron_nodes.availability_zone)" in check.detail
    assert check.fix == (
        "set cluster.neuron_nodes.availability_zone to AZs that offer it: ['us-east-2a']"
    )


def test_a_region_without_the_instance_type_fails_asking_for_another_region() -> None:
    aws = Aws()
    offerings(aws, [])
    check = checks.instance_offered(config(), aws)
    assert (check.status, check.detail) == (Status.FAIL, f"us-east-2 offers {TRN2} in no AZ")
    assert check.fix.startswith(f"set region to one that offers {TRN2}")


# --- capacity: the reservation ---


def test_a_scheduled_capacity_block_passes_and_says_when_it_starts(now: datetime) -> None:
    aws = Aws()
    reservations(aws, capacity_block(now))
    check = checks.reservation(block_config(), aws, now)
    start, end = now + timedelta(days=2, hours=3), now + timedelta(days=9, hours=3)
    assert check == checks.passed(
        checks.RESERVATION,
        f"Capacity Block {RESERVATION_ID}: 1 x {TRN2} in {BLOCK_AZ}, scheduled; starts "
        f"{start:%Y-%m-%d %H:%M} UTC (in 2 d 3 h); the Neuron nodes launch only from its start; "
        f"ends {end:%Y-%m-%d %H:%M} UTC (in 9 d 3 h); the deploy starts 1 node(s)",
    )
    aws.all_asked()


def test_a_reservation_that_does_not_match_lists_every_difference(now: datetime) -> None:
    aws = Aws()
    reservations(
        aws,
        capacity_block(
            now,
            State="expired",
            InstanceType="trn2u.48xlarge",
            AvailabilityZone="us-east-2c",
            TotalInstanceCount=1,
            StartDate=now - timedelta(days=8),
            EndDate=now - timedelta(hours=5),
        ),
    )
    three_nodes = block_config(**{"serving.replicas": "3"})  # 6 pods of 8 devices: 3 nodes
    check = checks.reservation(three_nodes, aws, now)
    assert check.status is Status.FAIL
    for problem in (
        "it is expired (usable: active, scheduled, pending)",
        f"it reserves trn2u.48xlarge, and cluster.neuron_nodes.instance_type is {TRN2}",
        f"it is in us-east-2c, and cluster.neuron_nodes.availability_zone is {BLOCK_AZ}",
        "it holds 1 instances, and the deploy starts 3 Neuron nodes",
        "it ended ",
    ):
        assert problem in check.detail
    assert check.fix == (
        "buy or renew the capacity and set cluster.neuron_nodes.capacity_reservation_id to it; "
        "set cluster.neuron_nodes.instance_type to trn2u.48xlarge; "
        "set cluster.neuron_nodes.availability_zone to us-east-2c (one of "
        "network.availability_zones); "
        "reserve 3, or need fewer (cluster.neuron_nodes.desired_size, serving.replicas, "
        "tuning.deploy); buy or extend the capacity"
    )


def test_an_odcr_configured_as_a_capacity_block_fails(now: datetime) -> None:
    aws = Aws()
    odcr = capacity_block(now, ReservationType="default", State="active", EndDateType="unlimited")
    del odcr["EndDate"]
    reservations(aws, odcr)
    check = checks.reservation(block_config(), aws, now)
    assert check.status is Status.FAIL
    assert "no end date" in check.detail
    kind = "it is a capacity reservation, and cluster.neuron_nodes.capacity_type is capacity-block"
    assert kind in check.detail
    assert check.fix == "set cluster.neuron_nodes.capacity_type to reservation"


def test_an_unknown_reservation_id_fails_with_where_to_look(now: datetime) -> None:
    aws = Aws()
    aws.error(
        "ec2",
        "describe_capacity_reservations",
        "InvalidCapacityReservationId.NotFound",
        f"The capacity reservation ID '{RESERVATION_ID}' does not exist",
        400,
    )
    check = checks.reservation(block_config(), aws, now)
    assert check == checks.failed(
        checks.RESERVATION,
        f"no capacity reservation {RESERVATION_ID} in this account in {REGION}",
        "set cluster.neuron_nodes.capacity_reservation_id to one `aws ec2 "
        f"describe-capacity-reservations --region {REGION}` lists, or `region` to the block's",
    )


def test_on_demand_has_no_reservation_to_check(now: datetime) -> None:
    check = checks.reservation(config(), Aws(), now)
    assert check.status is Status.SKIP and "capacity_type is on-demand" in check.detail


# --- capacity: the on-demand quota ---


def test_the_trn_quota_covers_the_nodes() -> None:
    aws = Aws()
    instance_types(aws)
    aws.answer("service-quotas", "get_service_quota", trn_quota(384.0), QUOTA_PARAMS)
    check = checks.vcpu_quota(config(), aws)
    assert check == checks.passed(
        checks.QUOTA,
        f"Running On-Demand Trn instances (L-2C3B7624) in {REGION} is 384 vCPUs; 1 x {TRN2} "
        "need 192 (192 each) (Trn instances already running count against it too)",
    )
    aws.all_asked()


def test_a_quota_below_the_nodes_vcpus_fails_with_the_request_command() -> None:
    aws = Aws()
    instance_types(aws)
    aws.answer("service-quotas", "get_service_quota", trn_quota(192.0), QUOTA_PARAMS)
    two_nodes = {"cluster.neuron_nodes.desired_size": "2", "cluster.neuron_nodes.max_size": "2"}
    check = checks.vcpu_quota(config(**two_nodes), aws)
    assert check.status is Status.FAIL
    assert check.detail.endswith("is 192 vCPUs; 2 x trn2.48xlarge need 384 (192 each)")
    assert check.fix.startswith(
        "request 384 vCPUs: `aws service-quotas request-service-quota-increase --service-code "
        "ec2 --quota-code L-2C3B7624 --desired-value 384 --region us-east-2`"
    )


def test_an_account_without_an_applied_quota_reads_the_default() -> None:
    aws = Aws()
    instance_types(aws)
    aws.error(
        "service-quotas",
        "get_service_quota",
        "NoSuchResourceException",
        "The request failed because the specified service quota does not exist.",
        400,
    )
    aws.answer("service-quotas", "get_aws_default_service_quota", trn_quota(0.0), QUOTA_PARAMS)
    check = checks.vcpu_quota(config(), aws)
    assert check.status is Status.FAIL and "is 0 vCPUs" in check.detail
    aws.all_asked()


def test_a_quota_code_that_names_another_quota_fails() -> None:
    aws = Aws()
    instance_types(aws)
    aws.answer(
        "service-quotas",
        "get_service_quota",
        trn_quota(64.0, "Running On-Demand Inf instances"),
        QUOTA_PARAMS,
    )
    check = checks.vcpu_quota(config(), aws)
    assert check.status is Status.FAIL
    assert "is 'Running On-Demand Inf instances', not 'Running On-Demand Trn" in check.detail
    assert "list-service-quotas --service-code ec2" in check.fix


def test_denied_quota_lookup_names_the_permission() -> None:
    aws = Aws()
    instance_types(aws)
    aws.error(
        "service-quotas",
        "get_service_quota",
        "AccessDeniedException",
        "User is not authorized to perform servicequotas:GetServiceQuota",
        400,
    )
    check = checks.vcpu_quota(config(), aws)
    assert check.status is Status.FAIL
    assert check.fix == (
        "allow servicequotas:GetServiceQuota (read-only) to the identity running this"
    )


def test_reserved_capacity_skips_the_quota() -> None:
    check = checks.vcpu_quota(block_config(), Aws())
    assert check.status is Status.SKIP and RESERVATION_ID in check.detail


def test_nodes_needed_follows_the_arms() -> None:
    assert checks.nodes_needed(config()) == 1  # two arms of 8 devices on one 16-device node
    assert checks.nodes_needed(config(**{"serving.replicas": "2"})) == 2
    whole_nodes = {"serving.neuron_devices": "16", "serving.tensor_parallel_size": "64"}
    assert checks.nodes_needed(config(**whole_nodes)) == 2
    # tuning.deploy: 2 drafts x k in {2, 4, 6, 8} more arms, two per node.
    assert checks.nodes_needed(config(**{"tuning.deploy": "true"})) == 5


# --- cluster ---


def test_the_kubernetes_version_is_offered() -> None:
    aws = Aws()
    cluster_versions(aws, "1.34", "1.35", "1.36")
    check = checks.eks_version(config(), aws)
    assert check.status is Status.PASS
    assert check.detail.startswith(
        f"Kubernetes 1.35 is offered in {REGION} (standard support, standard support until "
    )


def test_a_kubernetes_version_eks_does_not_offer_fails_with_the_usable_ones() -> None:
    aws = Aws()
    cluster_versions(aws, "1.33", "1.34")
    check = checks.eks_version(config(), aws)
    assert check == checks.failed(
        checks.EKS_VERSION,
        f"EKS in {REGION} does not offer Kubernetes 1.35 (it offers 1.33, 1.34)",
        "set cluster.kubernetes_version to one EKS offers here and the support calendar "
        "knows: ['1.34']",
    )


def test_the_recorded_addon_versions_are_compatible() -> None:
    aws = Aws()
    addon_versions(aws, S3_CSI, "v2.2.1-eksbuild.1")
    addon_versions(aws, CLOUDWATCH, "v4.6.0-eksbuild.1", "v4.5.0-eksbuild.2")
    check = checks.addon_versions(config(), aws, record())
    assert check == checks.passed(
        checks.ADDONS,
        f"{S3_CSI} v2.2.1-eksbuild.1, {CLOUDWATCH} v4.5.0-eksbuild.2: compatible with "
        "Kubernetes 1.35",
    )
    aws.all_asked()


def test_an_addon_version_not_listed_for_the_cluster_fails() -> None:
    aws = Aws()
    addon_versions(aws, S3_CSI, "v2.2.1-eksbuild.1")
    addon_versions(aws, CLOUDWATCH, "v4.6.0-eksbuild.1")
    check = checks.addon_versions(config(), aws, record())
    assert check.status is Status.FAIL
    assert check.detail == (
        f"{CLOUDWATCH} v4.5.0-eksbuild.2 (cdk.context.json 'experiment:pins') is not listed "
        f"for Kubernetes 1.35 in {REGION}"
    )
    assert check.fix == pins.REFRESH_HINT


def test_a_configured_addon_version_wins_and_its_fix_names_the_key() -> None:
    aws = Aws()
    addon_versions(aws, S3_CSI, "v2.2.1-eksbuild.1")
    addon_versions(aws, CLOUDWATCH, "v4.5.0-eksbuild.2")
    pinned = config(**{"cluster.s3_csi_addon_version": "v2.0.0-eksbuild.3"})
    check = checks.addon_versions(pinned, aws, record())
    assert check.status is Status.FAIL
    assert "v2.0.0-eksbuild.3 (cluster.s3_csi_addon_version) is not listed" in check.detail
    assert check.fix.startswith("set cluster.s3_csi_addon_version to a version listed")


def test_no_recorded_addon_versions_fails_asking_for_make_pins() -> None:
    check = checks.addon_versions(config(), Aws(), None)
    assert check.status is Status.FAIL
    assert f"{S3_CSI}: cluster.s3_csi_addon_version is not set" in check.detail
    assert check.fix.startswith("`make pins` (python -m experiment pins) records")
    # Pins recorded for another cluster version do not apply, and say so.
    other = checks.addon_versions(config(), Aws(), record("1.34"))
    assert "pins aws-mountpoint-s3-csi-driver for Kubernetes 1.34" in other.detail


def test_an_unoffered_kubernetes_version_skips_the_addons(now: datetime) -> None:
    aws = Aws()
    identity(aws)
    offerings(aws, ["us-east-2a", "us-east-2b", "us-east-2c"])
    instance_types(aws)
    aws.answer("service-quotas", "get_service_quota", trn_quota(384.0), QUOTA_PARAMS)
    cluster_versions(aws, "1.34")
    toolkit(aws)
    found = by_title(checks.run_checks(config(), aws, probes(now), record()))
    assert found[checks.EKS_VERSION].status is Status.FAIL
    assert found[checks.ADDONS] == checks.skipped(
        checks.ADDONS,
        f"needs Kubernetes 1.35 offered in {REGION} (the EKS version check)",
    )
    aws.all_asked()


# --- the CDK bootstrap, the bucket name ---


def test_the_bootstrap_stack_passes_with_its_version() -> None:
    aws = Aws()
    toolkit(aws)
    check = checks.bootstrap(config(), aws, ACCOUNT)
    assert check == checks.passed(
        checks.BOOTSTRAP,
        f"CDKToolkit in aws://{ACCOUNT}/{REGION}: UPDATE_COMPLETE, BootstrapVersion 30",
    )


def test_no_bootstrap_stack_fails_with_the_bootstrap_command() -> None:
    aws = Aws()
    aws.error(
        "cloudformation",
        "describe_stacks",
        "ValidationError",
        "Stack with id CDKToolkit does not exist",
        400,
    )
    check = checks.bootstrap(config(), aws, ACCOUNT)
    assert check.status is Status.FAIL
    assert check.detail == (
        f"no stack CDKToolkit in aws://{ACCOUNT}/{REGION}: the environment is not bootstrapped"
    )
    assert check.fix == f"{BOOTSTRAP} (with the venv's npx: export PATH=$PWD/.venv/bin:$PATH)"


def test_an_old_or_broken_bootstrap_stack_fails() -> None:
    aws = Aws()
    toolkit(aws, version="5")
    old = checks.bootstrap(config(), aws, ACCOUNT)
    assert old.status is Status.FAIL
    assert "BootstrapVersion 5; the app's synthesizer needs 6 or later" in old.detail
    assert old.fix == f"{BOOTSTRAP} (it upgrades the stack)"
    toolkit(aws, status="UPDATE_ROLLBACK_FAILED")
    broken = checks.bootstrap(config(), aws, ACCOUNT)
    assert broken.status is Status.FAIL and "is UPDATE_ROLLBACK_FAILED" in broken.detail


BUCKET = "qwen-sd-models-example"


def test_a_free_bucket_name_passes() -> None:
    aws = Aws()
    aws.error("s3", "head_bucket", "404", "Not Found", 404)
    check = checks.bucket_name(config(**{"model_store.bucket_name": BUCKET}), aws, ACCOUNT)
    assert check == checks.passed(checks.BUCKET, f"{BUCKET} is free")


def test_a_bucket_name_another_account_owns_fails() -> None:
    aws = Aws()
    aws.error("s3", "head_bucket", "403", "Forbidden", 403)
    check = checks.bucket_name(config(**{"model_store.bucket_name": BUCKET}), aws, ACCOUNT)
    assert check.status is Status.FAIL
    assert check.detail.startswith(f"{BUCKET} exists and another account owns it")
    assert check.fix.startswith("set model_store.bucket_name to another name")


def test_a_bucket_this_account_owns_passes_with_its_caveat() -> None:
    aws = Aws()
    aws.answer(
        "s3",
        "head_bucket",
        {"BucketRegion": REGION, "AccessPointAlias": False},
        {"Bucket": BUCKET, "ExpectedBucketOwner": ACCOUNT},
    )
    check = checks.bucket_name(config(**{"model_store.bucket_name": BUCKET}), aws, ACCOUNT)
    assert check.status is Status.PASS
    assert "a first deploy cannot create it again" in check.detail
    aws.all_asked()


def test_a_generated_bucket_name_has_nothing_to_check() -> None:
    check = checks.bucket_name(config(), Aws(), ACCOUNT)
    assert check.status is Status.SKIP and "bucket_name is null" in check.detail


# --- Docker, the hub ---


def test_docker_without_a_daemon_or_a_cli_fails() -> None:
    def no_daemon(argv: Sequence[str]) -> tuple[int, str]:
        return 1, (
            "Client:\n Version: 28.3.2\nCannot connect to the Docker daemon at "
            "unix:///var/run/docker.sock. Is the docker daemon running?"
        )

    def no_cli(argv: Sequence[str]) -> tuple[int, str]:
        raise FileNotFoundError(argv[0])

    down = checks.docker(no_daemon)
    assert down.status is Status.FAIL
    assert down.detail == (
        "`docker info` exited 1: Cannot connect to the Docker daemon at "
        "unix:///var/run/docker.sock. Is the docker daemon running?"
    )
    assert "start the Docker daemon" in down.fix
    missing = checks.docker(no_cli, "finch")
    assert missing.status is Status.FAIL and missing.detail.startswith("finch is not on PATH")
    assert checks.docker(docker_ok).status is Status.PASS


def test_the_docker_program_follows_cdk_docker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CDK_DOCKER", raising=False)
    assert checks.docker_program() == "docker"
    monkeypatch.setenv("CDK_DOCKER", "finch")
    assert checks.docker_program() == "finch"


def test_the_hub_is_asked_for_every_imported_model_at_its_revision() -> None:
    asked: list[tuple[str, str, str]] = []

    def hub(endpoint: str, model: str, revision: str) -> str:
        asked.append((endpoint, model, revision))
        return hub_ok(endpoint, model, revision)

    pinned = config(**{"model_store.hub_revisions": json.dumps({TARGET: "1" * 40})})
    check = checks.hub(pinned, hub, None)
    assert check.status is Status.PASS
    assert asked == [
        ("https://huggingface.co", TARGET, "1" * 40),
        ("https://huggingface.co", DRAFT, "main"),
    ]


def test_an_unreachable_hub_fails_and_a_disabled_import_skips() -> None:
    def offline(endpoint: str, model: str, revision: str) -> str:
        url = resolve.hub_revision_url(endpoint, model, revision)
        raise resolve.Unreachable(f"hub: GET {url}: <urlopen error [Errno -3] name resolution>")

    check = checks.hub(config(), offline, None)
    assert check.status is Status.FAIL
    assert check.detail.startswith(
        f"hub: GET https://huggingface.co/api/models/{TARGET}/revision/main: <urlopen error"
    )
    assert "let this machine reach https://huggingface.co over HTTPS" in check.fix
    off = checks.hub(config(**{"model_store.import_checkpoints": "false"}), offline, None)
    assert off.status is Status.SKIP and "import_checkpoints is false" in off.detail


def test_the_default_hub_probe_asks_the_hub_as_make_pins_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[tuple[str, str, str]] = []

    def hub_commit(endpoint: str, model: str, revision: str = "main") -> pins.HubCommit:
        asked.append((endpoint, model, revision))
        return pins.HubCommit(commit="b" * 40, source="hub API")

    monkeypatch.setattr(resolve, "hub_commit", hub_commit)
    answer = checks.hub_commit("https://huggingface.co", DRAFT, "main")
    assert answer == f"{DRAFT}@main is commit {'b' * 40}"
    assert asked == [("https://huggingface.co", DRAFT, "main")]


# --- the command ---


def arguments(tmp_path: Path, *extra: str, pinned: pins.PinRecord | None = None) -> Any:
    context = tmp_path / "cdk.context.json"
    if pinned is not None:
        context.write_text(json.dumps({pins.PINS_KEY: pinned.as_context()}))
    parser = argparse.ArgumentParser()
    preflight.add_arguments(parser)
    return parser.parse_args(["--context-file", str(context), *extra])


def test_every_check_passes_and_the_command_exits_0(
    now: datetime, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    aws = Aws()
    all_pass(aws)
    regions: set[str] = set()

    def clients(service: str, region: str) -> Any:
        regions.add(region)
        return aws(service)

    code = preflight.run(arguments(tmp_path, pinned=record()), clients, probes(now))
    out = capsys.readouterr().out
    assert code == 0, out
    assert regions == {REGION}
    lines = out.splitlines()
    assert [line.split(":")[0] for line in lines[:-1]] == [
        "✓ account",
        "✓ capacity",
        "- capacity",
        "✓ capacity",
        "✓ cluster",
        "✓ cluster",
        "✓ CDK bootstrap",
        "- model-store bucket name",
        "✓ Docker",
        "✓ model hub",
    ]
    assert lines[-1] == (
        "preflight: 8 passed, 0 failed, 2 skipped; nothing found that stops `cdk deploy`"
    )
    aws.all_asked()


def test_one_failure_makes_the_command_exit_1_and_prints_its_fix(
    now: datetime, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    aws = Aws()
    identity(aws)
    offerings(aws, ["us-east-2a", "us-east-2b", "us-east-2c"])
    instance_types(aws)
    aws.answer("service-quotas", "get_service_quota", trn_quota(384.0), QUOTA_PARAMS)
    cluster_versions(aws, "1.34", "1.35", "1.36")
    addon_versions(aws, S3_CSI, "v2.2.1-eksbuild.1")
    addon_versions(aws, CLOUDWATCH, "v4.5.0-eksbuild.2")
    aws.error(
        "cloudformation",
        "describe_stacks",
        "ValidationError",
        "Stack with id CDKToolkit does not exist",
        400,
    )
    code = preflight.run(
        arguments(tmp_path, pinned=record()), lambda service, region: aws(service), probes(now)
    )
    out = capsys.readouterr().out
    assert code == preflight.EXIT_FAILED
    assert (
        f"✗ CDK bootstrap: no stack CDKToolkit in aws://{ACCOUNT}/{REGION}: the environment is "
        f"not bootstrapped\n    fix: {BOOTSTRAP} (with the venv's npx: "
        "export PATH=$PWD/.venv/bin:$PATH)\n"
    ) in out
    skipped = "- capacity: reservation: skipped: cluster.neuron_nodes.capacity_type is on-demand"
    assert skipped in out
    summary = "preflight: 7 passed, 1 failed, 2 skipped; fix the failures above before `cdk deploy`"
    assert out.splitlines()[-1] == summary


def test_a_broken_pin_record_fails_the_addon_check_only(
    now: datetime, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    aws = Aws()
    identity(aws)
    offerings(aws, ["us-east-2a", "us-east-2b", "us-east-2c"])
    instance_types(aws)
    aws.answer("service-quotas", "get_service_quota", trn_quota(384.0), QUOTA_PARAMS)
    cluster_versions(aws, "1.35")
    toolkit(aws)
    args = arguments(tmp_path)
    args.context_file.write_text("{not json")
    code = preflight.run(args, lambda service, region: aws(service), probes(now))
    out = capsys.readouterr().out
    assert code == preflight.EXIT_FAILED
    assert "✗ cluster: add-on versions: cdk.context.json is not JSON" in out
    assert f"    fix: {pins.REFRESH_HINT}" in out


def test_an_invalid_configuration_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = arguments(tmp_path, "-c", "serving.num_speculative_tokens=16")
    code = preflight.run(args, lambda service, region: pytest.fail("asked AWS"), None)
    assert code == preflight.EXIT_BAD_INPUT
    assert "serving.num_speculative_tokens" in capsys.readouterr().err


def test_python_m_experiment_preflight_runs_the_checks(
    now: datetime,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    aws = Aws()
    all_pass(aws)
    monkeypatch.setattr(preflight, "default_clients", lambda service, region: aws(service))
    monkeypatch.setattr(preflight, "Probes", lambda: probes(now))
    context = tmp_path / "cdk.context.json"
    context.write_text(json.dumps({pins.PINS_KEY: record().as_context()}))
    assert main(["preflight", "--context-file", str(context)]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith(f"✓ account: {ARN}")
