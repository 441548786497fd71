"""Multiple comparisons across a replayed trace's cells (issue 40): each cell's bootstrap
p-value, Holm's step-down, the interval read at the cell's Holm level, and a flip across
lengths claimed only when it survives."""

from __future__ import annotations

import numpy as np
import pytest

from experiment.config import StatisticsConfig
from loadtest.results import (
    ClassVerdict,
    CostSummary,
    Decision,
    Interval,
    PairedStatistics,
    ScopeCost,
    ScopeStatistics,
)
from loadtest.stats import (
    bootstrap_p_value,
    holm_adjusted,
    holm_levels,
    read_interval,
)
from loadtest.verdict import bucket_verdicts, correction_text, verdict_flips

SETTINGS = StatisticsConfig()  # 95% family-wise, the default margin and pair floor
PAIRS = 400
RESAMPLES = 2000


def test_holm_adjusts_the_textbook_example() -> None:
    # R: p.adjust(c(0.01, 0.04, 0.03, 0.005), "holm") == c(0.03, 0.06, 0.06, 0.02):
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04, then the
    # running maximum.
    assert holm_adjusted([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # At alpha 0.05 Holm tests 0.005 at 0.05/4, 0.01 at 0.05/3 (both rejected), 0.03 at
    # 0.05/2 (not rejected: it stops there) and 0.04 at that same level.
    assert holm_levels([0.01, 0.04, 0.03, 0.005], 0.05) == pytest.approx(
        [0.05 / 3, 0.025, 0.025, 0.0125]
    )
    # Bonferroni (0.05/4 each) rejects only 0.005; Holm rejects 0.01 as well.
    rejected = [p <= 0.05 for p in holm_adjusted([0.01, 0.04, 0.03, 0.005])]
    assert rejected == [True, False, False, True]
    assert holm_adjusted([0.2]) == [0.2] and holm_levels([0.2], 0.05) == [0.05]


def _costs(above_one: int, below_one: int) -> np.ndarray:
    """RESAMPLES cost ratios, ``above_one`` of them above 1 and ``below_one`` below it."""
    return np.concatenate([np.linspace(0.5, 0.99, below_one), np.linspace(1.01, 1.6, above_one)])


def test_the_p_value_is_the_share_of_resamples_past_the_null_on_both_sides() -> None:
    # 30 of 2000 resamples above 1: one tail of 1.5%, two-sided 3% (the expansion at 400
    # pairs moves it by under 0.001).
    cheaper = _costs(above_one=30, below_one=RESAMPLES - 30)
    assert bootstrap_p_value(cheaper, PAIRS) == pytest.approx(0.03, abs=0.002)
    assert bootstrap_p_value(1 / cheaper, PAIRS) == pytest.approx(0.03, abs=0.002)
    assert bootstrap_p_value(_costs(4, RESAMPLES - 4), PAIRS) == pytest.approx(0.004, abs=0.001)
    assert bootstrap_p_value(_costs(0, RESAMPLES), PAIRS) == 0.0  # all on one side
    assert bootstrap_p_value(_costs(1000, 1000), PAIRS) == pytest.approx(1.0, abs=0.002)
    assert bootstrap_p_value(np.full(10, np.nan), PAIRS) is None


def test_the_p_value_is_the_dual_of_the_interval_shown() -> None:
    rng = np.random.default_rng(3)
    for n in (5, 16, 100):
        replicates = np.exp(rng.normal(-0.1, 0.06, RESAMPLES))
        p = bootstrap_p_value(replicates, n)
        assert p is not None and 0 < p < 1
        for confidence, excludes in ((1 - p * 1.01, True), (1 - p * 0.99, False)):
            bounds = read_interval(replicates, n, confidence)
            assert bounds is not None
            assert (bounds[1] < 1) is excludes


def _cell(costs: np.ndarray) -> tuple[ScopeStatistics, ScopeCost]:
    """A cell whose cost ratio's resamples are ``costs`` (cost = 1 / busy-rate ratio here)."""
    estimate = float(np.median(costs))
    busy = Interval(estimate=1 / estimate, low=None, high=None, n=PAIRS, confidence=0.95)
    stats = ScopeStatistics(
        pairs=PAIRS, speedup={}, busy_rate_ratio=busy, acceptance_rate_estimate=busy
    )
    stats.busy_rate_replicates = 1 / costs
    low, high = read_interval(costs, PAIRS, SETTINGS.confidence) or (None, None)
    ratio = Interval(estimate=estimate, low=low, high=high, n=PAIRS, confidence=0.95)
    return stats, ScopeCost.model_construct(ratio=ratio)


def _rows(short: np.ndarray, long: np.ndarray) -> list[ClassVerdict]:
    cells = {"0-127": _cell(short), "128+": _cell(long)}
    statistics = PairedStatistics.model_construct(
        by_bucket={"structured": {b: s for b, (s, _) in cells.items()}}
    )
    cost = CostSummary.model_construct(
        by_bucket={"structured": {b: c for b, (_, c) in cells.items()}}
    )
    return bucket_verdicts(statistics, cost, {}, SETTINGS)


def test_a_flip_at_95_percent_each_that_holm_does_not_keep() -> None:
    # Short inputs: SD cheaper, p = 0.03; long inputs: SD dearer, p = 0.03. Each alone at 95%
    # decides (0.03 < 0.05) and the class would flip; Holm tests the smaller at 0.05 / 2 =
    # 0.025, rejects neither, and neither cell decides.
    short = _costs(above_one=30, below_one=RESAMPLES - 30)
    long = 1 / short
    for cost in (short, long):
        _, cell_cost = _cell(cost)
        assert cell_cost.ratio.significant  # uncorrected: the 95% interval excludes 1
    rows = _rows(short, long)
    assert [r.decision for r in rows] == [Decision.CANT_TELL, Decision.CANT_TELL]
    assert [r.adjusted_p_value for r in rows] == pytest.approx([0.06, 0.06], abs=0.004)
    assert [r.cost_ratio.confidence for r in rows] == pytest.approx([0.975, 0.975])
    assert all(r.cost_ratio.low < 1 < r.cost_ratio.high for r in rows)  # type: ignore[operator]
    assert "(at 95% alone: use SD)" in rows[0].reason
    assert "(at 95% alone: don't)" in rows[1].reason
    assert verdict_flips(rows) == []
    text = correction_text(rows, SETTINGS.confidence)
    assert text.startswith(
        "Multiple comparisons: Holm's step-down over 2 cells, family-wise 95% (alpha 0.05); "
        "0 of 2 cost ratios differ from 1 after the correction"
    )
    assert "(97.50%)" in text


def test_a_flip_that_survives_holm_where_bonferroni_would_drop_it() -> None:
    # p = 0.004 (short) and 0.03 (long): Holm rejects 0.004 at 0.025, then 0.03 at 0.05; so
    # the flip stands. Bonferroni's 0.025 for both would have kept only the first.
    short = _costs(above_one=4, below_one=RESAMPLES - 4)
    long = 1 / _costs(above_one=30, below_one=RESAMPLES - 30)
    rows = _rows(short, long)
    assert [r.p_value for r in rows] == pytest.approx([0.004, 0.03], abs=0.002)
    assert rows[1].p_value is not None and rows[1].p_value > 0.05 / 2  # Bonferroni: not
    assert [r.decision for r in rows] == [Decision.USE_SD, Decision.DONT]
    assert [r.cost_ratio.confidence for r in rows] == pytest.approx([0.975, 0.95])
    assert verdict_flips(rows) == [
        "structured: the verdict flips with input length (0-127: use SD, 128+: don't)"
    ]
    assert "2 of 2 cost ratios differ from 1" in correction_text(rows, SETTINGS.confidence)


def test_a_cell_the_interval_does_not_decide_is_outside_the_family() -> None:
    short = _costs(above_one=30, below_one=RESAMPLES - 30)
    stats, cost = _cell(short)
    statistics = PairedStatistics.model_construct(by_bucket={"structured": {"0-127": stats}})
    costs = CostSummary.model_construct(by_bucket={"structured": {"0-127": cost}})
    rows = bucket_verdicts(statistics, costs, {("structured", "0-127"): 1}, SETTINGS)
    assert rows[0].decision is Decision.DONT and rows[0].p_value is None
    assert correction_text(rows, SETTINGS.confidence) == ""
    # alone in the family, the cell is judged at 95%, as without the correction
    alone = bucket_verdicts(statistics, costs, {}, SETTINGS)
    assert alone[0].decision is Decision.USE_SD and alone[0].cost_ratio.confidence == 0.95
