"""From measured runs to the fitted model, the held-out checks, the recommendation and the
break-even load. Pure: runs in, typed results out (loadtest.step_model and tune.predict hold
the formulas)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from statistics import fmean, median

from experiment.config import StatisticsConfig
from loadtest.cost import optimal_load, usd_per_million
from loadtest.metrics import ALL_CLASSES
from loadtest.results import PriceBasis
from loadtest.step_model import PredictionError, extend_rates, predict, relative_error
from tune.drafters import drafter_choices, workload_speedups
from tune.overrides import overrides_line
from tune.predict import break_even, fit_step_cost, rates_from_chunk_tokens, replay_tokens_per_step
from tune.results import (
    Acceptance,
    ArmCost,
    BreakEven,
    Check,
    ClassModel,
    ClassRun,
    Component,
    ComponentName,
    CostAtLoad,
    KPrediction,
    LoadCost,
    MeasuredSpeedup,
    MeasuredStep,
    Recommendation,
    Run,
    Setting,
    StepCostFit,
    TauSource,
    TuneResult,
    drafter_of,
)
from tune.speedups import find_run, measured_points, measured_speedup

TOLERANCE = 0.15  # the goal: held-out predictions within 15 % of measured
CLIENT_CHUNKS_FALLBACK = "comes from the tokens each streamed chunk carried, one request at a time"
CLIENT_CHUNKS_NOTE = (
    f"no spec-decode counters on /metrics (e.g. the Neuron fork): per-position acceptance "
    f"{CLIENT_CHUNKS_FALLBACK}"
)


def step_time_s(run: ClassRun) -> float:
    """The class's target step time: the median of its requests' own mean step times (one
    slow request, e.g. preempted by another process, does not move it)."""
    steps = [s.step_s for s in run.ok_samples if s.step_s is not None]
    if not steps:
        raise PredictionError(
            f"class {run.prompt_class}: no request produced two chunks; raise max_tokens"
        )
    return median(steps)


def _mean(values: Sequence[float | None], what: str) -> float:
    present = [v for v in values if v is not None]
    if not present:
        raise PredictionError(f"no successful request measured {what}")
    return fmean(present)


def acceptance_of(run: ClassRun, k: int) -> tuple[Acceptance, str | None]:
    """Counters when the server exported them, else the client's tokens per chunk."""
    if run.acceptance is not None and run.acceptance.per_position_rate:
        return run.acceptance, None
    rates = rates_from_chunk_tokens([s.chunk_tokens for s in run.ok_samples], k)
    steps = sum(max(len(s.chunk_tokens) - 2, 0) for s in run.ok_samples)
    # The run's own reason (frozen or mixed-class counters) when it has one.
    note = (
        CLIENT_CHUNKS_NOTE
        if run.acceptance_note is None
        else f"{run.acceptance_note}; per-position acceptance {CLIENT_CHUNKS_FALLBACK}"
    )
    return (
        Acceptance(
            source="client_chunks",
            per_position_rate=[float(r) for r in rates],
            acceptance_rate=float(rates.mean()),
            steps=steps,
        ),
        note,
    )


def replayed_taus(
    run: ClassRun, measured_k: int, acceptance: Acceptance, k_max: int
) -> tuple[dict[int, float], TauSource]:
    """tau(k) for k = 1..k_max by replaying the measured_k run's chunks (predict.py); beyond
    measured_k the replayed tau(measured_k) scaled as the per-position rates extrapolate.
    Empty, "per_position_rates": the chunks cannot be replayed (then predict() sums the rates)."""
    chunks = [s.chunk_tokens for s in run.ok_samples]
    try:
        taus = {
            k: replay_tokens_per_step(chunks, measured_k, k)
            for k in range(1, min(k_max, measured_k) + 1)
        }
    except PredictionError:
        return {}, "per_position_rates"
    rates = acceptance.per_position_rate
    at_measured = 1.0 + sum(rates[:measured_k])
    for k in range(measured_k + 1, k_max + 1):
        extended = extend_rates(rates, k)
        taus[k] = taus[measured_k] * (1.0 + float(extended.sum())) / at_measured
    return taus, "trace_replay"


def class_model(
    runs: Sequence[Run],
    draft: str,
    prompt_class: str,
    fit_k: Sequence[int],
    predict_k_max: int,
    boot: StatisticsConfig,
) -> tuple[ClassModel, list[str]]:
    """Fit (draft, class) on its fit-k runs at concurrency 1; predict every k; list the
    measured points (fit and held-out) next to the predictions."""
    notes: list[str] = []
    baseline_run = find_run(runs, Setting(), 1)
    if baseline_run is None or prompt_class not in baseline_run.classes:
        raise PredictionError("the baseline was not measured at concurrency 1")
    baseline = baseline_run.classes[prompt_class]
    fit_runs = {}
    for k in fit_k:
        run = find_run(runs, Setting(draft=draft, k=k), 1)
        if run is not None and prompt_class in run.classes and run.classes[prompt_class].ok_samples:
            fit_runs[k] = run.classes[prompt_class]
    if len(fit_runs) < 2:
        raise PredictionError(
            f"{draft}/{prompt_class}: fewer than two fit k measured ({sorted(fit_runs)})"
        )
    k_rates = max(fit_runs)
    acceptance, note = acceptance_of(fit_runs[k_rates], k_rates)
    if note:
        notes.append(f"{draft}/{prompt_class}: {note}")
    taus: dict[int, float]
    tau_source: TauSource
    if drafter_of(draft) == "eagle3":
        # The replay reads a draft's run of right tokens off the text: true of a draft model,
        # whose proposal at a position is the same whichever step it starts in. An EAGLE head
        # drafts positions 2..k from its own features, so a token's acceptance depends on its
        # depth in the step, which the per-position rates measure (docs/tuning.md).
        taus, tau_source = {}, "per_position_rates"
        notes.append(
            f"{draft}/{prompt_class}: tokens per step from per-position rates (an EAGLE "
            "drafter's acceptance depends on the depth in the step: no chunk replay)"
        )
    else:
        taus, tau_source = replayed_taus(fit_runs[k_rates], k_rates, acceptance, predict_k_max)
        if tau_source == "per_position_rates":
            notes.append(
                f"{draft}/{prompt_class}: tokens per step from per-position rates (the k="
                f"{k_rates} chunks cannot be replayed: merged chunks or too short)"
            )
    cost = fit_step_cost(step_time_s(baseline), {k: step_time_s(r) for k, r in fit_runs.items()})
    output_tokens = _mean([s.output_tokens for s in baseline.ok_samples], "output tokens")
    ttft = _mean([s.ttft_s for r in fit_runs.values() for s in r.ok_samples], "SD TTFT")
    baseline_ttft = _mean([s.ttft_s for s in baseline.ok_samples], "baseline TTFT")
    predictions = []
    for k in range(1, predict_k_max + 1):
        p = predict(
            acceptance.per_position_rate,
            cost,
            k,
            output_tokens=output_tokens,
            ttft_s=ttft,
            baseline_ttft_s=baseline_ttft,
            tokens_per_step=taus.get(k),
        )
        predictions.append(
            KPrediction(
                k=k,
                tokens_per_step=p.tokens_per_step,
                step_ms=p.step_s * 1e3,
                per_token_ms=p.per_token_s * 1e3,
                e2e_speedup=p.e2e_speedup,
                extrapolated=p.extrapolated,
            )
        )
    measured = []
    steps = []
    for run in runs:
        if run.setting.draft != draft or run.concurrency != 1 or prompt_class not in run.classes:
            continue
        point = measured_speedup(
            [baseline], [run.classes[prompt_class]], run.setting.k, run.role, boot
        )
        if point is not None:
            measured.append(point)
        if any(s.step_s is not None for s in run.classes[prompt_class].ok_samples):
            steps.append(
                MeasuredStep(
                    k=run.setting.k,
                    role=run.role,
                    step_ms=step_time_s(run.classes[prompt_class]) * 1e3,
                    baseline_step_ms=cost.baseline_s * 1e3,
                )
            )
    model = ClassModel(
        draft=draft,
        drafter=drafter_of(draft),
        prompt_class=prompt_class,
        acceptance=acceptance,
        acceptance_from_k=k_rates,
        tokens_per_step_source=tau_source,
        step_cost=StepCostFit(
            baseline_step_ms=cost.baseline_s * 1e3,
            intercept_ms=cost.intercept_s * 1e3,
            per_k_ms=cost.per_k_s * 1e3,
            fit_k=sorted(fit_runs),
        ),
        output_tokens=output_tokens,
        ttft_ms=ttft * 1e3,
        baseline_ttft_ms=baseline_ttft * 1e3,
        predictions=predictions,
        measured=sorted(measured, key=lambda m: m.k),
        steps=sorted(steps, key=lambda m: m.k),
    )
    return model, notes


def _component(
    name: ComponentName, predicted: float, measured: float | None, source: str
) -> Component:
    error = relative_error(predicted, measured) if measured else None
    return Component(
        name=name, predicted=predicted, measured=measured, source=source, relative_error=error
    )


def components(
    model: ClassModel, held_out: ClassRun, baseline: ClassRun, k: int
) -> list[Component]:
    """Each factor of the prediction at held-out k next to the held-out run's own value."""
    p = model.prediction(k)
    # What E2E depends on, pooled over the run's requests (the last, short step included).
    samples = [s for s in held_out.ok_samples if s.decode_steps >= 1]
    tokens = sum(sum(s.chunk_tokens) - s.chunk_tokens[0] for s in samples)
    steps = sum(s.decode_steps for s in samples)
    seconds = sum(s.chunk_times_s[-1] - s.chunk_times_s[0] for s in samples)
    tau = tokens / steps if steps else None
    per_token = seconds / tokens if tokens else None
    ttft = [s.ttft_s for s in held_out.ok_samples if s.ttft_s is not None]
    return [
        _component(
            "tokens_per_step",
            p.tokens_per_step,
            tau,
            f"client tokens per step after the first chunk at k={k}",
        ),
        _component(
            "step_ms",
            p.step_ms,
            step_time_s(held_out) * 1e3,
            f"median per-request step time at k={k}",
        ),
        _component(
            "per_token_ms",
            p.per_token_ms,
            per_token * 1e3 if per_token else None,
            f"time per output token after the first chunk at k={k} (all requests)",
        ),
        _component(
            "ttft_ms", model.ttft_ms, fmean(ttft) * 1e3 if ttft else None, f"mean TTFT at k={k}"
        ),
        _component(
            "baseline_step_ms",
            model.step_cost.baseline_step_ms,
            step_time_s(baseline) * 1e3,
            "median per-request step time of the baseline the speedup was measured against",
        ),
    ]


def holdout_checks(
    models: Sequence[ClassModel], runs: Sequence[Run], tolerance: float
) -> list[Check]:
    checks = []
    baseline_run = find_run(runs, Setting(), 1)
    for model in models:
        for point in model.measured:
            if point.role != "holdout":
                continue
            predicted = model.prediction(point.k).e2e_speedup
            error = relative_error(predicted, point.point)
            held_out = find_run(runs, Setting(draft=model.draft, k=point.k), 1)
            parts = (
                components(
                    model,
                    held_out.classes[model.prompt_class],
                    baseline_run.classes[model.prompt_class],
                    point.k,
                )
                if held_out is not None and baseline_run is not None
                else []
            )
            checks.append(
                Check(
                    draft=model.draft,
                    prompt_class=model.prompt_class,
                    k=point.k,
                    predicted_speedup=predicted,
                    measured=point,
                    relative_error=error,
                    within_tolerance=abs(error) <= tolerance,
                    components=parts,
                )
            )
    return checks


def within_one_step(k: int, best: int, grid: Sequence[int]) -> bool:
    """k lies between the measured neighbours of ``best`` (one grid step either side)."""
    ordered = sorted(grid)
    i = ordered.index(best)
    low = ordered[i - 1] if i > 0 else best - 1
    high = ordered[i + 1] if i + 1 < len(ordered) else best + 1
    return low <= k <= high


def _best_measured(points: Sequence[MeasuredSpeedup]) -> MeasuredSpeedup | None:
    return max(points, key=lambda m: m.point) if points else None


def recommend(
    models: Sequence[ClassModel],
    runs: Sequence[Run],
    weights: dict[str, int],
    boot: StatisticsConfig,
) -> list[Recommendation]:
    """Per class and overall: the (draft, k) with the highest predicted E2E speedup among the
    k whose acceptance was measured (extrapolated k are shown, never recommended)."""
    by_class: dict[str, list[ClassModel]] = {}
    for model in models:
        by_class.setdefault(model.prompt_class, []).append(model)
    baseline_run = find_run(runs, Setting(), 1)
    recommendations = []
    for name, class_models in sorted(by_class.items()):
        model, p = max(
            ((m, p) for m in class_models for p in m.predictions if not p.extrapolated),
            key=lambda mp: mp[1].e2e_speedup,
        )
        measured = next((m for m in model.measured if m.k == p.k), None)
        best = _best_measured(model.measured)
        recommendations.append(
            Recommendation(
                scope=name,
                draft=model.draft,
                k=p.k,
                predicted_speedup=p.e2e_speedup,
                measured=measured,
                best_measured_k=best.k if best else None,
                within_one_step=within_one_step(p.k, best.k, [m.k for m in model.measured])
                if best
                else None,
            )
        )
    # Overall: the total time of the workload (classes weighted by their request counts).
    candidates = workload_speedups(models, weights)
    if candidates and baseline_run is not None:
        speedup, draft, k = max(candidates)
        pooled = _overall_measured(runs, baseline_run, draft, boot)
        measured = next((m for m in pooled if m.k == k), None)
        best = _best_measured(pooled)
        recommendations.append(
            Recommendation(
                scope=ALL_CLASSES,
                draft=draft,
                k=k,
                predicted_speedup=speedup,
                measured=measured,
                best_measured_k=best.k if best else None,
                within_one_step=within_one_step(k, best.k, [m.k for m in pooled]) if best else None,
            )
        )
    return recommendations


def _overall_measured(
    runs: Sequence[Run], baseline_run: Run, draft: str, boot: StatisticsConfig
) -> list[MeasuredSpeedup]:
    return measured_points(runs, baseline_run, draft, sorted(baseline_run.classes), boot)


def break_even_by_class(
    runs: Sequence[Run], setting: Setting, max_num_seqs: int, boot: StatisticsConfig
) -> list[BreakEven]:
    """Measured speedup of ``setting`` over the baseline at each concurrency, per class."""
    levels = sorted({r.concurrency for r in runs if r.setting == setting})
    results = []
    classes = sorted({name for r in runs if r.setting == setting for name in r.classes})
    for name in classes:
        points: list[tuple[int, MeasuredSpeedup]] = []
        for level in levels:
            base, spec = find_run(runs, Setting(), level), find_run(runs, setting, level)
            if base is None or spec is None or name not in base.classes:
                continue
            point = measured_speedup(
                [base.classes[name]], [spec.classes[name]], setting.k, spec.role, boot
            )
            if point is not None:
                points.append((level, point))
        if not points:
            continue
        results.append(
            BreakEven(
                prompt_class=name,
                setting=setting,
                points=points,
                break_even_concurrency=break_even(
                    [c for c, _ in points], [p.point for _, p in points]
                ),
                max_num_seqs=max_num_seqs,
            )
        )
    return results


def cost_at_load(runs: Sequence[Run], setting: Setting, basis: PriceBasis) -> CostAtLoad | None:
    """Cost per 1M output tokens of the baseline and ``setting`` at each concurrency both
    were measured at (throughput: successful output tokens over the run's wall time), and
    each arm's throughput-optimal level (loadtest.cost). None: fewer than two levels."""
    arms = []
    for arm in (Setting(), setting):
        points: list[LoadCost] = []
        for run in sorted(
            (r for r in runs if r.setting == arm), key=lambda r: (r.concurrency, r.role)
        ):
            if any(p.concurrency == run.concurrency for p in points):
                continue  # the first run at a level (c=1 may have been measured twice)
            tokens = sum(s.output_tokens or 0 for c in run.classes.values() for s in c.ok_samples)
            throughput = tokens / run.wall_s if run.wall_s > 0 and tokens else None
            points.append(
                LoadCost(
                    concurrency=run.concurrency,
                    output_tokens=tokens,
                    wall_s=run.wall_s,
                    output_throughput_tok_s=throughput,
                    usd_per_million_output_tokens=usd_per_million(
                        basis.arm_usd_per_hour, throughput
                    ),
                )
            )
        optimal = optimal_load(
            {p.concurrency: p.output_throughput_tok_s for p in points}, basis.arm_usd_per_hour
        )
        arms.append(ArmCost(setting=arm, points=points, optimal=optimal))
    if any(len(a.points) < 2 for a in arms):
        return None
    return CostAtLoad(basis=basis, arms=arms)


def fit_and_recommend(
    result: TuneResult, fit_k: Mapping[str, Sequence[int]], k_max: int, boot: StatisticsConfig
) -> None:
    """Fit every (draft, class) of ``result.runs`` on the draft's fit k, check the held-out
    k, recommend and write the overrides line into ``result``; problems become notes. The
    local sweep and ``tune fit`` (cluster run directories) both end here."""
    runs = result.runs
    baseline = find_run(runs, Setting(), 1)
    if baseline is None:
        result.notes.append("the baseline was not measured: nothing to compare with")
        return
    for draft, draft_fit_k in fit_k.items():
        for name in sorted(baseline.classes):
            try:
                model, notes = class_model(runs, draft, name, draft_fit_k, k_max, boot)
            except PredictionError as err:
                result.notes.append(f"{draft}/{name}: no model: {err}")
                continue
            result.models.append(model)
            result.notes += notes
    result.checks = holdout_checks(result.models, runs, result.tolerance)
    weights = {name: len(run.samples) for name, run in baseline.classes.items()}
    result.recommendations = recommend(result.models, runs, weights, boot)
    result.drafter_choices = drafter_choices(
        result.models, runs, result.recommendations, weights, result.target, boot
    )
    overall = next((r for r in result.recommendations if r.scope == ALL_CLASSES), None)
    if overall is not None:
        result.overrides = overrides_line(result.target, overall.draft, overall.k)
