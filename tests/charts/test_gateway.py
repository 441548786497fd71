"""The Envoy Gateway resources enact ``routing`` exactly: per class, header case and failure."""

from __future__ import annotations

import re
from typing import Any

import pytest

from charts.gateway import (
    backend_traffic_policy,
    decide,
    envoy_proxy,
    fallback_backend,
    fallback_backend_name,
    gateway,
    gateway_manifests,
    gateway_service_name,
    gateway_url,
    http_route,
    matching_rule,
    route_table,
    serving_from_gateway,
)
from experiment import Arm, ExperimentConfig, build_config

CONFIGS = {
    "default": {},
    "both-classes": {"experiment.routing.speculative_classes": "structured,open_ended"},
    "none": {"experiment.routing.speculative_classes": "[]"},
    "own-header": {
        "experiment.routing.class_header": "x-tier",
        "experiment.routing.allowed_classes": "structured,open_ended,code",
        "experiment.routing.speculative_classes": "code,structured",
    },
}


def _header_cases(config: ExperimentConfig) -> list[list[str]]:
    """Missing, repeated, unknown, case variants, lists, padded and every allowed class."""
    cases: list[list[str]] = [[], [""], ["unknown"], ["structured,open_ended"]]
    for name in config.routing.allowed_classes:
        cases += [[name], [name.upper()], [f" {name}\t"], [name, name], [f"{name}x"], [f"x{name}"]]
        cases += [[name, "other"], [f"{name},{name}"]]
    return cases


def _arm(config: ExperimentConfig, reached: str) -> Arm:
    if reached == fallback_backend_name(config):
        raise AssertionError("a fallback Backend must never be a rule's first backend")
    return next(arm for arm in Arm if config.serving.service_name(arm) == reached)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_route_decides_as_the_routing_rule_for_every_header_case(name: str) -> None:
    config = build_config(CONFIGS[name])
    route = http_route(config)
    header = config.routing.class_header
    for values in _header_cases(config):
        expected = config.routing.arm_for(values)
        assert _arm(config, decide(route, {header: values})) is expected, (values, expected)


def test_a_different_header_than_the_configured_one_never_routes_to_the_speculative_arm() -> None:
    config = build_config(CONFIGS["own-header"])
    route = http_route(config)
    assert _arm(config, decide(route, {"x-prompt-class": ["structured"]})) is Arm.BASELINE
    assert _arm(config, decide(route, {"X-Tier": ["structured"]})) is Arm.SPECULATIVE


def test_route_table_is_one_row_per_speculative_class_then_the_default() -> None:
    config = build_config(CONFIGS["own-header"])
    table = route_table(config)
    assert [row.prompt_class for row in table] == ["code", "structured", None]
    assert [(row.arm, row.fallback) for row in table] == [
        (Arm.SPECULATIVE, Arm.BASELINE), (Arm.SPECULATIVE, Arm.BASELINE), (Arm.BASELINE, None),
    ]  # fmt: skip
    assert route_table(build_config(CONFIGS["none"]))[0].prompt_class is None


def test_speculative_rules_fail_over_to_the_baseline_backend() -> None:
    config = build_config({})
    rules = http_route(config)["spec"]["rules"]
    port = config.serving.port
    assert rules[0]["matches"] == [
        {"headers": [{"type": "Exact", "name": "x-prompt-class", "value": "structured"}]}
    ]
    assert rules[0]["backendRefs"] == [
        {"kind": "Service", "name": config.serving.speculative_service, "port": port},
        {"group": "gateway.envoyproxy.io", "kind": "Backend",
         "name": fallback_backend_name(config), "port": port},
    ]  # fmt: skip
    assert rules[-1]["backendRefs"] == [
        {"kind": "Service", "name": config.serving.baseline_service, "port": port}
    ]
    backend = fallback_backend(config)["spec"]
    assert backend["fallback"] is True
    host = f"{config.serving.baseline_service}.{config.serving.namespace}.svc.cluster.local"
    assert backend["endpoints"] == [{"fqdn": {"hostname": host, "port": port}}]


def test_retries_and_health_checks_come_from_the_routing_section() -> None:
    config = build_config(
        {
            "experiment.routing.fallback.retry_on": "connect-failure,reset",
            "experiment.routing.health.consecutive_5xx": "5",
            "experiment.routing.health.interval_s": "0.5",
            "experiment.routing.health.base_ejection_time_s": "45",
        }
    )
    policy = backend_traffic_policy(config)
    assert policy is not None
    spec = policy["spec"]
    assert spec["retry"] == {
        "numRetries": 1,
        "numAttemptsPerPriority": 1,
        "retryOn": {"triggers": ["connect-failure", "reset"]},
    }
    assert spec["healthCheck"]["passive"] == {
        "consecutive5XxErrors": 5, "interval": "500ms", "baseEjectionTime": "45000ms",
        "maxEjectionPercent": 100,
    }  # fmt: skip
    no_retry = backend_traffic_policy(build_config({"experiment.routing.fallback.retries": "0"}))
    assert no_retry is not None and "retry" not in no_retry["spec"]


def test_the_policy_attaches_to_the_speculative_rules_only() -> None:
    config = build_config(CONFIGS["own-header"])
    route = http_route(config)
    names = [rule["name"] for rule in route["spec"]["rules"]]
    assert names == ["speculative-0", "speculative-1", "everything-else"]
    policy = backend_traffic_policy(config)
    assert policy is not None
    assert policy["spec"]["targetRefs"] == [
        {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
         "name": route["metadata"]["name"], "sectionName": name}
        for name in names[:2]
    ]  # fmt: skip
    # No speculative class: nothing to retry or eject, so no policy at all.
    none = build_config(CONFIGS["none"])
    assert backend_traffic_policy(none) is None
    assert "BackendTrafficPolicy" not in [m["kind"] for m in gateway_manifests(none)]


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_no_rule_has_a_request_timeout(name: str) -> None:
    for rule in http_route(build_config(CONFIGS[name]))["spec"]["rules"]:
        assert rule["timeouts"] == {"request": "0s"}, rule["name"]


def test_the_gateway_has_no_endpoint_outside_the_cluster() -> None:
    config = build_config({})
    proxy = envoy_proxy(config)
    assert proxy["spec"]["provider"]["kubernetes"]["envoyService"] == {
        "type": "ClusterIP",
        "name": gateway_service_name(config),
    }
    ref = gateway(config)["spec"]["infrastructure"]["parametersRef"]
    assert (ref["kind"], ref["name"]) == ("EnvoyProxy", proxy["metadata"]["name"])


# A Service name is a DNS-1035 label (kubernetes/kubernetes: staging/src/k8s.io/apimachinery/
# pkg/util/validation/validation.go, IsDNS1035Label); the CRD schema does not check it.
DNS_1035 = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")


@pytest.mark.parametrize("project", ["qwen-sd", "team-b"])
def test_the_load_test_reaches_the_envoy_service_the_proxy_names(project: str) -> None:
    """The URL the load-test Job drives (charts/loadtest_job.py) is the Service Envoy Gateway
    creates from the EnvoyProxy: its name, Envoy Gateway's namespace (controller-namespace
    mode: tests/stacks/test_tiered_routing_stack.py) and the Gateway's listener port."""
    config = build_config({"experiment.project": project})
    name = envoy_proxy(config)["spec"]["provider"]["kubernetes"]["envoyService"]["name"]
    assert DNS_1035.fullmatch(name) and name.startswith(project)
    (listener,) = gateway(config)["spec"]["listeners"]
    namespace = config.routing.eks.namespace
    assert gateway_url(config) == f"http://{name}.{namespace}.svc:{listener['port']}"


def test_the_gateways_health_is_the_baselines() -> None:
    """The load test waits for ``/health`` of every arm's URL (loadtest/launch.py
    wait_ready): through the gateway, a request without a class header takes the catch-all
    rule, every path, to the baseline alone."""
    config = build_config({})
    rule = matching_rule(http_route(config), {})
    assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": "/"}}]
    assert [ref["name"] for ref in rule["backendRefs"]] == [
        config.serving.service_name(Arm.BASELINE)
    ]


def test_only_the_gateways_envoy_pods_are_admitted_to_the_serving_pods() -> None:
    config = build_config({})
    policy = serving_from_gateway(config)["spec"]
    (rule,) = policy["ingress"]
    (peer,) = rule["from"]
    assert peer["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": config.routing.eks.namespace
    }
    assert peer["podSelector"]["matchLabels"] == {
        "gateway.envoyproxy.io/owning-gateway-name": gateway(config)["metadata"]["name"],
        "gateway.envoyproxy.io/owning-gateway-namespace": config.serving.namespace,
    }
    assert rule["ports"] == [{"protocol": "TCP", "port": config.serving.port}]


def test_manifests_are_a_pure_function_of_the_config() -> None:
    first: list[dict[str, Any]] = gateway_manifests(build_config({}))
    assert first == gateway_manifests(build_config({}))
    other = gateway_manifests(build_config(CONFIGS["both-classes"]))
    assert first != other
