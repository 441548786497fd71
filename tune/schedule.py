"""Speculation that adapts to load: a k per batch-size range for vLLM's Dynamic SD
(``serving.speculation_schedule``), derived from step costs measured at a few batch sizes
and the draft's per-position acceptance. Pure: runs and fitted models in, a typed schedule
out (docs/tuning.md, "A k per batch size").

A closed-loop run at concurrency b keeps b sequences batched, so its requests' step times
are the step at batch size b. At every measured b the baseline arm gives the plain target
step t_base(b) and the speculative arm, measured at the fit k, the step line
T_b(k) = c0(b) + c1(b) k. Acceptance does not depend on the batch (greedy verification: the
draft proposes, and the target keeps, the same text whatever else is batched), so tau(k) is
the class model's (replayed or summed, tune/analysis.py). Per class, of N output tokens:

    E2E_base(b) = TTFT_base(b) + (N - 1) t_base(b)
    E2E(b, k)   = TTFT(b) + (N - 1) T_b(k) / tau(k)

The workload's speedup is sum_c w_c E2E_base / sum_c w_c E2E (classes weighted by their
request counts) and a server kept at b streams b N / E2E output tokens per second. Between
measured batch sizes the predictions are interpolated linearly; past the largest measured
one they are held.

k = 0 is not the baseline. At k = 0 vLLM still runs the drafter's forward pass over each
step's new tokens, to keep the drafter's KV cache in step with the text
(vllm/v1/spec_decode/llm_base_proposer.py, ``propose``: "No draft tokens requested (e.g.
Dynamic SD decided K=0). The prefill forward pass above already ran to keep the drafter KV
cache in sync"), so a k = 0 step costs about a k = 1 step and yields one token:

    E2E(b, 0)   = TTFT(b) + (N - 1) T_b(1)

The k of a batch size is the best predicted of 0..K by that model (in practice never 0, as
tau(1) > 1). Where even the best is predicted slower than the baseline, the schedule keeps it
and a note names those batch sizes: no k serves the baseline's speed there; routing those
loads to the baseline arm does (tiered routing, the guardrails).
Interval: the load test's expanded percentile bootstrap over prompts (the same draws in
every run, so both arms and every level stay paired) of the step times and TTFTs; tau(k) is
held at its point estimate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from experiment.config import StatisticsConfig
from loadtest.metrics import ALL_CLASSES
from loadtest.stats import interval, resample_counts
from tune.overrides import schedule_overrides_line
from tune.results import (
    BatchPrediction,
    ClassModel,
    ClassRun,
    LevelStepCost,
    Run,
    ScheduleRange,
    Setting,
    SpeculationSchedule,
    TuneResult,
    drafter_of,
)
from tune.speedups import find_run

Key = tuple[str, int]  # (prompt id, repeat): one request, the same in every run


def weighted_medians(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The median of ``values`` under each row of ``weights`` (rows x len(values)); with unit
    weights it is statistics.median (the two middle values averaged). NaN values (a request
    that failed in that run) carry no weight; a row with no weight gives NaN."""
    valid = ~np.isnan(values)
    ordered = np.argsort(values[valid], kind="stable")
    v = values[valid][ordered]
    if v.size == 0:
        return np.full(weights.shape[0], np.nan)
    cumulative = np.cumsum(weights[:, valid][:, ordered], axis=1)
    half = cumulative[:, -1:] / 2
    low = np.minimum((cumulative < half).sum(axis=1), v.size - 1)
    high = np.minimum((cumulative <= half).sum(axis=1), v.size - 1)
    out = (v[low] + v[high]) / 2
    return np.where(cumulative[:, -1] > 0, out, np.nan)


def weighted_means(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    valid = ~np.isnan(values)
    w = weights[:, valid]
    total = w.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(total > 0, w @ values[valid] / total, np.nan)


def _column(run: ClassRun, keys: Sequence[Key], what: str) -> np.ndarray:
    by_key = {(s.prompt_id, s.repeat): s for s in run.ok_samples}
    values = []
    for key in keys:
        sample = by_key.get(key)
        value = None if sample is None else (sample.step_s if what == "step" else sample.ttft_s)
        values.append(np.nan if value is None else value)
    return np.asarray(values, dtype=float)


@dataclass(frozen=True)
class _ClassLevel:
    """One class at one batch size; every array has one row per resample, row 0 the
    estimate (unit weights)."""

    baseline_step: np.ndarray
    intercept: np.ndarray
    per_k: np.ndarray
    ttft: np.ndarray
    baseline_ttft: np.ndarray


def _line(fit_k: Sequence[int], steps: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares line through (k, step) for every resample row at once."""
    x = np.asarray(fit_k, dtype=float)
    y = np.stack(steps, axis=1)  # rows x len(fit_k)
    dx = x - x.mean()
    slope = (y - y.mean(axis=1, keepdims=True)) @ dx / (dx @ dx)
    return y.mean(axis=1) - slope * x.mean(), slope


def _class_level(
    runs: Sequence[Run],
    draft: str,
    fit_k: Sequence[int],
    prompt_class: str,
    level: int,
    keys: Sequence[Key],
    weights: np.ndarray,
) -> _ClassLevel | None:
    base = find_run(runs, Setting(), level)
    fits = [find_run(runs, Setting(draft=draft, k=k), level) for k in fit_k]
    if base is None or prompt_class not in base.classes:
        return None
    measured = [
        (k, run.classes[prompt_class])
        for k, run in zip(fit_k, fits, strict=True)
        if run is not None and prompt_class in run.classes
    ]
    if len(measured) < 2:
        return None
    baseline = base.classes[prompt_class]
    steps = [weighted_medians(_column(run, keys, "step"), weights) for _, run in measured]
    intercept, per_k = _line([k for k, _ in measured], steps)
    # Pooled over the fit runs' requests, as the fitted model's SD TTFT (tune/analysis.py).
    ttft = weighted_means(
        np.concatenate([_column(run, keys, "ttft") for _, run in measured]),
        np.tile(weights, len(measured)),
    )
    return _ClassLevel(
        baseline_step=weighted_medians(_column(baseline, keys, "step"), weights),
        intercept=intercept,
        per_k=per_k,
        ttft=ttft,
        baseline_ttft=weighted_means(_column(baseline, keys, "ttft"), weights),
    )


@dataclass(frozen=True)
class _Level:
    """The workload at one batch size, rows = resamples: E2E per k of the speculating server
    (k = 0: its drafter still runs, one token per step) and of the baseline."""

    batch_size: int
    e2e: dict[int, np.ndarray]
    baseline: np.ndarray
    tokens: float  # sum_c w_c N_c
    measured: bool

    def speedup(self, k: int) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return self.baseline / self.e2e[k]

    def throughput(self, k: int) -> float:
        return float(self.batch_size * self.tokens / self.e2e[k][0])

    def baseline_throughput(self) -> float:
        return float(self.batch_size * self.tokens / self.baseline[0])


def _workload(
    batch_size: int,
    per_class: Mapping[str, _ClassLevel],
    models: Mapping[str, ClassModel],
    class_weights: Mapping[str, int],
    ks: Sequence[int],
) -> _Level:
    e2e: dict[int, np.ndarray] = {}
    baseline = np.zeros_like(next(iter(per_class.values())).baseline_step)
    for name, level in per_class.items():
        w, decode = class_weights.get(name, 1), models[name].output_tokens - 1
        baseline = baseline + w * (level.baseline_ttft + decode * level.baseline_step)
    for k in (0, *ks):
        total = np.zeros_like(baseline)
        for name, level in per_class.items():
            model, w = models[name], class_weights.get(name, 1)
            decode = model.output_tokens - 1
            # k = 0: the drafter's forward still runs (module docstring), one token a step.
            tau = 1.0 if k == 0 else model.prediction(k).tokens_per_step
            step = level.intercept + level.per_k * max(k, 1)
            total = total + w * (level.ttft + decode * step / tau)
        e2e[k] = total
    tokens = sum(class_weights.get(n, 1) * models[n].output_tokens for n in per_class)
    return _Level(batch_size, e2e, baseline, tokens, measured=True)


def _at(levels: Sequence[_Level], batch_size: int) -> _Level:
    """The workload at any batch size: a measured one, interpolated between two measured
    ones, or the largest measured one held."""
    exact = next((lv for lv in levels if lv.batch_size == batch_size), None)
    if exact is not None:
        return exact
    above = [lv for lv in levels if lv.batch_size > batch_size]
    below = [lv for lv in levels if lv.batch_size < batch_size]
    if not above:
        held = below[-1]
        return _Level(batch_size, held.e2e, held.baseline, held.tokens, measured=False)
    lo, hi = below[-1], above[0]
    t = (batch_size - lo.batch_size) / (hi.batch_size - lo.batch_size)
    e2e = {k: (1 - t) * lo.e2e[k] + t * hi.e2e[k] for k in lo.e2e}
    baseline = (1 - t) * lo.baseline + t * hi.baseline
    return _Level(batch_size, e2e, baseline, lo.tokens, measured=False)


def derive_schedule(
    runs: Sequence[Run],
    models: Sequence[ClassModel],
    draft: str,
    class_weights: Mapping[str, int],
    max_num_seqs: int,
    boot: StatisticsConfig,
) -> tuple[SpeculationSchedule | None, list[str]]:
    """The schedule for ``draft`` (its models, one per class) from the runs at every measured
    batch size, and notes on what limited it. None: fewer than two batch sizes with the
    baseline and two fit k measured."""
    mine = {m.prompt_class: m for m in models if m.draft == draft}
    if not mine:
        return None, [f"schedule: no fitted model of {draft}"]
    fit_k = sorted(next(iter(mine.values())).step_cost.fit_k)
    ks = [
        p.k
        for p in next(iter(mine.values())).predictions
        if not any(m.prediction(p.k).extrapolated for m in mine.values())
    ]
    levels_run = sorted(
        {r.concurrency for r in runs if r.setting == Setting()} & set(range(1, max_num_seqs + 1))
    )
    keys_by_class: dict[str, list[Key]] = {}
    base1 = find_run(runs, Setting(), 1)
    if base1 is None or not ks:
        return None, ["schedule: no baseline at concurrency 1 or no measured-range k"]
    for name in mine:
        if name in base1.classes:
            keys_by_class[name] = sorted(
                (s.prompt_id, s.repeat) for s in base1.classes[name].samples
            )
    n = sum(len(keys) for keys in keys_by_class.values())
    # Row 0: the estimate (every request once); rows 1..: the bootstrap's draws within each
    # class (a class never drops out of a resample), the same draws for every run and level.
    rows = {
        name: np.vstack([np.ones((1, len(keys))), resample_counts(len(keys), boot).counts])
        for name, keys in keys_by_class.items()
    }
    measured_levels: list[_Level] = []
    costs: list[LevelStepCost] = []
    notes: list[str] = []
    for level in levels_run:
        per_class: dict[str, _ClassLevel] = {}
        for name, keys in keys_by_class.items():
            found = _class_level(runs, draft, fit_k, name, level, keys, rows[name])
            if found is not None:
                per_class[name] = found
        if len(per_class) != len(keys_by_class):
            notes.append(
                f"schedule: batch size {level} left out: the baseline and two fit k of {draft} "
                "were not all measured there"
            )
            continue
        measured_levels.append(_workload(level, per_class, mine, class_weights, ks))
        costs += [
            LevelStepCost(
                batch_size=level,
                prompt_class=name,
                baseline_step_ms=float(c.baseline_step[0]) * 1e3,
                intercept_ms=float(c.intercept[0]) * 1e3,
                per_k_ms=float(c.per_k[0]) * 1e3,
                fit_k=fit_k,
                ttft_ms=float(c.ttft[0]) * 1e3,
                baseline_ttft_ms=float(c.baseline_ttft[0]) * 1e3,
            )
            for name, c in per_class.items()
        ]
    if len(measured_levels) < 2:
        notes.append(
            f"schedule: step costs of {draft} at fewer than two batch sizes; measure the fit k "
            "at more than one level of tuning.concurrency"
        )
        return None, notes
    largest = measured_levels[-1].batch_size
    if largest < max_num_seqs:
        notes.append(
            f"schedule: batch sizes {largest + 1}-{max_num_seqs} were not measured and keep the "
            f"prediction at {largest}; raise tuning.concurrency to {max_num_seqs} to measure them"
        )

    def speedup(level: _Level, k: int) -> BatchPrediction:
        values = level.speedup(k)
        return BatchPrediction(
            batch_size=level.batch_size,
            k=k,
            e2e_speedup=interval(float(values[0]), values[1:], n, boot),
            output_throughput_tok_s=level.throughput(k),
            baseline_output_throughput_tok_s=level.baseline_throughput(),
            measured=level.measured,
        )

    every = [_at(measured_levels, b) for b in range(1, max_num_seqs + 1)]
    predictions = [speedup(here, k) for here in every for k in (0, *ks)]
    # The best predicted of 0..K (k = 0 priced as served: module docstring); a range ends
    # where the k changes or where it stops (or starts) paying.
    chosen = [max((0, *ks), key=lambda k: here.speedup(k)[0]) for here in every]
    pays = [bool(here.speedup(k)[0] > 1) for here, k in zip(every, chosen, strict=True)]
    losing = [here.batch_size for here, paid in zip(every, pays, strict=True) if not paid]
    ranges: list[ScheduleRange] = []
    first = 1
    for b in range(1, max_num_seqs + 1):
        if b < max_num_seqs and (chosen[b], pays[b]) == (chosen[b - 1], pays[b - 1]):
            continue
        k = chosen[b - 1]
        span = every[first - 1 : b]
        weakest = min(span, key=lambda lv: lv.speedup(k)[0])
        best_k = k if k else max(ks, key=lambda j: weakest.speedup(j)[0])
        ranges.append(
            ScheduleRange(
                first=first,
                last=b,
                k=k,
                at_batch_size=weakest.batch_size,
                best_k=best_k,
                predicted_speedup=speedup(weakest, k).e2e_speedup,
                measured_batch_sizes=[lv.batch_size for lv in span if lv.measured],
            )
        )
        first = b + 1
    if len(losing) == max_num_seqs:
        notes.append(f"schedule: {draft} pays at no batch size at any k; serve the baseline")
    elif losing:
        notes.append(
            f"schedule: {draft} pays at no k at batch sizes {_spans(losing)}; a k=0 range would "
            "still run the drafter every step (vLLM keeps its KV cache in step), so route "
            "those loads to the baseline arm instead (tiered routing, the guardrails)"
        )
    schedule = SpeculationSchedule(
        draft=draft,
        drafter=drafter_of(draft),
        batch_sizes=[lv.batch_size for lv in measured_levels],
        max_num_seqs=max_num_seqs,
        max_k=max(ks),
        step_costs=costs,
        predictions=predictions,
        ranges=ranges,
        overrides=None,
    )
    return schedule, notes


def _spans(values: Sequence[int]) -> str:
    """[1, 2, 3, 7, 8] -> "1-3, 7-8"."""
    spans: list[list[int]] = []
    for v in values:
        if spans and v == spans[-1][1] + 1:
            spans[-1][1] = v
        else:
            spans.append([v, v])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def add_schedule(
    result: TuneResult, max_num_seqs: int, boot: StatisticsConfig, refused: str | None
) -> None:
    """Derive the schedule of the overall recommendation's draft into ``result`` with its
    notes; ``refused``: why the engine the schedule is meant for cannot serve it (no -c
    line then)."""
    overall = next((r for r in result.recommendations if r.scope == ALL_CLASSES), None)
    if overall is None:
        return
    baseline = find_run(result.runs, Setting(), 1)
    weights = {n: len(c.samples) for n, c in baseline.classes.items()} if baseline else {}
    schedule, notes = derive_schedule(
        result.runs, result.models, overall.draft, weights, max_num_seqs, boot
    )
    result.notes += notes
    if schedule is None:
        return
    if refused is not None:
        result.notes.append(f"schedule: not deployable: {refused}")
    elif any((r.predicted_speedup.estimate or 0.0) > 1 for r in schedule.ranges):  # pays
        schedule = schedule.model_copy(
            update={
                "overrides": schedule_overrides_line(
                    schedule.draft,
                    schedule.entries,
                    # no estimate: no loss expected there (the guardrail keeps its margin)
                    [r.predicted_speedup.estimate or 1.0 for r in schedule.ranges],
                )
            }
        )
    result.schedule = schedule
