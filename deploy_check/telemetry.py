"""The telemetry checks, over the Prometheus HTTP API: the backend answers, receives both arms'
and the gateway's series, has the guardrail rules loaded, fires none of them, and holds a
recent probe result.

The backend is the Amazon Managed Service for Prometheus workspace on the cluster (every
request SigV4-signed, ``sigv4_signer``) and the local run's Prometheus locally (plain HTTP).
Both serve the same API under their query root (``PrometheusApi.base``):

- prometheus docs/querying/api.md: ``GET /api/v1/query`` (an instant vector:
  ``{"resultType": "vector", "result": [{"metric": {...}, "value": [<unix time>, "<v>"]}]}``),
  ``GET /api/v1/rules`` (``{"groups": [{"name", "rules": [{"name", "type", "health",
  "lastError", ...}]}]}``), ``GET /api/v1/alerts`` (``{"alerts": [{"labels", "annotations",
  "state", "activeAt", "value"}]}``), each wrapped in ``{"status": "success", "data": ...}``;
- AMP user guide, "Prometheus-compatible APIs": QueryMetrics ``/workspaces/<id>/api/v1/query``,
  ListRules ``/workspaces/<id>/api/v1/rules``, ListAlerts ``/workspaces/<id>/api/v1/alerts``
  (GET, the same bodies), under ``https://aps-workspaces.<region>.amazonaws.com`` (the
  stack's PrometheusQueryUrl output, stacks/guardrails.py ``query_url``).

Every name queried is the rules' own (guardrails/rules.py, guardrails/vllm_metrics.py).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from deploy_check.http import Endpoint, HttpError
from deploy_check.model import Group, Result, Status
from experiment.config import Arm, ExperimentConfig
from guardrails.rules import (
    ARM,
    GATEWAY_REQUESTS,
    PROBE_LAST_SUCCESS,
    RuleSet,
    ServedMetrics,
    jobs,
)

API = "/api/v1"
# The signing name of Amazon Managed Service for Prometheus (botocore's service model
# amp/2020-08-01: "signingName": "aps"), the service Argo's provider signs for too.
AMP_SERVICE = "aps"
FIRING = "firing"  # an alert's state in /api/v1/alerts: "pending" or "firing"
RULE_OK = "ok"  # a rule's health in /api/v1/rules: "ok", "err" or "unknown"
ALERTING = "alerting"  # a rule's type in /api/v1/rules: "alerting" or "recording"
GROUP = Group.TELEMETRY

# (method, URL) -> the headers that authenticate the request (SigV4 on AMP).
Signer = Callable[[str, str], Mapping[str, str]]


class PrometheusError(Exception):
    """The backend did not answer, refused, or answered something that is not the API."""


@dataclass(frozen=True)
class Sample:
    labels: dict[str, str]
    at: float  # the evaluation time, the backend's clock (seconds since the epoch)
    value: float


def query_string(params: Mapping[str, str]) -> str:
    """Every character but the unreserved ones percent-encoded: the form SigV4 canonicalizes
    a query into (AWS General Reference, "Create a canonical request"), so the string sent is
    the string signed."""
    return urllib.parse.urlencode(
        params, quote_via=lambda text, *_: urllib.parse.quote(text, safe="-_.~")
    )


def sigv4_signer(region: str, credentials: Any = None) -> Signer:
    """Signs each request for AMP in ``region`` with botocore's SigV4Auth (service ``aps``);
    ``credentials``: botocore credentials (default: the standard chain, as the AWS CLI)."""
    try:
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.session import Session
    except ImportError:
        raise PrometheusError(
            "botocore signs the workspace's queries: pip install boto3 (the loadtest extra)"
        ) from None

    found = credentials if credentials is not None else Session().get_credentials()
    if found is None:
        raise PrometheusError(
            "no AWS credentials to sign the workspace's queries with: configure them as for "
            "the AWS CLI (AWS_PROFILE, aws sso login, or the instance role)"
        )

    def sign(method: str, url: str) -> Mapping[str, str]:
        request = AWSRequest(method=method, url=url)
        SigV4Auth(found, AMP_SERVICE, region).add_auth(request)
        return dict(request.headers.items())

    return sign


@dataclass(frozen=True)
class PrometheusApi:
    """The Prometheus HTTP API under ``endpoint`` (its query root), ``signer`` adding the
    authentication of each request (None: plain)."""

    endpoint: Endpoint
    signer: Signer | None = None

    @property
    def base(self) -> str:
        return self.endpoint.where

    def _data(self, name: str, params: Mapping[str, str] | None = None) -> Any:
        path = f"{API}/{name}" + (f"?{query_string(params)}" if params else "")
        headers = self.signer("GET", self.base.rstrip("/") + path) if self.signer else {}
        try:
            reply = self.endpoint.request("GET", path, headers=headers)
        except HttpError as err:
            raise PrometheusError(f"{self.base}: {err}") from None
        try:
            answer = reply.json()
        except ValueError:
            answer = None
        if reply.status != 200 or not isinstance(answer, dict) or answer.get("status") != "success":
            raise PrometheusError(
                f"GET {path} at {self.base} answered HTTP {reply.status}: {reply.shown()}"
            )
        return answer["data"]

    def query(self, expr: str) -> list[Sample]:
        """An instant query's vector (an empty list when nothing matches)."""
        data = self._data("query", {"query": expr})
        if data.get("resultType") != "vector":
            raise PrometheusError(f"{expr!r} is not a vector: {data.get('resultType')}")
        return [
            Sample(dict(row["metric"]), float(row["value"][0]), float(row["value"][1]))
            for row in data["result"]
        ]

    def count(self, expr: str) -> int:
        """``count(expr)`` as an int: 0 when no series matches (count of nothing is empty)."""
        samples = self.query(f"count({expr})")
        return int(samples[0].value) if samples else 0

    def rule_groups(self) -> list[dict[str, Any]]:
        return list(self._data("rules")["groups"])

    def alerts(self) -> list[dict[str, Any]]:
        return list(self._data("alerts")["alerts"])


def selector(**matchers: str) -> str:
    return "{" + ", ".join(f'{key}="{value}"' for key, value in matchers.items()) + "}"


REACHABLE = "the Prometheus backend answers queries"


def reachable_result(api: PrometheusApi, fix: str) -> Result:
    try:
        api.query("vector(1)")
    except PrometheusError as err:
        return Result.failed(GROUP, REACHABLE, str(err), fix)
    return Result.passed(GROUP, REACHABLE, api.base)


def arm_series_title(arm: Arm) -> str:
    return f"it receives the {arm.value} arm's series"


def arm_series_result(
    api: PrometheusApi, config: ExperimentConfig, served: ServedMetrics, arm: Arm, fix: str
) -> Result:
    """The arm is scraped up (``up == 1`` of the vLLM job with its ``arm`` label) and its
    running-requests gauge arrives (exported from start-up, idle or not: the series the
    missing-data rule looks for)."""
    match = selector(job=jobs(config)["vllm"], **{ARM: arm.value})
    return _series_result(api, arm_series_title(arm), match, served.running, fix)


GATEWAY_SERIES = "it receives the gateway's series"


def gateway_series_result(api: PrometheusApi, config: ExperimentConfig, fix: str) -> Result:
    match = selector(job=jobs(config)["gateway"])
    return _series_result(api, GATEWAY_SERIES, match, GATEWAY_REQUESTS, fix)


def _series_result(api: PrometheusApi, title: str, match: str, metric: str, fix: str) -> Result:
    try:
        up = api.count(f"up{match} == 1")
        series = api.count(f"{metric}{match}")
    except PrometheusError as err:
        return Result.failed(GROUP, title, str(err), fix)
    seen = f"{up} target(s) up{match}, {series} series {metric}{match}"
    if up and series:
        return Result.passed(GROUP, title, seen)
    return Result.failed(GROUP, title, seen, fix)


def rules_title(rules: RuleSet) -> str:
    return f"the guardrail rules are loaded (group {rules.group})"


def rules_result(api: PrometheusApi, rules: RuleSet, fix: str) -> Result:
    """The group is there with every alert of this configuration's rule set, all healthy."""
    title = rules_title(rules)
    try:
        groups = api.rule_groups()
    except PrometheusError as err:
        return Result.failed(GROUP, title, str(err), fix)
    found = [group for group in groups if group.get("name") == rules.group]
    if not found:
        names = sorted(str(group.get("name")) for group in groups)
        return Result.failed(GROUP, title, f"groups loaded: {names or 'none'}", fix)
    loaded = [rule for group in found for rule in group.get("rules", [])]
    alerts = {rule.get("name") for rule in loaded if rule.get("type") == ALERTING}
    missing = sorted({alert.name for alert in rules.alerts} - alerts)
    if missing:
        return Result.failed(
            GROUP,
            title,
            f"the group lacks {missing}: it was rendered from another configuration",
            fix,
        )
    broken = [f"{rule.get('name')}: {rule.get('lastError')}" for rule in loaded
              if rule.get("health", RULE_OK) not in (RULE_OK, "unknown")]  # fmt: skip
    if broken:
        return Result.failed(
            GROUP,
            title,
            "rules failing to evaluate: " + "; ".join(broken),
            "a query error in a rule is a rendering bug: report it with this output",
        )
    return Result.passed(GROUP, title, f"{len(loaded)} rules, {len(alerts)} of them alerts")


NO_ALERT = "no guardrail alert is firing"


ALERTS_FIX = "each alert says what it saw; docs/guardrails.md says what each means and what to do"


def alerts_result(api: PrometheusApi, rules: RuleSet, fix: str = ALERTS_FIX) -> Result:
    """None of the rule set's alerts is firing (other rules' alerts are not ours to judge)."""
    names = {alert.name for alert in rules.alerts}
    try:
        alerts = [a for a in api.alerts() if a.get("labels", {}).get("alertname") in names]
    except PrometheusError as err:
        return Result.failed(GROUP, NO_ALERT, str(err), "see the first telemetry check")
    firing = [alert for alert in alerts if alert.get("state") == FIRING]
    pending = len(alerts) - len(firing)
    if not firing:
        return Result.passed(GROUP, NO_ALERT, f"{pending} pending" if pending else "")
    return Result.failed(GROUP, NO_ALERT, "\n".join(_alert_text(a) for a in firing), fix)


def _alert_text(alert: Mapping[str, Any]) -> str:
    labels = {k: v for k, v in sorted(alert.get("labels", {}).items()) if k != "alertname"}
    summary = alert.get("annotations", {}).get("summary", "")
    name = alert.get("labels", {}).get("alertname")
    return f"{name} {labels} since {alert.get('activeAt', '?')}: {summary}"


def probe_title(config: ExperimentConfig) -> str:
    stale = config.guardrails.probe.stale_after_s
    return f"the probe succeeded within guardrails.probe.stale_after_s ({stale} s)"


def probe_result(api: PrometheusApi, config: ExperimentConfig, fix: str) -> Result:
    """The probe's last-success time (its own push) against the backend's clock."""
    title = probe_title(config)
    expr = f"{PROBE_LAST_SUCCESS}{selector(job=jobs(config)['probe'])}"
    try:
        samples = api.query(expr)
    except PrometheusError as err:
        return Result.failed(GROUP, title, str(err), fix)
    if not samples:
        return Result.failed(GROUP, title, f"no {expr}: the probe never pushed a result", fix)
    age = min(sample.at - sample.value for sample in samples)
    seen = f"last success {age:.0f} s ago"
    if age > config.guardrails.probe.stale_after_s:
        return Result.failed(GROUP, title, seen, fix)
    return Result.passed(GROUP, title, seen)


@dataclass(frozen=True)
class TelemetryFixes:
    """What to change when a telemetry check fails, worded for where the backend runs."""

    reachable: str
    scrape: Callable[[Arm | None], str]  # an arm's scrape, or the gateway's (None)
    rules: str
    probe: str
    alerts: str = ALERTS_FIX


def telemetry_titles(config: ExperimentConfig, rules: RuleSet, probe: bool) -> list[str]:
    titles = [REACHABLE, *(arm_series_title(arm) for arm in Arm), GATEWAY_SERIES]
    titles += [rules_title(rules), NO_ALERT]
    return titles + ([probe_title(config)] if probe else [])


def telemetry_results(
    api: PrometheusApi,
    config: ExperimentConfig,
    served: ServedMetrics,
    rules: RuleSet,
    fixes: TelemetryFixes,
    *,
    probe_skipped: str | None,
) -> list[Result]:
    """Every telemetry check; when the backend does not answer, the rest are skipped.
    ``probe_skipped``: why the probe check does not apply here (None: it does)."""
    first = reachable_result(api, fixes.reachable)
    if first.status is not Status.PASSED:
        rest = telemetry_titles(config, rules, probe=True)[1:]
        return [first, *(Result.skipped(GROUP, t, "the backend does not answer") for t in rest)]
    results = [first]
    results += [arm_series_result(api, config, served, arm, fixes.scrape(arm)) for arm in Arm]
    results.append(gateway_series_result(api, config, fixes.scrape(None)))
    results += [rules_result(api, rules, fixes.rules), alerts_result(api, rules, fixes.alerts)]
    if probe_skipped is None:
        results.append(probe_result(api, config, fixes.probe))
    else:
        results.append(Result.skipped(GROUP, probe_title(config), probe_skipped))
    return results
