"""Deploy pins without the network: the one error that lists every missing or malformed pin,
the record in cdk.context.json (its shape, what it is recorded for, how it layers under the
configuration) and the EKS add-on lookups against botocore's Stubber with the real
DescribeAddonVersions shape."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from experiment import ConfigError, build_config
from experiment.config.gateway_plugin import GATEWAY_API_PLUGIN_ASSET, GATEWAY_API_PLUGIN_VERSION
from experiment.loading import context_file_pins
from experiment.pins import record as pins
from experiment.pins import resolve

TARGET, DRAFT = "Qwen/Qwen3-32B", "Qwen/Qwen3-1.7B"
S3_CSI, CLOUDWATCH = "aws-mountpoint-s3-csi-driver", "amazon-cloudwatch-observability"
DIGEST = "ab" * 32


def record(**changes: Any) -> dict[str, Any]:
    """A record as `python -m experiment pins` writes it for the default configuration, with
    ``changes`` (key path joined by "|": model ids hold "/")."""
    value: dict[str, Any] = {
        "hub": {
            "endpoint": "https://huggingface.co",
            "revisions": {
                TARGET: {"commit": "1" * 40, "source": "hub API"},
                DRAFT: {"commit": "2" * 40, "source": "hub API"},
            },
        },
        "gateway_api_plugin": {
            "version": GATEWAY_API_PLUGIN_VERSION,
            "asset": GATEWAY_API_PLUGIN_ASSET,
            "sha256": DIGEST,
            "method": "release-api-digest",
            "source": "release API",
        },
        "eks_addons": {
            "kubernetes_version": "1.35",
            "region": "us-east-2",
            "versions": {
                S3_CSI: {"version": "v2.2.1-eksbuild.1", "source": "EKS"},
                CLOUDWATCH: {"version": "v4.5.0-eksbuild.2", "source": "EKS"},
            },
        },
    }
    for path, new in changes.items():
        *parents, last = path.split("|")
        node = value
        for part in parents:
            node = node[part]
        node[last] = new
    return value


def deploy(recorded: Any = None, **overrides: str):
    context: dict[str, Any] = {f"experiment.{key}": value for key, value in overrides.items()}
    if recorded is not None:
        context[pins.PINS_KEY] = recorded
    return build_config(context, for_eks=True)


def test_synth_lists_every_missing_pin_in_one_error_with_the_make_pins_hint() -> None:
    with pytest.raises(ConfigError) as refused:
        deploy()
    message = str(refused.value)
    for key in (
        "routing.eks.gateway_api_plugin_sha256 is required",
        "cluster.s3_csi_addon_version is required",
        "cluster.cloudwatch_addon_version is required",
        f"model_store.hub_revisions needs a commit for ['{TARGET}', '{DRAFT}']",
    ):
        assert key in message
    assert message.count("`make pins` (python -m experiment pins) resolves every one") == 1


def test_malformed_and_missing_pins_are_reported_together() -> None:
    with pytest.raises(ConfigError) as refused:
        deploy(
            **{
                "routing.eks.gateway_api_plugin_sha256": "ab" * 31,
                "cluster.s3_csi_addon_version": "latest",
            }
        )
    message = str(refused.value)
    assert "gateway_api_plugin_sha256 'abab" in message and "64 lower-case hex" in message
    assert "s3_csi_addon_version 'latest' is not an EKS add-on version of the form" in message
    assert "cloudwatch_addon_version is required" in message
    assert "needs a commit for" in message


def test_the_recorded_pins_make_synth_pass_and_a_setting_overrides_them() -> None:
    config = deploy(record())
    assert config.routing.eks.gateway_api_plugin_sha256 == DIGEST
    assert config.cluster.s3_csi_addon_version == "v2.2.1-eksbuild.1"
    assert config.model_store.hub_revisions[TARGET] == "1" * 40
    overridden = deploy(record(), **{"cluster.s3_csi_addon_version": "v2.0.0-eksbuild.3"})
    assert overridden.cluster.s3_csi_addon_version == "v2.0.0-eksbuild.3"
    assert overridden.cluster.cloudwatch_addon_version == "v4.5.0-eksbuild.2"
    # Local tools read the record too (nothing to require there): same values.
    assert build_config({pins.PINS_KEY: record()}).model_store.hub_revisions[DRAFT] == "2" * 40


def test_a_pin_recorded_for_another_cluster_version_is_not_applied_and_named() -> None:
    with pytest.raises(ConfigError) as refused:
        deploy(record(), **{"cluster.kubernetes_version": "1.36"})
    message = str(refused.value)
    assert "cluster.s3_csi_addon_version: cdk.context.json 'experiment:pins' pins" in message
    assert "for Kubernetes 1.35 in us-east-2, and cluster.kubernetes_version is 1.36" in message
    assert "cloudwatch_addon_version" in message and "--refresh" in message
    # The other pins still apply: only the add-ons are missing.
    assert "gateway_api_plugin_sha256 is required" not in message
    assert "needs a commit" not in message


def test_a_digest_of_another_plugin_release_or_another_hub_is_not_applied() -> None:
    with pytest.raises(ConfigError, match=r"digest of gatewayapi-plugin-linux-amd64 v0\.14\.0"):
        deploy(record(**{"gateway_api_plugin|version": "v0.14.0"}))
    with pytest.raises(ConfigError, match=r"holds commits of https://huggingface\.co, not of"):
        deploy(record(), **{"model_store.hub_endpoint": "https://hub.example.com"})


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        (
            {f"hub|revisions|{TARGET}|commit": "main"},
            rf"experiment:pins\.hub\.revisions\.{TARGET}\.commit: 'main' is not a commit",
        ),
        (
            {"gateway_api_plugin|sha256": "ab" * 31},
            r"gateway_api_plugin\.sha256: '(ab)+' is not a SHA-256 of 64",
        ),
        (
            {f"eks_addons|versions|{S3_CSI}|version": "2.2.1"},
            rf"eks_addons\.versions\.{S3_CSI}\.version: '2\.2\.1' is not an EKS add-on version",
        ),
        ({"eks_addons|versions|vpc-cni": {"version": "v1.0.0-eksbuild.1", "source": "x"}},
         r"eks_addons\.versions: \['vpc-cni'\] are not pinned add-ons"),
        ({"gateway_api_plugin|method": "guessed"}, r"gateway_api_plugin\.method"),
        ({"extra": 1}, r"experiment:pins\.extra: unknown key"),
    ],
)  # fmt: skip
def test_a_record_edited_into_nonsense_is_refused_naming_the_key(
    changes: dict[str, Any], named: str
) -> None:
    with pytest.raises(ConfigError, match=named) as refused:
        deploy(record(**changes))
    assert "python -m experiment pins --refresh" in str(refused.value)


def test_a_record_that_is_no_object_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"'experiment:pins' is list, not the object"):
        deploy(["v1"])


def test_the_kubectl_path_reads_the_context_file_and_refuses_nonsense(tmp_path: Path) -> None:
    assert context_file_pins(tmp_path) == {}  # no file: no pins
    file = tmp_path / pins.CONTEXT_FILE
    file.write_text(json.dumps({"availability-zones:x": ["a"], pins.PINS_KEY: record()}))
    assert context_file_pins(tmp_path) == {pins.PINS_KEY: record()}
    file.write_text("{not json")
    with pytest.raises(ConfigError, match=r"cdk\.context\.json is not JSON .*fix it or delete"):
        context_file_pins(tmp_path)
    file.write_text("[1, 2]")
    with pytest.raises(ConfigError, match=r"cdk\.context\.json holds a list"):
        context_file_pins(tmp_path)


def test_writing_keeps_cdk_s_cached_lookups(tmp_path: Path) -> None:
    file = tmp_path / pins.CONTEXT_FILE
    file.write_text(json.dumps({"availability-zones:account=1:region=r": ["r-a"]}))
    pins.write_file(file, pins.parse(record()))
    written = json.loads(file.read_text())
    assert written["availability-zones:account=1:region=r"] == ["r-a"]
    assert pins.parse(written[pins.PINS_KEY]) == pins.parse(record())
    assert [p.name for p in tmp_path.iterdir()] == [pins.CONTEXT_FILE]  # no temporary left


# DescribeAddonVersions as EKS answers it (boto/botocore botocore/data/eks/2017-11-01/
# service-2.json: addons[].addonVersions[].compatibilities[].{clusterVersion,
# platformVersions, defaultVersion}).
def addon_response(addon: str, versions: list[tuple[str, bool]], cluster: str = "1.35") -> dict:
    return {
        "addons": [
            {
                "addonName": addon,
                "type": "storage",
                "owner": "aws",
                "publisher": "eks",
                "addonVersions": [
                    {
                        "addonVersion": version,
                        "architecture": ["amd64", "arm64"],
                        "computeTypes": ["ec2"],
                        "compatibilities": [
                            {
                                "clusterVersion": cluster,
                                "platformVersions": ["*"],
                                "defaultVersion": default,
                            }
                        ],
                        "requiresConfiguration": False,
                        "requiresIamPermissions": True,
                    }
                    for version, default in versions
                ],
            }
        ]
    }


def stubbed(*responses: tuple[str, dict[str, Any]]) -> tuple[Any, Stubber]:
    client = boto3.client(
        "eks", region_name="us-east-2", aws_access_key_id="x", aws_secret_access_key="x"
    )
    stubber = Stubber(client)
    for addon, response in responses:
        expected = {"addonName": addon, "kubernetesVersion": "1.35"}
        stubber.add_response("describe_addon_versions", response, expected)
    stubber.activate()
    return client, stubber


def test_the_addon_pin_is_the_default_for_the_cluster_version() -> None:
    versions = [("v2.3.0-eksbuild.1", False), ("v2.2.1-eksbuild.1", True)]
    client, stubber = stubbed((S3_CSI, addon_response(S3_CSI, versions)))
    pin = resolve.addon_default(client, S3_CSI, "1.35")
    assert pin.version == "v2.2.1-eksbuild.1"
    assert "DescribeAddonVersions in us-east-2" in pin.source and "defaultVersion" in pin.source
    stubber.assert_no_pending_responses()


def test_no_default_version_is_a_failure_naming_what_is_listed() -> None:
    client, _ = stubbed((S3_CSI, addon_response(S3_CSI, [("v2.3.0-eksbuild.1", False)])))
    with pytest.raises(resolve.Unreachable, match=r"no default version of .*v2\.3\.0-eksbuild\.1"):
        resolve.addon_default(client, S3_CSI, "1.35")
    other = addon_response(S3_CSI, [("v2.3.0-eksbuild.1", True)], cluster="1.34")
    client, _ = stubbed((S3_CSI, other))
    with pytest.raises(resolve.Unreachable, match=r"no default version"):
        resolve.addon_default(client, S3_CSI, "1.35")


def test_an_eks_error_is_reported_with_its_code() -> None:
    client = boto3.client(
        "eks", region_name="us-east-2", aws_access_key_id="x", aws_secret_access_key="x"
    )
    stubber = Stubber(client)
    stubber.add_client_error(
        "describe_addon_versions", "AccessDeniedException", "not authorized", 403
    )
    stubber.activate()
    with pytest.raises(resolve.Unreachable, match=r"us-east-2 .*AccessDeniedException: not auth"):
        resolve.addon_default(client, S3_CSI, "1.35")


def test_the_check_finds_a_recorded_addon_version_or_says_it_is_gone() -> None:
    listed = [("v2.3.0-eksbuild.1", True), ("v2.2.1-eksbuild.1", False)]
    client, _ = stubbed(
        (S3_CSI, addon_response(S3_CSI, listed)), (S3_CSI, addon_response(S3_CSI, listed))
    )
    assert "listed, no longer the default" in resolve.check_addon(
        client, S3_CSI, "1.35", "v2.2.1-eksbuild.1"
    )
    with pytest.raises(resolve.Unreachable, match=r"v2\.1\.0-eksbuild\.1 is no longer listed"):
        resolve.check_addon(client, S3_CSI, "1.35", "v2.1.0-eksbuild.1")


@pytest.mark.parametrize(
    ("key", "old", "least"),
    [
        ("cluster.s3_csi_addon_version", "v1.15.0-eksbuild.1", "v2.0.0"),
        ("cluster.cloudwatch_addon_version", "v3.0.2-eksbuild.1", "v3.1.0"),
    ],
)
def test_an_add_on_older_than_its_pod_identity_support_is_refused(
    key: str, old: str, least: str
) -> None:
    """The stacks give both add-ons Pod Identity roles; an older build would get no
    credentials on the cluster (docs/guardrails.md, the credentials inventory)."""
    with pytest.raises(ConfigError, match=rf"{key} '{old}' is older than {least}"):
        deploy(record(), **{key: old})
    deploy(record(), **{key: f"{least}-eksbuild.1"})  # the first release that reads it
