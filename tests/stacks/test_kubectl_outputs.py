"""The stack outputs the kubectl path takes (``python -m charts --bucket --loadtest-image
--prometheus-url``): they exist under the names its help gives; and the gateway's address in
the cluster, which the load-test Job's tiered arm calls."""

from __future__ import annotations

import pytest
from cdk_synth import Synthesized

from charts import __main__ as charts_cli

pytestmark = pytest.mark.infra


def test_the_outputs_charts_help_names_exist(synth: Synthesized) -> None:
    cluster = synth.templates["Cluster"]["Outputs"]
    store = synth.templates["ModelStore"]["Outputs"]
    assert "BucketName" in store
    assert {"LoadTestImageUri", "PrometheusQueryUrl"} <= set(cluster)
    assert "ecr" in str(cluster["LoadTestImageUri"]["Value"]).lower()
    url = cluster["PrometheusQueryUrl"]["Value"]
    assert "aps-workspaces." in str(url) and "/workspaces/" in str(url)
    for name in ("BucketName", "LoadTestImageUri", "PrometheusQueryUrl"):
        assert name in (charts_cli.__doc__ or "")


def test_without_live_guardrails_there_is_no_workspace_output(tmp_path) -> None:
    from cdk_synth import synthesize

    off = synthesize({"experiment.guardrails.live.enabled": "false"}, tmp_path)
    assert "PrometheusQueryUrl" not in off.templates["Cluster"].get("Outputs", {})
    assert "LoadTestImageUri" in off.templates["Cluster"]["Outputs"]


def test_cdk_deploy_says_what_is_still_starting(synth: Synthesized) -> None:
    """The canary precompiles after cdk deploy returns: an output names it, its budgets, when
    the analysis starts and how to watch it."""
    from experiment import build_config

    text = synth.templates["Cluster"]["Outputs"]["SpeculativeRevisionStarting"]["Value"]
    config = build_config({})
    assert f"Rollout {config.project}-arms-" in text
    assert f"up to {config.serving.precompile_timeout_minutes} min" in text
    assert "analysis starts only then" in text and "--watch" in text


def test_the_gateway_address_output_is_the_service_the_envoy_proxy_names(
    synth: Synthesized,
) -> None:
    """The address is only right if Envoy Gateway names the Service as the output says: the
    rendered EnvoyProxy's envoyService.name, in the controller's namespace, on the port."""
    from charts.gateway import envoy_proxy
    from experiment import build_config

    config = build_config({})
    url = synth.templates["Cluster"]["Outputs"]["GatewayInternalUrl"]["Value"]
    service = envoy_proxy(config)["spec"]["provider"]["kubernetes"]["envoyService"]
    assert service["type"] == "ClusterIP"
    namespace = config.routing.eks.namespace
    assert url == f"http://{service['name']}.{namespace}.svc:{config.serving.port}"
