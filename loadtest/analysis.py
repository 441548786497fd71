"""Statistics, cost and verdict of a run: what the summary adds to the per-arm metrics.

``analysis_info(config, local=...)`` is written to run.json when the run starts (k, bootstrap
settings, the price the arms pay), so ``summarize(run_dir)`` recomputes everything from the
run directory alone; ``analyse`` does that from the records.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from experiment.config import Arm, ExperimentConfig
from loadtest.cost import cost_summary, price_basis
from loadtest.records import RequestRecord
from loadtest.results import (
    AcceptanceSource,
    AnalysisInfo,
    ArmSummary,
    ClassVerdict,
    CostSummary,
    Interval,
    Lossless,
    PairedStatistics,
    PilotFloors,
)
from loadtest.stats import paired_statistics, request_acceptance_interval
from loadtest.traffic import record_bucket
from loadtest.verdict import MorePairs, bucket_verdicts, pilot_floors, verdict_flips, verdicts

# The local CPU servers are bit-exact: the local bar is 100% exact match.
LOCAL_LOSSLESS_AGREEMENT = 1.0


Schedule = list[tuple[int, int, int]]


def _served(config: ExperimentConfig, *, local: bool) -> tuple[int, Schedule | None]:
    """The speculative arm's k and k per batch-size range, from its spec: the local run's or
    the trn2 one (the local rule, ``local.num_speculative_tokens`` else ``serving``'s, lives
    once, in ``ExperimentConfig.local_serving_spec``; the model paths do not matter here)."""
    if local:
        spec = config.local_serving_spec(Arm.SPECULATIVE, target_dir="", draft_dir="")
    else:
        spec = config.serving_spec(Arm.SPECULATIVE)
    k = spec.num_speculative_tokens
    assert k is not None, "a speculative arm's spec always has k"
    schedule = spec.speculation_schedule
    return k, [(first, last, n) for first, last, n in schedule] if schedule else None


def served_k(config: ExperimentConfig, *, local: bool) -> int:
    """The k the speculative arm serves with (its most, under a schedule)."""
    return _served(config, local=local)[0]


def served_schedule(config: ExperimentConfig, *, local: bool) -> Schedule | None:
    """The speculative arm's k per batch-size range; None: one k for every batch."""
    return _served(config, local=local)[1]


def analysis_info(config: ExperimentConfig, *, local: bool = False) -> AnalysisInfo:
    """What run.json records for the analysis. ``local``: the arms are the local run's CPU
    servers (local price, k and lossless bar), else the trn2 deployment's (the caller says
    which: never guessed from URLs)."""
    # The setting a "can't tell" verdict points at to get more pairs; a replayed trace has
    # no such setting (its requests are the trace's: a longer trace gives more pairs).
    trace = config.local.traffic if local else config.loadtest.traffic.file is not None
    pairs_setting: str | None
    requests_per_prompt: int | None
    if trace:
        pairs_setting, requests_per_prompt = None, None
    elif local:
        pairs_setting, requests_per_prompt = (
            "local.requests_per_prompt",
            config.local.requests_per_prompt,
        )
    else:
        pairs_setting, requests_per_prompt = (
            "loadtest.requests_per_prompt",
            config.loadtest.requests_per_prompt,
        )
    return AnalysisInfo(
        num_speculative_tokens=served_k(config, local=local),
        speculation_schedule=served_schedule(config, local=local),
        lossless_min_prefix_agreement=(
            LOCAL_LOSSLESS_AGREEMENT if local else config.guardrails.lossless_min_prefix_agreement
        ),
        statistics=config.statistics,
        price=price_basis(config, local=local),
        pairs_setting=pairs_setting,
        requests_per_prompt=requests_per_prompt,
        pilot_floor_factor=config.guardrails.live.pilot_floor_factor,
        # The local replay's config carries local.traffic_length_buckets here (replay_config).
        length_buckets=list(config.loadtest.traffic.length_buckets) if trace else None,
    )


@dataclass
class Analysis:
    statistics: PairedStatistics | None = None
    cost: CostSummary | None = None
    verdict: list[ClassVerdict] = field(default_factory=list)
    floors: PilotFloors | None = None
    verdict_by_bucket: list[ClassVerdict] = field(default_factory=list)
    bucket_flips: list[str] = field(default_factory=list)


def lossless_failures_by_class(lossless: Lossless, min_agreement: float) -> dict[str, int]:
    """Prompts per class whose SD output diverged before ``min_agreement`` of it: every
    mismatch at the local bar of 1.0 (bit-exact CPU), only early ones on Neuron
    (guardrails.lossless_min_prefix_agreement: its greedy outputs can drift late)."""
    if not lossless.applicable:
        return {}
    return dict(
        Counter(
            m.prompt_class
            for m in lossless.mismatches
            if m.agreement is None or m.agreement < min_agreement
        )
    )


def _mismatches_by_cell(
    lossless: Lossless,
    min_agreement: float,
    measured: Mapping[str, list[RequestRecord]],
    length_buckets: Sequence[int] | None,
) -> dict[tuple[str, str], int]:
    """As lossless_failures_by_class, per (class, input bucket) of the prompt's requests."""
    if not lossless.applicable:
        return {}
    bucket = {
        r.prompt_id: record_bucket(r.input_tokens, length_buckets)
        for rs in measured.values()
        for r in rs
    }
    return dict(
        Counter(
            (m.prompt_class, bucket.get(m.prompt_id, ""))
            for m in lossless.mismatches
            if m.agreement is None or m.agreement < min_agreement
        )
    )


def _per_request_intervals(
    arms: Mapping[str, ArmSummary], sd_records: Sequence[RequestRecord], info: AnalysisInfo
) -> dict[str, Interval] | None:
    """Each class's acceptance interval from the SD arm's requests' own figures, when its
    acceptance source is "per request" (every succeeded request carried them); else None."""
    if arms[Arm.SPECULATIVE.value].acceptance.source is not AcceptanceSource.PER_REQUEST:
        return None
    found = {}
    for name in sorted({r.prompt_class for r in sd_records}):
        class_records = [r for r in sd_records if r.prompt_class == name]
        interval = request_acceptance_interval(class_records, info.statistics)
        if interval is not None:
            found[name] = interval
    return found


def analyse(
    info: AnalysisInfo | None,
    records: Mapping[Arm, list[RequestRecord]],
    arms: Mapping[str, ArmSummary],
    lossless: Lossless,
    length_buckets: Sequence[int] | None = None,
) -> Analysis:
    """Paired statistics, cost per 1M output tokens and the verdict (empty without pairs or
    without the run's analysis settings, e.g. a run directory from an older version).
    A replayed trace's requests are bucketed by ``length_buckets`` when given (new edges at
    report time), else by the run's (``info.length_buckets``)."""
    if info is None or Arm.BASELINE.value not in arms or Arm.SPECULATIVE.value not in arms:
        return Analysis()
    edges = length_buckets if length_buckets is not None else info.length_buckets
    measured = {arm.value: [r for r in rs if not r.warmup] for arm, rs in records.items()}
    statistics = paired_statistics(
        measured.get(Arm.BASELINE.value, []),
        measured.get(Arm.SPECULATIVE.value, []),
        num_speculative_tokens=info.num_speculative_tokens,
        settings=info.statistics,
        length_buckets=edges,
    )
    if statistics.overall.pairs == 0:
        return Analysis(statistics=statistics)
    ratios: dict[str | None, Interval] = {None: statistics.overall.busy_rate_ratio}
    ratios.update({name: scope.busy_rate_ratio for name, scope in statistics.by_class.items()})
    cells = {
        (name, bucket): scope.busy_rate_ratio
        for name, buckets in statistics.by_bucket.items()
        for bucket, scope in buckets.items()
    }
    cost = cost_summary(
        info.price,
        measured,
        {name: arm.window_s for name, arm in arms.items()},
        ratios,
        bucket_ratios=cells,
        length_buckets=edges,
    )
    more_pairs = (
        MorePairs(info.pairs_setting, info.requests_per_prompt)
        if info.pairs_setting is not None and info.requests_per_prompt is not None
        else None
    )
    mismatches = lossless_failures_by_class(lossless, info.lossless_min_prefix_agreement)
    verdict = verdicts(statistics, cost, mismatches, info.statistics, more_pairs)
    by_bucket = bucket_verdicts(
        statistics,
        cost,
        _mismatches_by_cell(lossless, info.lossless_min_prefix_agreement, measured, edges),
        info.statistics,
        more_pairs,
    )
    return Analysis(
        verdict_by_bucket=by_bucket,
        bucket_flips=verdict_flips(by_bucket),
        statistics=statistics,
        cost=cost,
        verdict=verdict,
        floors=pilot_floors(
            verdict,
            arms[Arm.SPECULATIVE.value].acceptance,
            info.pilot_floor_factor,
            _per_request_intervals(arms, measured.get(Arm.SPECULATIVE.value, []), info),
        ),
    )
