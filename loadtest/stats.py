"""Paired A/B statistics: every speedup with its n and a seeded 95% bootstrap interval.

Both arms run the same schedule, so schedule index ``i`` is a pair: the same prompt sent to
the baseline and to the SD arm. A resample draws schedule indices with replacement and
applies the same draw to both arms (a paired bootstrap), which cancels the prompt-to-prompt
variation that dominates an unpaired comparison. A difference is significant only when the
interval excludes 1.

The interval is the *expanded* percentile interval (Hesterberg, "What Teachers Should Know
About the Bootstrap", The American Statistician 69, 2015, pp. 371-386, arXiv 1411.5279; the
default of his R package, CRAN resample R/confidence.R ``CI.percentile(expand = TRUE)`` via
``ExpandProbs``): the percentile interval read at the levels Phi(sqrt(n/(n-1)) t_{n-1})
instead of Phi(z). A plain percentile interval is too
narrow at small n (the bootstrap's spread is the plug-in one, divided by n, and its tails are
normal, not t): on synthetic paired data with a known ratio, skewed like request latencies
(lognormal, sigma 0.2-0.6 between prompts and 0.15-0.35 in the per-prompt speedup), its 95%
interval of a ratio of sums covered 88-90% at 10-12 pairs and 90.5-92.5% at 16. The expanded
interval covered 93-95% at 10 to 16 pairs, at least what the plain one reached at 20-24,
the old floor: hence the lower default of ``statistics.min_pairs_for_verdict``, and the local
run's 16 pairs per class can decide. With much heavier tails (sigma 1.0) every variant
under-covers (expanded 89-91% at 16-32 pairs, plain 87-89%). BCa was measured too and
covered no better than the plain percentile (its bias and skew corrections do not widen a
narrow interval; Owen, "Better bootstrap t confidence intervals for the mean", arXiv
2508.10083, 2025, finds BCa under-covering small samples too). The expansion tends to 1 as n
grows: large runs keep the plain percentile interval.
(tests/loadtest/test_stats.py::test_expanded_interval_keeps_its_coverage_at_small_n.)

Cost: a resample is a count matrix (how often each pair was drawn), kept as uint8 plus one
float32 copy per scope (5 bytes x resamples x pairs: 100 MB for 2000 resamples of 10k
requests). Means and sums are one matrix product (float32: relative error ~1e-6, far below
any interval's width); percentiles come from cumulative counts over the values sorted once,
never from sorting each resample. ``bench/stats_speed.py`` measures a 10k-request summary.

Definitions (docs/costs-and-statistics.md):

- latency speedup = baseline / SD (mean or percentile); per-request throughput = SD / baseline
- ITL and chunk-gap mean speedups: ratios of per-request sums (seconds after the first chunk
  over the tokens or chunks after it); their percentiles have no interval (per-token values)
- busy-time rate ratio = (sum SD tokens / sum SD e2e) / (sum baseline tokens / sum baseline e2e)
- p-value of a ratio (``bootstrap_p_value``): the smallest 1 - c at which the interval at
  confidence c excludes 1, so it is the interval's own dual; ``holm_adjusted`` and
  ``holm_levels`` correct a family of them (the per-bucket verdicts: loadtest.verdict)
- acceptance estimate = (tokens per chunk of SD / tokens per chunk of baseline - 1) / k,
  counting chunks after each request's first (the first carries the prefill's token); the
  baseline's tokens per chunk measures how often the transport merged chunks.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from statistics import NormalDist

import numpy as np

from experiment.config import StatisticsConfig
from loadtest.metrics import tpot_s
from loadtest.records import RequestRecord
from loadtest.results import Interval, PairedStatistics, ScopeStatistics
from loadtest.traffic import record_bucket

NO_DIFFERENCE = 1.0
MAX_COUNT = np.iinfo(np.uint8).max
# (summary key, lower is better): the per-request distributions with a paired CI.
PAIRED_METRICS: dict[str, bool] = {
    "ttft_ms": True,
    "tpot_ms": True,
    "e2e_ms": True,
    "output_tokens_per_s": False,
}
STATS = ("mean", "p50", "p90", "p99")


@dataclass
class Resamples:
    """The paired resamples of ``n`` pairs: ``counts[r, i]`` = draws of pair ``i`` in ``r``."""

    counts: np.ndarray  # (resamples, n) uint8

    @cached_property
    def weights(self) -> np.ndarray:
        # Converted once per scope: every mean and sum is then one BLAS product.
        return self.counts.astype(np.float32)

    def sums(self, columns: np.ndarray) -> np.ndarray:
        """(resamples, m) sums of each column of (n, m) ``columns`` under each resample."""
        return (self.weights @ columns.astype(np.float32)).astype(float)


def resample_counts(n: int, settings: StatisticsConfig) -> Resamples:
    """How often each of ``n`` pairs is drawn in each of ``settings.resamples`` resamples.

    Seeded: the same (n, settings) always give the same draws, so a summary is reproducible.
    """
    rng = np.random.default_rng(settings.seed)
    counts = np.empty((settings.resamples, n), dtype=np.uint8)
    rows_per_chunk = max(1, 2_000_000 // max(n, 1))  # bounds the scratch arrays to ~16 MB
    for start in range(0, settings.resamples, rows_per_chunk):
        rows = min(rows_per_chunk, settings.resamples - start)
        draws = rng.integers(0, n, size=(rows, n), dtype=np.int64)
        draws += (np.arange(rows) * n)[:, None]
        flat = np.bincount(draws.ravel(), minlength=rows * n)
        # P(a pair is drawn > 255 times out of n) is astronomically small; clip to be safe.
        counts[start : start + rows] = np.minimum(flat, MAX_COUNT).reshape(rows, n)
    return Resamples(counts=counts)


def _weighted_quantiles(
    resamples: Resamples, values: np.ndarray, quantiles: tuple[float, ...]
) -> np.ndarray:
    """(resamples, len(quantiles)) inverted-CDF quantiles of ``values`` under each resample.

    NaN values (a metric the request does not have) carry no weight."""
    counts = resamples.counts
    valid = ~np.isnan(values)
    order = np.argsort(np.where(valid, values, np.inf), kind="stable")
    ordered = values[order]
    n_valid = int(valid.sum())
    out = np.full((counts.shape[0], len(quantiles)), np.nan)
    if n_valid == 0:
        return out
    # Cumulative counts fit in uint16 below 65,536 pairs: half the memory traffic of int32.
    dtype = np.uint16 if counts.shape[1] < np.iinfo(np.uint16).max else np.int64
    step = max(1, 4_000_000 // max(counts.shape[1], 1))
    for start in range(0, counts.shape[0], step):
        cumulative = np.cumsum(
            counts[start : start + step][:, order[:n_valid]], axis=1, dtype=dtype
        )
        total = cumulative[:, -1].astype(np.int64)
        ranks = np.maximum(np.ceil(np.outer(total, quantiles)), 1).astype(np.int64)
        for row in range(cumulative.shape[0]):
            # first position whose cumulative count reaches the rank (rows are sorted)
            positions = np.searchsorted(cumulative[row], ranks[row], side="left")
            out[start + row] = ordered[np.minimum(positions, n_valid - 1)]
    return out


def _point_quantile(values: np.ndarray, q: float) -> float | None:
    valid = values[~np.isnan(values)]
    if valid.size == 0:
        return None
    return float(np.percentile(valid, q * 100, method="inverted_cdf"))


def t_quantile(z: float, df: int) -> float:
    """Student's t quantile at the normal quantile ``z``: the Cornish-Fisher expansion
    (Abramowitz & Stegun 26.7.5), within 0.004 of the exact value at 3 degrees of freedom and
    0.001 from 4 (numpy has no t distribution and scipy is not a dependency)."""
    terms = (
        (z**3 + z) / 4,
        (5 * z**5 + 16 * z**3 + 3 * z) / 96,
        (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384,
        (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160,
    )
    return z + sum(term / df**power for power, term in enumerate(terms, 1))


def expanded_levels(n: int, confidence: float) -> tuple[float, float]:
    """The levels at which the expanded percentile interval reads the replicates.

    Below 4 pairs the t expansion is too rough and any interval is a guess: the replicates'
    whole range, so the interval cannot look narrower than the data allow."""
    if n < 4:
        return 0.0, 1.0
    normal = NormalDist()
    z = normal.inv_cdf((1 - confidence) / 2)  # negative
    level = normal.cdf((n / (n - 1)) ** 0.5 * t_quantile(z, n - 1))
    return level, 1 - level


def interval(
    estimate: float | None,
    replicates: np.ndarray,
    n: int,
    settings: StatisticsConfig,
    null_value: float | None = NO_DIFFERENCE,
) -> Interval:
    finite = replicates[np.isfinite(replicates)]
    if estimate is None or not np.isfinite(estimate) or finite.size < replicates.size // 2:
        # Most resamples undefined (e.g. a handful of pairs): no interval rather than a wrong one.
        return Interval(
            estimate=estimate if estimate is None or np.isfinite(estimate) else None,
            low=None,
            high=None,
            n=n,
            confidence=settings.confidence,
            null_value=null_value,
        )
    low, high = np.quantile(finite, expanded_levels(n, settings.confidence))
    return Interval(
        estimate=float(estimate),
        low=float(low),
        high=float(high),
        n=n,
        confidence=settings.confidence,
        null_value=null_value,
    )


def read_interval(replicates: np.ndarray, n: int, confidence: float) -> tuple[float, float] | None:
    """The expanded percentile interval of ``replicates`` at ``confidence`` (as ``interval``
    reads it), or None when most replicates are undefined."""
    finite = replicates[np.isfinite(replicates)]
    if finite.size == 0 or finite.size < replicates.size // 2:
        return None
    low, high = np.quantile(finite, expanded_levels(n, confidence))
    return float(low), float(high)


def _excludes(replicates: np.ndarray, n: int, alpha: float, null_value: float) -> bool:
    bounds = read_interval(replicates, n, 1 - alpha)
    return bounds is not None and (bounds[0] > null_value or bounds[1] < null_value)


# Bisection steps of bootstrap_p_value: 2^-40 is far below any level a run can resolve.
P_VALUE_STEPS = 40


def bootstrap_p_value(
    replicates: np.ndarray, n: int, null_value: float = NO_DIFFERENCE
) -> float | None:
    """Two-sided p-value of ``null_value`` from the paired resamples: the smallest alpha at
    which the expanded percentile interval at confidence 1 - alpha excludes ``null_value``.

    So it is the interval's own dual: the interval at confidence c excludes the null exactly
    when p <= 1 - c, and a level a multiple-comparison procedure assigns to a cell can be
    read back as that cell's interval (loadtest.verdict). Exclusion only grows with alpha
    (the interval narrows), so a bisection finds the boundary. 0: every resample lies on one
    side of the null (the resamples cannot resolve a smaller p); 1: the null is the median
    of the resamples. None: no interval (most replicates undefined)."""
    if read_interval(replicates, n, 0.5) is None:
        return None
    finite = replicates[np.isfinite(replicates)]
    if finite.min() > null_value or finite.max() < null_value:  # the interval at 100%
        return 0.0
    low, high = 0.0, 1.0  # excludes at high (or nowhere), never at low
    if not _excludes(replicates, n, 1.0 - 1e-12, null_value):
        return 1.0
    for _ in range(P_VALUE_STEPS):
        middle = (low + high) / 2
        low, high = (
            (low, middle) if _excludes(replicates, n, middle, null_value) else (middle, high)
        )
    return high


def holm_adjusted(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm, "A simple sequentially rejective multiple
    test procedure", Scandinavian Journal of Statistics 6, 1979, pp. 65-70): with the p-values
    sorted, p_(1) <= ... <= p_(m), the adjusted p_(i) is max over j <= i of min(1, (m - j + 1)
    p_(j)); a hypothesis is rejected at family-wise level alpha when its adjusted p <= alpha.
    Returned in the input's order (R's ``p.adjust(p, "holm")``)."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def holm_levels(p_values: Sequence[float], alpha: float) -> list[float]:
    """The level Holm's step-down tests each hypothesis at, in the input's order: alpha / (m -
    j + 1) for the j-th smallest p-value while every smaller one was rejected, and the level
    of the first hypothesis not rejected for it and every one after it (the procedure stops
    there). Reading each hypothesis's interval at confidence 1 - its level makes the interval
    agree with Holm's decision: it excludes the null exactly when Holm rejects."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    levels = [0.0] * m
    stopped: float | None = None
    for rank, i in enumerate(order):
        level = alpha / (m - rank) if stopped is None else stopped
        if stopped is None and p_values[i] > level:
            stopped = level
        levels[i] = level
    return levels


def _safe_ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(denominator != 0, numerator / denominator, np.nan)


def _scalar_ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


def paired_speedups(
    baseline: np.ndarray,
    speculative: np.ndarray,
    *,
    lower_is_better: bool,
    resamples: Resamples,
    settings: StatisticsConfig,
    stats: Iterable[str] = STATS,
) -> dict[str, Interval]:
    """Speedup (> 1: SD better) of each statistic of a paired per-request metric.

    ``baseline[i]`` and ``speculative[i]`` belong to the same schedule index; NaN marks a
    request without the metric (it still counts for the others)."""
    stats = tuple(stats)
    n = int(np.sum(~np.isnan(baseline) & ~np.isnan(speculative)))
    both = ~np.isnan(baseline) & ~np.isnan(speculative)
    base = np.where(both, baseline, np.nan)
    sd = np.where(both, speculative, np.nan)
    result: dict[str, Interval] = {}
    arms: dict[str, np.ndarray] = {}
    points: dict[str, tuple[float | None, float | None]] = {}
    if "mean" in stats:
        columns = np.stack([np.nan_to_num(base), np.nan_to_num(sd), both.astype(float)], axis=1)
        sums = resamples.sums(columns)
        arms["mean"] = np.stack(
            [_safe_ratio(sums[:, 0], sums[:, 2]), _safe_ratio(sums[:, 1], sums[:, 2])], axis=1
        )
        points["mean"] = (
            float(np.nanmean(base)) if n else None,
            float(np.nanmean(sd)) if n else None,
        )
    quantile_stats = [s for s in stats if s.startswith("p")]
    if quantile_stats:
        quantiles = tuple(int(s[1:]) / 100 for s in quantile_stats)
        base_q = _weighted_quantiles(resamples, base, quantiles)
        sd_q = _weighted_quantiles(resamples, sd, quantiles)
        for column, (stat, q) in enumerate(zip(quantile_stats, quantiles, strict=True)):
            arms[stat] = np.stack([base_q[:, column], sd_q[:, column]], axis=1)
            points[stat] = (_point_quantile(base, q), _point_quantile(sd, q))
    for stat in stats:
        b_rep, s_rep = arms[stat][:, 0], arms[stat][:, 1]
        b_point, s_point = points[stat]
        if lower_is_better:
            replicates, estimate = _safe_ratio(b_rep, s_rep), _scalar_ratio(b_point, s_point)
        else:
            replicates, estimate = _safe_ratio(s_rep, b_rep), _scalar_ratio(s_point, b_point)
        result[stat] = interval(estimate, replicates, n, settings)
    return result


def paired_rate_ratio(
    numerators: tuple[np.ndarray, np.ndarray],
    denominators: tuple[np.ndarray, np.ndarray],
    *,
    resamples: Resamples,
    settings: StatisticsConfig,
    scale: float = 1.0,
) -> Interval:
    """``scale`` x (sum SD num / sum SD den) / (sum base num / sum base den), paired.

    ``scale`` is a run-level factor held fixed across resamples (e.g. the ratio of the arms'
    effective concurrency, or of their prices)."""
    return paired_rate_ratio_replicates(
        numerators, denominators, resamples=resamples, settings=settings, scale=scale
    )[0]


def paired_rate_ratio_replicates(
    numerators: tuple[np.ndarray, np.ndarray],
    denominators: tuple[np.ndarray, np.ndarray],
    *,
    resamples: Resamples,
    settings: StatisticsConfig,
    scale: float = 1.0,
) -> tuple[Interval, np.ndarray]:
    """paired_rate_ratio and the replicates its interval was read from (one per resample)."""
    (num_b, num_s), (den_b, den_s) = numerators, denominators
    columns = np.stack([num_b, den_b, num_s, den_s], axis=1).astype(float)
    sums = resamples.sums(columns)
    replicates = scale * _safe_ratio(
        _safe_ratio(sums[:, 2], sums[:, 3]), _safe_ratio(sums[:, 0], sums[:, 1])
    )
    totals = columns.sum(axis=0)
    base_rate = _scalar_ratio(float(totals[0]), float(totals[1]))
    sd_rate = _scalar_ratio(float(totals[2]), float(totals[3]))
    estimate = _scalar_ratio(sd_rate, base_rate)
    return (
        interval(None if estimate is None else scale * estimate, replicates, len(num_b), settings),
        replicates,
    )


def acceptance_estimate(
    tokens: tuple[np.ndarray, np.ndarray],
    chunks: tuple[np.ndarray, np.ndarray],
    *,
    num_speculative_tokens: int,
    resamples: Resamples,
    settings: StatisticsConfig,
) -> Interval:
    """Client-side acceptance rate with its interval (see the module docstring)."""
    (tok_b, tok_s), (chk_b, chk_s) = tokens, chunks
    columns = np.stack([tok_b, chk_b, tok_s, chk_s], axis=1).astype(float)
    sums = resamples.sums(columns)
    totals = columns.sum(axis=0)

    def acceptance(s: np.ndarray) -> np.ndarray:
        length = _safe_ratio(_safe_ratio(s[..., 2], s[..., 3]), _safe_ratio(s[..., 0], s[..., 1]))
        return np.clip((length - 1) / num_speculative_tokens, 0.0, 1.0)

    point = float(acceptance(totals))
    estimate = None if np.isnan(point) else point
    replicates = acceptance(sums)
    return interval(estimate, replicates, len(tok_b), settings, null_value=None)


def request_acceptance_interval(
    records: Iterable[RequestRecord], settings: StatisticsConfig
) -> Interval | None:
    """Accepted / drafted tokens of the measured requests that carried their own figures
    (vLLM --per-request-spec-decode-metrics), a ratio of sums with the expanded percentile
    bootstrap over those requests (the load test's seeded resamples). None: no request
    carried figures, or none drafted."""
    columns = np.array(
        [
            (r.spec_accepted_tokens, r.spec_draft_tokens)
            for r in records
            if r.ok
            and not r.warmup
            and r.spec_accepted_tokens is not None
            and r.spec_draft_tokens is not None
        ],
        dtype=float,
    ).reshape(-1, 2)
    totals = columns.sum(axis=0)
    if not len(columns) or totals[1] == 0:
        return None
    sums = resample_counts(len(columns), settings).sums(columns)
    replicates = _safe_ratio(sums[:, 0], sums[:, 1])
    return interval(float(totals[0] / totals[1]), replicates, len(columns), settings, None)


# --------------------------------------------------------------------------- run records


@dataclass
class PairedSamples:
    """Per-request values of both arms, aligned on the schedule index (both arms ok)."""

    index: np.ndarray
    prompt_class: np.ndarray
    values: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    unpaired: int = 0  # measured indices that failed (or are missing) on either arm
    # A replayed trace's input-length bucket per pair ("" without a trace).
    bucket: np.ndarray = field(default_factory=lambda: np.array([], dtype=object))

    def __len__(self) -> int:
        return int(self.index.size)

    def subset(self, mask: np.ndarray) -> PairedSamples:
        return PairedSamples(
            index=self.index[mask],
            prompt_class=self.prompt_class[mask],
            values={k: (b[mask], s[mask]) for k, (b, s) in self.values.items()},
            unpaired=0,
            bucket=self.bucket[mask] if self.bucket.size else self.bucket,
        )


def _after_first_chunk(record: RequestRecord) -> tuple[float, float, float]:
    """(tokens, chunks, seconds) after the first token-carrying chunk of a request."""
    size = min(len(record.chunk_times), len(record.chunk_tokens))  # as zip(strict=False)
    tokens = record.chunk_tokens[:size]
    # C-level list scans instead of a Python loop over every chunk: this runs per request.
    if size and min(tokens) >= 0:
        carrying = size - tokens.count(0)
        if carrying < 2:
            return 0.0, 0.0, 0.0
        first = next(j for j, n in enumerate(tokens) if n > 0)
        last = size - 1 - next(j for j, n in enumerate(reversed(tokens)) if n > 0)
        after = sum(tokens) - tokens[first]
        return (
            float(after),
            float(carrying - 1),
            record.chunk_times[last] - record.chunk_times[first],
        )
    pairs = [(t, n) for t, n in zip(record.chunk_times, tokens, strict=False) if n > 0]
    if len(pairs) < 2:
        return 0.0, 0.0, 0.0
    after = sum(n for _, n in pairs) - pairs[0][1]
    return float(after), float(len(pairs) - 1), pairs[-1][0] - pairs[0][0]


def request_values(record: RequestRecord) -> dict[str, float]:
    """Every per-request value the paired statistics use (NaN: the request has none)."""
    nan = float("nan")
    tpot = tpot_s(record)
    e2e = record.e2e_s
    tokens = record.output_tokens
    after_tokens, after_chunks, after_s = _after_first_chunk(record)
    return {
        "ttft_ms": nan if record.ttft_s is None else record.ttft_s * 1000,
        "tpot_ms": nan if tpot is None else tpot * 1000,
        "e2e_ms": nan if e2e is None else e2e * 1000,
        "output_tokens_per_s": tokens / e2e if e2e and tokens is not None else nan,
        "e2e_s": nan if e2e is None else e2e,
        "output_tokens": nan if tokens is None else float(tokens),
        "tokens_after_first": after_tokens,
        "chunks_after_first": after_chunks,
        "seconds_after_first": after_s,
    }


VALUE_NAMES = tuple(request_values(RequestRecord(arm="", index=0, prompt_id="", prompt_class="")))


def pair_records(
    baseline: Iterable[RequestRecord],
    speculative: Iterable[RequestRecord],
    length_buckets: Sequence[int] | None = None,
) -> PairedSamples:
    """Pairs of measured requests that succeeded on both arms, by schedule index; a replayed
    request's bucket by ``length_buckets`` (None: no buckets)."""
    base = {r.index: r for r in baseline if not r.warmup}
    sd = {r.index: r for r in speculative if not r.warmup}
    indices = sorted(i for i in set(base) & set(sd) if base[i].ok and sd[i].ok)
    unpaired = len(set(base) | set(sd)) - len(indices)

    def table(records: dict[int, RequestRecord]) -> np.ndarray:
        rows = [list(request_values(records[i]).values()) for i in indices]
        return np.array(rows, dtype=float).reshape(len(indices), len(VALUE_NAMES))

    base_table, sd_table = table(base), table(sd)
    return PairedSamples(
        index=np.array(indices, dtype=int),
        prompt_class=np.array([base[i].prompt_class for i in indices], dtype=object),
        bucket=np.array(
            [record_bucket(base[i].input_tokens, length_buckets) for i in indices], dtype=object
        ),
        values={
            name: (base_table[:, column], sd_table[:, column])
            for column, name in enumerate(VALUE_NAMES)
        },
        unpaired=unpaired,
    )


def scope_statistics(
    samples: PairedSamples, *, num_speculative_tokens: int, settings: StatisticsConfig
) -> ScopeStatistics:
    resamples = resample_counts(len(samples), settings)
    speedup = {
        metric: paired_speedups(
            *samples.values[metric],
            lower_is_better=lower,
            resamples=resamples,
            settings=settings,
        )
        for metric, lower in PAIRED_METRICS.items()
    }
    # Per-token and per-chunk means are ratios of per-request sums (time after the first
    # chunk over its tokens, or chunks): speedup = baseline mean / SD mean.
    after_s = samples.values["seconds_after_first"]
    for metric, count in (("itl_ms", "tokens_after_first"), ("chunk_gap_ms", "chunks_after_first")):
        speedup[metric] = {
            "mean": paired_rate_ratio(
                samples.values[count], after_s, resamples=resamples, settings=settings
            )
        }
    busy, busy_replicates = paired_rate_ratio_replicates(
        samples.values["output_tokens"],
        samples.values["e2e_s"],
        resamples=resamples,
        settings=settings,
    )
    acceptance = acceptance_estimate(
        samples.values["tokens_after_first"],
        samples.values["chunks_after_first"],
        num_speculative_tokens=num_speculative_tokens,
        resamples=resamples,
        settings=settings,
    )
    scope = ScopeStatistics(
        pairs=len(samples),
        speedup=speedup,
        busy_rate_ratio=busy,
        acceptance_rate_estimate=acceptance,
    )
    scope.busy_rate_replicates = busy_replicates  # in memory only: loadtest.verdict reads it
    return scope


def paired_statistics(
    baseline: Iterable[RequestRecord],
    speculative: Iterable[RequestRecord],
    *,
    num_speculative_tokens: int,
    settings: StatisticsConfig,
    length_buckets: Sequence[int] | None = None,
) -> PairedStatistics:
    """``length_buckets``: the edges a replayed trace's requests are grouped by (by_bucket)."""
    samples = pair_records(baseline, speculative, length_buckets)
    classes = sorted(set(samples.prompt_class.tolist()))
    cells = sorted({(c, b) for c, b in zip(samples.prompt_class, samples.bucket, strict=True) if b})
    by_bucket: dict[str, dict[str, ScopeStatistics]] = {}
    for name, bucket in cells:  # the same statistics, grouped by (class, input bucket)
        mask = (samples.prompt_class == name) & (samples.bucket == bucket)
        by_bucket.setdefault(name, {})[bucket] = scope_statistics(
            samples.subset(mask), num_speculative_tokens=num_speculative_tokens, settings=settings
        )
    return PairedStatistics(
        by_bucket=by_bucket,
        confidence=settings.confidence,
        resamples=settings.resamples,
        seed=settings.seed,
        unpaired=samples.unpaired,
        overall=scope_statistics(
            samples, num_speculative_tokens=num_speculative_tokens, settings=settings
        ),
        by_class={
            name: scope_statistics(
                samples.subset(samples.prompt_class == name),
                num_speculative_tokens=num_speculative_tokens,
                settings=settings,
            )
            for name in classes
        },
    )
