"""The guardrail probe: a small, bounded sample of the prompt suite through the gateway, per
class, to both arms, at temperature 0; lossless prefix agreement and per-class acceptance
pushed to a Prometheus Pushgateway (``python -m loadtest probe``; the cluster's CronJob,
charts/probe.py).

Each speculative class (``routing.speculative_classes``) gets its first
``guardrails.probe.prompts_per_class`` prompts of the suite (``loadtest.prompts``, file
order: the same prompts every run). Each prompt goes through the gateway twice: with the
class header (``routing.class_header``: the speculative route) and without it (the default
route: the baseline). Nothing is measured here that the load test does not measure already:
agreement is ``loadtest.lossless``'s prefix agreement, acceptance per class is the paired
statistics' client-side estimate from tokens per chunk (``loadtest.stats``,
``acceptance_rate_estimate``).

Bounded: at most classes x prompts_per_class x 2 requests, sent one at a time (the probe
must not load the arms it watches), each with a timeout that ends by the run's deadline
(``guardrails.probe.deadline_s`` less the push's time), never retried. The results are
pushed only when every request succeeded and every figure exists: a partial run pushes
nothing, so ``PROBE_LAST_SUCCESS`` ages and the probe-missing alert fires, and the command
exits 1 with its failures counted. Why push and not be scraped: the run lasts seconds every
few minutes and its pod is gone before a scrape could find it; a Pushgateway is the
ecosystem's holder for a service-level batch job's outcome (prometheus.io docs, "When to use
the Pushgateway"). Prompts are never printed: ids only.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Gauge, push_to_gateway

from experiment.config import Arm, ExperimentConfig
from guardrails.rules import (
    ARM,
    CLASS,
    PROBE_ACCEPTANCE,
    PROBE_AGREEMENT,
    PROBE_LAST_SUCCESS,
    PROBE_TOKEN_TIME,
    jobs,
)
from loadtest.analysis import served_k
from loadtest.client import RequestParams, stream_request
from loadtest.lossless import lossless_check
from loadtest.metrics import tpot_s
from loadtest.prompts import Prompt, load_prompts
from loadtest.records import RequestRecord
from loadtest.stats import paired_statistics
from loadtest.transport import StreamSession

# Seconds the push may take (prometheus_client push_to_gateway's ``timeout``); the requests'
# budget is the deadline less this, so a run that ends on time can still push.
PUSH_TIMEOUT_S = 10.0
DEADLINE = "deadline"  # a request not sent: the run's time was up


@dataclass
class ProbeRun:
    """What one probe run measured. ``failures``: reason -> count (a record's error, or
    ``deadline`` for a request not sent, or a figure that could not be computed)."""

    selected: dict[str, list[str]]  # class -> prompt ids
    records: dict[Arm, list[RequestRecord]] = field(default_factory=dict)
    acceptance: dict[str, float | None] = field(default_factory=dict)
    # class -> arm -> mean time per output token of the class's prompts (the same on both)
    token_time: dict[str, dict[Arm, float | None]] = field(default_factory=dict)
    agreement: float | None = None
    failures: Counter[str] = field(default_factory=Counter)

    @property
    def requests(self) -> int:
        return sum(len(records) for records in self.records.values())

    @property
    def complete(self) -> bool:
        return not self.failures


def select_prompts(config: ExperimentConfig) -> dict[str, list[Prompt]]:
    """Each speculative class's first ``prompts_per_class`` prompts of the suite."""
    per_class = config.guardrails.probe.prompts_per_class
    prompts = load_prompts(list(config.loadtest.prompts.files))
    selected: dict[str, list[Prompt]] = {}
    for name in config.routing.speculative_classes:
        members = [prompt for prompt in prompts if prompt.prompt_class == name][:per_class]
        if not members:
            raise ValueError(
                f"routing.speculative_classes names {name!r} but loadtest.prompts.files hold no "
                f"prompt of that class; add one or remove the class"
            )
        selected[name] = members
    return selected


def request_params(config: ExperimentConfig, arm: Arm) -> RequestParams:
    """The load test's request, at temperature 0 and the probe's length; the class header
    only on the speculative arm's request (the baseline's takes the gateway's default)."""
    lt = config.loadtest
    return RequestParams(
        model=config.serving.target_model,
        max_tokens=config.guardrails.probe.max_tokens,
        temperature=0.0,
        ignore_eos=lt.ignore_eos,
        seed=lt.seed,
        timeout_s=lt.request_timeout_s,
        class_header=config.routing.class_header if arm is Arm.SPECULATIVE else None,
    )


def run_probe(
    config: ExperimentConfig,
    gateway_url: str,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> ProbeRun:
    """Send the sample through ``gateway_url``, one request at a time, and measure it."""
    if not gateway_url.startswith(("http://", "https://")):
        raise ValueError(f"gateway URL {gateway_url!r} must start with http:// or https://")
    selected = select_prompts(config)
    run = ProbeRun({name: [p.id for p in members] for name, members in selected.items()})
    run.records = {arm: [] for arm in Arm}
    deadline = clock() + config.guardrails.probe.deadline_s - PUSH_TIMEOUT_S
    params = {arm: request_params(config, arm) for arm in Arm}
    items = [prompt for members in selected.values() for prompt in members]
    with StreamSession() as session:
        for index, prompt in enumerate(items):
            for arm in (Arm.SPECULATIVE, Arm.BASELINE):
                left = deadline - clock()
                if left <= 0:
                    run.failures[DEADLINE] += 1
                    continue
                record = RequestRecord(
                    arm=arm.value, index=index, prompt_id=prompt.id,
                    prompt_class=prompt.prompt_class,
                )  # fmt: skip
                # The request's own timeout ends by the run's deadline: no request outlives it.
                timeout = min(params[arm].timeout_s, left)
                limited = dataclasses.replace(params[arm], timeout_s=timeout)
                stream_request(session, gateway_url, prompt.text, limited, record)
                run.records[arm].append(record)
                if not record.ok:
                    run.failures[record.error or "failed"] += 1
    if run.failures:
        return run
    baseline, speculative = run.records[Arm.BASELINE], run.records[Arm.SPECULATIVE]
    run.agreement = lossless_check(baseline, speculative, 0.0).prefix_agreement_rate
    if run.agreement is None:
        run.failures["no tokens compared"] += 1
    statistics = paired_statistics(
        baseline,
        speculative,
        num_speculative_tokens=served_k(config, local=False),
        settings=config.statistics,
    )
    for name in selected:
        scope = statistics.by_class.get(name)
        estimate = scope.acceptance_rate_estimate.estimate if scope else None
        run.acceptance[name] = estimate
        if estimate is None:
            run.failures[f"no acceptance estimate for class {name}"] += 1
        run.token_time[name] = {}
        for arm in Arm:
            # Per request, decode time / tokens after the first (loadtest.metrics.tpot_s):
            # independent of how the server batches tokens into chunks.
            times = [
                t
                for r in run.records[arm]
                if r.prompt_class == name and (t := tpot_s(r)) is not None
            ]
            run.token_time[name][arm] = sum(times) / len(times) if times else None
            if not times:
                run.failures[f"no time per output token for class {name} on {arm.value}"] += 1
    return run


def registry_of(config: ExperimentConfig, run: ProbeRun, now: float) -> CollectorRegistry:
    """The series the guardrail rules read (guardrails/rules.py), of a complete run."""
    if not run.complete or run.agreement is None:
        raise ValueError("only a complete probe run is pushed")
    registry = CollectorRegistry()
    acceptance = Gauge(
        PROBE_ACCEPTANCE,
        "Client-side acceptance estimate of the speculative arm, per prompt class (probe)",
        [CLASS],
        registry=registry,
    )
    for name, value in run.acceptance.items():
        assert value is not None  # a complete run has every class's estimate
        acceptance.labels(name).set(value)
    token_time = Gauge(
        PROBE_TOKEN_TIME,
        "Mean time per output token of the class's probe prompts on each arm, seconds (probe)",
        [CLASS, ARM],
        registry=registry,
    )
    for name, by_arm in run.token_time.items():
        for arm, seconds in by_arm.items():
            assert seconds is not None  # a complete run has every class's pair
            token_time.labels(name, arm.value).set(seconds)
    Gauge(
        PROBE_AGREEMENT,
        "Greedy-output tokens before the first divergence / tokens compared (probe)",
        registry=registry,
    ).set(run.agreement)
    Gauge(
        PROBE_LAST_SUCCESS,
        "Unix time of the last complete probe run",
        registry=registry,
    ).set(now)
    return registry


def push(config: ExperimentConfig, run: ProbeRun, pushgateway_url: str) -> None:
    """PUT the run's group (job = the probe's scrape job): it replaces the last run's."""
    # prometheus_client exposition.py push_to_gateway: PUT to /metrics/job/<job>.
    push_to_gateway(
        pushgateway_url,
        job=jobs(config)["probe"],
        registry=registry_of(config, run, time.time()),
        timeout=PUSH_TIMEOUT_S,
    )


def describe(run: ProbeRun) -> str:
    """Lines for the log: per class its prompt ids and acceptance, the agreement and the
    failures. Never a prompt's text."""
    lines = [f"requests sent: {run.requests}"]
    for name, ids in run.selected.items():
        value = run.acceptance.get(name)
        shown = "n/a" if value is None else f"{value:.3f}"
        lines.append(f"class {name}: prompts {','.join(ids)}; acceptance estimate {shown}")
    if run.agreement is not None:
        lines.append(f"prefix agreement: {run.agreement:.4f}")
    for reason, count in sorted(run.failures.items()):
        lines.append(f"failed: {count} x {reason}")
    return "\n".join(lines)
