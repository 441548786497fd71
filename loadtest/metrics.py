"""Client-side metrics from raw records: per arm x prompt class, exact percentiles (numpy).

Definitions (the same for both arms; see docs/loadtest.md):

- TTFT: request start -> first chunk carrying generated content.
- TPOT: (e2e - ttft) / (output_tokens - 1) per request (vLLM's definition).
- per-token ITL: each chunk after the first contributes ``n`` values of ``gap / n`` where
  ``gap`` is the time since the previous chunk and ``n`` the tokens it carried.
- chunk gap: the raw time between consecutive content chunks (not per token).
- E2E: request start -> ``[DONE]``.
- output tokens/s per request: output_tokens / e2e; per run: total output tokens / window,
  where the window runs from the first measured request's start to the last one's end.
- goodput: requests meeting every SLO (ttft, tpot, e2e) per second of the window.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain, pairwise
from typing import Any, Protocol

import numpy as np

from loadtest.records import RequestRecord
from loadtest.results import (
    Comparison,
    Distribution,
    LengthMismatch,
    MetricBlock,
    Speedups,
    StatSpeedups,
)

PERCENTILES = (50, 90, 95, 99)  # the p* fields of results.Distribution
SPEEDUP_STATS = ("mean", "p50", "p90", "p99")  # the fields of results.StatSpeedups
# Chunks closer than this arrived in one burst (one socket read, or a stalled reader):
# their gaps say nothing about generation speed.
BURST_GAP_S = 1e-4
BURST_WARNING_FRACTION = 0.1


def bursting(block: MetricBlock) -> bool:
    """Whether an arm's chunks arrived in bursts: its client-side per-token timing is the
    stream's grouping, not generation (the report then reads the servers' histograms)."""
    fraction = block.burst_gap_fraction
    return fraction is not None and fraction > BURST_WARNING_FRACTION


# The scope of every prompt class together, wherever a scope is named (summary verdicts,
# the decision tables, the CSV, tune's recommendations).
ALL_CLASSES = "all"
# (summary key, unit, lower is better)
DISTRIBUTIONS: dict[str, tuple[str, bool]] = {
    "ttft_ms": ("ms", True),
    "tpot_ms": ("ms", True),
    "itl_ms": ("ms", True),
    "chunk_gap_ms": ("ms", True),
    "e2e_ms": ("ms", True),
    "output_tokens_per_s": ("tok/s", False),
    "tokens_per_chunk": ("tokens", False),
}
RATES: dict[str, bool] = {  # run-level rates; all higher is better
    "output_throughput_tok_s": False,
    "request_throughput_rps": False,
    "goodput_rps": False,
}


def describe(values: Iterable[float] | np.ndarray) -> Distribution:
    array = (
        values.astype(float, copy=False)
        if isinstance(values, np.ndarray)
        else np.fromiter(values, dtype=float)
    )
    if array.size == 0:
        return Distribution(count=0)
    p50, p90, p95, p99 = (float(q) for q in np.percentile(array, PERCENTILES))
    return Distribution(
        count=int(array.size),
        mean=float(array.mean()),
        p50=p50,
        p90=p90,
        p95=p95,
        p99=p99,
        min=float(array.min()),
        max=float(array.max()),
    )


def token_chunks(record: RequestRecord) -> tuple[list[float], list[int]]:
    """(times, tokens) of the chunks that carried tokens."""
    pairs = [(t, n) for t, n in zip(record.chunk_times, record.chunk_tokens, strict=False) if n > 0]
    return [t for t, _ in pairs], [n for _, n in pairs]


def per_token_itl_s(record: RequestRecord) -> list[float]:
    times, tokens = token_chunks(record)
    values: list[float] = []
    for j in range(1, len(times)):
        gap = times[j] - times[j - 1]
        values.extend([gap / tokens[j]] * tokens[j])
    return values


def chunk_gaps_s(record: RequestRecord) -> list[float]:
    times, _ = token_chunks(record)
    return [b - a for a, b in pairwise(times)]


def tpot_s(record: RequestRecord) -> float | None:
    if record.output_tokens is None or record.output_tokens < 2 or record.ttft_s is None:
        return None
    return ((record.e2e_s or 0.0) - record.ttft_s) / (record.output_tokens - 1)


def meets_slo(record: RequestRecord, slo: dict[str, float]) -> bool:
    tpot = tpot_s(record)
    return (
        record.ok
        and record.ttft_s is not None
        and record.ttft_s * 1000 <= slo["ttft_ms"]
        and (tpot is None or tpot * 1000 <= slo["tpot_ms"])
        and (record.e2e_s or 0.0) * 1000 <= slo["e2e_ms"]
    )


def window_s(records: list[RequestRecord]) -> float:
    """First start to last end on the wall clock: records of several Locust workers (pods)
    share no monotonic clock. Records without a wall-clock start fall back to ``start``."""
    if not records:
        return 0.0
    wall = all(r.wall_start > 0 for r in records)
    starts = [r.wall_start if wall else r.start for r in records]
    start = min(starts)
    end = max(s + (r.e2e_s or 0.0) for s, r in zip(starts, records, strict=True))
    return max(end - start, 0.0)


def length_mismatch(record: RequestRecord) -> bool:
    return record.ok and record.max_tokens > 0 and record.output_tokens != record.max_tokens


@dataclass(frozen=True)
class _Columns:
    """Records as arrays, built once per arm and sliced per prompt class (``subset``).

    ``ok`` records only: chunk arrays hold their token-carrying chunks, concatenated in record
    order, and ``gap_*`` the chunks after each record's first (``chunk_gaps_s``,
    ``per_token_itl_s``). Every value is computed as the per-record definitions above compute
    it, in the same order, so the distributions are identical to the last bit."""

    records: list[RequestRecord]  # the block's records, ok or not
    ok: list[RequestRecord]
    chunk_owner: np.ndarray  # position in ``ok`` of each token-carrying chunk
    chunk_tokens: np.ndarray
    gap_owner: np.ndarray  # position in ``ok`` of each gap
    gap_s: np.ndarray  # time since the previous token-carrying chunk
    gap_tokens: np.ndarray  # tokens of the chunk that ended the gap

    @classmethod
    def of(cls, records: list[RequestRecord]) -> _Columns:
        ok = [r for r in records if r.ok]
        lengths = np.fromiter(
            (min(len(r.chunk_times), len(r.chunk_tokens)) for r in ok),
            dtype=np.int64,
            count=len(ok),
        )
        total = int(lengths.sum())
        # zip(strict=False) in token_chunks: a record's longer list is cut to the shorter.
        times = np.fromiter(
            chain.from_iterable(
                r.chunk_times[:n] for r, n in zip(ok, lengths.tolist(), strict=True)
            ),
            dtype=float,
            count=total,
        )
        tokens = np.fromiter(
            chain.from_iterable(
                r.chunk_tokens[:n] for r, n in zip(ok, lengths.tolist(), strict=True)
            ),
            dtype=np.int64,
            count=total,
        )
        owner = np.repeat(np.arange(len(ok)), lengths)
        carrying = tokens > 0
        times, tokens, owner = times[carrying], tokens[carrying], owner[carrying]
        same_record = owner[1:] == owner[:-1]
        return cls(
            records=records,
            ok=ok,
            chunk_owner=owner,
            chunk_tokens=tokens,
            gap_owner=owner[1:][same_record],
            gap_s=(times[1:] - times[:-1])[same_record],
            gap_tokens=tokens[1:][same_record],
        )

    def subset(self, keep: list[bool]) -> _Columns:
        """The columns of the records where ``keep`` (one flag per record) is true."""
        kept_ok = np.array([k for k, r in zip(keep, self.records, strict=True) if r.ok], dtype=bool)
        # Old ok position -> new ok position (-1: dropped).
        renumber = np.cumsum(kept_ok) - 1
        chunks = kept_ok[self.chunk_owner]
        gaps = kept_ok[self.gap_owner]
        return _Columns(
            records=[r for k, r in zip(keep, self.records, strict=True) if k],
            ok=[r for k, r in zip(kept_ok.tolist(), self.ok, strict=True) if k],
            chunk_owner=renumber[self.chunk_owner[chunks]],
            chunk_tokens=self.chunk_tokens[chunks],
            gap_owner=renumber[self.gap_owner[gaps]],
            gap_s=self.gap_s[gaps],
            gap_tokens=self.gap_tokens[gaps],
        )


def metric_block(records: list[RequestRecord], window: float, slo: dict[str, float]) -> MetricBlock:
    return _block(_Columns.of(records), window, slo)


def _block(columns: _Columns, window: float, slo: dict[str, float]) -> MetricBlock:
    records, ok = columns.records, columns.ok
    failures = Counter(r.error for r in records if not r.ok)
    output_total = sum(r.output_tokens or 0 for r in ok)
    good = sum(1 for r in ok if meets_slo(r, slo))
    per_request_tps = [
        (r.output_tokens or 0) / r.e2e_s for r in ok if r.e2e_s and r.output_tokens is not None
    ]
    gaps = columns.gap_s
    return MetricBlock(
        requests=len(records),
        succeeded=len(ok),
        failed=len(records) - len(ok),
        failures_by_reason={str(k): v for k, v in sorted(failures.items())},
        output_tokens_total=output_total,
        length_mismatches=sum(1 for r in ok if length_mismatch(r)),
        inexact_token_accounting=sum(1 for r in ok if r.token_accounting != "usage"),
        slo_met=good,
        slo_attainment=good / len(records) if records else None,
        ttft_ms=describe(r.ttft_s * 1000 for r in ok if r.ttft_s is not None),
        tpot_ms=describe(t * 1000 for r in ok if (t := tpot_s(r)) is not None),
        # per_token_itl_s: each gap split evenly over the tokens of the chunk that ended it
        itl_ms=describe(np.repeat(gaps / columns.gap_tokens, columns.gap_tokens) * 1000),
        chunk_gap_ms=describe(gaps * 1000),
        e2e_ms=describe((r.e2e_s or 0.0) * 1000 for r in ok),
        output_tokens_per_s=describe(per_request_tps),
        tokens_per_chunk=describe(columns.chunk_tokens),
        burst_gap_fraction=int(np.count_nonzero(gaps < BURST_GAP_S)) / gaps.size
        if gaps.size
        else None,
        output_throughput_tok_s=output_total / window if window > 0 else None,
        request_throughput_rps=len(ok) / window if window > 0 else None,
        goodput_rps=good / window if window > 0 else None,
    )


@dataclass
class ArmMetrics:
    """The record-derived part of an arm's summary (the rest comes from its window file)."""

    window_s: float
    warmup_excluded: int
    arrival_lag_ms: Distribution
    overall: MetricBlock
    by_class: dict[str, MetricBlock] = field(default_factory=dict)
    length_mismatch_examples: list[LengthMismatch] = field(default_factory=list)


def segmented_window_s(records: list[RequestRecord], segments: Sequence[tuple[int, int]]) -> float:
    """The sum of each segment's window: alternating arms (loadtest/alternating.py) measure
    in blocks of schedule indices ``(first, last)``, and the time between an arm's blocks
    belongs to the other arms."""
    return sum(
        window_s([r for r in records if first <= r.index <= last]) for first, last in segments
    )


def arm_metrics(
    records: list[RequestRecord],
    slo: dict[str, float],
    segments: Sequence[tuple[int, int]] = (),
) -> ArmMetrics:
    """Window, overall and per-class blocks of the measured (non-warm-up) records;
    ``segments``: the schedule indices of each block of an alternating arm (empty: one
    window)."""
    measured = [r for r in records if not r.warmup]
    window = segmented_window_s(measured, segments) if segments else window_s(measured)
    columns = _Columns.of(measured)
    return ArmMetrics(
        window_s=window,
        warmup_excluded=sum(1 for r in records if r.warmup),
        # open loop: how late requests left vs their Poisson arrival (all users busy)
        arrival_lag_ms=describe(r.scheduled_lag_s * 1000 for r in measured),
        overall=_block(columns, window, slo),
        by_class={
            name: _block(columns.subset([r.prompt_class == name for r in measured]), window, slo)
            for name in sorted({r.prompt_class for r in measured})
        },
        length_mismatch_examples=[
            LengthMismatch(
                index=r.index, prompt_id=r.prompt_id, requested=r.max_tokens, got=r.output_tokens
            )
            for r in measured
            if length_mismatch(r)
        ][:20],
    )


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


def speedups(baseline: MetricBlock, speculative: MetricBlock) -> Speedups:
    """SD vs baseline, > 1 means SD is better: latency baseline/SD, throughput SD/baseline."""
    result: dict[str, Any] = {}
    for name, (_, lower_is_better) in DISTRIBUTIONS.items():
        if name == "tokens_per_chunk":
            continue
        stats: dict[str, float | None] = {}
        for stat in SPEEDUP_STATS:
            b = baseline.distribution(name).stat(stat)
            s = speculative.distribution(name).stat(stat)
            stats[stat] = _ratio(b, s) if lower_is_better else _ratio(s, b)
        result[name] = StatSpeedups(**stats)
    for name in RATES:
        result[name] = _ratio(getattr(speculative, name), getattr(baseline, name))
    return Speedups(**result)


class ArmBlocks(Protocol):
    """What a comparison needs of an arm (an ArmSummary, or the ArmMetrics it is built from)."""

    @property
    def overall(self) -> MetricBlock: ...

    @property
    def by_class(self) -> dict[str, MetricBlock]: ...


def compare_arms(arms: Mapping[str, ArmBlocks]) -> Comparison:
    base, sd = arms.get("baseline"), arms.get("speculative")
    if base is None or sd is None:
        return Comparison()
    classes = sorted(set(base.by_class) & set(sd.by_class))
    return Comparison(
        overall=speedups(base.overall, sd.overall),
        by_class={c: speedups(base.by_class[c], sd.by_class[c]) for c in classes},
    )
