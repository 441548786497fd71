"""Argo Rollouts' analysis semantics, written once: when a metric is measured, how a
measurement is judged, when a metric and its AnalysisRun fail, error or stay inconclusive, and
so when the Rollout aborts.

Read at argoproj/argo-rollouts v1.9.1 (the version the stacks install):

- ``analysis/analysis.go`` ``generateMetricTasks``: a metric's first measurement is taken at
  the run's start, or ``initialDelay`` after it; the next one ``interval`` after the last
  one *finished*, except after an Error, which is retried after ``DefaultErrorRetryInterval``
  (10 s) whatever the interval; none once ``count`` measurements were taken.
- ``pkg/apis/rollouts/v1alpha1/analysis_types.go`` ``EffectiveCount``: no count and no
  interval is one measurement; an interval alone measures for ever.
- ``analysis/analysis.go`` ``runMeasurements``: Successful, Failed and Inconclusive
  measurements count (and reset the consecutive errors); an Error counts only as an error.
- ``analysis/analysis.go`` ``assessMetricFailureInconclusiveOrError``: a metric is **Failed
  when its failed measurements exceed failureLimit** (default 0: the first failure fails it;
  negative: never), Inconclusive when inconclusive ones exceed inconclusiveLimit (default 0),
  **Error when consecutive errors exceed consecutiveErrorLimit** (default 4,
  ``utils/defaults/defaults.go``). The counts are for the life of the run: a background run
  lives as long as the canary.
- ``utils/evaluate/evaluate.go`` ``EvaluateResult``: failureCondition true is Failed; else
  successCondition true is Successful; neither is Inconclusive (one condition alone: the other
  is its negation). ``metricproviders/prometheus/prometheus.go`` ``processResponse``: a vector
  is handed to the conditions as ``result``, the list of its sample values; a query error is
  an Error measurement.
- ``rollout/analysis.go`` ``reconcileBackgroundAnalysisRun``: a run that is Failed or Error
  aborts the Rollout; Inconclusive pauses it for a person.
- ``utils/replicaset/canary.go`` ``BeforeStartingStep`` (and the same gate in
  ``reconcileBackgroundAnalysisRun``): the background run is created only once the current
  step index reaches ``analysis.startingStep``; ``rollout/canary.go``
  ``completedCurrentCanaryStep``: a ``setCanaryScale`` step completes when the canary's
  *available* replicas reach the count (``AtDesiredReplicaCountsForCanary``), an ``analysis``
  step when its run is Successful.

The conditions are Argo's expression language (antonmedv/expr); ``Condition`` parses the
subset the project renders (``result``, indexing, ``len``, numbers, comparisons, ``&&``,
``||``, ``!``, parentheses) and refuses anything else, so a rendered condition this module
cannot judge exactly fails a test instead of being guessed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

DEFAULT_ERROR_RETRY_S = 10.0  # analysis/analysis.go DefaultErrorRetryInterval
DEFAULT_CONSECUTIVE_ERROR_LIMIT = 4  # utils/defaults/defaults.go DefaultConsecutiveErrorLimit


class Phase(StrEnum):
    """v1alpha1.AnalysisPhase."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCESSFUL = "Successful"
    FAILED = "Failed"
    INCONCLUSIVE = "Inconclusive"
    ERROR = "Error"

    @property
    def completed(self) -> bool:
        return self not in (Phase.PENDING, Phase.RUNNING)


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration_s(text: str) -> float:
    """A Go duration string as Argo's DurationString takes it (``30s``, ``1m30s``, ``2h``)."""
    parts = _DURATION.findall(text)
    if not text or "".join(f"{n}{u}" for n, u in parts) != text:
        raise ValueError(f"{text!r} is not a duration such as '60s' or '1m30s'")
    return sum(float(n) * _UNIT_S[u] for n, u in parts)


# -- the condition language ------------------------------------------------------------------

_TOKEN = re.compile(
    r"\s*(?:(\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)|(&&|\|\||==|!=|<=|>=|[<>!()\[\]])|([A-Za-z_]\w*))"
)


@dataclass(frozen=True)
class Condition:
    """One success or failure condition, parsed once; ``holds(result)`` evaluates it."""

    text: str

    def __post_init__(self) -> None:
        self.holds([0.0])  # parse now: an unsupported condition fails at load, not at runtime

    def holds(self, result: Sequence[float]) -> bool:
        value = _Parser(self.text, list(result)).parse()
        if not isinstance(value, bool):
            raise ValueError(f"condition {self.text!r} is not a boolean expression")
        return value


class _Parser:
    """Recursive descent over: or := and ('||' and)*; and := not ('&&' not)*;
    not := '!' not | cmp; cmp := atom (op atom)?; atom := number | result | result[n] |
    len(atom) | '(' or ')'. Indexing past the end is an error, as in expr."""

    def __init__(self, text: str, result: list[float]) -> None:
        self.text = text
        self.result = result
        self.tokens: list[str] = []
        pos = 0
        while pos < len(text):
            match = _TOKEN.match(text, pos)
            if not match or match.end() == pos:
                if text[pos:].strip() == "":
                    break
                raise ValueError(f"condition {text!r}: cannot read {text[pos:]!r}")
            self.tokens.append(next(g for g in match.groups() if g is not None))
            pos = match.end()
        self.pos = 0
        self.skip = 0

    def parse(self) -> Any:
        value = self._or()
        if self.pos != len(self.tokens):
            raise ValueError(f"condition {self.text!r}: unexpected {self.tokens[self.pos]!r}")
        return value

    def _peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def _take(self, expected: str | None = None) -> str:
        token = self._peek()
        if token is None or (expected is not None and token != expected):
            raise ValueError(f"condition {self.text!r}: expected {expected or 'more'}")
        self.pos += 1
        return token

    def _or(self) -> Any:
        value = self._and()
        while self._peek() == "||":
            self._take()
            right = self._skipped(self._and) if value else self._and()
            value = bool(value) or bool(right)
        return value

    def _skipped(self, part: Callable[[], Any]) -> Any:
        """Parse ``part`` without evaluating it: ``&&`` and ``||`` short-circuit in expr, so
        ``len(result) == 1 && result[0] == 0`` is false, not an error, on an empty result."""
        self.skip += 1
        try:
            return part()
        finally:
            self.skip -= 1

    def _and(self) -> Any:
        value = self._not()
        while self._peek() == "&&":
            self._take()
            right = self._not() if value else self._skipped(self._not)
            value = bool(value) and bool(right)
        return value

    def _not(self) -> Any:
        if self._peek() == "!":
            self._take()
            return not self._not()
        return self._cmp()

    def _cmp(self) -> Any:
        left = self._atom()
        op = self._peek()
        if op in ("==", "!=", "<", "<=", ">", ">="):
            self._take()
            right = self._atom()
            ops: dict[str, Callable[[Any, Any], bool]] = {
                "==": lambda a, b: a == b,
                "!=": lambda a, b: a != b,
                "<": lambda a, b: a < b,
                "<=": lambda a, b: a <= b,
                ">": lambda a, b: a > b,
                ">=": lambda a, b: a >= b,
            }
            return ops[op](left, right)
        return left

    def _atom(self) -> Any:
        token = self._take()
        if token == "(":
            value = self._or()
            self._take(")")
            return value
        if token == "len":
            self._take("(")
            value = self._or()
            self._take(")")
            return len(value)
        if token == "result":
            found: Any = self.result
            while self._peek() == "[":
                self._take()
                index = self._atom()
                self._take("]")
                if not isinstance(index, float) or not index.is_integer():
                    raise ValueError(f"condition {self.text!r}: index {index!r} is not whole")
                if self.skip:
                    return 0.0
                if not 0 <= int(index) < len(found):
                    raise IndexError(
                        f"index out of range: {int(index)} (array length {len(found)})"
                    )
                found = found[int(index)]
            return found
        if token[0].isdigit():
            return float(token)
        raise ValueError(f"condition {self.text!r}: {token!r} is not supported")


def judge(result: Sequence[float], success: Condition | None, failure: Condition | None) -> Phase:
    """``EvaluateResult``: one measurement's phase from its value; a condition that cannot be
    evaluated on it (an index past the end) is an Error, as Argo's evaluation error is."""
    try:
        succeeded = success.holds(result) if success else False
        failed = failure.holds(result) if failure else False
    except (IndexError, TypeError):
        return Phase.ERROR
    if success is None and failure is None:
        return Phase.SUCCESSFUL
    if failure is None:
        failed = not succeeded
    elif success is None:
        succeeded = not failed
    if failed:
        return Phase.FAILED
    return Phase.SUCCESSFUL if succeeded else Phase.INCONCLUSIVE


# -- metrics and runs ------------------------------------------------------------------------


@dataclass(frozen=True)
class Metric:
    """One metric of an AnalysisTemplate, as the controller reads it."""

    name: str
    interval_s: float | None
    initial_delay_s: float
    count: int | None  # EffectiveCount: None measures for ever
    failure_limit: int
    inconclusive_limit: int
    consecutive_error_limit: int
    success: Condition | None
    failure: Condition | None
    query: str | None  # the Prometheus provider's query; None for other providers

    @classmethod
    def from_template(cls, metric: dict[str, Any]) -> Metric:
        """From one entry of an AnalysisTemplate's ``spec.metrics`` (the rendered dict)."""
        interval = duration_s(metric["interval"]) if metric.get("interval") else None
        count = metric.get("count") or None
        effective = count if count is not None else (None if interval is not None else 1)
        prometheus = metric.get("provider", {}).get("prometheus")
        delay = metric.get("initialDelay")
        success, failure = metric.get("successCondition"), metric.get("failureCondition")
        return cls(
            name=metric["name"],
            interval_s=interval,
            initial_delay_s=duration_s(delay) if delay else 0.0,
            count=effective,
            failure_limit=int(metric.get("failureLimit", 0)),
            inconclusive_limit=int(metric.get("inconclusiveLimit", 0)),
            consecutive_error_limit=int(
                metric.get("consecutiveErrorLimit", DEFAULT_CONSECUTIVE_ERROR_LIMIT)
            ),
            success=Condition(success) if success else None,
            failure=Condition(failure) if failure else None,
            query=prometheus["query"] if prometheus else None,
        )


@dataclass(frozen=True)
class Measurement:
    at_s: float
    phase: Phase
    value: str = ""  # the result as text, or the error's message


@dataclass
class MetricResult:
    """v1alpha1.MetricResult: the counters the limits are judged on."""

    metric: Metric
    measurements: list[Measurement] = field(default_factory=list)
    count: int = 0
    successful: int = 0
    failed: int = 0
    inconclusive: int = 0
    error: int = 0
    consecutive_error: int = 0

    def add(self, measurement: Measurement) -> None:
        self.measurements.append(measurement)
        if measurement.phase is Phase.ERROR:
            self.error += 1
            self.consecutive_error += 1
            return
        self.count += 1
        self.consecutive_error = 0
        if measurement.phase is Phase.SUCCESSFUL:
            self.successful += 1
        elif measurement.phase is Phase.FAILED:
            self.failed += 1
        else:
            self.inconclusive += 1

    def verdict(self) -> tuple[Phase | None, str]:
        """``assessMetricFailureInconclusiveOrError``: the last matching line wins."""
        phase, message = None, ""
        limit = self.metric.failure_limit
        if limit >= 0 and self.failed > limit:
            phase, message = Phase.FAILED, f"failed ({self.failed}) > failureLimit ({limit})"
        if self.inconclusive > self.metric.inconclusive_limit:
            phase = Phase.INCONCLUSIVE
            message = (
                f"inconclusive ({self.inconclusive}) > inconclusiveLimit "
                f"({self.metric.inconclusive_limit})"
            )
        if self.consecutive_error > self.metric.consecutive_error_limit:
            phase = Phase.ERROR
            message = (
                f"consecutiveErrors ({self.consecutive_error}) > consecutiveErrorLimit "
                f"({self.metric.consecutive_error_limit})"
            )
        return phase, message

    def phase(self) -> Phase:
        """``assessMetricStatus`` without termination (the run stops at the first end)."""
        if not self.measurements:
            return Phase.PENDING
        verdict, _ = self.verdict()
        if verdict is not None:
            return verdict
        if self.metric.count is not None and self.count >= self.metric.count:
            return Phase.SUCCESSFUL
        return Phase.RUNNING

    def next_due_s(self, started_at_s: float) -> float | None:
        """When ``generateMetricTasks`` takes the next measurement; None: never again."""
        if self.phase().completed:
            return None
        if not self.measurements:
            return started_at_s + self.metric.initial_delay_s
        last = self.measurements[-1]
        if last.phase is Phase.ERROR:
            return last.at_s + DEFAULT_ERROR_RETRY_S
        return last.at_s + (self.metric.interval_s or DEFAULT_ERROR_RETRY_S)


# A measurement: the metric and the time -> the provider's answer: a list of sample values, or
# an exception (the query could not be signed, sent or evaluated), which is an Error.
Measure = Callable[[Metric, float], Sequence[float]]


@dataclass(frozen=True)
class Outcome:
    """How a run ended by ``until_s``: ``phase`` Running when it had not."""

    phase: Phase
    at_s: float | None  # when the run left Running (the abort, for Failed and Error)
    metric: str | None  # the metric that decided it
    message: str
    measurements: dict[str, list[Measurement]]

    @property
    def aborts(self) -> bool:
        """A background run that is Failed or Error aborts the Rollout (Inconclusive pauses)."""
        return self.phase in (Phase.FAILED, Phase.ERROR)


@dataclass
class AnalysisRun:
    """One AnalysisRun of ``metrics`` started at ``started_at_s``, stepped measurement by
    measurement in time order (the controller reconciles each metric when it is due)."""

    metrics: Sequence[Metric]
    started_at_s: float
    results: dict[str, MetricResult] = field(init=False)

    def __post_init__(self) -> None:
        self.results = {metric.name: MetricResult(metric) for metric in self.metrics}

    @classmethod
    def of_template(cls, template: dict[str, Any], started_at_s: float) -> AnalysisRun:
        return cls([Metric.from_template(m) for m in template["spec"]["metrics"]], started_at_s)

    def next_due(self) -> tuple[float, MetricResult] | None:
        due = [
            (at, result)
            for result in self.results.values()
            if (at := result.next_due_s(self.started_at_s)) is not None
        ]
        return min(due, key=lambda item: item[0]) if due else None

    def measure(self, result: MetricResult, at_s: float, measure: Measure) -> Measurement:
        metric = result.metric
        try:
            values = [float(v) for v in measure(metric, at_s)]
        except Exception as error:
            measurement = Measurement(at_s, Phase.ERROR, f"{type(error).__name__}: {error}")
        else:
            shown = "[" + ",".join(_shown(v) for v in values) + "]"
            measurement = Measurement(at_s, judge(values, metric.success, metric.failure), shown)
        result.add(measurement)
        return measurement

    def run(self, measure: Measure, until_s: float) -> Outcome:
        """Measure every metric when due up to ``until_s``; stop at the first metric that
        completes Failed, Error or Inconclusive (the run terminates then), or when every
        metric completed."""
        while (due := self.next_due()) is not None and due[0] <= until_s:
            at, result = due
            self.measure(result, at, measure)
            phase = result.phase()
            if phase in (Phase.FAILED, Phase.ERROR, Phase.INCONCLUSIVE):
                return self._outcome(phase, at, result.metric.name, result.verdict()[1])
        if all(r.phase() is Phase.SUCCESSFUL for r in self.results.values()):
            last = max(m.at_s for r in self.results.values() for m in r.measurements)
            return self._outcome(Phase.SUCCESSFUL, last, None, "every metric completed")
        return self._outcome(Phase.RUNNING, None, None, "")

    def _outcome(self, phase: Phase, at: float | None, metric: str | None, msg: str) -> Outcome:
        return Outcome(
            phase, at, metric, msg, {n: list(r.measurements) for n, r in self.results.items()}
        )


def _shown(value: float) -> str:
    return "NaN" if math.isnan(value) else repr(value)
