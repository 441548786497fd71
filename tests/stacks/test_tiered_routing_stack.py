"""The tiered-routing controllers in the synthesized cluster stack: pinned Helm releases,
the routing chart applied after them (the controller's credentials:
test_controller_credentials.py)."""

from __future__ import annotations

import json

import pytest
from cdk_synth import decode_manifest

from experiment.config import GATEWAY_API_PLUGIN_URL
from stacks.gateway import (
    ENVOY_GATEWAY_RELEASE,
    ROLLOUTS_RELEASE,
    envoy_gateway_values,
    rollouts_values,
)

pytestmark = pytest.mark.infra

HELM = "Custom::AWSCDK-EKS-HelmChart"


def _helm(synth) -> dict[str, tuple[str, dict]]:
    return {
        r["Properties"]["Release"]: (k, r)
        for k, r in synth.templates["Cluster"]["Resources"].items()
        if r["Type"] == HELM
    }


def test_envoy_gateway_and_argo_rollouts_are_the_pinned_charts(synth) -> None:
    eks = synth.config.routing.eks
    charts = _helm(synth)
    _, envoy = charts[ENVOY_GATEWAY_RELEASE]
    assert envoy["Properties"]["Repository"] == eks.envoy_gateway_chart
    assert envoy["Properties"]["Chart"] == "gateway-helm"
    assert envoy["Properties"]["Version"] == eks.envoy_gateway_version == "v1.9.3"
    assert envoy["Properties"]["Namespace"] == eks.namespace
    values = json.loads(envoy["Properties"]["Values"])
    assert values == envoy_gateway_values()
    assert values["config"]["envoyGateway"]["extensionApis"]["enableBackend"] is True
    _, rollouts = charts[ROLLOUTS_RELEASE]
    assert rollouts["Properties"]["Repository"] == eks.rollouts_chart_repository
    assert rollouts["Properties"]["Version"] == eks.rollouts_chart_version == "2.41.1"
    assert rollouts["Properties"]["Namespace"] == eks.rollouts_namespace
    # The values carry the controller's IRSA role ARN (tests/stacks/test_controller_credentials.py).
    values = decode_manifest(rollouts["Properties"]["Values"])
    assert values == rollouts_values(synth.config, "TOKEN")
    # The plugin of the pinned release, checked against the configured digest.
    (plugin,) = values["controller"]["trafficRouterPlugins"]
    assert plugin == {
        "name": "argoproj-labs/gatewayAPI",
        "location": GATEWAY_API_PLUGIN_URL,
        "sha256": eks.gateway_api_plugin_sha256,
    }
    assert GATEWAY_API_PLUGIN_URL == (
        "https://github.com/argoproj-labs/rollouts-plugin-trafficrouter-gatewayapi/releases/"
        "download/v0.15.0/gatewayapi-plugin-linux-amd64"
    )
    assert {"name": "AWS_REGION", "value": synth.config.region} in values["controller"]["extraEnv"]


def test_envoy_gateway_runs_the_gateways_envoy_service_in_its_own_namespace() -> None:
    """charts.gateway.gateway_url addresses the Envoy Service in routing.eks.namespace: Envoy
    Gateway v1.9.0 puts it there unless provider.kubernetes.deploy.type is GatewayNamespace
    (internal/infrastructure/kubernetes/proxy_infra.go, GetResourceNamespace), which these
    values leave out (the chart's default config has no deploy)."""
    envoy_gateway = envoy_gateway_values()["config"]["envoyGateway"]
    assert "deploy" not in envoy_gateway.get("provider", {}).get("kubernetes", {})


def test_the_routing_chart_applies_after_both_controllers(synth) -> None:
    resources = synth.templates["Cluster"]["Resources"]
    routing = [
        (k, r)
        for k, r in resources.items()
        if r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"
        and any(obj["kind"] == "HTTPRoute" for obj in decode_manifest(r["Properties"]["Manifest"]))
    ]
    assert len(routing) == 1
    (_, chart), helm = routing[0], _helm(synth)
    depends = set(chart.get("DependsOn", []))
    assert {helm[ENVOY_GATEWAY_RELEASE][0], helm[ROLLOUTS_RELEASE][0]} <= depends


def test_operators_get_an_access_entry_in_their_group_only(synth, synth_options) -> None:
    """No operator entry without operators; with one, the entry grants the group and no
    access policy (the routing chart's Role is its only permission)."""
    assert not [
        r
        for r in synth.templates["Cluster"]["Resources"].values()
        if r["Type"] == "AWS::EKS::AccessEntry" and "KubernetesGroups" in r["Properties"]
    ]
    config = synth_options.config
    entries = [
        r["Properties"]
        for r in synth_options.templates["Cluster"]["Resources"].values()
        if r["Type"] == "AWS::EKS::AccessEntry"
        and r["Properties"]["PrincipalArn"] in config.routing.eks.operator_principal_arns
    ]
    assert len(entries) == 1
    (entry,) = entries
    assert entry["KubernetesGroups"] == [config.routing.eks.operators_group]
    assert "AccessPolicies" not in entry


def _manifest_with(resources: dict, kind: str) -> str:
    (logical_id,) = [
        k
        for k, r in resources.items()
        if r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"
        and any(obj["kind"] == kind for obj in decode_manifest(r["Properties"]["Manifest"]))
    ]
    return logical_id


def test_the_speculative_revision_is_patched_in_only_after_the_baseline_is_stable(synth) -> None:
    """Rollout (baseline) -> wait for .status.stableRS -> merge patch to the speculative
    template, in that order in the template; the patch is canary_patches' own."""
    from charts.rollout import canary_patches, rollout_name

    config = synth.config
    resources = synth.templates["Cluster"]["Resources"]
    routing = _manifest_with(resources, "Rollout")
    (rollout,) = [
        obj
        for obj in decode_manifest(resources[routing]["Properties"]["Manifest"])
        if obj["kind"] == "Rollout"
    ]
    assert rollout["metadata"]["name"] == rollout_name(config)
    value_type = "Custom::AWSCDK-EKS-KubernetesObjectValue"
    (wait_id, wait), *more = [(k, r) for k, r in resources.items() if r["Type"] == value_type]
    assert not more
    props = wait["Properties"]
    assert (props["ObjectType"], props["ObjectName"], props["JsonPath"]) == (
        "rollout.argoproj.io", rollout_name(config), ".status.stableRS",
    )  # fmt: skip
    assert props["ObjectNamespace"] == config.serving.namespace
    assert int(props["TimeoutSeconds"]) == config.routing.eks.initial_revision_timeout_minutes * 60
    assert routing in wait.get("DependsOn", [])
    # A new baseline is a new Rollout name: the old one must be pruned on update.
    assert resources[routing]["Properties"]["PruneLabel"]
    (patch,) = [r for r in resources.values() if r["Type"] == "Custom::AWSCDK-EKS-KubernetesPatch"]
    assert wait_id in patch.get("DependsOn", [])
    apply, restore = canary_patches(config)
    assert patch["Properties"]["ResourceName"] == f"rollout.argoproj.io/{rollout_name(config)}"
    assert patch["Properties"]["PatchType"] == "merge"
    assert json.loads(patch["Properties"]["ApplyPatchJson"]) == apply
    assert json.loads(patch["Properties"]["RestorePatchJson"]) == restore


def test_the_load_test_applies_after_the_rollout_that_runs_its_servers(synth) -> None:
    from charts.loadtest_job import COMPONENT as LOADTEST_COMPONENT
    from charts.naming import COMPONENT

    resources = synth.templates["Cluster"]["Resources"]
    routing = _manifest_with(resources, "Rollout")
    (loadtest,) = [
        k
        for k, r in resources.items()
        if r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"
        and any(
            obj["kind"] == "Job"
            and obj["metadata"].get("labels", {}).get(COMPONENT) == LOADTEST_COMPONENT
            for obj in decode_manifest(r["Properties"]["Manifest"])
        )
    ]
    assert routing in resources[loadtest].get("DependsOn", [])
