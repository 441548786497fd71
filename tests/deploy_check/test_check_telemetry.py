"""The telemetry checks of ``python -m experiment check`` (deploy_check/telemetry.py) against
answers in the Prometheus HTTP API's shapes: each passes on a healthy backend and fails,
saying what to change, on an unhealthy one; the AMP queries are SigV4-signed for ``aps``. No
socket: the backend is a fake (the real ``prometheus`` binary: test_check_integration.py)."""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping

import pytest
from botocore.credentials import Credentials
from check_fakes import NOW, FakeEndpoint, Reply, prometheus_error, success, vector

from deploy_check.model import Status
from deploy_check.telemetry import (
    GATEWAY_SERIES,
    NO_ALERT,
    PrometheusApi,
    TelemetryFixes,
    alerts_result,
    arm_series_result,
    gateway_series_result,
    probe_result,
    query_string,
    reachable_result,
    rules_result,
    sigv4_signer,
    telemetry_results,
)
from experiment import build_config
from experiment.config import Arm
from guardrails.rules import PROBE_LAST_SUCCESS, SERVED_METRICS, rule_set
from runtime.spec import Generation

CONFIG = build_config({})
RULES = rule_set(CONFIG, CONFIG.serving.generation)
SERVED = SERVED_METRICS[CONFIG.serving.generation]
AMP = "https://aps-workspaces.us-east-2.amazonaws.com/workspaces/ws-0a1b2c3d"


def backend(queries: Mapping[str, Reply], **apis: Reply) -> PrometheusApi:
    """A fake backend: each instant query's answer by its text (an empty vector otherwise),
    ``rules`` and ``alerts`` by name."""

    def answer(method: str, path: str, headers: Mapping[str, str]) -> Reply:
        parts = urllib.parse.urlsplit(path)
        name = parts.path.removeprefix("/api/v1/")
        if name == "query":
            expr = urllib.parse.parse_qs(parts.query)["query"][0]
            return queries.get(expr, vector())
        return apis[name]

    return PrometheusApi(FakeEndpoint("http://127.0.0.1:9090", answer=answer))


def arm_queries(arm: Arm, up: int, series: int) -> dict[str, Reply]:
    match = f'{{job="qwen-sd-vllm", arm="{arm.value}"}}'
    return {
        f"count(up{match} == 1)": vector(({}, float(up))) if up else vector(),
        f"count({SERVED.running}{match})": vector(({}, float(series))) if series else vector(),
    }


def test_a_backend_answering_queries_passes_and_one_refusing_fails_with_the_fix() -> None:
    assert reachable_result(backend({}), "fix").status is Status.PASSED
    refusing = PrometheusApi(FakeEndpoint("http://127.0.0.1:9"))
    result = reachable_result(refusing, "pass the stack's URL")
    assert result.status is Status.FAILED
    assert "Connection refused" in result.detail and result.fix == "pass the stack's URL"


def test_an_api_error_is_a_failure_quoting_it() -> None:
    api = backend({"vector(1)": prometheus_error("parse error", 400)})
    result = reachable_result(api, "fix")
    assert result.status is Status.FAILED and "HTTP 400" in result.detail


@pytest.mark.parametrize("arm", list(Arm))
def test_an_arm_scraped_with_its_series_passes(arm: Arm) -> None:
    result = arm_series_result(backend(arm_queries(arm, 1, 1)), CONFIG, SERVED, arm, "fix")
    assert result.status is Status.PASSED, result
    assert "1 target(s) up" in result.detail


@pytest.mark.parametrize(("up", "series"), [(0, 0), (1, 0), (0, 1)])
def test_an_arm_down_or_without_its_series_fails(up: int, series: int) -> None:
    api = backend(arm_queries(Arm.SPECULATIVE, up, series))
    result = arm_series_result(api, CONFIG, SERVED, Arm.SPECULATIVE, "the collector scrapes it")
    assert result.status is Status.FAILED and result.fix == "the collector scrapes it"
    assert f"{up} target(s) up" in result.detail and "vllm:num_requests_running" in result.detail


def test_the_gateways_series_pass_or_fail() -> None:
    match = '{job="qwen-sd-gateway"}'
    queries = {
        f"count(up{match} == 1)": vector(({}, 1.0)),
        f"count(envoy_cluster_upstream_rq_total{match})": vector(({}, 2.0)),
    }
    assert gateway_series_result(backend(queries), CONFIG, "fix").status is Status.PASSED
    result = gateway_series_result(backend({}), CONFIG, "fix")
    assert result.status is Status.FAILED and result.title == GATEWAY_SERIES


def rule_groups(rules: list[dict[str, object]], name: str = RULES.group) -> Reply:
    """/api/v1/rules as Prometheus (and AMP's ListRules) answers it."""
    group = {"name": name, "file": "/etc/prometheus/guardrail-rules.yml", "rules": rules,
             "interval": 60, "limit": 0, "evaluationTime": 0.0021,
             "lastEvaluation": "2026-11-28T10:01:00.0Z"}  # fmt: skip
    return success({"groups": [group]})


def loaded_rules(health: str = "ok") -> list[dict[str, object]]:
    rules: list[dict[str, object]] = [
        {"name": r.record, "query": r.expr, "health": health, "lastError": "", "type": "recording",
         "evaluationTime": 0.0003, "lastEvaluation": "2026-11-28T10:01:00.0Z"}
        for r in RULES.recordings
    ]  # fmt: skip
    rules += [
        {"state": "inactive", "name": a.name, "query": a.expr, "duration": 60, "labels": {},
         "annotations": {"summary": a.summary}, "alerts": [], "health": "ok", "lastError": "",
         "type": "alerting", "evaluationTime": 0.0004, "lastEvaluation": "2026-11-28T10:01:00.0Z"}
        for a in RULES.alerts
    ]  # fmt: skip
    return rules


def test_the_rule_group_with_every_alert_passes() -> None:
    result = rules_result(backend({}, rules=rule_groups(loaded_rules())), RULES, "fix")
    assert result.status is Status.PASSED, result
    assert f"{len(RULES.alerts)} of them alerts" in result.detail


def test_a_missing_group_fails_listing_what_is_loaded() -> None:
    api = backend({}, rules=rule_groups(loaded_rules(), name="node-exporter"))
    result = rules_result(api, RULES, "cdk deploy writes it")
    assert result.status is Status.FAILED
    assert "['node-exporter']" in result.detail and result.fix == "cdk deploy writes it"


def test_a_group_lacking_an_alert_fails_as_rendered_from_another_configuration() -> None:
    rules = [r for r in loaded_rules() if r["name"] != "SpecDecodeProbeMissing"]
    result = rules_result(backend({}, rules=rule_groups(rules)), RULES, "fix")
    assert result.status is Status.FAILED
    assert "SpecDecodeProbeMissing" in result.detail and "another configuration" in result.detail


def test_a_rule_failing_to_evaluate_fails() -> None:
    rules = loaded_rules()
    rules[0] = {
        **rules[0],
        "health": "err",
        "lastError": "vector contains metrics with the same labelset",
    }
    result = rules_result(backend({}, rules=rule_groups(rules)), RULES, "fix")
    assert result.status is Status.FAILED and "same labelset" in result.detail


def alerts(*items: tuple[str, str]) -> Reply:
    """/api/v1/alerts as Prometheus (and AMP's ListAlerts) answers it."""
    return success(
        {
            "alerts": [
                {"labels": {"alertname": name, "arm": "speculative", "severity": "page"},
                 "annotations": {"summary": "An arm that was serving is gone"}, "state": state,
                 "activeAt": "2026-11-28T09:58:00.0Z", "value": "1e+00"}
                for name, state in items
            ]
        }
    )  # fmt: skip


def test_no_firing_guardrail_alert_passes_even_with_a_foreign_one_firing() -> None:
    api = backend(
        {}, alerts=alerts(("SpecDecodeArmMetricsMissing", "pending"), ("Watchdog", "firing"))
    )
    result = alerts_result(api, RULES)
    assert result.status is Status.PASSED and result.detail == "1 pending"


def test_a_firing_guardrail_alert_fails_naming_it_and_its_summary() -> None:
    api = backend({}, alerts=alerts(("SpecDecodeArmMetricsMissing", "firing")))
    result = alerts_result(api, RULES, "retry once fixed")
    assert result.status is Status.FAILED and result.title == NO_ALERT
    assert "SpecDecodeArmMetricsMissing {'arm': 'speculative', 'severity': 'page'}" in result.detail
    assert "An arm that was serving is gone" in result.detail
    assert result.fix == "retry once fixed"


def probe_answer(age_s: float) -> dict[str, Reply]:
    expr = f'{PROBE_LAST_SUCCESS}{{job="qwen-sd-probe"}}'
    return {expr: vector(({"__name__": PROBE_LAST_SUCCESS, "job": "qwen-sd-probe"}, NOW - age_s))}


def test_a_recent_probe_success_passes() -> None:
    result = probe_result(backend(probe_answer(600)), CONFIG, "fix")
    assert result.status is Status.PASSED and result.detail == "last success 600 s ago"


def test_a_stale_or_absent_probe_success_fails_with_the_fix() -> None:
    stale = CONFIG.guardrails.probe.stale_after_s + 1
    result = probe_result(backend(probe_answer(stale)), CONFIG, "the CronJob runs it")
    assert result.status is Status.FAILED and result.fix == "the CronJob runs it"
    absent = probe_result(backend({}), CONFIG, "fix")
    assert absent.status is Status.FAILED and "never pushed" in absent.detail


def fixes() -> TelemetryFixes:
    return TelemetryFixes("reach", lambda arm: f"scrape {arm}", "rules", "probe")


def test_every_check_runs_on_a_healthy_backend_and_passes() -> None:
    queries = {**arm_queries(Arm.BASELINE, 1, 1), **arm_queries(Arm.SPECULATIVE, 1, 1)}
    queries.update(probe_answer(60))
    match = '{job="qwen-sd-gateway"}'
    queries[f"count(up{match} == 1)"] = vector(({}, 1.0))
    queries[f"count(envoy_cluster_upstream_rq_total{match})"] = vector(({}, 2.0))
    api = backend(queries, rules=rule_groups(loaded_rules()), alerts=alerts())
    results = telemetry_results(api, CONFIG, SERVED, RULES, fixes(), probe_skipped=None)
    assert [r.status for r in results] == [Status.PASSED] * 7, results


def test_the_rest_is_skipped_when_the_backend_does_not_answer() -> None:
    api = PrometheusApi(FakeEndpoint("http://127.0.0.1:9"))
    results = telemetry_results(api, CONFIG, SERVED, RULES, fixes(), probe_skipped=None)
    assert results[0].status is Status.FAILED
    assert {r.status for r in results[1:]} == {Status.SKIPPED} and len(results) == 7


def test_the_probe_check_is_skipped_where_no_probe_runs() -> None:
    local = rule_set(CONFIG, Generation.LOCAL_CPU)
    api = backend({}, rules=rule_groups(loaded_rules()), alerts=alerts())
    results = telemetry_results(api, CONFIG, SERVED, local, fixes(), probe_skipped="no probe")
    assert results[-1].status is Status.SKIPPED and results[-1].detail == "no probe"


def test_amp_queries_are_sigv4_signed_for_aps_over_the_string_sent() -> None:
    signer = sigv4_signer("us-east-2", Credentials("AKIDEXAMPLE", "secret", "token"))
    seen: list[tuple[str, dict[str, str]]] = []

    def answer(method: str, path: str, headers: Mapping[str, str]) -> Reply:
        seen.append((path, dict(headers)))
        return vector(({}, 1.0))

    api = PrometheusApi(FakeEndpoint(AMP, answer=answer), signer)
    api.query('count(up{job="qwen-sd-vllm", arm="baseline"} == 1)')
    ((path, headers),) = seen
    assert path.startswith("/api/v1/query?query=count%28up%7Bjob%3D%22qwen-sd-vllm%22%2C%20arm")
    authorization = headers["Authorization"]
    assert authorization.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/us-east-2/aps/aws4_request" in authorization
    assert headers["X-Amz-Security-Token"] == "token" and "X-Amz-Date" in headers


def test_the_query_string_encodes_every_reserved_character() -> None:
    assert query_string({"query": 'a{b="c/d"} ~'}) == "query=a%7Bb%3D%22c%2Fd%22%7D%20~"
