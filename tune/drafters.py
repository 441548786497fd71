"""The drafter comparison: per prompt class (and for the whole workload) the drafter, draft
and k to serve, and by how much it beats the best candidate of another drafter -- predicted
by the fitted models, and measured head to head on the same prompts with the load test's
paired bootstrap. Pure: fitted models and runs in, typed choices out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from experiment.config import StatisticsConfig
from loadtest.metrics import ALL_CLASSES
from tune.overrides import overrides_line
from tune.results import (
    ClassModel,
    DrafterChoice,
    Recommendation,
    Run,
    Setting,
    drafter_of,
)
from tune.speedups import find_run, measured_points, measured_speedup


def _baseline_e2e(model: ClassModel) -> float:
    return model.baseline_ttft_ms + (model.output_tokens - 1) * model.step_cost.baseline_step_ms


def workload_speedups(
    models: Sequence[ClassModel], weights: Mapping[str, int]
) -> list[tuple[float, str, int]]:
    """(predicted speedup of the whole workload, draft, k) for every draft fitted on every
    class and every k measured-range for all of them: the workload's total time, classes
    weighted by their request counts."""
    classes = {m.prompt_class for m in models}
    out: list[tuple[float, str, int]] = []
    for draft in sorted({m.draft for m in models}):
        mine = [m for m in models if m.draft == draft]
        if len(mine) != len(classes):
            continue
        for k in (p.k for p in mine[0].predictions if not p.extrapolated):
            if any(m.prediction(k).extrapolated for m in mine):
                continue
            base = sum(weights.get(m.prompt_class, 1) * _baseline_e2e(m) for m in mine)
            spec = sum(
                weights.get(m.prompt_class, 1) * _baseline_e2e(m) / m.prediction(k).e2e_speedup
                for m in mine
            )
            out.append((base / spec, draft, k))
    return out


def _options(
    models: Sequence[ClassModel], scope: str, weights: Mapping[str, int]
) -> list[tuple[float, str, int]]:
    """Every (predicted speedup, draft, k) the recommendation of ``scope`` chose among."""
    if scope == ALL_CLASSES:
        return workload_speedups(models, weights)
    return [
        (p.e2e_speedup, m.draft, p.k)
        for m in models
        if m.prompt_class == scope
        for p in m.predictions
        if not p.extrapolated
    ]


def _runner_up(
    options: Sequence[tuple[float, str, int]], draft: str
) -> tuple[float, str, int] | None:
    """The best option of another drafter; with one drafter swept, of another draft."""
    others = [o for o in options if drafter_of(o[1]) != drafter_of(draft)]
    others = others or [o for o in options if o[1] != draft]
    return max(others) if others else None


def _measured_k(
    runs: Sequence[Run], baseline: Run, draft: str, k: int, classes: Sequence[str],
    boot: StatisticsConfig,
) -> int | None:  # fmt: skip
    """``k`` when it was measured at concurrency 1, else the draft's best measured k."""
    points = measured_points(runs, baseline, draft, classes, boot)
    if any(p.k == k for p in points):
        return k
    return max(points, key=lambda p: p.point).k if points else None


def drafter_choices(
    models: Sequence[ClassModel],
    runs: Sequence[Run],
    recommendations: Sequence[Recommendation],
    weights: Mapping[str, int],
    target: Literal["local", "trn2"],
    boot: StatisticsConfig,
) -> list[DrafterChoice]:
    """One choice per recommendation (per class, then all): the recommended (draft, k), its
    drafter, the runner-up and the measured margin between the two."""
    baseline = find_run(runs, Setting(), 1)
    choices = []
    for rec in recommendations:
        runner = _runner_up(_options(models, rec.scope, weights), rec.draft)
        choice = DrafterChoice(
            scope=rec.scope,
            drafter=drafter_of(rec.draft),
            draft=rec.draft,
            k=rec.k,
            predicted_speedup=rec.predicted_speedup,
            overrides=overrides_line(target, rec.draft, rec.k),
        )
        if runner is not None:
            speedup, draft, k = runner
            choice.runner_up_drafter = drafter_of(draft)
            choice.runner_up_draft = draft
            choice.runner_up_k = k
            choice.runner_up_predicted_speedup = speedup
        if runner is not None and baseline is not None:
            classes = sorted(baseline.classes) if rec.scope == ALL_CLASSES else [rec.scope]
            mine = _measured_k(runs, baseline, rec.draft, rec.k, classes, boot)
            theirs = _measured_k(runs, baseline, runner[1], runner[2], classes, boot)
            if mine is not None and theirs is not None:
                # Classes both settings measured (all of them in a complete sweep).
                a = find_run(runs, Setting(draft=rec.draft, k=mine), 1)
                b = find_run(runs, Setting(draft=runner[1], k=theirs), 1)
                assert a is not None and b is not None
                both = [n for n in classes if n in a.classes and n in b.classes]
                head_to_head = measured_speedup(
                    [b.classes[n] for n in both],
                    [a.classes[n] for n in both],
                    mine,
                    "fit",
                    boot,
                )
                choice.measured_k = mine
                choice.runner_up_measured_k = theirs
                choice.margin = head_to_head.e2e_speedup if head_to_head else None
        choices.append(choice)
    return choices
