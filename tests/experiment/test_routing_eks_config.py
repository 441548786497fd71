"""``routing.eks``: bad pins and names are rejected with the key to change."""

from __future__ import annotations

import pytest

from experiment import ConfigError, build_config


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("envoy_gateway_version", "1.9.1", r"routing\.eks\.envoy_gateway_version.*'v1\.9\.1'"),
        ("envoy_gateway_version", "latest", r"routing\.eks\.envoy_gateway_version"),
        ("rollouts_chart_version", "v2.41.1", r"routing\.eks\.rollouts_chart_version.*no 'v'"),
        ("namespace", "Envoy_Gateway", r"routing\.eks\.namespace"),
        ("analysis_window_periods", "0", r"routing\.eks\.analysis_window_periods"),
        ("operators_group", "", r"routing\.eks\.operators_group"),
        ("abort_scale_down_delay_s", "0", r"routing\.eks\.abort_scale_down_delay_s.*1 or more"),
        ("initial_revision_timeout_minutes", "15", r"routing\.eks\.initial_revision_timeout"),
        ("gateway_api_plugin_sha256", "ab" * 31, r"gateway_api_plugin_sha256.*64 lower-case hex"),
        ("gateway_api_plugin_sha256", "AB" * 32, r"gateway_api_plugin_sha256.*64 lower-case hex"),
    ],
)
def test_bad_eks_routing_settings_name_the_key(key: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_config({f"experiment.routing.eks.{key}": value})


def test_defaults_are_the_verified_pins() -> None:
    eks = build_config({}).routing.eks
    assert (eks.envoy_gateway_version, eks.rollouts_chart_version) == ("v1.9.3", "2.41.1")


def test_the_plugin_digest_is_required_for_the_eks_app_only() -> None:
    """Local runs never install the traffic-router plugin; the CDK app always does, so it
    needs the binary's digest, which has no verified default (the error says where to read
    it)."""
    assert build_config({}).routing.eks.gateway_api_plugin_sha256 is None
    release = r"rollouts-plugin-trafficrouter-gatewayapi/releases/tag/v0\.15\.0"
    with pytest.raises(ConfigError, match=rf"gateway_api_plugin_sha256 is required.*{release}"):
        build_config({}, for_eks=True)
    digest = "0123456789abcdef" * 4
    eks = build_config(
        {
            "experiment.routing.eks.gateway_api_plugin_sha256": digest,
            "experiment.cluster.s3_csi_addon_version": "v2.1.0-eksbuild.1",
            "experiment.cluster.cloudwatch_addon_version": "v4.1.0-eksbuild.1",
            "experiment.model_store.import_checkpoints": "false",  # no hub commits needed
        },
        for_eks=True,
    ).routing.eks
    assert eks.gateway_api_plugin_sha256 == digest


def test_operator_principals_must_be_iam_arns_and_not_admins() -> None:
    with pytest.raises(ConfigError, match=r"routing\.eks\.operator_principal_arns.*Oncall"):
        build_config({"experiment.routing.eks.operator_principal_arns": '["oncall"]'})
    arn = "arn:aws:iam::123456789012:role/Admin"
    with pytest.raises(ConfigError, match=r"cluster\.admin_principal_arns"):
        build_config(
            {
                "experiment.routing.eks.operator_principal_arns": f'["{arn}"]',
                "experiment.cluster.admin_principal_arns": f'["{arn}"]',
            }
        )
