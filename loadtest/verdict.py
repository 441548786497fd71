"""The verdict per prompt class: use SD, don't, or can't tell, from intervals, not points.

Rules, in order (docs/costs-and-statistics.md):

1. SD changed the output of a prompt of the class at temperature 0 -> don't (not lossless).
2. Fewer pairs than ``statistics.min_pairs_for_verdict`` -> can't tell (a percentile
   bootstrap interval from a handful of pairs is too narrow).
3. Cost per 1M output tokens, SD / baseline: the whole interval below 1 -> use SD;
   the whole interval above 1 -> don't; the interval holds 1 (or none could be computed)
   -> can't tell, with the number of pairs so the reader knows what more data would cost.

The end-to-end latency speedup is shown next to it: in a closed loop at fixed concurrency
it moves with throughput, so it does not decide on its own.
"""

from __future__ import annotations

from loadtest.metrics import ALL_CLASSES
from loadtest.results import (
    ClassVerdict,
    CostSummary,
    Decision,
    Interval,
    PairedStatistics,
    ScopeCost,
    ScopeStatistics,
)


def _span(interval: Interval) -> str:
    return f"{interval.estimate:.3f}x [{interval.low:.3f}, {interval.high:.3f}]"


def decide(
    cost_ratio: Interval, lossless_mismatches: int, min_pairs: int = 20
) -> tuple[Decision, str]:
    if lossless_mismatches:
        return Decision.DONT, (
            f"SD changed the output of {lossless_mismatches} prompt(s) at temperature 0"
        )
    low, high, estimate = cost_ratio.low, cost_ratio.high, cost_ratio.estimate
    if estimate is None or low is None or high is None:
        return Decision.CANT_TELL, f"no cost interval from {cost_ratio.n} pairs"
    if cost_ratio.n < min_pairs:
        return Decision.CANT_TELL, (
            f"only {cost_ratio.n} pairs (cost ratio {_span(cost_ratio)}): an interval from "
            f"fewer than {min_pairs} is too narrow to trust; run more requests"
        )
    confidence = f"{cost_ratio.confidence:.0%}"
    if high < 1:
        return Decision.USE_SD, f"SD costs {_span(cost_ratio)} of the baseline ({confidence})"
    if low > 1:
        return Decision.DONT, f"SD costs {_span(cost_ratio)} of the baseline ({confidence})"
    return Decision.CANT_TELL, (
        f"cost ratio {_span(cost_ratio)} holds 1 at {confidence} with {cost_ratio.n} pairs: "
        "run more requests"
    )


def _verdict(
    name: str, stats: ScopeStatistics, cost: ScopeCost, mismatches: int, min_pairs: int
) -> ClassVerdict:
    decision, reason = decide(cost.ratio, mismatches, min_pairs)
    return ClassVerdict(
        prompt_class=name,
        decision=decision,
        reason=reason,
        pairs=stats.pairs,
        cost_ratio=cost.ratio,
        e2e_speedup=stats.speedup.get("e2e_ms", {}).get("mean"),
        acceptance_rate_estimate=stats.acceptance_rate_estimate,
        lossless_mismatches=mismatches,
    )


def verdicts(
    statistics: PairedStatistics,
    cost: CostSummary,
    lossless_mismatches_by_class: dict[str, int],
    min_pairs: int = 20,
) -> list[ClassVerdict]:
    """One verdict per prompt class, then "all"; a class needs statistics and a cost."""
    rows = [
        _verdict(
            name,
            statistics.by_class[name],
            cost.by_class[name],
            lossless_mismatches_by_class.get(name, 0),
            min_pairs,
        )
        for name in sorted(set(statistics.by_class) & set(cost.by_class))
    ]
    rows.append(
        _verdict(
            ALL_CLASSES,
            statistics.overall,
            cost.overall,
            sum(lossless_mismatches_by_class.values()),
            min_pairs,
        )
    )
    return rows
