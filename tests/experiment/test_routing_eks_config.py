"""``routing.eks``: bad pins and names are rejected with the key to change."""

from __future__ import annotations

import pytest

from experiment import ConfigError, build_config


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("envoy_gateway_version", "1.9.0", r"routing\.eks\.envoy_gateway_version.*'v1\.9\.0'"),
        ("envoy_gateway_version", "latest", r"routing\.eks\.envoy_gateway_version"),
        ("rollouts_chart_version", "v2.41.1", r"routing\.eks\.rollouts_chart_version.*no 'v'"),
        ("namespace", "Envoy_Gateway", r"routing\.eks\.namespace"),
        ("analysis_window_periods", "0", r"routing\.eks\.analysis_window_periods"),
        ("operators_group", "", r"routing\.eks\.operators_group"),
        ("abort_scale_down_delay_s", "0", r"routing\.eks\.abort_scale_down_delay_s.*1 or more"),
        ("initial_revision_timeout_minutes", "15", r"routing\.eks\.initial_revision_timeout"),
    ],
)
def test_bad_eks_routing_settings_name_the_key(key: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_config({f"experiment.routing.eks.{key}": value})


def test_defaults_are_the_verified_pins() -> None:
    eks = build_config({}).routing.eks
    assert (eks.envoy_gateway_version, eks.rollouts_chart_version) == ("v1.9.0", "2.41.1")


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
