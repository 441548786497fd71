"""The verdict per prompt class: use SD, don't, no gain or can't tell, from intervals, not
points.

Rules, in order (docs/costs-and-statistics.md):

1. SD changed the output of a prompt of the class at temperature 0 -> don't (not lossless);
   on Neuron only a divergence before guardrails.lossless_min_prefix_agreement of the output
   counts (loadtest.analysis.lossless_failures_by_class), locally every one.
2. Fewer pairs than ``statistics.min_pairs_for_verdict`` -> can't tell: below it even the
   expanded interval (loadtest.stats) is a guess.
3. Cost per 1M output tokens, SD / baseline, with its interval at ``statistics.confidence``
   c: the whole interval inside the equivalence bounds [1/(1+m), 1+m] (m =
   ``statistics.equivalence_margin``) -> no gain: keep the baseline. These are two one-sided
   tests (TOST), each at alpha = (1 - c) / 2: a two-sided c interval is the (1 - 2 alpha)
   interval TOST reads, so 95% means alpha = 0.025 each side. An interval inside the bounds
   decides "no gain" even when it excludes 1: a difference the margin calls too small does
   not pay for a second arm.
4. Otherwise: the whole interval below 1 -> use SD; the whole interval above 1 -> don't;
   the interval holds 1 (or none could be computed) -> can't tell.

A "can't tell" says what would let it decide: the pairs the floor needs, or the pairs that
would shrink the interval off 1 (an estimate outside the bounds) or into the bounds (an
estimate inside them) if the estimate held (an interval's half-width shrinks as 1/sqrt(n),
measured on the log scale where a ratio's interval is near symmetric), and the ``-c``
setting that gets them.

A replayed trace is also judged per prompt class and input-length bucket (``bucket_verdicts``):
the cells are one family, each decided on its interval read at its Holm level, so the
family-wise error stays at 1 - c however many cells there are, and a flip of a class's
verdict across lengths is claimed only when it survives that.

The end-to-end latency speedup is shown next to it: in a closed loop at fixed concurrency
it moves with throughput, so it does not decide on its own.

The decision carries its own guardrails (``pilot_floors``): for each class routed to SD, the
acceptance floor the run supports is ``guardrails.live.pilot_floor_factor`` times the lower
bound of the class's acceptance interval (from its requests' own figures where the server
returned them, else the client-side estimate), rounded down; only when the SD server
measured its acceptance (an estimated or unavailable one proposes no floor, and says why).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_FLOOR, Decimal

import numpy as np

from experiment.config import StatisticsConfig
from loadtest.metrics import ALL_CLASSES
from loadtest.results import (
    Acceptance,
    AcceptanceSource,
    ClassFloor,
    ClassVerdict,
    CostSummary,
    Decision,
    Interval,
    PairedStatistics,
    PilotFloors,
    ScopeCost,
    ScopeStatistics,
)
from loadtest.stats import bootstrap_p_value, holm_adjusted, holm_levels, read_interval

# An estimate this close to 1 is "the same cost": no run size is worth suggesting for it.
SAME_COST = 0.01
DEFAULT_MARGIN: float = StatisticsConfig.model_fields["equivalence_margin"].default
# Decimals of a proposed acceptance floor, rounded down: a floor reads as a setting, and a
# bar 0.01 lower than factor x bound is well inside the factor's own margin.
FLOOR_DECIMALS = 2


@dataclass(frozen=True)
class MorePairs:
    """The ``-c`` setting that multiplies a run's pairs (requests per prompt) and its value."""

    setting: str
    value: int

    def times(self, factor: int) -> str:
        return f"-c {self.setting}={self.value * factor}"


def _span(interval: Interval) -> str:
    return f"{interval.estimate:.3f}x [{interval.low:.3f}, {interval.high:.3f}]"


def pairs_to_exclude_one(ratio: Interval) -> int | None:
    """Pairs at which ``ratio``'s interval would stop holding 1 if its estimate held
    (None: the estimate is within SAME_COST of 1, or there is no interval)."""
    estimate, low, high = ratio.estimate, ratio.low, ratio.high
    if estimate is None or low is None or high is None or min(estimate, low) <= 0:
        return None
    distance = abs(math.log(estimate))
    if distance < math.log1p(SAME_COST):
        return None
    # the half-width on the side facing 1
    half = math.log(high / estimate) if estimate < 1 else math.log(estimate / low)
    return max(ratio.n + 1, math.ceil(ratio.n * (half / distance) ** 2))


def equivalence_bounds(margin: float) -> tuple[float, float]:
    """[1/(1+m), 1+m]: symmetric on the log scale, so SD at most a factor 1+m cheaper or
    dearer, whichever arm is the reference."""
    return 1 / (1 + margin), 1 + margin


def inside(ratio: Interval, bounds: tuple[float, float]) -> bool:
    """The whole interval lies within ``bounds`` (both one-sided tests reject)."""
    low, high = ratio.low, ratio.high
    return low is not None and high is not None and bounds[0] <= low and high <= bounds[1]


def pairs_to_fit_margin(ratio: Interval, margin: float) -> int | None:
    """Pairs at which ``ratio``'s interval would lie inside the equivalence bounds if its
    estimate held (None: no interval, or the estimate is not strictly inside the bounds)."""
    estimate, low, high = ratio.estimate, ratio.low, ratio.high
    if estimate is None or low is None or high is None or min(estimate, low) <= 0:
        return None
    centre, edge = math.log(estimate), math.log1p(margin)
    room_up, room_down = edge - centre, edge + centre
    if min(room_up, room_down) <= 0:
        return None
    factor = max(math.log(high / estimate) / room_up, math.log(estimate / low) / room_down)
    return max(ratio.n + 1, math.ceil(ratio.n * factor**2))


def tost_text(ratio: Interval, margin: float) -> str:
    """How the equivalence was tested, with the alpha each one-sided test used."""
    low, high = equivalence_bounds(margin)
    alpha = (1 - ratio.confidence) / 2
    return (
        f"equivalence bounds [{low:.3f}, {high:.3f}] (statistics.equivalence_margin="
        f"{margin:g}; two one-sided tests at alpha={alpha:.3g} each, the {ratio.confidence:.0%} "
        "interval)"
    )


def _how(pairs: int, needed: int, more: MorePairs | None) -> str:
    factor = math.ceil(needed / max(pairs, 1))
    if more is None:
        return f"run {factor}x the requests"
    return f"run with {more.times(factor)}"


def decide(
    cost_ratio: Interval,
    lossless_mismatches: int,
    min_pairs: int,
    more_pairs: MorePairs | None = None,
    margin: float = DEFAULT_MARGIN,
) -> tuple[Decision, str]:
    if lossless_mismatches:
        return Decision.DONT, (
            f"SD changed the output of {lossless_mismatches} prompt(s) at temperature 0"
        )
    low, high, estimate, n = cost_ratio.low, cost_ratio.high, cost_ratio.estimate, cost_ratio.n
    if estimate is None or low is None or high is None:
        return Decision.CANT_TELL, f"no cost interval from {n} pairs"
    if n < min_pairs:
        return Decision.CANT_TELL, (
            f"only {n} pairs (cost ratio {_span(cost_ratio)}); the verdict needs "
            f"statistics.min_pairs_for_verdict={min_pairs}: "
            f"{_how(n, min_pairs, more_pairs)}"
        )
    confidence = f"{cost_ratio.confidence:.0%}"
    if inside(cost_ratio, equivalence_bounds(margin)):
        return Decision.NO_GAIN, (
            f"keep the baseline: SD costs {_span(cost_ratio)} of the baseline (n={n}), inside "
            f"the {tost_text(cost_ratio, margin)}"
        )
    if high < 1:
        return Decision.USE_SD, (
            f"SD costs {_span(cost_ratio)} of the baseline ({confidence}, n={n})"
        )
    if low > 1:
        return Decision.DONT, f"SD costs {_span(cost_ratio)} of the baseline ({confidence}, n={n})"
    held = f"n={n}: cost ratio {_span(cost_ratio)} holds 1 at {confidence}"
    to_fit = pairs_to_fit_margin(cost_ratio, margin)
    if to_fit is not None:
        low_bound, high_bound = equivalence_bounds(margin)
        return Decision.CANT_TELL, (
            f"{held} and reaches outside the equivalence bounds [{low_bound:.3f}, "
            f"{high_bound:.3f}]; about {to_fit} pairs would bring it inside (no gain) if the "
            f"estimate holds: {_how(n, to_fit, more_pairs)}"
        )
    needed = pairs_to_exclude_one(cost_ratio)
    if needed is None and low <= 0:  # not a ratio of two positive costs: no projection
        return Decision.CANT_TELL, f"{held}: run more requests"
    if needed is None:
        return Decision.CANT_TELL, (
            f"{held}, and its estimate is within {SAME_COST:.0%} of 1: the arms cost about the "
            "same; more pairs would only narrow that"
        )
    return Decision.CANT_TELL, (
        f"{held}; about {needed} pairs would exclude 1 if the estimate holds: "
        f"{_how(n, needed, more_pairs)}"
    )


def _verdict(
    name: str,
    stats: ScopeStatistics,
    cost: ScopeCost,
    mismatches: int,
    settings: StatisticsConfig,
    more_pairs: MorePairs | None,
) -> ClassVerdict:
    margin = settings.equivalence_margin
    decision, reason = decide(
        cost.ratio, mismatches, settings.min_pairs_for_verdict, more_pairs, margin
    )
    return ClassVerdict(
        prompt_class=name,
        decision=decision,
        reason=reason,
        pairs=stats.pairs,
        cost_ratio=cost.ratio,
        e2e_speedup=stats.speedup.get("e2e_ms", {}).get("mean"),
        acceptance_rate_estimate=stats.acceptance_rate_estimate,
        lossless_mismatches=mismatches,
        equivalence_bounds=equivalence_bounds(margin),
    )


def verdicts(
    statistics: PairedStatistics,
    cost: CostSummary,
    lossless_mismatches_by_class: dict[str, int],
    settings: StatisticsConfig,
    more_pairs: MorePairs | None = None,
) -> list[ClassVerdict]:
    """One verdict per prompt class, then "all"; a class needs statistics and a cost."""
    rows = [
        _verdict(
            name,
            statistics.by_class[name],
            cost.by_class[name],
            lossless_mismatches_by_class.get(name, 0),
            settings,
            more_pairs,
        )
        for name in sorted(set(statistics.by_class) & set(cost.by_class))
    ]
    rows.append(
        _verdict(
            ALL_CLASSES,
            statistics.overall,
            cost.overall,
            sum(lossless_mismatches_by_class.values()),
            settings,
            more_pairs,
        )
    )
    return rows


def floor_down(value: float, decimals: int = FLOOR_DECIMALS) -> float:
    """``value`` rounded down to ``decimals``, never above it: Decimal(value) is the float's
    exact value, and the nearest float to a decimal at or below a float is at or below it
    too (``math.floor(value * 100) / 100`` can round up through the product)."""
    step = Decimal(1).scaleb(-decimals)
    return float(Decimal(value).quantize(step, rounding=ROUND_FLOOR))


def _no_floor(acceptance: Acceptance) -> str | None:
    """Why no class of the run gets a floor (None: the SD arm's acceptance was measured)."""
    if acceptance.source is AcceptanceSource.ESTIMATED:
        return (
            "acceptance estimated, not measured: the SD server exports no speculation counters "
            "(the fork profile's V0 engine), so the run has no measured acceptance to set a "
            "floor by"
        )
    if acceptance.source is AcceptanceSource.NOT_AVAILABLE:
        return f"acceptance not available ({acceptance.reason or 'no reason recorded'})"
    return None


def pilot_floors(
    rows: Sequence[ClassVerdict],
    acceptance: Acceptance,
    factor: float,
    per_request: Mapping[str, Interval] | None = None,
) -> PilotFloors | None:
    """The acceptance floors the run supports for the classes ``rows`` route to SD ("use
    SD"): ``factor`` x the lower bound of each class's acceptance interval, rounded down to
    FLOOR_DECIMALS. ``acceptance`` is the SD arm's (its source decides whether any class gets
    a floor). ``per_request``: each class's interval from its requests' own figures, used
    instead of the client-side estimate where given (the server's count beats an estimate).
    None without a per-class verdict (nothing is routed by class then)."""
    classes = [v for v in rows if v.prompt_class != ALL_CLASSES]
    if not classes:
        return None
    run_reason = _no_floor(acceptance)
    entries = []
    for row in classes:
        if not row.decision.routes_to_sd:
            continue
        interval = (per_request or {}).get(row.prompt_class)
        source = AcceptanceSource.PER_REQUEST
        if interval is None:
            interval, source = row.acceptance_rate_estimate, AcceptanceSource.ESTIMATED
        low = None if interval is None else interval.low
        reason = run_reason
        floor = None
        if reason is None and low is None:
            reason = f"its acceptance has no interval ({row.pairs} pairs)"
        elif reason is None and low is not None:
            floor = floor_down(factor * low)
            if floor <= 0:
                reason = (
                    f"{factor:g} x its lower bound {low:.3f} rounds down to 0: a floor must be "
                    "above 0"
                )
                floor = None
        entries.append(
            ClassFloor(
                prompt_class=row.prompt_class,
                acceptance=interval,
                acceptance_source=source,
                floor=floor,
                reason=reason,
            )
        )
    return PilotFloors(
        factor=factor,
        source=acceptance.source,
        measured_acceptance_rate=acceptance.acceptance_rate if acceptance.available else None,
        by_class=entries,
    )


@dataclass(frozen=True, eq=False)
class _Cell:
    """One (class, input bucket) of a replayed trace and what its verdict reads."""

    name: str
    bucket: str
    stats: ScopeStatistics
    cost: ScopeCost
    mismatches: int
    replicates: np.ndarray | None  # the cost ratio's bootstrap replicates (None: none kept)
    p_value: float | None  # for a cost ratio of 1; None: outside the family


def cost_ratio_replicates(stats: ScopeStatistics, cost: ScopeCost) -> np.ndarray | None:
    """The cell's cost-ratio replicates: cost ratio = effective-concurrency ratio / busy-rate
    ratio, the first fixed per run (loadtest.cost.cost_ratio), so each busy-rate resample
    gives one cost ratio (None: the statistics kept no replicates, or no cost estimate)."""
    replicates = stats.busy_rate_replicates
    estimate, rate = cost.ratio.estimate, stats.busy_rate_ratio.estimate
    if replicates is None or estimate is None or not rate:
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(replicates != 0, estimate * rate / replicates, np.nan)


def _cell(
    name: str,
    bucket: str,
    stats: ScopeStatistics,
    cost: ScopeCost,
    mismatches: int,
    min_pairs: int,
) -> _Cell:
    replicates = cost_ratio_replicates(stats, cost)
    p_value = None
    # In the family: the cells decided by their interval (a lossless mismatch decides
    # "don't" and too few pairs "can't tell" whatever the interval says).
    if replicates is not None and not mismatches and cost.ratio.n >= min_pairs:
        p_value = bootstrap_p_value(replicates, cost.ratio.n)
    return _Cell(name, bucket, stats, cost, mismatches, replicates, p_value)


def _at(cell: _Cell, confidence: float) -> Interval:
    """The cell's cost ratio with its interval read at ``confidence``."""
    assert cell.replicates is not None  # a cell in the family kept them
    bounds = read_interval(cell.replicates, cell.cost.ratio.n, confidence)
    low, high = bounds if bounds is not None else (None, None)
    return cell.cost.ratio.model_copy(update={"low": low, "high": high, "confidence": confidence})


def _p_text(p: float) -> str:
    return f"{p:.2g}" if p >= 1e-3 else "<0.001"


def bucket_verdicts(
    statistics: PairedStatistics,
    cost: CostSummary,
    lossless_mismatches_by_cell: dict[tuple[str, str], int],
    settings: StatisticsConfig,
    more_pairs: MorePairs | None = None,
) -> list[ClassVerdict]:
    """A replayed trace's verdict per prompt class and input-length bucket: the same rules
    on the cell's own pairs and cost, at the cell's Holm level.

    The cells are a family: at 95% each, some of a dozen cells would decide by chance, and
    "the verdict flips with length" would sometimes be noise. Holm's step-down method holds
    the family-wise error rate (the chance that any cell's "SD costs the same as the
    baseline" is wrongly rejected) at 1 - ``statistics.confidence``: it is valid under any
    dependence between the cells' p-values (its proof is Bonferroni's inequality, applied at
    each step; Holm 1979), which matters here because the cells share the run's machine and
    drift, and it is uniformly more powerful than Bonferroni (it rejects everything
    Bonferroni's alpha/m rejects, and more). Each cell's p-value is the paired bootstrap's own
    (loadtest.stats.bootstrap_p_value, the dual of the interval shown), and each cell's
    interval is read at the level Holm tested it at (loadtest.stats.holm_levels), so its
    interval excludes 1 exactly when Holm rejects: these are not simultaneous intervals
    (Bonferroni's at 1 - alpha/m would be, and are wider). "No gain" (the interval inside
    the equivalence bounds) is read off the same interval, so it is at least as strict as at
    the uncorrected level; Holm's bound is for the "different from 1" claims. A cell whose
    verdict the interval does not decide (a lossless mismatch, fewer pairs than
    ``statistics.min_pairs_for_verdict``) is outside the family."""
    min_pairs = settings.min_pairs_for_verdict
    cells = [
        _cell(
            name,
            bucket,
            stats,
            cell_cost,
            lossless_mismatches_by_cell.get((name, bucket), 0),
            min_pairs,
        )
        for name, buckets in sorted(statistics.by_bucket.items())
        for bucket, stats in sorted(buckets.items(), key=lambda kv: _bucket_start(kv[0]))
        if (cell_cost := cost.by_bucket.get(name, {}).get(bucket)) is not None
    ]
    family = [c for c in cells if c.p_value is not None]
    p_values = [c.p_value for c in family if c.p_value is not None]
    alpha = 1 - settings.confidence
    levels = dict(zip(map(id, family), holm_levels(p_values, alpha), strict=True))
    adjusted = dict(zip(map(id, family), holm_adjusted(p_values), strict=True))
    rows = []
    for cell in cells:
        row = _verdict(
            cell.name, cell.stats, cell.cost, cell.mismatches, settings, more_pairs
        ).model_copy(update={"input_bucket": cell.bucket})
        if cell.p_value is not None:
            level = levels[id(cell)]
            ratio = _at(cell, 1 - level)
            row = _verdict(
                cell.name,
                cell.stats,
                cell.cost.model_copy(update={"ratio": ratio}),
                cell.mismatches,
                settings,
                more_pairs,
            )
            alone, _ = decide(
                _at(cell, settings.confidence),
                0,
                min_pairs,
                more_pairs,
                settings.equivalence_margin,
            )
            note = (
                f"; Holm over {len(family)} cells: p={_p_text(cell.p_value)}, adjusted "
                f"{_p_text(adjusted[id(cell)])}, interval read at {1 - level:.2%}"
            )
            if alone is not row.decision:
                note += f" (at {settings.confidence:.0%} alone: {alone.value})"
            row = row.model_copy(
                update={
                    "input_bucket": cell.bucket,
                    "reason": row.reason + note,
                    "p_value": cell.p_value,
                    "adjusted_p_value": adjusted[id(cell)],
                }
            )
        rows.append(row)
    return rows


def correction_text(rows: Sequence[ClassVerdict], confidence: float) -> str:
    """How the per-bucket verdicts controlled the family-wise error, from their own numbers
    (empty without a cell in the family)."""
    family = [r for r in rows if r.adjusted_p_value is not None]
    if not family:
        return ""
    alpha = 1 - confidence
    rejected = sum(r.adjusted_p_value is not None and r.adjusted_p_value <= alpha for r in family)
    levels = sorted(r.cost_ratio.confidence for r in family)
    shown = f"{levels[0]:.2%}" if levels[0] == levels[-1] else f"{levels[0]:.2%}-{levels[-1]:.2%}"
    outside = len(rows) - len(family)
    return (
        f"Multiple comparisons: Holm's step-down over {len(family)} cell"
        f"{'' if len(family) == 1 else 's'}, family-wise {confidence:.0%} (alpha {alpha:.3g}); "
        f"{rejected} of {len(family)} cost ratios differ from 1 after the correction (Holm-"
        f"adjusted p <= {alpha:.3g}). Each cell's interval is read at the level Holm tested it "
        f"at ({shown}), so it excludes 1 exactly when Holm rejects; these are not simultaneous "
        "intervals."
        + (
            f" {outside} cell{'' if outside == 1 else 's'} outside the family (a lossless "
            "mismatch or too few pairs decide them)."
            if outside
            else ""
        )
    )


def _bucket_start(label: str) -> int:
    """A bucket label's first token count ("512-2047", "8192+"): buckets in length order."""
    digits = label.split("-")[0].rstrip("+")
    return int(digits) if digits.isdigit() else 0


def verdict_flips(rows: Sequence[ClassVerdict]) -> list[str]:
    """Each class whose decided verdicts route its buckets to different arms ("use SD" in
    one, "don't" or "no gain" in another), with the verdict of each bucket: a per-class
    routing rule would be wrong for part of its traffic. ``rows`` are bucket_verdicts', each
    decided at its Holm level, so a flip is claimed only when it survives the correction."""
    by_class: dict[str, list[ClassVerdict]] = {}
    for row in rows:
        by_class.setdefault(row.prompt_class, []).append(row)
    flips = []
    for name, cells in sorted(by_class.items()):
        routes = {c.decision.routes_to_sd for c in cells if c.decision is not Decision.CANT_TELL}
        if len(routes) > 1:
            shown = ", ".join(f"{c.input_bucket}: {c.decision.value}" for c in cells)
            flips.append(f"{name}: the verdict flips with input length ({shown})")
    return flips
