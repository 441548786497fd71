"""The tiered arm against both serving arms, per prompt class.

The tiered arm is the gateway (routing) in front of both servers, driven with the same
schedule as the two arms. Schedule index ``i`` is the same prompt on every arm, so each
comparison is paired like SD vs baseline (loadtest.stats): baseline / tiered and SD / tiered
mean E2E, each with its paired bootstrap interval.

The check: a class the gateway sends to the speculative arm must look like SD, every other
class like the baseline (issue 24's goal). On a speculative class the tiered arm's speedup
over the baseline must lie within SD's interval of that speedup; on the others its interval
must contain 1, the baseline's speedup over itself. Fewer pairs than
``statistics.min_pairs_for_verdict`` (as for the verdict) or a missing interval is "can't
tell", never a pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from experiment.config import Arm, StatisticsConfig
from loadtest.lossless import lossless_check
from loadtest.records import RequestRecord
from loadtest.results import (
    Interval,
    PairedStatistics,
    TieredClass,
    TieredComparison,
    TieredRouting,
)
from loadtest.stats import PairedSamples, pair_records, paired_speedups, resample_counts

METRIC = "e2e_ms"  # the goal is stated on end-to-end latency
STAT = "mean"


def _e2e_interval(samples: PairedSamples, settings: StatisticsConfig) -> Interval:
    """reference / tiered mean E2E over the pairs (> 1: tiered faster)."""
    reference, tiered = samples.values[METRIC]
    return paired_speedups(
        reference,
        tiered,
        lower_is_better=True,
        resamples=resample_counts(len(samples), settings),
        settings=settings,
        stats=(STAT,),
    )[STAT]


def _contains(interval: Interval | None, value: float | None) -> bool | None:
    if interval is None or value is None or interval.low is None or interval.high is None:
        return None
    return interval.low <= value <= interval.high


def _check(
    routed_to: Arm, vs_baseline: Interval, sd_speedup: Interval | None, min_pairs: int
) -> tuple[bool | None, str]:
    if vs_baseline.n < min_pairs:
        return None, (
            f"can't tell: {vs_baseline.n} pairs, fewer than "
            f"statistics.min_pairs_for_verdict={min_pairs}"
        )
    if routed_to is Arm.SPECULATIVE:
        held = _contains(sd_speedup, vs_baseline.estimate)
        if held is None:
            return None, "can't tell: no interval of SD's or tiered's speedup (too few pairs)"
        where = "within" if held else "outside"
        return held, (
            f"routed to SD: tiered's E2E speedup over the baseline {vs_baseline.estimate:.2f}x "
            f"is {where} SD's interval"
        )
    held = _contains(vs_baseline, 1.0)
    if held is None:
        return None, "can't tell: no interval of tiered's speedup (too few pairs)"
    return held, (
        "routed to the baseline: tiered's E2E speedup interval "
        + ("contains 1 (matches the baseline)" if held else "excludes 1 (differs from it)")
    )


def tiered_comparison(
    routing: TieredRouting,
    baseline: Iterable[RequestRecord],
    speculative: Iterable[RequestRecord],
    tiered: Iterable[RequestRecord],
    *,
    statistics: PairedStatistics | None,
    settings: StatisticsConfig,
    temperature: float,
) -> TieredComparison:
    """Per class: the tiered arm against the baseline and SD (paired), and the check.
    ``statistics``: the run's SD-vs-baseline block (SD's own interval per class)."""
    base, sd, tier = (
        [r for r in records if not r.warmup] for records in (baseline, speculative, tiered)
    )
    vs_base, vs_sd = pair_records(base, tier), pair_records(sd, tier)
    classes: Sequence[str] = sorted({r.prompt_class for r in tier})
    by_class = {}
    for name in classes:
        routed_to = Arm.SPECULATIVE if name in routing.speculative_classes else Arm.BASELINE
        against_base = _e2e_interval(vs_base.subset(vs_base.prompt_class == name), settings)
        against_sd = _e2e_interval(vs_sd.subset(vs_sd.prompt_class == name), settings)
        scope = statistics.by_class.get(name) if statistics is not None else None
        sd_speedup = scope.speedup.get(METRIC, {}).get(STAT) if scope is not None else None
        held, reason = _check(routed_to, against_base, sd_speedup, settings.min_pairs_for_verdict)
        by_class[name] = TieredClass(
            prompt_class=name,
            routed_to=routed_to.value,
            vs_baseline=against_base,
            vs_speculative=against_sd,
            speculative_vs_baseline=sd_speedup,
            held=held,
            reason=reason,
        )
    return TieredComparison(
        routing=routing,
        by_class=by_class,
        lossless=lossless_check(base, tier, temperature),
        unpaired=vs_base.unpaired,
    )


def tiered_warnings(comparison: TieredComparison | None) -> list[str]:
    """A class where the tiered arm did not match the arm it is routed to."""
    if comparison is None:
        return []
    return [
        f"tiered: {name} does not match the {check.routed_to} arm ({check.reason})"
        for name, check in comparison.by_class.items()
        if check.held is False
    ]
