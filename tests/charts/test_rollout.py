"""The rollback's analysis watches live traffic through the guardrail rules (Prometheus), or,
with live guardrails off, queries the guardrail alarms' own metrics (moto); its RBAC lets
people abort and retry but never promote."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import aws_cdk as cdk
import boto3
import pytest
from merge_patch import merge_patch
from moto import mock_aws
from workspace import DEPLOY_PINS, PROMETHEUS_URL

from charts.rollout import (
    OPERATOR_STATUS_FIELDS,
    analysis_template,
    no_promote_policy,
    operator_role,
)
from experiment import Arm, ConfigError, ExperimentConfig, build_config
from guardrails.analysis import LIVE_FAILURE, LIVE_SUCCESS, live_checks
from guardrails.cloudwatch import CloudWatchGuardrail, analysis_guardrails
from guardrails.rules import (
    GATEWAY_REQUESTS,
    GATEWAY_RESPONSES,
    GATEWAY_RETRIES,
    PROBE_ACCEPTANCE,
    PROBE_AGREEMENT,
    PROBE_LAST_SUCCESS,
    PROBE_TOKEN_TIME,
    SERVED_METRICS,
    rule_set,
)
from stacks.alarms import GuardrailAlarms

pytestmark = pytest.mark.infra  # synthesizes the alarms with the CDK

# The CloudWatch checks exist only with live guardrails off.
CLOUDWATCH = {"experiment.guardrails.live.enabled": "false"}
FLOORS = {
    **CLOUDWATCH,
    "experiment.routing.speculative_classes": "structured,open_ended",
    "experiment.routing.acceptance_floors": '{"structured": 0.55}',
    "experiment.guardrails.min_acceptance_rate": "0.35",
}


def _alarm_metrics(config: ExperimentConfig) -> dict[tuple, tuple[str, float, str]]:
    """(namespace, metric, dims) -> (statistic, threshold, operator) of every guardrail alarm."""
    stack = cdk.Stack(cdk.App(), "Alarms")
    GuardrailAlarms(stack, "Guardrails", config=config)
    template = cdk.assertions.Template.from_stack(stack).to_json()
    alarms = {}
    for resource in template["Resources"].values():
        if resource["Type"] != "AWS::CloudWatch::Alarm":
            continue
        props = resource["Properties"]
        dims = tuple(sorted((d["Name"], d["Value"]) for d in props["Dimensions"]))
        alarms[(props["Namespace"], props["MetricName"], dims)] = (
            props["Statistic"],
            props["Threshold"],
            props["ComparisonOperator"],
            props["Period"],
        )
    return alarms


@pytest.mark.parametrize("overrides", [{}, FLOORS], ids=["default", "floors"])
def test_every_check_is_a_guardrail_alarms_metric_statistic_period_and_threshold(
    overrides: dict[str, str],
) -> None:
    """Same metric, dimensions, statistic, period and threshold as an alarm, the class's own
    floor where routing.acceptance_floors sets one (one list renders both)."""
    config = build_config({"experiment.routing.speculative_classes": "structured,open_ended",
                           **overrides})  # fmt: skip
    alarms = _alarm_metrics(config)
    namespace = config.loadtest.metric_namespace
    checks = analysis_guardrails(config)
    assert len(checks) == 5  # measured, two class estimates, SD failed share, lossless
    operators = {"at_least": "LessThanThreshold", "at_most": "GreaterThanThreshold"}
    for check in checks:
        key = (namespace, check.metric, tuple(sorted(check.dimensions)))
        assert key in alarms, check
        statistic, threshold, operator, period = alarms[key]
        assert (check.statistic, check.threshold, operators[check.must_be], check.period_s) == (
            statistic, threshold, operator, period,
        )  # fmt: skip


def test_a_class_floor_replaces_the_global_floor_for_that_class_only() -> None:
    config = build_config(FLOORS)
    by_name = {check.name: check for check in analysis_guardrails(config)}
    assert by_name["sd-acceptance-structured"].threshold == 0.55
    assert by_name["sd-acceptance-open-ended"].threshold == 0.35
    assert by_name["sd-acceptance-measured"].threshold == 0.35
    default = {c.name for c in analysis_guardrails(build_config({}))}
    assert "sd-acceptance-open-ended" not in default  # not routed to the speculative arm


@pytest.fixture
def aws_env(monkeypatch) -> None:
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-2",
    }.items():
        monkeypatch.setenv(key, value)


def _aws_query(query: dict[str, Any]) -> dict[str, Any]:
    """Argo's lower-case MetricDataQuery as the AWS SDK spells it (argo-rollouts v1.9.1
    metricproviders/cloudwatch: the fields are copied one to one)."""
    stat = query["metricStat"]
    metric = stat["metric"]
    dims = [{"Name": d["name"], "Value": d["value"]} for d in metric["dimensions"]]
    return {
        "Id": query["id"],
        "MetricStat": {
            "Metric": {
                "Namespace": metric["namespace"],
                "MetricName": metric["metricName"],
                "Dimensions": dims,
            },
            "Period": stat["period"],
            "Stat": stat["stat"],
        },
    }  # fmt: skip


def _verdicts(config: ExperimentConfig, values: dict[str, float]) -> dict[str, bool]:
    """Publish ``values`` (check name -> value) to moto, query every analysis metric as
    Argo does, and judge each result with its check."""
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    checks = {check.name: check for check in analysis_guardrails(config)}
    client = boto3.client("cloudwatch", region_name=config.region)
    for name, value in values.items():
        check = checks[name]
        client.put_metric_data(
            Namespace=config.loadtest.metric_namespace,
            MetricData=[{
                "MetricName": check.metric,
                "Dimensions": [{"Name": n, "Value": v} for n, v in check.dimensions],
                "Value": value, "Unit": "None", "Timestamp": now - timedelta(minutes=1),
            }],
        )  # fmt: skip
    verdicts = {}
    for metric in analysis_template(config)["spec"]["metrics"]:
        (query,) = metric["provider"]["cloudWatch"]["metricDataQueries"]
        window = int(metric["provider"]["cloudWatch"]["interval"].removesuffix("s"))
        result = client.get_metric_data(
            MetricDataQueries=[_aws_query(query)],
            StartTime=now - timedelta(seconds=window),
            EndTime=now + timedelta(minutes=1),
        )["MetricDataResults"]
        check: CloudWatchGuardrail = checks[metric["name"]]
        verdicts[metric["name"]] = check.passes(result[0]["Values"])
    return verdicts


HEALTHY = {"sd-acceptance-measured": 0.6, "sd-acceptance-structured": 0.7,
           "sd-acceptance-open-ended": 0.4, "failed-share-speculative": 0.0,
           "lossless-agreement": 1.0}  # fmt: skip
BREACHES = {
    "sd-acceptance-measured": 0.2,
    "sd-acceptance-structured": 0.5,  # under its own 0.55 floor, above the global 0.35
    "sd-acceptance-open-ended": 0.3,
    "failed-share-speculative": 0.5,
    "lossless-agreement": 0.5,
}


def test_healthy_metrics_pass_and_no_data_passes(aws_env) -> None:
    config = build_config(FLOORS)
    with mock_aws():
        assert all(_verdicts(config, {}).values())  # nothing published: not breaching
        verdicts = _verdicts(config, HEALTHY)
    assert verdicts and all(verdicts.values()), verdicts


@pytest.mark.parametrize("breached", sorted(BREACHES))
def test_each_breach_fails_its_check_only(aws_env, breached: str) -> None:
    config = build_config(FLOORS)
    with mock_aws():
        verdicts = _verdicts(config, {**HEALTHY, breached: BREACHES[breached]})
    assert {name for name, ok in verdicts.items() if not ok} == {breached}


def test_the_baseline_arms_failures_do_not_roll_back_the_speculative_arm() -> None:
    config = build_config({})
    sd = config.loadtest.variant_labels[Arm.SPECULATIVE]
    for check in analysis_guardrails(config):
        assert (config.loadtest.variant_dimension, sd) in check.dimensions


def test_argo_conditions_state_the_same_verdict_as_the_checks() -> None:
    config = build_config(FLOORS)
    checks = {check.name: check for check in analysis_guardrails(config)}
    for metric in analysis_template(config)["spec"]["metrics"]:
        check = checks[metric["name"]]
        op = "<" if check.must_be == "at_least" else ">"
        periods = config.guardrails.evaluation_periods
        assert metric["successCondition"] == (
            f"count(result[0].Values, {{# {op} {check.threshold}}}) < {periods}"
        )
        assert metric["failureLimit"] == 0  # the condition debounces, not a lifetime count


def test_a_cloudwatch_check_fails_only_on_as_many_breaches_as_the_alarm_needs() -> None:
    config = build_config({**FLOORS, "experiment.guardrails.evaluation_periods": "2"})
    (check,) = [c for c in analysis_guardrails(config) if c.name == "failed-share-speculative"]
    breach, fine = 0.5, 0.0
    assert check.passes([]) and check.passes([breach]) and check.passes([fine, breach, fine])
    assert not check.passes([breach, fine, breach])


def test_operators_may_patch_rollout_status_only_and_nothing_grants_promotion() -> None:
    config = build_config({})
    role, binding = operator_role(config)
    writes = [rule for rule in role["rules"] if set(rule["verbs"]) - {"get", "list", "watch"}]
    assert writes == [
        {"apiGroups": ["argoproj.io"], "resources": ["rollouts/status"], "verbs": ["patch"]}
    ]
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
         "name": config.routing.eks.operators_group}
    ]  # fmt: skip


def test_the_admission_policy_keeps_promotion_to_the_controller() -> None:
    config = build_config({})
    policy, binding = no_promote_policy(config)
    spec = policy["spec"]
    # Every status key but abort (which abort and retry patch) is kept, and spec.paused;
    # tests/charts/test_rollout_admission.py evaluates them against every promote patch.
    kept, paused = (v["expression"] for v in spec["validations"])
    assert OPERATOR_STATUS_FIELDS == ("abort",)
    assert "k in ['abort'] || object.?status[?k] == oldObject.?status[?k]" in kept
    assert paused == "object.?spec.?paused == oldObject.?spec.?paused"
    eks = config.routing.eks
    controller = f"system:serviceaccount:{eks.rollouts_namespace}:{eks.rollouts_service_account}"
    assert (
        spec["matchConditions"][0]["expression"] == f"request.userInfo.username != '{controller}'"
    )
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]


# The actuator: one Rollout, stable = baseline pods, canary = speculative pods.


def _labels_match(selector: dict[str, str], pod_labels: dict[str, str]) -> bool:
    return all(pod_labels.get(key) == value for key, value in selector.items())


PROFILES = [{}, {"experiment.serving.profile": "new-deployment"},
            {"experiment.serving.replicas": "2"}]  # fmt: skip


@pytest.mark.parametrize("overrides", PROFILES)
def test_the_rollouts_stable_and_canary_are_the_baseline_and_speculative_services(
    overrides,
) -> None:
    from charts.rollout import (
        GATEWAY_API_PLUGIN,
        analysis_template_name,
        probe_once_template_name,
        revision_template,
        rollout,
        weights_route_name,
    )

    config = build_config(overrides)
    body = rollout(config)
    canary = body["spec"]["strategy"]["canary"]
    assert canary["stableService"] == config.serving.service_name(Arm.BASELINE)
    assert canary["canaryService"] == config.serving.service_name(Arm.SPECULATIVE)
    assert body["spec"]["template"] == revision_template(config, Arm.BASELINE)
    assert body["spec"]["replicas"] == config.serving.replicas
    # Scale the canary like the baseline, run the probe once, then hold it: no step ever
    # promotes it. The background analysis starts at the pause, once the steps before it
    # completed: the canary's pods available and the probe's first results pushed.
    probe = [{"analysis": {"templates": [{"templateName": probe_once_template_name(config)}]}}]
    assert canary["steps"] == [
        {"setCanaryScale": {"replicas": config.serving.replicas}},
        *(probe if config.guardrails.probe_runs else []),
        {"pause": {}},
    ]
    assert not any("setWeight" in step or "setHeaderRoute" in step for step in canary["steps"])
    assert canary["analysis"] == {
        "templates": [{"templateName": analysis_template_name(config)}],
        "startingStep": len(canary["steps"]) - 1,
    }
    assert body["spec"]["progressDeadlineAbort"] is True
    plugin = canary["trafficRouting"]["plugins"][GATEWAY_API_PLUGIN]
    route = weights_route_name(config)
    assert plugin == {"httpRoute": route, "namespace": config.serving.namespace}
    assert canary["abortScaleDownDelaySeconds"] == config.routing.eks.abort_scale_down_delay_s >= 1


def test_the_weights_route_is_the_plugins_own_and_reaches_no_gateway() -> None:
    """The plugin zeroes every reference to the canary Service in its route: that must not
    be the tiered HTTPRoute, whose speculative classes go to that Service."""
    from charts.gateway import http_route
    from charts.rollout import controller_route_access, weights_route, weights_route_name

    config = build_config({})
    route = weights_route(config)
    assert "parentRefs" not in route["spec"]
    (rule,) = route["spec"]["rules"]
    weights = {ref["name"]: ref["weight"] for ref in rule["backendRefs"]}
    assert weights == {config.serving.service_name(Arm.BASELINE): 100,
                       config.serving.service_name(Arm.SPECULATIVE): 0}  # fmt: skip
    assert http_route(config)["metadata"]["name"] != weights_route_name(config)
    role, binding = controller_route_access(config)
    assert role["rules"] == [{"apiGroups": ["gateway.networking.k8s.io"],
                              "resources": ["httproutes"],
                              "resourceNames": [weights_route_name(config)],
                              "verbs": ["get", "update"]}]  # fmt: skip
    eks = config.routing.eks
    assert binding["subjects"] == [{"kind": "ServiceAccount",
                                    "name": eks.rollouts_service_account,
                                    "namespace": eks.rollouts_namespace}]  # fmt: skip


@pytest.mark.parametrize("overrides", PROFILES)
def test_each_services_selector_is_in_both_revisions_labels(overrides) -> None:
    """Argo rejects a Service whose selector has a label the current template lacks
    (ValidateService), and the template is the baseline first, the speculative later."""
    from charts.rollout import revision_template, rollout, rollout_arm_manifests

    config = build_config(overrides)
    templates = [revision_template(config, arm)["metadata"]["labels"] for arm in Arm]
    selector = rollout(config)["spec"]["selector"]["matchLabels"]
    for arm in Arm:
        svc = next(m for m in rollout_arm_manifests(config, arm) if m["kind"] == "Service")
        assert svc["metadata"]["name"] == config.serving.service_name(arm)  # names kept
        for labels in templates:
            assert _labels_match(svc["spec"]["selector"], labels)
            assert _labels_match(selector, labels)


def test_every_policy_and_budget_still_selects_the_rollouts_pods() -> None:
    """The NetworkPolicies admit the load test, the gateway and the guardrails' collector to
    both revisions' pods; each arm's PDB guards its own revision only."""
    from charts.gateway import serving_from_gateway
    from charts.network_policy import network_policies
    from charts.rollout import revision_template, rollout_arm_manifests

    config = build_config({})
    pods = {arm: revision_template(config, arm)["metadata"]["labels"] for arm in Arm}
    vllm_policies = [
        p for p in [*network_policies(config), serving_from_gateway(config)]
        if p["metadata"]["name"].startswith(f"{config.project}-vllm-")
    ]  # fmt: skip
    assert len(vllm_policies) == 3
    for policy in vllm_policies:
        for labels in pods.values():
            assert _labels_match(policy["spec"]["podSelector"]["matchLabels"], labels)
    for arm in Arm:
        pdb = next(
            m for m in rollout_arm_manifests(config, arm) if m["kind"] == "PodDisruptionBudget"
        )
        chosen = {a for a in Arm if _labels_match(pdb["spec"]["selector"]["matchLabels"], pods[a])}
        assert chosen == {arm}


@pytest.mark.parametrize("overrides", PROFILES)
def test_the_canary_patch_turns_the_baseline_into_the_speculative_template_and_back(
    overrides,
) -> None:
    from charts.rollout import canary_patches, revision_template, rollout

    config = build_config(overrides)
    created = rollout(config)
    apply, restore = canary_patches(config)
    patched = merge_patch(created, apply)
    assert patched["spec"]["template"] == revision_template(config, Arm.SPECULATIVE)
    assert {k: v for k, v in patched["spec"].items() if k != "template"} == {
        k: v for k, v in created["spec"].items() if k != "template"
    }
    assert merge_patch(patched, restore) == created


def test_the_rollout_name_follows_the_baseline_and_only_the_baseline() -> None:
    """A changed baseline must become a new Rollout (its first revision is promoted at
    once); a changed speculative arm must stay a new revision of the same one."""
    from charts.rollout import rollout_name

    base = rollout_name(build_config({}))
    assert rollout_name(build_config({"experiment.serving.num_speculative_tokens": 5})) == base
    assert rollout_name(build_config({"experiment.serving.max_num_seqs": 8})) != base
    assert rollout_name(build_config({"experiment.serving.image": "repo/vllm:other"})) != base


# The live analysis: the rule set's analysis alerts over the workspace.

NEW_DEPLOYMENT = {"experiment.serving.profile": "new-deployment"}
LIVE_PROFILES = [{}, NEW_DEPLOYMENT, {**NEW_DEPLOYMENT, **{k: v for k, v in FLOORS.items()
                                                           if k not in CLOUDWATCH}}]  # fmt: skip
_STRINGS = re.compile(r'"[^"]*"')
_BRACES = re.compile(r"\{[^}]*\}|\[[^\]]*\]")
_LABEL_LISTS = re.compile(r"\b(by|on|ignoring|without)\s*\([^)]*\)")
_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_PROMQL_WORDS = {"and", "or", "unless"}


def _series_read(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (not its functions, labels or strings)."""
    bare = _LABEL_LISTS.sub(" ", _BRACES.sub(" ", _STRINGS.sub(" ", expr)))
    names = set()
    for match in _NAME.finditer(bare):
        start, rest = match.start(), bare[match.end() :].lstrip()
        if start and (bare[start - 1].isalnum() or bare[start - 1] in "._"):
            continue  # part of a number such as 1.1 or 0.35
        if not rest.startswith("("):  # a function
            names.add(match.group())
    return names - _PROMQL_WORDS


def _exported(config: ExperimentConfig) -> set[str]:
    """What the servers of the cluster's generation, the gateway and the probe export, and
    ``up``, which Prometheus writes for every target."""
    served = SERVED_METRICS[config.serving.generation]
    own = {value for value in vars(served).values() if value}
    gateway = {GATEWAY_REQUESTS, GATEWAY_RESPONSES, GATEWAY_RETRIES}
    probe = {PROBE_ACCEPTANCE, PROBE_AGREEMENT, PROBE_LAST_SUCCESS, PROBE_TOKEN_TIME}
    return own | gateway | probe | {"up"}


def _raw_series(config: ExperimentConfig, expr: str) -> set[str]:
    """The exported series behind ``expr``, through the rule set's recordings."""
    recordings = {r.record: r.expr for r in rule_set(config, config.serving.generation).recordings}
    names, seen = _series_read(expr), set()
    while names - seen:
        name = (names - seen).pop()
        seen.add(name)
        if name in recordings:
            names |= _series_read(recordings[name])
    return {name for name in seen if name not in recordings}


def _metrics(config: ExperimentConfig) -> list[dict[str, Any]]:
    return analysis_template(config, PROMETHEUS_URL)["spec"]["metrics"]


def test_series_read_finds_names_only() -> None:
    expr = 'sum by (arm) (rate(x_total{job="a"}[300s])) / y:z{arm="b"} > 1.1 and on() absent(up)'
    assert _series_read(expr) == {"x_total", "y:z", "up"}


@pytest.mark.parametrize("overrides", LIVE_PROFILES)
def test_every_analysis_query_reads_what_the_servers_gateway_and_probe_export(overrides) -> None:
    """On new-deployment (live counters) the old checks read AcceptanceRateEstimate, which
    the load test publishes only for an estimated (fork) acceptance: they could never fire.
    Every live query reads the servers', gateway's and probe's own series."""
    config = build_config(overrides)
    exported = _exported(config)
    checks = {check.name: check for check in live_checks(config)}
    for metric in _metrics(config):
        assert set(metric["provider"]) == {"prometheus"}, metric["name"]
        # The query reads the alert's ALERTS series; the alert's expression the raw series.
        expr = checks[metric["name"]].alert.expr
        assert "AcceptanceRateEstimate" not in expr
        read = _raw_series(config, expr)
        assert read and read <= exported, (metric["name"], read - exported)


@pytest.mark.parametrize("overrides", LIVE_PROFILES)
def test_one_metric_per_analysis_alert_named_after_it(overrides) -> None:
    config = build_config(overrides)
    alerts = rule_set(config, config.serving.generation).alerts
    metrics = _metrics(config)
    names = [m["name"] for m in metrics]
    assert len(set(names)) == len(names)
    queries = sorted(m["provider"]["prometheus"]["query"] for m in metrics)
    # Each reads its alert's firing state (the rule's `for` applies), never the raw condition.
    expected = []
    for alert in alerts:
        if alert.analysis:
            matchers = {"alertname": alert.name, "alertstate": "firing", **alert.labels}
            inner = ", ".join(f'{k}="{v}"' for k, v in matchers.items())
            expected.append(f"count(ALERTS{{{inner}}}) or vector(0)")
    assert queries == sorted(expected)
    assert all(m["failureLimit"] == config.guardrails.live.failure_limit == 0 for m in metrics)
    for check in live_checks(config):
        assert check.name.startswith(re.sub(r"(?<=[a-z])(?=[A-Z])", "-", check.alert.name).lower())


def test_per_class_probe_checks_are_named_by_class() -> None:
    config = build_config({**NEW_DEPLOYMENT, "experiment.routing.speculative_classes":
                           "structured,open_ended"})  # fmt: skip
    names = {m["name"] for m in _metrics(config)}
    assert {"spec-decode-probe-acceptance-below-floor-structured",
            "spec-decode-probe-acceptance-below-floor-open-ended"} <= names  # fmt: skip


def _argo_verdict(metric: dict[str, Any], result: list[float]) -> str:
    """Argo's EvaluateResult (argo-rollouts utils/evaluate/evaluate.go) on a vector's values:
    the two conditions are plain expr-lang, the same in Python once && is spelled `and`."""

    def holds(condition: str) -> bool:
        return bool(eval(condition.replace("&&", "and"), {"len": len, "result": result}))

    if holds(metric["failureCondition"]):
        return "Failed"
    return "Successful" if holds(metric["successCondition"]) else "Inconclusive"


def test_firing_fails_quiet_passes_and_no_sample_is_inconclusive() -> None:
    config = build_config(NEW_DEPLOYMENT)
    for metric in _metrics(config):
        assert (metric["successCondition"], metric["failureCondition"]) == (
            LIVE_SUCCESS, LIVE_FAILURE,
        )  # fmt: skip
        assert metric["provider"]["prometheus"]["query"].endswith(" or vector(0)")
        assert _argo_verdict(metric, [0.0]) == "Successful"
        assert _argo_verdict(metric, [1.0]) == "Failed"
        assert _argo_verdict(metric, [3.0]) == "Failed"
        assert _argo_verdict(metric, []) == "Inconclusive"


def test_missing_data_fails_the_analysis_through_the_missing_data_alerts() -> None:
    """The query cannot be empty, so no data is judged by the alerts that fire on it: they
    are analysis metrics too."""
    config = build_config(NEW_DEPLOYMENT)
    exprs = {check.name: check.alert.expr for check in live_checks(config)}
    queries = {m["name"]: m["provider"]["prometheus"]["query"] for m in _metrics(config)}
    job = f"{config.project}-vllm"
    assert f'absent(up{{job="{job}", arm="speculative"}} == 1 and on() group(' in exprs[
        "spec-decode-arm-metrics-missing"]  # fmt: skip
    assert "absent(up{" in exprs["spec-decode-gateway-metrics-missing"]
    assert "absent(specdecode_probe_last_success" in exprs["spec-decode-probe-missing"]
    assert "spec-decode-counters-frozen" in queries
    for name in ("SpecDecodeArmMetricsMissing", "SpecDecodeProbeMissing"):
        assert any(f'alertname="{name}", alertstate="firing"' in q for q in queries.values())


def test_limits_interval_address_and_sigv4_come_from_the_config() -> None:
    config = build_config({
        **NEW_DEPLOYMENT,
        "experiment.guardrails.live.failure_limit": "3",
        "experiment.guardrails.live.consecutive_error_limit": "5",
        "experiment.guardrails.live.evaluation_interval_s": "90",
    })  # fmt: skip
    for metric in _metrics(config):
        limits = ("failureLimit", "inconclusiveLimit", "consecutiveErrorLimit", "interval")
        # inconclusiveLimit 0: the query cannot come back empty, nothing to configure
        assert tuple(metric[key] for key in limits) == (3, 0, 5, "90s")
        prometheus = metric["provider"]["prometheus"]
        assert prometheus["address"] == PROMETHEUS_URL
        assert prometheus["authentication"] == {"sigv4": {"region": config.region}}


def test_live_analysis_needs_a_workspace_url_argo_signs() -> None:
    config = build_config({})
    with pytest.raises(ConfigError, match=r"--prometheus-url .*guardrails\.live\.enabled=false"):
        analysis_template(config)
    with pytest.raises(ConfigError, match=r"SigV4 only"):
        analysis_template(config, "http://prometheus.example.com:9090")
    token = "${Token[TOKEN.9]}"  # the stack's output: checked by nobody before deploy
    assert _metrics(config)[0]["provider"]["prometheus"]["address"] == PROMETHEUS_URL
    template = analysis_template(config, token)
    assert template["spec"]["metrics"][0]["provider"]["prometheus"]["address"] == token


def test_with_live_guardrails_off_the_cloudwatch_checks_remain() -> None:
    config = build_config(CLOUDWATCH)
    metrics = analysis_template(config)["spec"]["metrics"]
    assert [m["name"] for m in metrics] == [c.name for c in analysis_guardrails(config)]
    assert all(set(m["provider"]) == {"cloudWatch"} for m in metrics)


def test_plain_yaml_refuses_live_guardrails_without_a_workspace(tmp_path, capsys) -> None:
    from charts.__main__ import main

    args = ["--out", str(tmp_path), "--bucket", "b", "--loadtest-image", "i", *DEPLOY_PINS]
    assert main(args) == 2
    assert "--prometheus-url" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.yaml"))


def test_the_collector_reaches_the_serving_port_from_the_vpc_only() -> None:
    """The managed collector is no pod: admitted by the VPC's address range, to the serving
    port (where vLLM serves /metrics), with live guardrails only."""
    from charts.network_policy import network_policies

    def collector_policies(config: ExperimentConfig) -> list[dict[str, Any]]:
        return [p for p in network_policies(config) if "collector" in p["metadata"]["name"]]

    config = build_config({})
    (policy,) = collector_policies(config)
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["ingress"] == [
        {"from": [{"ipBlock": {"cidr": config.network.vpc_cidr}}],
         "ports": [{"protocol": "TCP", "port": config.serving.port}]}
    ]  # fmt: skip
    assert policy["spec"]["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/part-of": config.project, "app.kubernetes.io/name": "vllm"
    }  # fmt: skip
    assert collector_policies(build_config(CLOUDWATCH)) == []


def test_the_gateway_names_its_cluster_statistics_after_the_rules() -> None:
    from charts.gateway import envoy_proxy
    from guardrails.scrape import CLUSTER_STAT_NAME

    proxy = envoy_proxy(build_config({}))
    assert proxy["spec"]["telemetry"]["metrics"]["clusterStatName"] == CLUSTER_STAT_NAME
    assert CLUSTER_STAT_NAME == "%ROUTE_RULE_NAME%"
