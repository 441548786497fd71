"""The CloudWatch-only guardrails, written once: over the figures the load test publishes
(loadtest/cloudwatch.py), for when the live guardrails are off (``guardrails.live.enabled``
false) or no Prometheus is there to evaluate ``guardrails.rules``.

Two renderings read this one list: the alarms (stacks/alarms.py, each notifying the
guardrail topic) and, for the guardrails marked ``analysis`` (those about the speculative
arm), the rollback analysis' CloudWatch metrics (charts/rollout.py). Same names, metrics,
dimensions, statistics, periods, thresholds and debounce in both, so an alarm and the
analysis cannot disagree about what breaches. The thresholds are those of the live rules:
``guardrails.min_acceptance_rate`` or the class's own ``routing.acceptance_floors`` floor,
``max_failed_request_share``, ``lossless_min_prefix_agreement``.

- acceptance from the server's counters (``AcceptanceRate``) where the run had them, and the
  client-side estimate of each prompt class (``AcceptanceRateEstimate``) for servers without
  counters. CloudWatch needs concrete dimensions (no SEARCH in an alarm), so the classes are
  those of the configured prompt files, read here (guardrails/ does not import loadtest/;
  tests/stacks/test_alarms.py checks both agree), and the speculative routes' classes.
- the failed-request share of each arm (the baseline's notifies; only the speculative arm's
  rolls back).
- lossless: the SD arm's prefix agreement with the baseline at temperature 0 below the
  tolerance (greedy outputs on Neuron are not bit-exact, so one late divergence must not fire).

Debounce: a guardrail breaches on ``guardrails.evaluation_periods`` datapoints on the wrong
side of the threshold, the alarm's own rule (``EvaluationPeriods`` with ``DatapointsToAlarm``
left at its default, the same number); the analysis states it as its condition over the
window it looks back on, with failureLimit 0. Missing data is not breaching (CloudWatch User
Guide, "Configuring how CloudWatch alarms treat missing data"): a run publishes once, and a
figure a server cannot give is not published, never published as 0.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from experiment.config import Arm, ExperimentConfig
from experiment.loading import PROJECT_ROOT

Bound = Literal["at_least", "at_most"]


@dataclass(frozen=True)
class CloudWatchGuardrail:
    """One guardrail over a published metric. ``name`` is the alarm's (after the project's
    prefix) and the analysis metric's; ``analysis``: the rollback analysis checks it too."""

    name: str
    description: str
    metric: str
    dimensions: tuple[tuple[str, str], ...]
    statistic: str
    period_s: int
    threshold: float
    must_be: Bound
    breaches_to_fail: int
    analysis: bool

    def breaches(self, value: float) -> bool:
        return value < self.threshold if self.must_be == "at_least" else value > self.threshold

    def passes(self, values: list[float]) -> bool:
        """The verdict on the datapoints of the window looked back on (none: a pass)."""
        return sum(self.breaches(value) for value in values) < self.breaches_to_fail

    def condition(self) -> str:
        """The same verdict in Argo's expr language (``result`` is GetMetricData's
        MetricDataResults; ``count`` is expr's builtin, 0 on an empty list)."""
        op = "<" if self.must_be == "at_least" else ">"
        return f"count(result[0].Values, {{# {op} {self.threshold!r}}}) < {self.breaches_to_fail}"


def prompt_classes(config: ExperimentConfig) -> list[str]:
    """The prompt classes of the configured prompt files, sorted (only each JSONL line's
    ``class`` is read; the load test validates the files)."""
    classes: set[str] = set()
    for name in config.loadtest.prompts.files:
        path = Path(name) if Path(name).is_absolute() else PROJECT_ROOT / name
        if not path.is_file():
            raise ValueError(
                f"loadtest.prompts.files: {name!r} does not exist; the guardrail alarms need "
                "the prompt classes it defines"
            )
        for line in path.read_text().splitlines():
            if line.strip():
                classes.add(str(json.loads(line)["class"]))
    return sorted(classes)


def _kebab(text: str) -> str:
    return text.replace("_", "-")


def cloudwatch_guardrails(config: ExperimentConfig) -> list[CloudWatchGuardrail]:
    lt = config.loadtest
    names = lt.metric_names
    guard = config.guardrails
    sd = lt.variant_labels[Arm.SPECULATIVE]
    variant = ((lt.variant_dimension, sd),)

    def guardrail(
        name: str,
        description: str,
        metric: str,
        dimensions: tuple[tuple[str, str], ...],
        threshold: float,
        must_be: Bound,
        analysis: bool,
    ) -> CloudWatchGuardrail:
        return CloudWatchGuardrail(
            name=name,
            description=description,
            metric=metric,
            dimensions=dimensions,
            statistic="Minimum" if must_be == "at_least" else "Maximum",
            period_s=guard.period_minutes * 60,
            threshold=threshold,
            must_be=must_be,
            breaches_to_fail=guard.evaluation_periods,
            analysis=analysis,
        )

    found = [
        guardrail(
            "sd-acceptance-measured",
            f"SD arm ({sd}): acceptance from the server's spec-decode counters below "
            f"guardrails.min_acceptance_rate {guard.min_acceptance_rate}; speculation may cost "
            "more than it saves. Published only when the counters moved (never for frozen "
            "counters)",
            names.acceptance_rate,
            variant,
            guard.min_acceptance_rate,
            "at_least",
            analysis=True,
        )
    ]
    speculative = config.routing.speculative_classes
    for prompt_class in sorted(set(prompt_classes(config)) | set(speculative)):
        floor = config.routing.acceptance_floor(prompt_class, guard.min_acceptance_rate)
        found.append(
            guardrail(
                f"sd-acceptance-{_kebab(prompt_class)}",
                f"SD arm ({sd}): client-side acceptance estimate of prompt class "
                f"{prompt_class!r} (servers without spec-decode counters) below its floor "
                f"{floor} (routing.acceptance_floors, else guardrails.min_acceptance_rate); "
                "speculation may cost more than it saves for this class",
                names.acceptance_rate_estimate,
                (*variant, (lt.prompt_class_dimension, prompt_class)),
                floor,
                "at_least",
                # Only the classes routed to the speculative arm can roll it back.
                analysis=prompt_class in speculative,
            )
        )
    for arm in Arm:
        label = lt.variant_labels[arm]
        found.append(
            guardrail(
                f"failed-share-{arm.value}",
                f"{arm.value} arm ({label}): share of failed requests above "
                f"guardrails.max_failed_request_share {guard.max_failed_request_share}",
                names.failed_request_share,
                ((lt.variant_dimension, label),),
                guard.max_failed_request_share,
                "at_most",
                analysis=arm is Arm.SPECULATIVE,
            )
        )
    found.append(
        guardrail(
            "lossless-agreement",
            f"SD arm ({sd}) reproduced less than guardrails.lossless_min_prefix_agreement "
            f"({guard.lossless_min_prefix_agreement}) of the baseline's greedy output before "
            "diverging (temperature 0): see the run's report (lossless section: first "
            "divergence per prompt)",
            names.lossless_prefix_agreement,
            variant,
            guard.lossless_min_prefix_agreement,
            "at_least",
            analysis=True,
        )
    )
    return found


def analysis_guardrails(config: ExperimentConfig) -> list[CloudWatchGuardrail]:
    """The guardrails the rollback analysis checks with live guardrails off."""
    return [found for found in cloudwatch_guardrails(config) if found.analysis]
