"""TTFT, TPOT and inter-token latency from each arm's own vLLM histograms over its window.

The client's per-token figures time the arrival of each streamed chunk. When the API server
writes several tokens in one chunk (a baseline whose chunk gaps fall under 0.1 ms:
``loadtest.metrics.BURST_GAP_S``), those figures time the stream's grouping, not generation.
vLLM stamps the same quantities with the engine core's step timestamps
(``vllm/v1/metrics/stats.py``, ``IterationStats.update_from_output``; names and meaning in
``guardrails/vllm_metrics.py``), which the grouping does not touch. So the load test scrapes
each server's ``/metrics`` when the measured window opens and when it closes (every block of
an alternating arm: ``loadtest.window``) and reads the histograms' change:

- mean = d(sum) / d(count): exact;
- p50, p90, p99 interpolated linearly inside the bucket that holds them (Prometheus'
  ``histogram_quantile``), each with its bucket: the resolution is the bucket's width
  (10, 25, 50, 75 ms, ... edges for TPOT and inter-token latency);
- the per-token inter-token latency = d(step gaps' sum) / decode tokens (d generation
  tokens - d TTFT count), the client's token-weighted ``itl_ms`` mean.

A histogram has no request identity, so SD vs baseline cannot be paired by request: the
interval of a mean's speedup is an unpaired normal approximation on its logarithm (delta
method), each arm's variance estimated from its bucket deltas (bucket midpoints, plus
width^2/12 inside a bucket, Sheppard's correction); none when an observation sits in the
+Inf bucket. Quantile speedups get no interval: compare their buckets.

A scrape that cannot be read, or lines of these histograms that cannot be parsed, are
counted (``ArmServerLatency.failed_scrapes``, ``malformed_lines``) and never raise.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from statistics import NormalDist

import requests
from pydantic import BaseModel, ConfigDict, Field

from guardrails import vllm_metrics
from loadtest.acceptance import SCRAPE_TIMEOUT_S, Counters, parse_counters
from loadtest.records import RequestRecord
from loadtest.results import (
    ArmServerLatency,
    HistogramDistribution,
    HistogramQuantile,
    Interval,
    ServerComparison,
    ServerLatency,
)

QUANTILES = {"p50": 0.5, "p90": 0.9, "p99": 0.99}
# Summary metric -> the vLLM histogram it is read from.
HISTOGRAM_OF = {
    "ttft_ms": vllm_metrics.TIME_TO_FIRST_TOKEN,
    "tpot_ms": vllm_metrics.TIME_PER_OUTPUT_TOKEN,
    "step_gap_ms": vllm_metrics.INTER_TOKEN_LATENCY,
}
INTERVAL_METHOD = (
    "unpaired (a histogram has no request identity): normal approximation on the log of the "
    "ratio of means, each arm's variance estimated from its bucket deltas (midpoints plus "
    "width^2/12); quantiles have no interval, their resolution is their bucket"
)
MS = 1000.0


class Histogram(BaseModel):
    """One histogram as scraped, summed over every label set but ``le``."""

    model_config = ConfigDict(extra="forbid")

    edges: list[float]
    """Finite upper bucket edges (seconds), ascending; the +Inf bucket is ``count``."""
    cumulative: list[float]
    """Observations <= each edge."""
    sum: float
    count: float


class ServerScrape(BaseModel):
    """What one /metrics scrape recorded for the latency figures (in the window file)."""

    model_config = ConfigDict(extra="forbid")

    histograms: dict[str, Histogram] = Field(default_factory=dict)
    generation_tokens: float | None = None
    """vllm:generation_tokens_total, summed over engines (None: not exported)."""
    malformed_lines: int = 0
    """Lines of the latency histograms or the token counter that could not be parsed."""
    error: str | None = None
    """Why the scrape could not be read (None: it was)."""


_SAMPLE = re.compile(
    r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\S+)?$"
)
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')
_WANTED = (*vllm_metrics.LATENCY_HISTOGRAMS, vllm_metrics.GENERATION_TOKENS)


def _labels(text: str | None) -> dict[str, str] | None:
    if not text:
        return {}
    labels, position = {}, 0
    while position < len(text):
        match = _LABEL.match(text, position)
        if match is None or match.end() == position:
            return None
        labels[match.group(1)] = match.group(2)
        position = match.end()
    return labels


@dataclass
class _Accumulator:
    buckets: dict[float, float]
    total: float = 0.0
    count: float = 0.0
    seen_sum: bool = False
    seen_count: bool = False


def parse_histograms(text: str) -> ServerScrape:
    """The latency histograms and the generation counter from Prometheus text. Tolerant: a
    line of theirs that does not parse is counted in ``malformed_lines`` and skipped, and a
    histogram whose buckets contradict each other (not cumulative, +Inf != count) is
    dropped and counted; other families are not read at all."""
    found: dict[str, _Accumulator] = {}
    tokens: float | None = None
    malformed = 0
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or not line.startswith(_WANTED):
            continue
        match = _SAMPLE.match(line)
        labels = _labels(match.group("labels")) if match else None
        try:
            value = float(match.group("value")) if match else math.nan
        except ValueError:
            value = math.nan
        if match is None or labels is None or math.isnan(value):
            malformed += 1
            continue
        name = match.group("name")
        if name == vllm_metrics.GENERATION_TOKENS + vllm_metrics.COUNTER_SUFFIX:
            tokens = (tokens or 0.0) + value
            continue
        base, _, part = name.rpartition("_")
        if base not in vllm_metrics.LATENCY_HISTOGRAMS or part not in ("bucket", "sum", "count"):
            continue  # *_created and the counter's own *_created
        entry = found.setdefault(base, _Accumulator(buckets={}))
        if part == "sum":
            entry.total += value
            entry.seen_sum = True
        elif part == "count":
            entry.count += value
            entry.seen_count = True
        else:
            try:
                edge = float(labels["le"])
            except (KeyError, ValueError):
                malformed += 1
                continue
            entry.buckets[edge] = entry.buckets.get(edge, 0.0) + value
    histograms: dict[str, Histogram] = {}
    for name, entry in found.items():
        histogram = _histogram(entry)
        if histogram is None:
            malformed += 1
        else:
            histograms[name] = histogram
    return ServerScrape(histograms=histograms, generation_tokens=tokens, malformed_lines=malformed)


def _histogram(entry: _Accumulator) -> Histogram | None:
    if not (entry.seen_sum and entry.seen_count and math.inf in entry.buckets):
        return None
    edges = sorted(edge for edge in entry.buckets if math.isfinite(edge))
    cumulative = [entry.buckets[edge] for edge in edges]
    if any(b < a for a, b in pairwise(cumulative)):
        return None
    if entry.buckets[math.inf] != entry.count or (cumulative and cumulative[-1] > entry.count):
        return None
    return Histogram(edges=edges, cumulative=cumulative, sum=entry.total, count=entry.count)


def scrape_window(
    base_url: str, session: requests.Session | None = None
) -> tuple[Counters | None, ServerScrape]:
    """One GET of ``base_url/metrics``: the speculative counters (loadtest.acceptance; None
    when unreadable) and the latency histograms (``error`` set when unreadable)."""
    getter = session or requests
    try:
        response = getter.get(base_url.rstrip("/") + "/metrics", timeout=SCRAPE_TIMEOUT_S)
        response.raise_for_status()
        text = response.text
    except requests.RequestException as err:
        return None, ServerScrape(error=f"{type(err).__name__}: {err}"[:300])
    try:
        counters: Counters | None = parse_counters(text)
    except ValueError:  # the speculative counters' own parser refuses the whole body
        counters = None
    return counters, parse_histograms(text)


@dataclass(frozen=True)
class HistogramDelta:
    """A histogram's change over one or more windows (seconds)."""

    edges: tuple[float, ...]
    counts: tuple[float, ...]
    """Per bucket (not cumulative), the last one the +Inf bucket."""
    total: float

    @property
    def count(self) -> float:
        return sum(self.counts)

    def __add__(self, other: HistogramDelta) -> HistogramDelta:
        if self.edges != other.edges:
            raise ValueError("bucket edges differ between windows")
        counts = tuple(a + b for a, b in zip(self.counts, other.counts, strict=True))
        return HistogramDelta(self.edges, counts, self.total + other.total)

    def mean(self) -> float | None:
        return self.total / self.count if self.count > 0 else None

    def quantile(self, q: float) -> HistogramQuantile | None:
        """Prometheus' histogram_quantile: linear inside the bucket holding rank q x count."""
        count = self.count
        if count <= 0:
            return None
        rank = q * count
        below = 0.0
        for index, in_bucket in enumerate(self.counts):
            low = 0.0 if index == 0 else self.edges[index - 1]
            if index == len(self.edges):  # the +Inf bucket: its lower edge, as Prometheus
                return HistogramQuantile(value=low, bucket_low=low, bucket_high=None)
            high = self.edges[index]
            if in_bucket > 0 and below + in_bucket >= rank:
                value = low + (high - low) * (rank - below) / in_bucket
                return HistogramQuantile(value=value, bucket_low=low, bucket_high=high)
            below += in_bucket
        return None  # unreachable: the +Inf bucket returns

    def variance(self) -> float | None:
        """Sample variance estimated from the buckets (midpoints + width^2/12); None with
        fewer than two observations or any in the +Inf bucket (no upper edge)."""
        count, mean = self.count, self.mean()
        if count < 2 or mean is None or self.counts[-1] > 0:
            return None
        spread = 0.0
        for index, in_bucket in enumerate(self.counts[:-1]):
            if in_bucket <= 0:
                continue
            low = 0.0 if index == 0 else self.edges[index - 1]
            high = self.edges[index]
            spread += in_bucket * (((low + high) / 2 - mean) ** 2 + (high - low) ** 2 / 12)
        return spread / (count - 1)


def histogram_delta(before: Histogram, after: Histogram) -> HistogramDelta:
    """after - before; ValueError when they cannot be one server's window (edges changed,
    or a count went down: the server restarted in between)."""
    if before.edges != after.edges:
        raise ValueError("the bucket edges changed between the scrapes")
    cumulative = [b - a for a, b in zip(before.cumulative, after.cumulative, strict=True)]
    total_count = after.count - before.count
    per_bucket = [c - p for p, c in pairwise([0.0, *cumulative, total_count])]
    if total_count < 0 or any(c < 0 for c in per_bucket):
        raise ValueError("a count went down between the scrapes (did the server restart?)")
    return HistogramDelta(tuple(before.edges), tuple(per_bucket), after.sum - before.sum)


@dataclass(frozen=True)
class WindowDelta:
    """Every latency histogram's change over one window, and the generated tokens."""

    histograms: Mapping[str, HistogramDelta]
    generation_tokens: float | None

    def __add__(self, other: WindowDelta) -> WindowDelta:
        names = self.histograms.keys() & other.histograms.keys()
        tokens = None
        if self.generation_tokens is not None and other.generation_tokens is not None:
            tokens = self.generation_tokens + other.generation_tokens
        return WindowDelta(
            {name: self.histograms[name] + other.histograms[name] for name in names}, tokens
        )


def window_delta(before: ServerScrape | None, after: ServerScrape | None) -> WindowDelta | str:
    """The window's change, or why there is none."""
    if before is None or after is None:
        return "/metrics was not scraped at both ends of the window"
    for scrape in (before, after):
        if scrape.error is not None:
            return f"/metrics could not be read: {scrape.error}"
    names = [n for n in vllm_metrics.LATENCY_HISTOGRAMS if n in before.histograms]
    names = [n for n in names if n in after.histograms]
    if not names:
        return (
            f"no latency histograms on /metrics ({', '.join(vllm_metrics.LATENCY_HISTOGRAMS)}; "
            "a server that is not vLLM V1?)"
        )
    try:
        deltas = {n: histogram_delta(before.histograms[n], after.histograms[n]) for n in names}
    except ValueError as err:
        return str(err)
    tokens = None
    if before.generation_tokens is not None and after.generation_tokens is not None:
        tokens = after.generation_tokens - before.generation_tokens
    return WindowDelta(deltas, tokens)


def _distribution(name: str, delta: HistogramDelta) -> HistogramDistribution:
    mean = delta.mean()
    quantiles = {}
    for key, q in QUANTILES.items():
        found = delta.quantile(q)
        if found is not None:
            high = None if found.bucket_high is None else found.bucket_high * MS
            quantiles[key] = HistogramQuantile(
                value=found.value * MS, bucket_low=found.bucket_low * MS, bucket_high=high
            )
    return HistogramDistribution(
        metric=name,
        count=round(delta.count),
        mean=None if mean is None else mean * MS,
        quantiles=quantiles,
        buckets=[edge * MS for edge in delta.edges],
    )


def server_latency(delta: WindowDelta, windows: int = 1) -> ServerLatency:
    """The summary block of a window's (or several windows') histogram changes."""
    found = {
        key: _distribution(name, delta.histograms[name])
        for key, name in HISTOGRAM_OF.items()
        if name in delta.histograms
    }
    steps = delta.histograms.get(vllm_metrics.INTER_TOKEN_LATENCY)
    first = delta.histograms.get(vllm_metrics.TIME_TO_FIRST_TOKEN)
    decode = None
    if delta.generation_tokens is not None and first is not None:
        decode = round(delta.generation_tokens - first.count)
    itl = steps.total / decode * MS if steps is not None and decode and decode > 0 else None
    return ServerLatency(
        ttft_ms=found.get("ttft_ms"),
        tpot_ms=found.get("tpot_ms"),
        step_gap_ms=found.get("step_gap_ms"),
        itl_ms_mean=itl,
        decode_tokens=decode,
        windows=windows,
    )


@dataclass(frozen=True)
class ScrapeWindow:
    """One window's scrapes: the whole arm (one window) or one block of an alternating arm
    with the schedule indices it ran."""

    before: ServerScrape | None
    after: ServerScrape | None
    first_index: int | None = None
    last_index: int | None = None


@dataclass(frozen=True)
class ArmServerDeltas:
    """An arm's summed deltas, overall and per class that ran alone, for the comparison."""

    overall: WindowDelta | None
    by_class: dict[str, WindowDelta]


def arm_server_latency(
    windows: Sequence[ScrapeWindow], records: Iterable[RequestRecord]
) -> tuple[ArmServerLatency, ArmServerDeltas]:
    """The arm's server-side latency from its windows' scrapes. A class gets its own figure
    from the windows whose measured requests are all of that class (blocks of an alternating
    arm); classes sharing a window cannot be told apart in a histogram."""
    measured = [r for r in records if not r.warmup]
    scrapes = [s for w in windows for s in (w.before, w.after) if s is not None]
    block = ArmServerLatency(
        available=False,
        scrapes=len(scrapes),
        failed_scrapes=sum(1 for s in scrapes if s.error is not None),
        malformed_lines=sum(s.malformed_lines for s in scrapes),
    )
    none = ArmServerDeltas(None, {})
    if not windows:
        return block.model_copy(update={"reason": "the arm recorded no measured window"}), none
    deltas = [window_delta(w.before, w.after) for w in windows]
    problems = [d for d in deltas if isinstance(d, str)]
    if problems:
        reason = f"{len(problems)} of {len(windows)} windows without histograms: {problems[0]}"
        return block.model_copy(update={"reason": reason}), none
    good = [d for d in deltas if isinstance(d, WindowDelta)]
    try:
        overall = _sum(good)
        by_class: dict[str, list[WindowDelta]] = {}
        for delta, owner in zip(good, _window_classes(windows, measured), strict=True):
            if owner is not None:
                by_class.setdefault(owner, []).append(delta)
        class_deltas = {name: _sum(found) for name, found in sorted(by_class.items())}
    except ValueError as err:
        return block.model_copy(update={"reason": f"windows cannot be added: {err}"}), none
    missing = sorted({r.prompt_class for r in measured} - class_deltas.keys())
    note = None
    if missing:
        note = (
            f"no per-class figure for {', '.join(missing)}: a histogram cannot tell classes "
            "apart, and no window ran only that class (classes get one in blocks of their own)"
        )
    latency = block.model_copy(
        update={
            "available": True,
            "overall": server_latency(overall, len(good)),
            "by_class": {
                name: server_latency(delta, len(by_class[name]))
                for name, delta in class_deltas.items()
            },
            "class_note": note,
        }
    )
    return latency, ArmServerDeltas(overall, class_deltas)


def _sum(deltas: Sequence[WindowDelta]) -> WindowDelta:
    total = deltas[0]
    for delta in deltas[1:]:
        total = total + delta
    return total


def _window_classes(
    windows: Sequence[ScrapeWindow], measured: Sequence[RequestRecord]
) -> list[str | None]:
    """Per window: the one prompt class of its measured requests (None: several, or the
    arm's only window, which never stands for a class)."""
    if len(windows) < 2:
        return [None] * len(windows)
    owners: list[str | None] = []
    for window in windows:
        low, high = window.first_index, window.last_index
        if low is None or high is None:
            owners.append(None)
            continue
        names = {r.prompt_class for r in measured if low <= r.index <= high}
        owners.append(names.pop() if len(names) == 1 else None)
    return owners


def _mean_interval(
    baseline: HistogramDelta, speculative: HistogramDelta, confidence: float
) -> Interval:
    """Baseline mean / SD mean with the unpaired delta-method interval (INTERVAL_METHOD)."""
    base_mean, sd_mean = baseline.mean(), speculative.mean()
    n = round(min(baseline.count, speculative.count))
    if not base_mean or not sd_mean:
        return Interval(estimate=None, low=None, high=None, n=n, confidence=confidence)
    estimate = base_mean / sd_mean
    base_var, sd_var = baseline.variance(), speculative.variance()
    if base_var is None or sd_var is None:
        return Interval(estimate=estimate, low=None, high=None, n=n, confidence=confidence)
    se = math.sqrt(
        base_var / (baseline.count * base_mean**2) + sd_var / (speculative.count * sd_mean**2)
    )
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    return Interval(
        estimate=estimate,
        low=estimate * math.exp(-z * se),
        high=estimate * math.exp(z * se),
        n=n,
        confidence=confidence,
    )


def _quantile_speedup(
    baseline: HistogramDelta, speculative: HistogramDelta, q: float, confidence: float
) -> Interval:
    base, sd = baseline.quantile(q), speculative.quantile(q)
    estimate = base.value / sd.value if base and sd and sd.value > 0 else None
    n = round(min(baseline.count, speculative.count))
    return Interval(estimate=estimate, low=None, high=None, n=n, confidence=confidence)


def scope_speedups(
    baseline: WindowDelta, speculative: WindowDelta, confidence: float
) -> dict[str, dict[str, Interval]]:
    """Metric -> stat -> SD vs baseline (base / SD: > 1 means SD is faster)."""
    result: dict[str, dict[str, Interval]] = {}
    for key, name in HISTOGRAM_OF.items():
        base, sd = baseline.histograms.get(name), speculative.histograms.get(name)
        if base is None or sd is None:
            continue
        stats = {"mean": _mean_interval(base, sd, confidence)}
        for stat, q in QUANTILES.items():
            stats[stat] = _quantile_speedup(base, sd, q, confidence)
        result[key] = stats
    base_itl = server_latency(baseline).itl_ms_mean
    sd_itl = server_latency(speculative).itl_ms_mean
    if base_itl and sd_itl:
        n = round(min(baseline.generation_tokens or 0, speculative.generation_tokens or 0))
        result["itl_ms"] = {
            "mean": Interval(
                estimate=base_itl / sd_itl, low=None, high=None, n=n, confidence=confidence
            )
        }
    return result


def compare_servers(
    baseline: ArmServerDeltas, speculative: ArmServerDeltas, confidence: float
) -> ServerComparison | None:
    """SD vs baseline from both arms' histograms; None when an arm has none."""
    if baseline.overall is None or speculative.overall is None:
        return None
    shared = sorted(baseline.by_class.keys() & speculative.by_class.keys())
    return ServerComparison(
        interval_method=INTERVAL_METHOD,
        overall=scope_speedups(baseline.overall, speculative.overall, confidence),
        by_class={
            name: scope_speedups(baseline.by_class[name], speculative.by_class[name], confidence)
            for name in shared
        },
    )
