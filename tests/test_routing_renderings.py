"""One routing source, two renderings: the local Envoy bootstrap (``local_run/gateway.py``) and
the Envoy Gateway resources on EKS (``charts/gateway.py``) make the same decision for every
class and header case, and carry the same policy for every failure, as the arms' symmetry
test does for the two Deployments.

Both sides are read from their rendered JSON, not from the config: the local side through
``local_run.gateway.decide`` / ``matching_route`` (Envoy's route table: exact header matchers,
first match wins, catch-all last), the EKS side through ``charts.gateway.decide`` /
``matching_rule`` (the HTTPRoute) and the BackendTrafficPolicy attached to the matched rule.
Each is reduced to a ``Policy``; the two must be equal. Mutated renderings show that a
divergence on either side is caught.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, get_args

import pytest

from charts.gateway import decide as eks_decide
from charts.gateway import gateway_manifests, matching_rule
from experiment import ExperimentConfig, build_config
from experiment.config import Arm
from experiment.config.routing import RetryTrigger
from local_run.gateway import decide as local_decide
from local_run.gateway import local_gateway, matching_route, priorities

# Envoy's retry_on conditions (data-plane-api envoy/config/route/v3/route_components.proto,
# RetryPolicy.retry_on: "the conditions documented for x-envoy-retry-on", envoyproxy/envoy
# docs/root/configuration/http/http_filters/router_filter.rst) to Envoy Gateway's
# BackendTrafficPolicy triggers (envoyproxy/gateway v1.9.0 api/v1alpha1/retry_types.go,
# TriggerEnum; internal/xds/translator/route.go buildRetryOn writes each back as the Envoy
# string on the left). One entry per trigger the config accepts.
ENVOY_RETRY_ON_TO_GATEWAY_TRIGGER: dict[str, str] = {
    "connect-failure": "connect-failure",
    "reset": "reset",
    "5xx": "5xx",
    "gateway-error": "gateway-error",
    "refused-stream": "refused-stream",
}
# Envoy Gateway's retry without retryOn (v1.9.0 internal/xds/translator/route.go,
# retryDefaultRetryOn) and numRetries default (retry_types.go, kubebuilder default 2).
GATEWAY_DEFAULT_TRIGGERS = frozenset(
    {"connect-failure", "refused-stream", "unavailable", "cancelled", "retriable-status-codes"}
)
GATEWAY_DEFAULT_RETRIES = 2
# Envoy's RouteAction.timeout when unset (route_components.proto: 15 s); Envoy Gateway sets no
# route timeout unless one is given (v1.9.0 internal/xds/translator/route.go,
# getEffectiveRequestTimeout), so the same default applies there.
ENVOY_DEFAULT_ROUTE_TIMEOUT_S = 15.0
# Retries in flight at once before a 503: Envoy's circuit-breaker default (data-plane-api
# envoy/config/cluster/v3/circuit_breaker.proto, Thresholds.max_retries) and Envoy Gateway's
# (v1.9.0 BackendTrafficPolicy circuitBreaker: "if not set, circuit breakers will be enabled
# with the default thresholds", maxParallelRetries kubebuilder default 1024).
ENVOY_DEFAULT_MAX_RETRIES = 3
GATEWAY_DEFAULT_MAX_PARALLEL_RETRIES = 1024


@dataclass(frozen=True)
class Ejection:
    """Passive health checks of the cluster a request is first sent to."""

    consecutive_5xx: int
    interval_s: float
    base_ejection_time_s: float
    max_ejection_percent: int
    split_local_origin_errors: bool


# OutlierDetection defaults (data-plane-api envoy/config/cluster/v3/outlier_detection.proto)
# and PassiveHealthCheck defaults (envoyproxy/gateway v1.9.0 api/v1alpha1/healthcheck_types.go
# kubebuilder defaults, applied by the API server).
ENVOY_EJECTION_DEFAULTS = Ejection(5, 10.0, 30.0, 10, False)
GATEWAY_EJECTION_DEFAULTS = Ejection(5, 3.0, 30.0, 10, False)


@dataclass(frozen=True)
class Policy:
    """What a rendering does with one request: where it goes, and on each failure."""

    first: Arm  # the arm of the first attempt
    fallbacks: tuple[Arm, ...]  # lower priorities of the same destination
    retries: int
    triggers: frozenset[str]  # in Envoy Gateway's vocabulary; empty without retries
    retry_to: Arm | None  # the arm a retry goes to; None without retries
    ejection: Ejection | None  # of the first arm's endpoints; None: never ejected
    route_timeout_s: float  # 0: disabled
    max_parallel_retries: int | None  # retries in flight before a 503; None: no retries


# The Policy fields that decide what happens on each failure of the first attempt. A cut
# stream is never retried on either side (Envoy retries only before forwarding the response
# headers), so what matters there is that no route timeout cuts a long stream by itself.
FAILURES: dict[str, tuple[str, ...]] = {
    "connect-failure": ("retries", "triggers", "retry_to", "max_parallel_retries"),
    "reset": ("retries", "triggers", "retry_to", "max_parallel_retries"),
    "5xx-before-first-byte": ("retries", "triggers", "retry_to", "max_parallel_retries"),
    "stream-cut-mid-response": ("route_timeout_s",),
    "ejection-after-consecutive-5xx": ("ejection", "fallbacks"),
}

CONFIGS: dict[str, dict[str, str]] = {
    "default": {},
    "all-speculative": {"experiment.routing.speculative_classes": "structured,open_ended"},
    "none-speculative": {"experiment.routing.speculative_classes": "[]"},
    "retries-0": {"experiment.routing.fallback.retries": "0"},
    "custom-header": {
        "experiment.routing.class_header": "x-tier",
        "experiment.routing.allowed_classes": "structured,open_ended,code",
        "experiment.routing.speculative_classes": "code,open_ended",
        "experiment.routing.fallback.retry_on": "gateway-error,refused-stream,reset",
        "experiment.routing.health.consecutive_5xx": "7",
        "experiment.routing.health.interval_s": "0.5",
        "experiment.routing.health.base_ejection_time_s": "90",
        "experiment.routing.fallback.max_parallel_retries": "16",
    },
}
UNKNOWN_CLASS = "unlisted"


def header_cases(config: ExperimentConfig) -> dict[str, list[str]]:
    """Every header case docs/routing.md lists, for every allowed class and an unknown one:
    missing, case variants, surrounding whitespace, comma lists, prefixes, repeated headers
    and an oversized value (under Envoy's 60 KiB header limit, so it is routed)."""
    cases: dict[str, list[str]] = {"missing": [], "empty": [""], "list-of-all": []}
    cases["list-of-all"] = [",".join(config.routing.allowed_classes)]
    for name in [*config.routing.allowed_classes, UNKNOWN_CLASS]:
        cases |= {
            f"{name}": [name],
            f"{name}/upper": [name.upper()],
            f"{name}/title": [name.title()],
            f"{name}/whitespace": [f"  {name}\t"],
            f"{name}/inner-space": [f"{name[:2]} {name[2:]}"],
            f"{name}/list": [f"{name}, {UNKNOWN_CLASS}"],
            f"{name}/list-no-space": [f"{UNKNOWN_CLASS},{name}"],
            f"{name}/prefix": [f"{name}-please"],
            f"{name}/suffix-of": [f"x{name}"],
            f"{name}/quoted": [f'"{name}"'],
            f"{name}/repeated": [name, name],
            f"{name}/repeated-mixed": [UNKNOWN_CLASS, name],
            f"{name}/repeated-with-empty": ["", name],
            f"{name}/oversized": [name + "x" * 8000],
        }
    return cases


def _seconds(duration: str) -> float:
    """A protobuf JSON Duration ("1.5s") or a Gateway API Duration ("1h30m", "500ms")."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", duration)
    if not parts or "".join(n + u for n, u in parts) != duration:
        raise ValueError(f"not a duration: {duration!r}")
    return sum(float(number) * units[unit] for number, unit in parts)


# ---------------------------------------------------------------- the local rendering


def local_rendering(config: ExperimentConfig) -> dict[str, Any]:
    """The bootstrap the local run hands to Envoy (rendered only: nothing is started)."""
    return local_gateway(config, Path("unused")).bootstrap


def local_policy(bootstrap: Mapping[str, Any], headers: Mapping[str, Sequence[str]]) -> Policy:
    action = matching_route(bootstrap, headers)["route"]
    arms = [Arm(name) for name in priorities(bootstrap, action["cluster"])]
    assert arms[0] is Arm(local_decide(bootstrap, headers))
    retry = action.get("retry_policy")
    # RetryPolicy.num_retries defaults to 1 when a retry policy is present.
    retries = int(retry.get("num_retries", 1)) if retry else 0
    triggers: frozenset[str] = frozenset()
    retry_to = None
    if retry and retries:
        triggers = frozenset(
            ENVOY_RETRY_ON_TO_GATEWAY_TRIGGER[condition]
            for condition in retry["retry_on"].split(",")
        )
        # previous_priorities with update_frequency N: N attempts per priority, then the next
        # (envoy/extensions/retry/priority/previous_priorities/v3/previous_priorities_config
        # .proto); without it every attempt goes to the highest healthy priority.
        priority = retry.get("retry_priority", {})
        per_priority = (
            priority["typed_config"]["update_frequency"]
            if priority.get("name") == "envoy.retry_priorities.previous_priorities"
            else None
        )
        retry_to = arms[1] if per_priority == 1 and len(arms) > 1 else arms[0]
    clusters = {c["name"]: c for c in bootstrap["static_resources"]["clusters"]}
    detection = clusters[action["cluster"]].get("outlier_detection")
    ejection = None
    if detection is not None:
        defaults = ENVOY_EJECTION_DEFAULTS
        ejection = Ejection(
            consecutive_5xx=detection.get("consecutive_5xx", defaults.consecutive_5xx),
            interval_s=_seconds(detection["interval"])
            if "interval" in detection
            else defaults.interval_s,
            base_ejection_time_s=_seconds(detection["base_ejection_time"])
            if "base_ejection_time" in detection
            else defaults.base_ejection_time_s,
            max_ejection_percent=detection.get(
                "max_ejection_percent", defaults.max_ejection_percent
            ),
            split_local_origin_errors=detection.get(
                "split_external_local_origin_errors", defaults.split_local_origin_errors
            ),
        )
    timeout = action.get("timeout")
    # The DEFAULT-priority max_retries of the route's cluster (the rule's: both arms are its
    # priorities), the one every retry counts against.
    limits = [
        next(
            (
                t.get("max_retries", ENVOY_DEFAULT_MAX_RETRIES)
                for t in clusters[name].get("circuit_breakers", {}).get("thresholds", [])
                if t.get("priority", "DEFAULT") == "DEFAULT"
            ),
            ENVOY_DEFAULT_MAX_RETRIES,
        )
        for name in {action["cluster"]}
    ]
    return Policy(
        first=arms[0],
        fallbacks=tuple(arms[1:]),
        retries=retries,
        triggers=triggers,
        retry_to=retry_to,
        ejection=ejection,
        route_timeout_s=_seconds(timeout) if timeout else ENVOY_DEFAULT_ROUTE_TIMEOUT_S,
        max_parallel_retries=min(limits) if retries else None,
    )


# ---------------------------------------------------------------- the EKS rendering


def eks_policy(
    config: ExperimentConfig,
    manifests: Sequence[Mapping[str, Any]],
    headers: Mapping[str, Sequence[str]],
) -> Policy:
    (route,) = [m for m in manifests if m["kind"] == "HTTPRoute"]
    rule = matching_rule(route, headers)
    backends = {m["metadata"]["name"]: m for m in manifests if m["kind"] == "Backend"}

    def arm_of(ref: Mapping[str, Any]) -> Arm:
        service = ref["name"]
        if ref.get("kind") == "Backend":
            (endpoint,) = backends[service]["spec"]["endpoints"]
            service = endpoint["fqdn"]["hostname"].split(".")[0]
        return next(arm for arm in Arm if config.serving.service_name(arm) == service)

    refs = rule["backendRefs"]
    # Envoy Gateway's failover: only Backends with fallback: true are lower priorities
    # (site/content/en/latest/tasks/traffic/failover.md); other refs would split traffic.
    assert all(
        r.get("kind") == "Backend" and backends[r["name"]]["spec"]["fallback"] for r in refs[1:]
    )
    arms = [arm_of(ref) for ref in refs]
    assert arms[0] is arm_of({"name": eks_decide(route, headers)})
    # The policies attached to this rule: to the whole route, or to the rule by sectionName.
    attached = [
        m["spec"]
        for m in manifests
        if m["kind"] == "BackendTrafficPolicy"
        and any(
            ref["kind"] == "HTTPRoute"
            and ref["name"] == route["metadata"]["name"]
            and ref.get("sectionName", rule.get("name")) == rule.get("name")
            for ref in m["spec"]["targetRefs"]
        )
    ]
    assert len(attached) <= 1, "one BackendTrafficPolicy per rule: merging is not modelled"
    policy = attached[0] if attached else {}
    retry = policy.get("retry")
    retries = int(retry.get("numRetries", GATEWAY_DEFAULT_RETRIES)) if retry else 0
    triggers: frozenset[str] = frozenset()
    retry_to = None
    if retry and retries:
        listed = retry.get("retryOn", {}).get("triggers")
        triggers = frozenset(listed) if listed else GATEWAY_DEFAULT_TRIGGERS
        per_priority = retry.get("numAttemptsPerPriority")  # -> update_frequency (route.go)
        retry_to = arms[1] if per_priority == 1 and len(arms) > 1 else arms[0]
    passive = policy.get("healthCheck", {}).get("passive")
    ejection = None
    if passive is not None:
        defaults = GATEWAY_EJECTION_DEFAULTS
        ejection = Ejection(
            consecutive_5xx=passive.get("consecutive5XxErrors", defaults.consecutive_5xx),
            interval_s=_seconds(passive["interval"])
            if "interval" in passive
            else defaults.interval_s,
            base_ejection_time_s=_seconds(passive["baseEjectionTime"])
            if "baseEjectionTime" in passive
            else defaults.base_ejection_time_s,
            max_ejection_percent=passive.get("maxEjectionPercent", defaults.max_ejection_percent),
            split_local_origin_errors=passive.get(
                "splitExternalLocalOriginErrors", defaults.split_local_origin_errors
            ),
        )
    # The rule's request timeout wins over the policy's (route.go getEffectiveRequestTimeout).
    timeout = rule.get("timeouts", {}).get("request") or (
        policy.get("timeout", {}).get("http", {}).get("requestTimeout")
    )
    breaker = policy.get("circuitBreaker", {})
    return Policy(
        first=arms[0],
        fallbacks=tuple(arms[1:]),
        retries=retries,
        triggers=triggers,
        retry_to=retry_to,
        ejection=ejection,
        route_timeout_s=_seconds(timeout) if timeout else ENVOY_DEFAULT_ROUTE_TIMEOUT_S,
        max_parallel_retries=(
            breaker.get("maxParallelRetries", GATEWAY_DEFAULT_MAX_PARALLEL_RETRIES)
            if retries
            else None
        ),
    )


# ---------------------------------------------------------------- the comparison


def disagreements(
    config: ExperimentConfig,
    bootstrap: Mapping[str, Any],
    manifests: Sequence[Mapping[str, Any]],
) -> list[str]:
    """Every header case and Policy field on which the two renderings differ."""
    header = config.routing.class_header
    found = []
    for case, values in header_cases(config).items():
        local = local_policy(bootstrap, {header: values})
        eks = eks_policy(config, manifests, {header: values})
        for field in fields(Policy):
            if getattr(local, field.name) != getattr(eks, field.name):
                found.append(
                    f"{case}: {field.name} local {getattr(local, field.name)!r} "
                    f"!= EKS {getattr(eks, field.name)!r}"
                )
    return found


def test_the_trigger_table_covers_every_trigger_the_config_accepts() -> None:
    assert set(ENVOY_RETRY_ON_TO_GATEWAY_TRIGGER) == set(get_args(RetryTrigger))


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_both_renderings_send_every_class_and_header_case_to_the_same_arm(name: str) -> None:
    config = build_config(CONFIGS[name])
    bootstrap, manifests = local_rendering(config), gateway_manifests(config)
    header = config.routing.class_header
    for case, values in header_cases(config).items():
        local = local_policy(bootstrap, {header: values})
        eks = eks_policy(config, manifests, {header: values})
        assert (local.first, local.fallbacks) == (eks.first, eks.fallbacks), (case, values)
        # ... and that arm is the one the rule names.
        assert local.first is config.routing.arm_for(values), (case, values)


@pytest.mark.parametrize("failure", sorted(FAILURES))
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_both_renderings_carry_the_same_policy_for_each_failure(name: str, failure: str) -> None:
    config = build_config(CONFIGS[name])
    bootstrap, manifests = local_rendering(config), gateway_manifests(config)
    header = config.routing.class_header
    for case, values in header_cases(config).items():
        local = local_policy(bootstrap, {header: values})
        eks = eks_policy(config, manifests, {header: values})
        for field in FAILURES[failure]:
            assert getattr(local, field) == getattr(eks, field), (case, field)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_renderings_agree_on_everything_and_enact_the_routing_section(name: str) -> None:
    config = build_config(CONFIGS[name])
    bootstrap = local_rendering(config)
    assert disagreements(config, bootstrap, gateway_manifests(config)) == []
    # The common policy is the section's, not merely the same on both sides.
    fallback, health = config.routing.fallback, config.routing.health
    unclassified = local_policy(bootstrap, {})  # missing header: the baseline, no retry
    assert (unclassified.first, unclassified.retries, unclassified.ejection) == (
        Arm.BASELINE, 0, None
    )  # fmt: skip
    for prompt_class in config.routing.speculative_classes:
        policy = local_policy(bootstrap, {config.routing.class_header: [prompt_class]})
        assert policy.first is Arm.SPECULATIVE and policy.fallbacks == (Arm.BASELINE,)
        assert policy.retries == fallback.retries
        if fallback.retries:
            assert policy.triggers == set(fallback.retry_on) and policy.retry_to is Arm.BASELINE
        assert policy.ejection == Ejection(
            health.consecutive_5xx, health.interval_s, health.base_ejection_time_s, 100, False
        )
        assert policy.route_timeout_s == 0
        assert policy.max_parallel_retries == (
            fallback.max_parallel_retries if fallback.retries else None
        )


def _routes(bootstrap: dict[str, Any]) -> list[dict[str, Any]]:
    listener = bootstrap["static_resources"]["listeners"][0]
    manager = listener["filter_chains"][0]["filters"][0]["typed_config"]
    routes: list[dict[str, Any]] = manager["route_config"]["virtual_hosts"][0]["routes"]
    return routes


def _kind(manifests: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(m for m in manifests if m["kind"] == kind)


def _set(path: Sequence[str | int], value: object) -> Callable[[dict[str, Any]], None]:
    def mutate(document: dict[str, Any]) -> None:
        target: Any = document
        for key in path[:-1]:
            target = target[key]
        if value is None:
            del target[path[-1]]
        else:
            target[path[-1]] = value

    return mutate


# One divergence each, on the default config: the local bootstrap's first route is the
# structured class's, its second the catch-all, and so are its clusters (one per rule); the
# HTTPRoute's rules are in the same order.
LOCAL_MUTATIONS: dict[str, Callable[[dict[str, Any]], object]] = {
    "another class": lambda b: _set(["match", "headers", 0, "string_match", "exact"], "open_ended")(
        _routes(b)[0]
    ),
    "case-insensitive match": lambda b: _set(
        ["match", "headers", 0, "string_match"], {"exact": "structured", "ignore_case": True}
    )(_routes(b)[0]),
    "two retries": lambda b: _set(["route", "retry_policy", "num_retries"], 2)(_routes(b)[0]),
    "fewer triggers": lambda b: _set(["route", "retry_policy", "retry_on"], "5xx")(_routes(b)[0]),
    "retry stays speculative": lambda b: _set(["route", "retry_policy", "retry_priority"], None)(
        _routes(b)[0]
    ),
    "default route timeout": lambda b: _set(["route", "timeout"], None)(_routes(b)[0]),
    "baseline retried": lambda b: _set(
        ["route", "retry_policy"], _routes(b)[0]["route"]["retry_policy"]
    )(_routes(b)[1]),
    "later ejection": lambda b: _set(["outlier_detection", "consecutive_5xx"], 4)(
        b["static_resources"]["clusters"][0]
    ),
    "Envoy's 3 parallel retries": lambda b: _set(["circuit_breakers"], None)(
        b["static_resources"]["clusters"][0]
    ),
    "baseline first": lambda b: [
        _set(["load_assignment", "endpoints", tier, "priority"], 1 - tier)(
            b["static_resources"]["clusters"][0]
        )
        for tier in (0, 1)
    ],
}
EKS_MUTATIONS: dict[str, Callable[[list[dict[str, Any]]], None]] = {
    "another class": lambda m: _set(
        ["spec", "rules", 0, "matches", 0, "headers", 0, "value"], "open_ended"
    )(_kind(m, "HTTPRoute")),
    "policy on the whole route": lambda m: _set(["spec", "targetRefs", 0, "sectionName"], None)(
        _kind(m, "BackendTrafficPolicy")
    ),
    "no request timeout": lambda m: _set(["spec", "rules", 0, "timeouts"], None)(
        _kind(m, "HTTPRoute")
    ),
    "retry stays speculative": lambda m: _set(["spec", "retry", "numAttemptsPerPriority"], None)(
        _kind(m, "BackendTrafficPolicy")
    ),
    "fewer triggers": lambda m: _set(["spec", "retry", "retryOn", "triggers"], ["5xx"])(
        _kind(m, "BackendTrafficPolicy")
    ),
    "default retries": lambda m: _set(["spec", "retry", "numRetries"], None)(
        _kind(m, "BackendTrafficPolicy")
    ),
    "longer ejection": lambda m: _set(
        ["spec", "healthCheck", "passive", "baseEjectionTime"], "60000ms"
    )(_kind(m, "BackendTrafficPolicy")),
    "default ejection share": lambda m: _set(
        ["spec", "healthCheck", "passive", "maxEjectionPercent"], None
    )(_kind(m, "BackendTrafficPolicy")),
    "fewer parallel retries": lambda m: _set(["spec", "circuitBreaker", "maxParallelRetries"], 3)(
        _kind(m, "BackendTrafficPolicy")
    ),
}


@pytest.mark.parametrize("mutation", sorted(LOCAL_MUTATIONS))
def test_a_divergent_local_rendering_is_caught(mutation: str) -> None:
    config = build_config({})
    bootstrap = copy.deepcopy(local_rendering(config))
    try:
        LOCAL_MUTATIONS[mutation](bootstrap)
        found = disagreements(config, bootstrap, gateway_manifests(config))
    except ValueError as refused:  # decide refuses a matcher it does not evaluate
        found = [str(refused)]
    assert found, mutation


@pytest.mark.parametrize("mutation", sorted(EKS_MUTATIONS))
def test_a_divergent_eks_rendering_is_caught(mutation: str) -> None:
    config = build_config({})
    manifests = copy.deepcopy(gateway_manifests(config))
    EKS_MUTATIONS[mutation](manifests)
    assert disagreements(config, local_rendering(config), manifests), mutation
