"""Paired bootstrap against cases with known answers (loadtest/stats.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from experiment.config import StatisticsConfig
from loadtest.records import RequestRecord
from loadtest.stats import (
    _weighted_quantiles,
    acceptance_estimate,
    pair_records,
    paired_rate_ratio,
    paired_speedups,
    paired_statistics,
    resample_counts,
    t_quantile,
)

SETTINGS = StatisticsConfig(confidence=0.95, resamples=2000, seed=7)


def _speedups(base, sd, lower_is_better=True, settings=SETTINGS):
    resamples = resample_counts(len(base), settings)
    return paired_speedups(
        np.asarray(base, dtype=float),
        np.asarray(sd, dtype=float),
        lower_is_better=lower_is_better,
        resamples=resamples,
        settings=settings,
    )


def test_constant_ratio_collapses_the_interval_onto_it() -> None:
    base = np.random.default_rng(1).lognormal(3, 0.5, size=500)
    result = _speedups(base, base / 2)
    for stat, interval in result.items():
        assert interval.estimate == pytest.approx(2.0), stat
        assert interval.low == pytest.approx(2.0) and interval.high == pytest.approx(2.0), stat
        assert interval.n == 500 and interval.significant
    throughput = _speedups(base, base * 3, lower_is_better=False)["mean"]
    assert (throughput.low, throughput.high) == (pytest.approx(3.0), pytest.approx(3.0))


def test_ratio_of_means_matches_the_delta_method_interval() -> None:
    # Paired normal data: the bootstrap interval of mean(b)/mean(s) must agree with the
    # analytic (delta-method) interval R +- z * sd(b - R s) / (sqrt(n) mean(s)).
    rng = np.random.default_rng(3)
    n = 4000
    base = rng.normal(100.0, 15.0, size=n)
    sd = 0.8 * base + rng.normal(0.0, 8.0, size=n)
    ratio = base.mean() / sd.mean()
    half_width = 1.959964 * np.std(base - ratio * sd, ddof=1) / (math.sqrt(n) * sd.mean())
    interval = _speedups(base, sd, settings=StatisticsConfig(resamples=4000, seed=11))["mean"]
    assert interval.estimate == pytest.approx(ratio)
    assert interval.low == pytest.approx(ratio - half_width, abs=0.1 * half_width)
    assert interval.high == pytest.approx(ratio + half_width, abs=0.1 * half_width)


def test_same_seed_same_interval_other_seed_other_interval() -> None:
    rng = np.random.default_rng(5)
    base = rng.lognormal(3, 0.4, size=300)
    sd = base * rng.lognormal(-0.1, 0.2, size=300)
    first = _speedups(base, sd)
    again = _speedups(base, sd)
    other = _speedups(base, sd, settings=StatisticsConfig(seed=SETTINGS.seed + 1))
    assert first == again
    assert first["mean"].estimate == other["mean"].estimate
    assert (first["mean"].low, first["mean"].high) != (other["mean"].low, other["mean"].high)


def test_no_difference_is_not_significant_and_a_clear_one_is() -> None:
    rng = np.random.default_rng(9)
    base = rng.lognormal(3, 0.4, size=400)
    same = base * rng.lognormal(0.0, 0.05, size=400)
    assert _speedups(base, same)["mean"].significant is False
    faster = base * rng.lognormal(-0.3, 0.05, size=400)
    clear = _speedups(base, faster)["mean"]
    assert clear.significant and clear.low > 1


def test_resampled_quantiles_equal_explicit_resampling() -> None:
    rng = np.random.default_rng(2)
    values = rng.normal(size=57)
    values[[3, 20]] = np.nan  # requests without the metric carry no weight
    resamples = resample_counts(values.size, StatisticsConfig(resamples=200, seed=4))
    counts = resamples.counts
    quantiles = (0.5, 0.9, 0.99)
    fast = _weighted_quantiles(resamples, values, quantiles)
    for row in range(counts.shape[0]):
        drawn = np.repeat(values, counts[row])
        drawn = drawn[~np.isnan(drawn)]
        expected = np.percentile(drawn, [q * 100 for q in quantiles], method="inverted_cdf")
        np.testing.assert_allclose(fast[row], expected)


def test_resample_counts_draw_n_per_row_and_repeat_by_seed() -> None:
    settings = StatisticsConfig(resamples=300, seed=1)
    counts = resample_counts(40, settings).counts
    assert counts.shape == (300, 40) and counts.dtype == np.uint8
    assert (counts.sum(axis=1) == 40).all()
    np.testing.assert_array_equal(counts, resample_counts(40, settings).counts)


def test_missing_values_reduce_n_of_that_metric_only() -> None:
    base = np.array([10.0, 20.0, np.nan, 40.0])
    sd = np.array([5.0, np.nan, 15.0, 20.0])
    interval = _speedups(base, sd)["mean"]
    assert interval.n == 2
    assert interval.estimate == pytest.approx((10 + 40) / (5 + 20))


def test_rate_ratio_is_ratio_of_sums_with_scale() -> None:
    tokens = (np.array([100.0, 100.0, 100.0]), np.array([100.0, 100.0, 100.0]))
    seconds = (np.array([2.0, 4.0, 6.0]), np.array([1.0, 2.0, 3.0]))
    resamples = resample_counts(3, SETTINGS)
    interval = paired_rate_ratio(tokens, seconds, resamples=resamples, settings=SETTINGS, scale=1.5)
    assert interval.estimate == pytest.approx(3.0)  # 2x the tokens per second, scaled 1.5
    assert interval.low == pytest.approx(3.0) and interval.high == pytest.approx(3.0)


def test_acceptance_estimate_removes_chunk_merging() -> None:
    # k = 7; the SD arm carries 3 tokens per chunk where the baseline carries 1: each target
    # step accepted 2 of 7 drafts. With every chunk merged in pairs (2 vs 6) the same holds.
    n = 50
    resamples = resample_counts(n, SETTINGS)
    for per_chunk_base in (1.0, 2.0):
        chunks = (np.full(n, 60.0), np.full(n, 20.0))
        tokens = (chunks[0] * per_chunk_base, chunks[1] * 3 * per_chunk_base)
        interval = acceptance_estimate(
            tokens, chunks, num_speculative_tokens=7, resamples=resamples, settings=SETTINGS
        )
        assert interval.estimate == pytest.approx(2 / 7)
        assert interval.low == pytest.approx(2 / 7) and interval.high == pytest.approx(2 / 7)
        assert interval.significant is None  # a rate, not a comparison with 1


def _record(arm: str, index: int, e2e: float, cls: str = "c", **kwargs) -> RequestRecord:
    chunks = kwargs.pop("chunks", 4)
    per_chunk = kwargs.pop("per_chunk", 1)
    return RequestRecord(
        arm=arm,
        index=index,
        prompt_id=f"p{index}",
        prompt_class=cls,
        ttft_s=0.1,
        e2e_s=e2e,
        chunk_times=[0.1 * (j + 1) for j in range(chunks)],
        chunk_tokens=[per_chunk] * chunks,
        chunk_texts=["x"] * chunks,
        output_tokens=chunks * per_chunk,
        **kwargs,
    )


def test_pairs_are_measured_requests_ok_on_both_arms() -> None:
    base = [
        _record("baseline", -1, 1.0, warmup=True),
        _record("baseline", 0, 1.0),
        _record("baseline", 1, 1.0, error="timeout"),
        _record("baseline", 2, 1.0),
    ]
    sd = [_record("speculative", 0, 0.5), _record("speculative", 1, 0.5)]
    samples = pair_records(base, sd)
    assert samples.index.tolist() == [0]
    assert samples.unpaired == 2  # index 1 failed on the baseline, index 2 has no SD twin
    assert samples.values["e2e_ms"][0].tolist() == [1000.0]


def test_run_statistics_per_class_with_n() -> None:
    base = [_record("baseline", i, 2.0, cls="a" if i % 2 else "b") for i in range(40)]
    sd = [
        _record("speculative", i, 1.0 if i % 2 else 2.0, cls="a" if i % 2 else "b", chunks=2)
        for i in range(40)
    ]
    for record in sd:
        record.chunk_tokens = [2, 2]
    stats = paired_statistics(base, sd, num_speculative_tokens=3, settings=SETTINGS)
    assert stats.overall.pairs == 40 and set(stats.by_class) == {"a", "b"}
    assert stats.by_class["a"].speedup["e2e_ms"]["mean"].estimate == pytest.approx(2.0)
    assert stats.by_class["b"].speedup["e2e_ms"]["mean"].estimate == pytest.approx(1.0)
    assert stats.by_class["b"].speedup["e2e_ms"]["mean"].significant is False
    assert stats.by_class["a"].pairs == 20
    # per token after the first chunk: baseline 0.3 s / 3 tokens, SD 0.1 s / 2 tokens
    assert stats.overall.speedup["itl_ms"]["mean"].estimate == pytest.approx(2.0)
    assert stats.overall.speedup["chunk_gap_ms"]["mean"].estimate == pytest.approx(1.0)
    # 2 tokens per chunk after the first vs 1: acceptance (2 - 1) / 3
    assert stats.overall.acceptance_rate_estimate.estimate == pytest.approx(1 / 3)
    assert stats.model_dump(mode="json")["overall"]["speedup"]["e2e_ms"]["mean"]["n"] == 40


@pytest.mark.parametrize(
    ("df", "exact"),
    # Student's t 0.975 quantiles (any table, e.g. NIST/SEMATECH e-Handbook 1.3.6.7.2)
    [(3, 3.182446), (5, 2.570582), (9, 2.262157), (15, 2.131450), (30, 2.042272)],
)
def test_t_quantile_matches_the_table(df: int, exact: float) -> None:
    assert -t_quantile(-1.959964, df) == pytest.approx(exact, abs=0.004 if df == 3 else 0.001)


def _coverage(n: int, trials: int, *, expanded: bool) -> float:
    """How often the 95% busy-rate interval of ``n`` synthetic pairs holds the true ratio.

    Each pair: a baseline E2E with prompt-to-prompt spread (lognormal, sigma 0.3), the SD arm
    at 0.8 of it times a per-prompt factor of mean 1 (sigma 0.3: acceptance varies by
    prompt), the same tokens on both arms. The true busy-rate ratio is E[base] / E[SD] = 1.25.
    """
    rng = np.random.default_rng(2024)
    hits = 0
    tokens = np.full(n, 128.0)
    for trial in range(trials):
        settings = StatisticsConfig(resamples=1000, seed=trial)
        base = rng.lognormal(0.0, 0.3, n)
        sd = base * 0.8 * rng.lognormal(-(0.3**2) / 2, 0.3, n)
        resamples = resample_counts(n, settings)
        interval = paired_rate_ratio(
            (tokens, tokens), (base, sd), resamples=resamples, settings=settings
        )
        if expanded:
            low, high = interval.low, interval.high
        else:  # the plain percentile interval of the same replicates
            sums = resamples.sums(np.stack([tokens, base, tokens, sd], axis=1))
            replicates = (sums[:, 2] / sums[:, 3]) / (sums[:, 0] / sums[:, 1])
            low, high = np.quantile(replicates, [0.025, 0.975])
        assert low is not None and high is not None
        hits += low <= 1.25 <= high
    return hits / trials


def test_expanded_interval_keeps_its_coverage_at_small_n() -> None:
    # The rule that lets the default local run (16 pairs per class) decide: at 16 pairs, and
    # at the verdict's floor of 10, the interval still covers about 95%; the plain percentile
    # interval falls short (measured: 94.5% and 93.5% vs 89.7% and 91.3%). 1500 trials: a
    # coverage's standard error is about 0.006.
    for n in (10, 16):
        expanded = _coverage(n, 1500, expanded=True)
        plain = _coverage(n, 1500, expanded=False)
        assert expanded >= 0.925, (n, expanded)
        assert expanded <= 0.985, (n, expanded)  # wider, not uselessly wide
        assert expanded > plain + 0.015, (n, expanded, plain)
