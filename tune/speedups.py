"""Measured E2E speedups: runs found by setting, requests paired by (prompt, repeat), ratios
with the load test's paired bootstrap (loadtest.stats). Pure: runs in, intervals out."""

from __future__ import annotations

from collections.abc import Sequence
from statistics import fmean

import numpy as np

from experiment.config import StatisticsConfig
from loadtest.stats import paired_speedups, resample_counts
from tune.results import ClassRun, MeasuredSpeedup, Role, Run, Setting


def find_run(runs: Sequence[Run], setting: Setting, concurrency: int) -> Run | None:
    for run in runs:
        if run.setting == setting and run.concurrency == concurrency:
            return run
    return None


def paired_e2e(baseline: ClassRun, speculative: ClassRun) -> tuple[list[float], list[float]]:
    """E2E of the requests both arms completed, paired by (prompt, repeat)."""
    base = {(s.prompt_id, s.repeat): s.e2e_s for s in baseline.ok_samples}
    pairs = [
        (base[(s.prompt_id, s.repeat)], s.e2e_s)
        for s in speculative.ok_samples
        if (s.prompt_id, s.repeat) in base
    ]
    return [b for b, _ in pairs if b is not None], [s for _, s in pairs if s is not None]


def measured_speedup(
    baseline: Sequence[ClassRun],
    speculative: Sequence[ClassRun],
    k: int,
    role: Role,
    boot: StatisticsConfig,
) -> MeasuredSpeedup | None:
    """mean(E2E ``baseline``) / mean(E2E ``speculative``) pooled over the given classes (one
    class, or all for ALL_CLASSES), paired by request; None: no pairs. ``baseline`` may be
    another speculative setting (a head-to-head of two drafters)."""
    base_e2e: list[float] = []
    spec_e2e: list[float] = []
    for b, s in zip(baseline, speculative, strict=True):
        pb, ps = paired_e2e(b, s)
        base_e2e += pb
        spec_e2e += ps
    if not base_e2e:
        return None
    interval = paired_speedups(
        np.asarray(base_e2e),
        np.asarray(spec_e2e),
        lower_is_better=True,
        resamples=resample_counts(len(base_e2e), boot),
        settings=boot,
        stats=("mean",),
    )["mean"]
    if interval.estimate is None:
        return None
    tokens = [
        (sum(x.chunk_tokens) - x.chunk_tokens[0]) / x.decode_steps
        for run in speculative
        for x in run.ok_samples
        if x.decode_steps >= 1
    ]
    return MeasuredSpeedup(
        k=k,
        role=role,
        e2e_speedup=interval,
        tokens_per_step=fmean(tokens) if tokens else None,
    )


def measured_points(
    runs: Sequence[Run],
    baseline_run: Run,
    draft: str,
    classes: Sequence[str],
    boot: StatisticsConfig,
) -> list[MeasuredSpeedup]:
    """Every k of ``draft`` measured at concurrency 1, its speedup pooled over ``classes``
    (those both it and the baseline measured), by k."""
    points = []
    for run in runs:
        if run.setting.draft != draft or run.concurrency != 1:
            continue
        names = [n for n in classes if n in run.classes and n in baseline_run.classes]
        if not names:
            continue
        point = measured_speedup(
            [baseline_run.classes[n] for n in names],
            [run.classes[n] for n in names],
            run.setting.k,
            run.role,
            boot,
        )
        if point is not None:
            points.append(point)
    return sorted(points, key=lambda m: m.k)
