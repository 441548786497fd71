"""The guardrail rules under Prometheus' own rule test runner, ``promtool test rules``.

The rule file is rendered from a fixed test configuration (guardrails.rules.rule_set(...)
.prometheus(), as every consumer renders it); the promtool test file is generated from the
cases below: for each case, the series the scrape would have stored (with the labels the
scrape adds: job, arm, route, class, instance; ``up`` per target) and, at one evaluation time,
the exact alerts expected of EVERY alert of the rule set (none, or which with which labels).

Kinds of case, each alert has at least one of each (test_every_alert_has_every_kind_of_case):

- healthy: both arms serve within their thresholds; nothing fires.
- idle: every target scraped, counters flat, nothing running; nothing fires.
- degraded: a threshold crossed; that alert fires, no other.
- stale: series stop (a stale marker: the target left discovery, or its scrape failed). The
  missing-data rules fire (an arm's or the gateway's ``up``; the speculation counters while
  the arm serves; the probe's results, or its last success too old); every other rule has no
  data then and stays quiet, and the test checks that it does.
- absent: series never there. ``up`` absent fires the arm's or gateway's rule; speculation
  counters absent while serving fire CountersFrozen; probe results absent fire ProbeMissing.

The mutation tests weaken one rule of the rendered file at a time and show that promtool's run
of the same cases then fails, so the cases can fail.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from experiment import ExperimentConfig, build_config
from experiment.config import Arm
from guardrails import rules
from guardrails.rules import SERVED_METRICS, ServedMetrics, rule_set
from runtime.spec import Generation

MISSING_PROMTOOL = (
    "promtool is missing: the guardrail rules' unit tests run it (make test installs it). "
    "Debian/Ubuntu: apt-get install prometheus; elsewhere: put the promtool of a Prometheus "
    "release tarball on PATH"
)

# The fixed test configuration: short windows so a case is a few minutes of samples, and
# thresholds written here, not taken from the defaults, so the cases' numbers read against them.
OVERRIDES = {
    "guardrails.live.scrape_interval_s": "15",
    "guardrails.live.evaluation_interval_s": "15",
    "guardrails.live.window_s": "60",
    "guardrails.live.pending_s": "0",  # an alert fires at the first evaluation that sees it
    "guardrails.live.idle_requests_per_s": "0",
    "guardrails.live.latency_margin": "0.1",
    "guardrails.live.max_fallback_share": "0.05",
    "guardrails.min_acceptance_rate": "0.5",
    "guardrails.max_failed_request_share": "0.01",
    "guardrails.lossless_min_prefix_agreement": "0.95",
    "guardrails.probe.schedule": "* * * * *",  # every minute: runs 60 s apart
    "guardrails.probe.deadline_s": "30",
    "guardrails.probe.stale_after_s": "120",  # above 60 + 30
    "guardrails.live.serving_lookback_s": "3600",  # longer than any case: "has served" holds
    "routing.speculative_classes": "structured",
}
STEP_S = 15  # one scrape
STEPS = 12  # samples after the first: 3 minutes (promtool evaluates every rule every 15 s)
EVAL = "3m"  # every case is judged at the end of its samples
# Series that stop, stop at 1.5 minutes with a stale marker (Prometheus writes one when a
# target leaves discovery or its scrape fails): gone from then on, as no window holds them.
HALF = STEPS // 2


def _config(**more: str) -> ExperimentConfig:
    return build_config({**OVERRIDES, **more})


CONFIG = _config()
JOB = rules.jobs(CONFIG)
CLASS = CONFIG.routing.speculative_classes[0]
SD_ROUTE = CONFIG.routing.rule_name(CLASS)
DEFAULT_ROUTE = CONFIG.routing.rule_name(None)
SD, BASE = Arm.SPECULATIVE.value, Arm.BASELINE.value

# Series values (promtool's expanding notation, prometheus docs/configuration/
# unit_testing_rules.md: 'a+bxn', 'axn', '_' missing, 'stale' a stale marker).


def rising(per_s: float, start: float = 0) -> str:
    """A counter growing by ``per_s`` every second for the whole case."""
    return f"{start:g}+{per_s * STEP_S:g}x{STEPS}"


def steady(value: float) -> str:
    return f"{value:g}x{STEPS}"


def stops(values: str) -> str:
    """The first half of ``values``' samples, then a stale marker (the series is gone)."""
    head = values.rsplit("x", 1)[0]
    return f"{head}x{HALF} stale"


def down_from_half() -> str:
    """``up`` of a target whose scrapes start failing half-way."""
    return f"1x{HALF} 0x{STEPS - HALF - 1}"


def _labels(**labels: str) -> str:
    return "{" + ", ".join(f'{key}="{value}"' for key, value in labels.items()) + "}"


def vllm(metric: str, arm: str) -> str:
    return metric + _labels(job=JOB["vllm"], instance=f"{arm}:8000", arm=arm)


def gateway(metric: str, route: str, **labels: str) -> str:
    # The scrape copies envoy_cluster_name into route (guardrails/scrape.py) and keeps both.
    return metric + _labels(
        job=JOB["gateway"], instance="envoy:19001", envoy_cluster_name=route, route=route,
        **labels,
    )  # fmt: skip


def probe(metric: str, **labels: str) -> str:
    return metric + _labels(job=JOB["probe"], **labels)


UP_SD, UP_BASE = (vllm("up", arm) for arm in (SD, BASE))
UP_GATEWAY = "up" + _labels(job=JOB["gateway"], instance="envoy:19001")
PROBE_ACCEPTANCE = probe(rules.PROBE_ACCEPTANCE, **{rules.CLASS: CLASS})
PROBE_AGREEMENT = probe(rules.PROBE_AGREEMENT)
PROBE_LAST_SUCCESS = probe(rules.PROBE_LAST_SUCCESS)
PROBE_TIME_SD, PROBE_TIME_BASE = (
    probe(rules.PROBE_TOKEN_TIME, **{rules.CLASS: CLASS, rules.ARM: arm}) for arm in (SD, BASE)
)
GW_REQUESTS = gateway(rules.GATEWAY_REQUESTS, SD_ROUTE)
GW_OK = gateway(rules.GATEWAY_RESPONSES, SD_ROUTE, envoy_response_code_class="2")
GW_5XX = gateway(rules.GATEWAY_RESPONSES, SD_ROUTE, envoy_response_code_class="5")
GW_RETRIES = gateway(rules.GATEWAY_RETRIES, SD_ROUTE)
GW_DEFAULT_REQUESTS = gateway(rules.GATEWAY_REQUESTS, DEFAULT_ROUTE)
GW_DEFAULT_5XX = gateway(rules.GATEWAY_RESPONSES, DEFAULT_ROUTE, envoy_response_code_class="5")


def healthy(served: ServedMetrics) -> dict[str, str]:
    """Both arms serving: 2 requests/s finished each, 3 running; the speculative arm's tokens
    take 0.04 s against the baseline's 0.05 s (0.8 times); acceptance 9 of 12 draft tokens
    (0.75, floor 0.5); the speculative route 10 requests/s, none failed, none retried (Envoy
    has no 5xx or retry series yet); the baseline's route fails 10 % (not a speculative route:
    not these rules' business); the probe ran a minute ago: acceptance 0.75, agreement 1, the
    class's prompts 0.04 s per token on the speculative arm against 0.05 s on the baseline."""
    series = {UP_SD: steady(1), UP_BASE: steady(1), UP_GATEWAY: steady(1)}
    for arm, seconds_per_token in ((SD, 0.04), (BASE, 0.05)):
        series[vllm(served.finished, arm)] = rising(2)
        series[vllm(served.generated, arm)] = rising(100)  # the fork's token_time_count too
        series[vllm(served.running, arm)] = steady(3)
        series[vllm(served.token_time_count, arm)] = rising(100)
        series[vllm(served.token_time_sum, arm)] = rising(100 * seconds_per_token)
    if served.drafts and served.draft_tokens and served.accepted:
        series[vllm(served.drafts, SD)] = rising(3)
        series[vllm(served.draft_tokens, SD)] = rising(12)
        series[vllm(served.accepted, SD)] = rising(9)
    series[GW_REQUESTS] = rising(10)
    series[GW_OK] = rising(10)
    series[GW_DEFAULT_REQUESTS] = rising(10)
    series[GW_DEFAULT_5XX] = rising(1)
    series[PROBE_ACCEPTANCE] = steady(0.75)
    series[PROBE_AGREEMENT] = steady(1)
    series[PROBE_LAST_SUCCESS] = steady(STEPS * STEP_S - 60)
    series[PROBE_TIME_SD] = steady(0.04)
    series[PROBE_TIME_BASE] = steady(0.05)
    return series


def idle(served: ServedMetrics) -> dict[str, str]:
    """Every target scraped; every counter flat at what earlier traffic left; none running."""
    series = healthy(served)
    for name, values in series.items():
        if values.startswith("0+"):
            series[name] = steady(1000)
        elif "num_requests_running" in name:
            series[name] = steady(0)
    return series


def sd_counters(served: ServedMetrics) -> list[str]:
    return [vllm(m, SD) for m in (served.drafts, served.draft_tokens, served.accepted) if m]


def arm_series(served: ServedMetrics, arm: str) -> list[str]:
    names = [served.finished, served.generated, served.running, served.token_time_sum]
    names += [served.token_time_count] if served.token_time_count not in names else []
    return [vllm(m, arm) for m in names] + (sd_counters(served) if arm == SD else [])


GATEWAY_SERIES = [GW_REQUESTS, GW_OK, GW_DEFAULT_REQUESTS, GW_DEFAULT_5XX]
PROBE_SERIES = [
    PROBE_ACCEPTANCE, PROBE_AGREEMENT, PROBE_LAST_SUCCESS, PROBE_TIME_SD, PROBE_TIME_BASE
]  # fmt: skip


@dataclass(frozen=True)
class Case:
    """``change(served, series)`` edits the healthy series (None as a value: never there);
    ``firing``: alert name -> the labels of each alert expected (the series' labels and the
    rule's own; severity is added), every other alert expected silent."""

    name: str
    kind: str  # healthy, idle, degraded, stale, absent
    change: Any  # Callable[[ServedMetrics, dict[str, str | None]], None]
    firing: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    counters: bool = False  # about the speculation counters: not for a build without them
    start: Any = None  # the series changed: healthy(served), or idle(served)


def _none(_: ServedMetrics, __: dict[str, str | None]) -> None:
    pass


def _set(**by_name: str | None) -> Any:
    """A change setting series (by module constant name's value) to values."""

    def change(_: ServedMetrics, series: dict[str, str | None]) -> None:
        series.update(by_name)

    return change


def _each(names: Any, how: Any) -> Any:
    """A change applying ``how(values)`` (None: the series never existed) to the series
    ``names(served)`` lists."""

    def change(served: ServedMetrics, series: dict[str, str | None]) -> None:
        for name in names(served):
            series[name] = how(series[name]) if how else None

    return change


def _both(*changes: Any) -> Any:
    def change(served: ServedMetrics, series: dict[str, str | None]) -> None:
        for one in changes:
            one(served, series)

    return change


ARM_MISSING = "SpecDecodeArmMetricsMissing"
GATEWAY_MISSING = "SpecDecodeGatewayMetricsMissing"
FROZEN = "SpecDecodeCountersFrozen"
ACCEPTANCE = "SpecDecodeAcceptanceBelowFloor"
FAILING = "SpecDecodeRouteFailing"
FALLING_BACK = "SpecDecodeRouteFallingBack"
SLOWER = "SpecDecodeSlowerThanBaseline"
PROBE_ACCEPTANCE_LOW = "SpecDecodeProbeAcceptanceBelowFloor"
LOSSY = "SpecDecodeProbeLossy"
PROBE_MISSING = "SpecDecodeProbeMissing"
# Rules whose purpose is missing data: they fire on stale and absent series.
MISSING_DATA = {ARM_MISSING, GATEWAY_MISSING, FROZEN, PROBE_MISSING}

SD_ARM = {rules.ARM: SD}
PROBE_JOB = {"job": JOB["probe"]}
PROBE_TIME_LABELS = [{**PROBE_JOB, rules.CLASS: CLASS, rules.ARM: arm} for arm in (SD, BASE)]

CASES = [
    Case("healthy: both arms serve within every threshold", "healthy", _none),
    Case(
        "healthy: the speculative arm 1.05 times the baseline's time per token (margin 0.1)",
        "healthy",
        lambda s, series: series.update({vllm(s.token_time_sum, SD): rising(100 * 0.05 * 1.05)}),
    ),
    Case("idle: scraped, counters flat, nothing running", "idle", _none, start=idle),
    Case(
        # One token per request (a classification): nothing to draft, counters flat, no fault.
        "healthy: the speculative arm finishes 1-token requests, its counters stand still",
        "healthy",
        _both(
            lambda s, series: series.update({vllm(s.generated, SD): rising(2)}),
            _each(sd_counters, lambda values: steady(500)),
        ),
        counters=True,
    ),
    # degraded: one threshold crossed
    Case(
        "degraded: the speculative arm's scrapes fail from 1.5m (up 0, its series stale)",
        "degraded",
        _both(
            _set(**{UP_SD: down_from_half()}),
            _each(lambda s: arm_series(s, SD), stops),
        ),
        {ARM_MISSING: [SD_ARM]},
    ),
    Case(
        "absent: the speculative arm is scraped (up 1) but exports none of vLLM's series",
        "absent",
        _each(lambda s: arm_series(s, SD), None),
        {ARM_MISSING: [SD_ARM]},
    ),
    Case(
        "degraded: the gateway's scrapes fail from 1.5m (up 0, its series stale)",
        "degraded",
        _both(_set(**{UP_GATEWAY: down_from_half()}), _each(lambda s: GATEWAY_SERIES, stops)),
        {GATEWAY_MISSING: [{}]},
    ),
    Case(
        "degraded: the speculative arm serves but its speculation counters stand still",
        "degraded",
        _each(sd_counters, lambda values: steady(500)),
        {FROZEN: [SD_ARM]},
        counters=True,
    ),
    Case(
        "degraded: acceptance 4.5 of 12 draft tokens (0.375) below the floor 0.5",
        "degraded",
        lambda s, series: series.update({vllm(s.accepted or "", SD): rising(4.5)}),
        {ACCEPTANCE: [{**SD_ARM, rules.CLASS: CLASS}]},
        counters=True,
    ),
    Case(
        "degraded: 0.5 of the speculative route's 10 requests/s fail with a 5xx (5 % > 1 %)",
        "degraded",
        _set(**{GW_5XX: rising(0.5)}),
        {FAILING: [{rules.ROUTE: SD_ROUTE}]},
    ),
    Case(
        "degraded: 1 of the speculative route's 10 requests/s retried on the baseline (10 %)",
        "degraded",
        _set(**{GW_RETRIES: rising(1)}),
        {FALLING_BACK: [{rules.ROUTE: SD_ROUTE}]},
    ),
    Case(
        # Envoy's upstream_rq_total counts retries as attempts: 10 attempts/s with 0.48
        # retries are 9.52 requests, 5.04 % of them fell back (over 5 %); counted against
        # the attempts it would be 4.8 % and pass.
        "degraded: 0.48 of 10 attempts/s are retries, 5.04 % of the 9.52 requests fell back",
        "degraded",
        _set(**{GW_RETRIES: rising(0.48)}),
        {FALLING_BACK: [{rules.ROUTE: SD_ROUTE}]},
    ),
    Case(
        # A failed attempt rescued by the retry did not fail the request: 0.5 5xx attempts/s
        # all retried (and served by the baseline) fail nothing; only the fallback fires.
        "degraded: 0.5 of 10 attempts/s fail with a 5xx and are retried: fell back, not failed",
        "degraded",
        _set(**{GW_5XX: rising(0.5), GW_RETRIES: rising(0.5)}),
        {FALLING_BACK: [{rules.ROUTE: SD_ROUTE}]},
    ),
    Case(
        # Live traffic is not compared: under tiered routing the arms serve different classes.
        "healthy: the speculative arm's live traffic 1.2 times the baseline's time per token",
        "healthy",
        lambda s, series: series.update({vllm(s.token_time_sum, SD): rising(100 * 0.06)}),
    ),
    Case(
        "degraded: the probe's class prompts take 1.2 times the baseline's time per token",
        "degraded",
        _set(**{PROBE_TIME_SD: steady(0.06)}),
        {SLOWER: [{**PROBE_JOB, rules.CLASS: CLASS}]},
    ),
    Case(
        "healthy: the probe's class prompts take 1.05 times the baseline's (margin 0.1)",
        "healthy",
        _set(**{PROBE_TIME_SD: steady(0.0525)}),
    ),
    Case(
        "degraded: the probe's acceptance of the class 0.25 below its floor 0.5",
        "degraded",
        _set(**{PROBE_ACCEPTANCE: steady(0.25)}),
        {PROBE_ACCEPTANCE_LOW: [{**PROBE_JOB, rules.CLASS: CLASS}]},
    ),
    Case(
        "degraded: the probe's prefix agreement 0.9 below the tolerance 0.95",
        "degraded",
        _set(**{PROBE_AGREEMENT: steady(0.9)}),
        {LOSSY: [PROBE_JOB]},
    ),
    # stale: series that stop
    Case(
        "stale: the speculative arm's target and series are gone from 1.5m",
        "stale",
        _both(_set(**{UP_SD: stops(steady(1))}), _each(lambda s: arm_series(s, SD), stops)),
        {ARM_MISSING: [SD_ARM]},
    ),
    Case(
        "stale: the baseline arm's target and series are gone from 1.5m",
        "stale",
        _both(_set(**{UP_BASE: stops(steady(1))}), _each(lambda s: arm_series(s, BASE), stops)),
        {ARM_MISSING: [{rules.ARM: BASE}]},
    ),
    Case(
        "stale: the gateway's target and series are gone from 1.5m",
        "stale",
        _both(_set(**{UP_GATEWAY: stops(steady(1))}), _each(lambda s: GATEWAY_SERIES, stops)),
        {GATEWAY_MISSING: [{}]},
    ),
    Case(
        "stale: the speculation counters vanish from 1.5m while the arm serves",
        "stale",
        _each(sd_counters, stops),
        {FROZEN: [SD_ARM]},
        counters=True,
    ),
    Case(
        "stale: the probe's last success is 3 minutes old (stale_after_s 120)",
        "stale",
        _set(**{PROBE_LAST_SUCCESS: steady(0)}),
        {PROBE_MISSING: [PROBE_JOB]},
    ),
    Case(
        "stale: the probe's series are gone from 1.5m",
        "stale",
        _each(lambda s: PROBE_SERIES, stops),
        {PROBE_MISSING: [PROBE_JOB, {**PROBE_JOB, rules.CLASS: CLASS}, *PROBE_TIME_LABELS]},
    ),
    # absent: series never there
    Case(
        # A first deploy's precompile: the pods are targets, never up. Not a guardrail fault
        # (the rollout's progress deadline judges it), and the probe cannot run yet.
        "healthy: still starting, both arms' targets up 0 since their discovery",
        "healthy",
        _both(
            _set(**{UP_SD: steady(0), UP_BASE: steady(0)}),
            _each(lambda s: arm_series(s, SD) + arm_series(s, BASE) + PROBE_SERIES, None),
        ),
    ),
    Case(
        "stale: the speculative arm served, then its target is up 0 from 1.5m",
        "stale",
        _both(_set(**{UP_SD: down_from_half()}), _each(lambda s: arm_series(s, SD), stops)),
        {ARM_MISSING: [SD_ARM]},
    ),
    Case(
        "absent: the gateway was never scraped",
        "absent",
        _both(_set(**{UP_GATEWAY: None}), _each(lambda s: GATEWAY_SERIES, None)),
        {GATEWAY_MISSING: [{}]},
    ),
    Case(
        "absent: the speculative arm serves but exports no speculation counters",
        "absent",
        _each(sd_counters, None),
        {FROZEN: [SD_ARM]},
        counters=True,
    ),
    Case(
        "absent: the probe never pushed while the speculative arm serves",
        "absent",
        _each(lambda s: PROBE_SERIES, None),
        {PROBE_MISSING: [PROBE_JOB, {**PROBE_JOB, rules.CLASS: CLASS}, *PROBE_TIME_LABELS]},
    ),
    Case(
        "absent: the probe ran but pushed no time per token of the speculative arm",
        "absent",
        _set(**{PROBE_TIME_SD: None}),
        {PROBE_MISSING: [PROBE_TIME_LABELS[0]]},
    ),
    Case(
        "absent: the probe ran but pushed no acceptance of the class",
        "absent",
        _set(**{PROBE_ACCEPTANCE: None}),
        {PROBE_MISSING: [{**PROBE_JOB, rules.CLASS: CLASS}]},
    ),
    Case(
        "absent: the probe's results carry no last-success time",
        "absent",
        _set(**{PROBE_LAST_SUCCESS: None}),
        {PROBE_MISSING: [PROBE_JOB]},
    ),
    Case(
        "absent: the probe ran but pushed no prefix agreement",
        "absent",
        _set(**{PROBE_AGREEMENT: None}),
        {PROBE_MISSING: [PROBE_JOB]},
    ),
]


def _alerts(generation: Generation, config: ExperimentConfig = CONFIG) -> list[rules.Alert]:
    return list(rule_set(config, generation).alerts)


def _expected(alert_name: str, labels: dict[str, str], generation: Generation) -> dict[str, Any]:
    """promtool's expected alert: the labels and the annotations of the rule that fired (the
    one of that name whose own labels the expected ones hold: one rule per class may share a
    name). promtool compares both and adds alertname itself."""
    matching = [
        alert
        for alert in _alerts(generation)
        if alert.name == alert_name and alert.labels.items() <= labels.items()
    ]
    assert len(matching) == 1, f"{alert_name} {labels}: {len(matching)} rules match"
    (alert,) = matching
    return {
        "exp_labels": {"severity": "page", **labels, **alert.labels},
        "exp_annotations": {"summary": alert.summary},
    }


def cases(generation: Generation) -> list[Case]:
    counters = SERVED_METRICS[generation].drafts is not None
    return [case for case in CASES if counters or not case.counters]


def test_group(case: Case, generation: Generation) -> dict[str, Any]:
    served = SERVED_METRICS[generation]
    series: dict[str, str | None] = dict((case.start or healthy)(served))
    case.change(served, series)
    names = sorted({alert.name for alert in _alerts(generation)})
    unknown = set(case.firing) - set(names)
    assert not unknown, f"{case.name}: no such alerts {unknown}"
    group: dict[str, Any] = {
        "name": case.name,
        "interval": f"{STEP_S}s",
        "input_series": [
            {"series": name, "values": values}
            for name, values in sorted(series.items())
            if values is not None
        ],
        "alert_rule_test": [
            {
                "eval_time": EVAL,
                "alertname": name,
                "exp_alerts": [
                    _expected(name, labels, generation) for labels in case.firing.get(name, [])
                ],
            }
            for name in names
        ],
    }
    if case.name.startswith("healthy: both arms"):
        group["promql_expr_test"] = _recorded_in_health(served)
    return group


test_group.__test__ = False  # type: ignore[attr-defined]  # a helper, not a pytest test


def _recorded_in_health(served: ServedMetrics) -> list[dict[str, Any]]:
    """The recorded series of the healthy case, where their value is a plain number."""
    route = {rules.ROUTE: SD_ROUTE}
    expected: list[tuple[str, dict[str, str], float]] = [
        # No 5xx or retry series from Envoy yet: a share of 0, not no data.
        (rules.ROUTE_FAILED, route, 0),
        (rules.ROUTE_FALLBACK, route, 0),
        (rules.ROUTE_FAILED, {rules.ROUTE: DEFAULT_ROUTE}, 0.1),
    ]
    if served.accepted:
        expected.append((rules.ACCEPTANCE, SD_ARM, 0.75))
    selector = {rules.ROUTE_FALLBACK: _labels(**route)}  # the default route's is 0 too
    tests = []
    for record in dict.fromkeys(name for name, _, _ in expected):
        tests.append(
            {
                "expr": record + selector.get(record, ""),
                "eval_time": EVAL,
                "exp_samples": [
                    {"labels": record + _labels(**labels), "value": value}
                    for name, labels, value in expected
                    if name == record
                ],
            }
        )
    return tests


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail(MISSING_PROMTOOL, pytrace=False)
    return found


def render(
    tmp_path: Path, generation: Generation, config: ExperimentConfig = CONFIG
) -> dict[str, Any]:
    document = rule_set(config, generation).prometheus()
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(document, sort_keys=False))
    return document


def write_tests(tmp_path: Path, generation: Generation) -> Path:
    path = tmp_path / "rules_test.yml"
    document = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": f"{CONFIG.guardrails.live.evaluation_interval_s}s",
        "tests": [test_group(case, generation) for case in cases(generation)],
    }
    path.write_text(yaml.safe_dump(document, sort_keys=False, width=120))
    return path


def run_promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *map(str, args)], capture_output=True, text=True, timeout=30)


def _output(result: subprocess.CompletedProcess[str]) -> str:
    return f"promtool exit {result.returncode}\n{result.stdout[-6000:]}\n{result.stderr[-3000:]}"


GENERATIONS = [Generation.LOCAL_CPU, Generation.NEURON_FORK]


def test_the_plugin_renders_what_local_cpu_renders() -> None:
    """Both serve vLLM's V1 engine (same metric names), so the local-cpu run covers both."""
    assert rule_set(CONFIG, Generation.NEURON_PLUGIN) == rule_set(CONFIG, Generation.LOCAL_CPU)


def test_the_fork_has_no_counter_rules() -> None:
    """The fork's V0 engine has no speculation counters: no rule may read them."""
    names = {alert.name for alert in _alerts(Generation.NEURON_FORK)}
    assert names == {alert.name for alert in _alerts(Generation.LOCAL_CPU)} - {FROZEN, ACCEPTANCE}
    text = yaml.safe_dump(rule_set(CONFIG, Generation.NEURON_FORK).prometheus())
    assert "spec_decode" not in text and rules.ACCEPTANCE not in text


@pytest.mark.parametrize("generation", GENERATIONS)
def test_every_alert_has_every_kind_of_case(generation: Generation) -> None:
    """Every case checks every alert, so each alert has a healthy, an idle, a stale and an
    absent case by construction; here: each fires in a case of its own, and a missing-data
    rule fires both when its series stop and when they never were."""
    chosen = cases(generation)
    kinds = {case.kind for case in chosen}
    assert kinds == {"healthy", "idle", "degraded", "stale", "absent"}
    for alert in {alert.name for alert in _alerts(generation)}:
        fired = {case.kind for case in chosen if alert in case.firing}
        need = {"stale", "absent"} if alert in MISSING_DATA else {"degraded"}
        assert need <= fired, f"{alert}: no {need - fired} case fires it"
    for case in chosen:
        if case.kind in ("healthy", "idle"):
            assert not case.firing, case.name


@pytest.mark.process  # runs promtool
@pytest.mark.parametrize("generation", GENERATIONS)
def test_promtool_passes_every_case(tmp_path: Path, generation: Generation) -> None:
    render(tmp_path, generation)
    result = run_promtool("test", "rules", write_tests(tmp_path, generation))
    assert result.returncode == 0, _output(result)


def _active(arm: str) -> str:
    """The rules' "the arm serves" clause, as rendered for the test configuration."""
    return f'({rules.FINISHED}{{arm="{arm}"}} > 0.0 or {rules.RUNNING}{{arm="{arm}"}} > 0)'


@dataclass(frozen=True)
class Mutation:
    """Replace ``old`` with ``new`` in the expression of the rule named ``rule`` (an alert or
    a recording)."""

    name: str
    rule: str
    old: str
    new: str
    generation: Generation = Generation.LOCAL_CPU
    shows: str | None = None  # the alert whose expectation fails, for a mutated recording


SD_DRAFTS = f'{rules.DRAFTS}{{arm="{SD}"}}'
MUTATIONS = [
    # (A down arm also leaves its vLLM series stale, so `up == 1` alone is not mutated: the
    # gauge's clause covers it; the gateway has no such second clause.)
    Mutation(
        "a scrape without vLLM's series passes",
        ARM_MISSING,
        f" and on() group({rules.SERVED_METRICS[Generation.LOCAL_CPU].running}",
        " or on() group(",
    ),
    Mutation("a down gateway counts as scraped", GATEWAY_MISSING, " == 1)", ")"),
    Mutation("absent counters pass", FROZEN, f" or on() absent({SD_DRAFTS})", ""),
    Mutation(
        "frozen counters fire without decoding",
        FROZEN,
        f'{rules.DECODING}{{arm="{SD}"}} > 0',
        "vector(1) > 0",
    ),
    Mutation("the acceptance floor halved", ACCEPTANCE, "< 0.5", "< 0.25"),
    Mutation("the failed-share comparison flipped", FAILING, "> 0.01", "< 0.01"),
    Mutation(
        "no 5xx series is no data",
        rules.ROUTE_FAILED,
        f" or {rules.ROUTE_ATTEMPTS} * 0",
        "",
    ),
    Mutation("the fallback ceiling raised", FALLING_BACK, "> 0.05", "> 0.5"),
    Mutation(
        "retries counted as requests",
        rules.ROUTE_REQUESTS,
        f" - {rules.ROUTE_RETRIES}",
        "",
        shows=FALLING_BACK,
    ),
    Mutation(
        "a rescued attempt counted as failed",
        rules.ROUTE_FAILED,
        f" - {rules.ROUTE_RETRIES}",
        "",
        shows=FAILING,
    ),
    Mutation("the latency margin raised", SLOWER, "> 1.1", "> 1.5"),
    Mutation("the fork's latency margin raised", SLOWER, "> 1.1", "> 1.5", Generation.NEURON_FORK),
    Mutation(
        "an arm that never served counts as gone",
        ARM_MISSING,
        ' and on() (max(max_over_time(up{job="'
        + JOB["vllm"]
        + '", arm="'
        + SD
        + '"}[3600s])) == 1)',
        "",
    ),
    Mutation(
        "the probe counts as missing before the speculative arm serves",
        PROBE_MISSING,
        ' and on() (max(up{job="' + JOB["vllm"] + '", arm="' + SD + '"}) == 1)',
        "",
    ),
    Mutation("the probe's floor lowered", PROBE_ACCEPTANCE_LOW, "< 0.5", "< 0.2"),
    Mutation("the lossless tolerance lowered", LOSSY, "< 0.95", "< 0.5"),
    Mutation(
        "no last-success time passes",
        PROBE_MISSING,
        f"absent({PROBE_LAST_SUCCESS}) or ",
        "",
    ),
    Mutation("old probe results pass", PROBE_MISSING, "> 120", "> 1200"),
    Mutation(
        "no agreement passes",
        PROBE_MISSING,
        f" or absent({PROBE_AGREEMENT})",
        "",
    ),
]


@pytest.mark.process  # runs promtool
@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.name.replace(" ", "-"))
def test_a_weakened_rule_fails_the_cases(tmp_path: Path, mutation: Mutation) -> None:
    document = render(tmp_path, mutation.generation)
    (rule,) = (
        rule
        for rule in document["groups"][0]["rules"]
        if mutation.rule in (rule.get("alert"), rule.get("record"))
    )
    assert mutation.old in rule["expr"], f"{mutation.name}: {mutation.old!r} not in the rule"
    rule["expr"] = rule["expr"].replace(mutation.old, mutation.new)
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(document, sort_keys=False))
    tests = write_tests(tmp_path, mutation.generation)
    assert run_promtool("check", "rules", tmp_path / "rules.yml").returncode == 0
    result = run_promtool("test", "rules", tests)
    assert result.returncode != 0, f"{mutation.name}: the cases still pass\n{_output(result)}"
    # The failure is the mutated rule's (an alert's expectation, or the recording's values).
    assert (mutation.shows or mutation.rule) in result.stdout + result.stderr, _output(result)


CHECKED_CONFIGS = {
    "test": {},
    "defaults": None,
    "two speculative classes": {"routing.speculative_classes": "structured,open_ended"},
    "probe disabled": {"guardrails.probe.enabled": "false"},
}


@pytest.mark.process  # runs promtool
@pytest.mark.parametrize("generation", list(Generation))
@pytest.mark.parametrize("which", CHECKED_CONFIGS)
def test_promtool_checks_every_rendering(
    tmp_path: Path, which: str, generation: Generation
) -> None:
    more = CHECKED_CONFIGS[which]
    config = build_config({}) if more is None else _config(**more)
    document = render(tmp_path, generation, config)
    result = run_promtool("check", "rules", tmp_path / "rules.yml")
    assert result.returncode == 0, _output(result)
    count = len(document["groups"][0]["rules"])
    assert f"SUCCESS: {count} rules found" in result.stdout, _output(result)
    names = [rule.get("alert") for rule in document["groups"][0]["rules"]]
    assert (PROBE_MISSING in names) is config.guardrails.probe.enabled
    floors = config.routing.speculative_classes if config.guardrails.probe.enabled else []
    assert names.count(PROBE_ACCEPTANCE_LOW) == len(floors)


# --- speculation stopped paying, judged against the schedule's prediction ----------------------

SCHEDULED = {
    "serving.speculation_schedule": "[[1,3,3],[4,8,1]]",  # range 2: no k pays, k=1 kept
    "local.max_num_seqs": "8",
}
PREDICTED = {"guardrails.live.schedule_predicted_speedups": "[1.6,0.8]"}  # 0.8: a loss expected


def _schedule_timeline(served: ServedMetrics) -> dict[str, str]:
    """Healthy otherwise; the speculative arm runs 2 requests until 45 s, then 6; the probe's
    time per token on the speculative arm is 1.25 times the baseline's until 105 s, then 1.5
    times (0.05 s per token on the baseline)."""
    series = healthy(served)
    series[vllm(served.running, SD)] = "2x3 6x8"
    series[PROBE_TIME_SD] = "0.0625x7 0.075x4"
    series[PROBE_TIME_BASE] = steady(0.05)
    return series


# (eval time, fires): batch 2 (range 1, predicted 1.6x: 1.25 > 1.1 fires); batch 6 (range 2,
# predicted 0.8x: 1.25 is within the 1.1 / 0.8 = 1.375 it allows); batch 6 at 1.5 (worse than
# the predicted loss: fires).
SCHEDULE_TIMELINE = [("30s", True), ("90s", False), ("150s", True)]


def _schedule_tests(config: ExperimentConfig) -> dict[str, Any]:
    served = SERVED_METRICS[Generation.LOCAL_CPU]
    series = _schedule_timeline(served)
    (alert,) = [a for a in rule_set(config, Generation.LOCAL_CPU).alerts if a.name == SLOWER]
    expected = {
        "exp_labels": {"severity": "page", **PROBE_JOB, rules.CLASS: CLASS},
        "exp_annotations": {"summary": alert.summary},
    }
    return {
        "rule_files": ["rules.yml"],
        "evaluation_interval": f"{config.guardrails.live.evaluation_interval_s}s",
        "tests": [
            {
                "name": "speculation stopped paying, against the schedule's prediction",
                "interval": f"{STEP_S}s",
                "input_series": [
                    {"series": name, "values": values} for name, values in sorted(series.items())
                ],
                "alert_rule_test": [
                    {
                        "eval_time": at,
                        "alertname": SLOWER,
                        "exp_alerts": [expected] if fires else [],
                    }
                    for at, fires in SCHEDULE_TIMELINE
                ],
            }
        ],
    }


def test_a_schedule_without_predicted_speedups_keeps_the_plain_margin() -> None:
    plain = {a.name: a.expr for a in _alerts(Generation.LOCAL_CPU, _config(**SCHEDULED))}
    assert plain[SLOWER].endswith("> 1.1")
    gains = _config(**SCHEDULED, **{"guardrails.live.schedule_predicted_speedups": "[1.6,1.2]"})
    assert {a.name: a.expr for a in _alerts(Generation.LOCAL_CPU, gains)} == plain


@pytest.mark.process  # runs promtool
def test_a_loss_the_schedule_predicted_does_not_fire_a_worse_one_does(tmp_path: Path) -> None:
    config = _config(**SCHEDULED, **PREDICTED)
    render(tmp_path, Generation.LOCAL_CPU, config)
    tests = tmp_path / "schedule_test.yml"
    tests.write_text(yaml.safe_dump(_schedule_tests(config), sort_keys=False, width=120))
    result = run_promtool("test", "rules", tests)
    assert result.returncode == 0, _output(result)
    # The same timeline without the prediction fires at batch 6 too: the prediction is what
    # keeps it quiet there, so this test can fail.
    render(tmp_path, Generation.LOCAL_CPU, _config(**SCHEDULED))
    result = run_promtool("test", "rules", tests)
    fired_at_batch_6 = "time: 1m30s" in result.stdout + result.stderr
    assert result.returncode != 0 and fired_at_batch_6, _output(result)
