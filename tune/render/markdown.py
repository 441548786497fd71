"""tune.md: the recommendation first, then the evidence (the drafters compared, held-out
checks, the fitted model per draft and class, break-even load, plan and notes)."""

from __future__ import annotations

from tune.render.plots import ACCEPTANCE_PLOT, BREAK_EVEN_PLOT, SPEEDUP_PLOT
from tune.render.words import (
    break_even_text,
    candidate_text,
    holdout_by_drafter,
    interval_text,
    margin_text,
    schedule_range_text,
    speedup_text,
)
from tune.results import ComponentName, TuneResult


def _recommendations(result: TuneResult) -> list[str]:
    lines = [
        "| scope | draft | k | predicted E2E speedup | measured (95% CI, n) | error "
        "| best measured k | within one step |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in result.recommendations:
        error = (
            f"{(r.predicted_speedup - r.measured.point) / r.measured.point:+.1%}"
            if r.measured
            else "-"
        )
        lines.append(
            f"| {r.scope} | {r.draft} | {r.k} | {r.predicted_speedup:.2f}x "
            f"| {speedup_text(r.measured)} | {error} | {r.best_measured_k} | {r.within_one_step} |"
        )
    return lines


def _drafter_choices(result: TuneResult) -> list[str]:
    if not result.drafter_choices:
        return ["No drafter chosen (no model was fitted)."]
    lines = [
        "The recommended (drafter, draft, k) per scope against the best candidate of another "
        "drafter (of another draft when one drafter was swept). Predicted: the ratio of the "
        "two predicted speedups. Measured: mean E2E of the runner-up / mean E2E of the choice "
        "on the same prompts at concurrency 1 (paired bootstrap, 95% CI, n pairs), each at its "
        "own k when measured, else its best measured k.",
        "",
        "| scope | choice | predicted E2E speedup | margin | paste |",
        "|---|---|---|---|---|",
    ]
    for c in result.drafter_choices:
        lines.append(
            f"| {c.scope} | {candidate_text(c.drafter, c.draft, c.k)} "
            f"| {c.predicted_speedup:.2f}x | {margin_text(c)} | `{c.overrides}` |"
        )
    return lines


def _drafters(result: TuneResult) -> list[str]:
    """Per drafter and class: acceptance per position, what a step costs, E2E speedups."""
    if not result.models:
        return []
    lines = [
        "Acceptance per position from vLLM's per-position counters (or the client's chunks "
        "where the source says so). Draft cost per step, measured: the median per-request "
        "step time of the speculative server over the baseline's, same class, concurrency 1. "
        "Fitted: T(k) = c0 + c1 k against the baseline step.",
        "",
        "| drafter | draft | class | acceptance per position | draft cost per step (SD / "
        "baseline step, measured) | fitted T(k) ms | E2E speedup measured (95% CI, n) |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in sorted(result.models, key=lambda m: (m.drafter, m.draft, m.prompt_class)):
        rates = ", ".join(f"{r:.2f}" for r in m.acceptance.per_position_rate)
        steps = "; ".join(
            f"k={s.k}: {s.relative:.2f}x ({s.draft_cost_ms:+.2f} ms)" for s in m.steps
        )
        cost = m.step_cost
        speedups = "; ".join(f"k={p.k}: {interval_text(p.e2e_speedup)}" for p in m.measured)
        lines.append(
            f"| {m.drafter} | {m.draft} | {m.prompt_class} | {rates} (k={m.acceptance_from_k}, "
            f"{m.acceptance.source}) | {steps or '-'} | {cost.intercept_ms:.2f} + "
            f"{cost.per_k_ms:.2f} k (baseline {cost.baseline_step_ms:.2f}) | {speedups or '-'} |"
        )
    by_drafter = holdout_by_drafter(result.checks, result.tolerance)
    if by_drafter:
        lines += ["", "Held-out k by drafter:", "", *(f"- {line}" for line in by_drafter)]
    return lines


def _checks(result: TuneResult) -> list[str]:
    if not result.checks:
        return ["No held-out k was measured (quick mode or none configured)."]
    lines = [
        f"Predicted without their data, then measured; goal: |error| <= {result.tolerance:.0%}.",
        "",
        "| draft | class | k | predicted | measured (95% CI, n) | error | within goal |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in result.checks:
        lines.append(
            f"| {c.draft} | {c.prompt_class} | {c.k} | {c.predicted_speedup:.2f}x "
            f"| {speedup_text(c.measured)} | {c.relative_error:+.1%} | {c.within_tolerance} |"
        )
    lines += ["", *_components(result)]
    return lines


COMPONENT_LABELS: dict[ComponentName, str] = {
    "tokens_per_step": "tokens per step tau(k)",
    "step_ms": "SD step T(k) ms",
    "per_token_ms": "per output token ms",
    "ttft_ms": "SD TTFT ms",
    "baseline_step_ms": "baseline step ms",
}


def _components(result: TuneResult) -> list[str]:
    """Where each held-out error comes from: every factor of the prediction next to what the
    held-out run measured itself."""
    checks = [c for c in result.checks if c.components]
    if not checks:
        return []
    names = list(COMPONENT_LABELS)
    lines = [
        "Components of each held-out prediction (predicted / measured at that k, error): "
        "the factor with the large error is the part of the model to distrust.",
        "",
        "| draft | class | k | " + " | ".join(COMPONENT_LABELS[n] for n in names) + " |",
        "|---|---|---|" + "---|" * len(names),
    ]
    for c in checks:
        by_name = {part.name: part for part in c.components}
        cells = []
        for name in names:
            part = by_name.get(name)
            if part is None or part.measured is None or part.relative_error is None:
                cells.append("-")
            else:
                cells.append(
                    f"{part.predicted:.2f} / {part.measured:.2f} ({part.relative_error:+.0%})"
                )
        lines.append(f"| {c.draft} | {c.prompt_class} | {c.k} | " + " | ".join(cells) + " |")
    return lines


def _models(result: TuneResult) -> list[str]:
    lines = []
    for m in result.models:
        cost = m.step_cost
        rates = ", ".join(f"{r:.2f}" for r in m.acceptance.per_position_rate)
        lines += [
            f"### {m.draft} / {m.prompt_class}",
            "",
            f"- acceptance per position (from k={m.acceptance_from_k}, {m.acceptance.source}): "
            f"{rates}",
            "- tokens per step tau(k): "
            + (
                f"replay of the k={m.acceptance_from_k} run's chunks (k beyond it: scaled "
                "by the extrapolated rates)"
                if m.tokens_per_step_source == "trace_replay"
                else "1 + r_1 + ... + r_k (the chunks could not be replayed)"
            ),
            f"- step cost: baseline {cost.baseline_step_ms:.2f} ms; SD T(k) = "
            f"{cost.intercept_ms:.2f} + {cost.per_k_ms:.2f} k ms (fit on k = {cost.fit_k}; "
            f"fixed overhead {cost.fixed_overhead_ms:+.2f} ms)",
            f"- {m.output_tokens:.0f} output tokens; TTFT baseline {m.baseline_ttft_ms:.1f} ms, "
            f"SD {m.ttft_ms:.1f} ms",
            "",
            "| k | tokens/step | step ms | per-token ms | predicted E2E speedup | measured |",
            "|---|---|---|---|---|---|",
        ]
        measured = {p.k: p for p in m.measured}
        for p in m.predictions:
            flag = " (extrapolated)" if p.extrapolated else ""
            point = measured.get(p.k)
            lines.append(
                f"| {p.k} | {p.tokens_per_step:.2f} | {p.step_ms:.2f} | {p.per_token_ms:.2f} "
                f"| {p.e2e_speedup:.2f}x{flag} "
                f"| {speedup_text(point) + f' ({point.role})' if point else '-'} |"
            )
        lines.append("")
    return lines


def _break_even(result: TuneResult) -> list[str]:
    if not result.break_even:
        return ["Not measured (no concurrency level above 1, or the budget ran out)."]
    lines = [
        f"Setting: {result.break_even[0].setting.label}; max_num_seqs "
        f"{result.break_even[0].max_num_seqs}.",
        "",
        "| class | speedup by concurrency | SD stops paying above |",
        "|---|---|---|",
    ]
    for b in result.break_even:
        points = "; ".join(f"c={c}: {speedup_text(p)}" for c, p in b.points)
        lines.append(f"| {b.prompt_class} | {points} | {break_even_text(b)} |")
    return lines


def _schedule(result: TuneResult) -> list[str]:
    schedule = result.schedule
    if schedule is None:
        return ["Not derived (the fit k were not measured at two batch sizes; see the notes)."]
    lines = [
        f"Draft {schedule.draft} ({schedule.drafter}), k up to {schedule.max_k}, batch sizes "
        f"1-{schedule.max_num_seqs}; step costs measured at {schedule.batch_sizes}. Predicted "
        "E2E speedup of the workload over the baseline at the same batch size, with a "
        "bootstrap interval over prompts (step times and TTFTs resampled, tokens per step "
        "held).",
        "",
        *(f"- {schedule_range_text(r)}" for r in schedule.ranges),
        "",
        f"Paste: `{schedule.overrides}`"
        if schedule.overrides
        else "Not deployable here (see the notes).",
        "",
        "Step costs by batch size (ms): the baseline's target step, and the speculative step "
        "T(k) = intercept + per k x k through the fit k.",
        "",
        "| batch | class | baseline step | intercept | per k | TTFT | baseline TTFT |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in schedule.step_costs:
        lines.append(
            f"| {c.batch_size} | {c.prompt_class} | {c.baseline_step_ms:.2f} "
            f"| {c.intercept_ms:.2f} | {c.per_k_ms:.2f} | {c.ttft_ms:.1f} "
            f"| {c.baseline_ttft_ms:.1f} |"
        )
    lines += [
        "",
        "| batch | k | predicted E2E speedup | output tokens/s (baseline) | measured |",
        "|---|---|---|---|---|",
    ]
    for p in schedule.predictions:
        lines.append(
            f"| {p.batch_size} | {p.k} | {interval_text(p.e2e_speedup)} "
            f"| {p.output_throughput_tok_s:.1f} ({p.baseline_output_throughput_tok_s:.1f}) "
            f"| {'yes' if p.measured else 'no'} |"
        )
    return lines


def _cost(result: TuneResult) -> list[str]:
    cost = result.cost
    if cost is None:
        return ["Not measured (no concurrency level above 1, or the budget ran out)."]
    basis = cost.basis
    label = " (NOMINAL price: set pricing.* to your own)" if basis.nominal else ""
    lines = [
        f"Price: {basis.instance_type} ({basis.capacity_type}) ${basis.instance_usd_per_hour:.2f}"
        f"/h x {basis.devices_claimed}/{basis.devices_per_instance} devices = "
        f"${basis.arm_usd_per_hour:.3f}/h per arm{label}; source: {basis.source} "
        f"({basis.as_of}). Throughput = successful output tokens / wall time of the level.",
        "",
        "| arm | concurrency | output tokens/s | $ per 1M output tokens | throughput-optimal |",
        "|---|---|---|---|---|",
    ]
    for arm in cost.arms:
        best = arm.optimal.concurrency if arm.optimal else None
        for p in arm.points:
            rate = f"{p.output_throughput_tok_s:.1f}" if p.output_throughput_tok_s else "-"
            usd = (
                f"{p.usd_per_million_output_tokens:.2f}"
                if p.usd_per_million_output_tokens is not None
                else "-"
            )
            mark = "yes" if p.concurrency == best else ""
            lines.append(f"| {arm.setting.label} | {p.concurrency} | {rate} | {usd} | {mark} |")
    return lines


def _runs(result: TuneResult) -> list[str]:
    lines = [
        "| setting | role | concurrency | requests ok / sent | skipped | server ready s "
        "| wall s | load average (1 min) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in result.runs:
        sent = sum(len(c.samples) for c in run.classes.values())
        ok = sum(len(c.ok_samples) for c in run.classes.values())
        ready = f"{run.server_ready_s:.0f}" if run.server_ready_s is not None else "-"
        load = f"{run.load_average_1m:.1f}" if run.load_average_1m is not None else "-"
        lines.append(
            f"| {run.setting.label} | {run.role} | {run.concurrency} | {ok} / {sent} "
            f"| {run.skipped_requests} | {ready} | {run.wall_s:.0f} | {load} |"
        )
    return lines


def render_markdown(result: TuneResult, plots: list[str]) -> str:
    lines = [
        f"# Tuning sweep ({result.target}): choose the drafter, draft and k",
        "",
        "## Recommendation",
        "",
        *_recommendations(result),
        "",
        f"Paste: `{result.overrides}`" if result.overrides else "No recommendation.",
        "",
        "## Drafter per class",
        "",
        *_drafter_choices(result),
        "",
        "## Drafters compared",
        "",
        *_drafters(result),
        "",
        "## Held-out checks",
        "",
        *_checks(result),
        "",
        "## Break-even load",
        "",
        *_break_even(result),
        "",
        "## Speculation schedule: a k per batch size",
        "",
        *_schedule(result),
        "",
        "## Cost per 1M output tokens by load",
        "",
        *_cost(result),
        "",
    ]
    titles = {
        SPEEDUP_PLOT: "E2E speedup vs k",
        ACCEPTANCE_PLOT: "acceptance per position",
        BREAK_EVEN_PLOT: "break-even",
    }
    lines += [f"![{titles.get(p, p)}]({p})" for p in plots]
    lines += ["", "## Fitted model per draft and prompt class", "", *_models(result)]
    lines += ["## Runs", "", *_runs(result), ""]
    if result.notes:
        lines += ["## Notes", "", *(f"- {n}" for n in result.notes), ""]
    load = ", ".join(f"{x:.2f}" for x in result.load_average)
    lines.append(
        f"Sweep took {result.elapsed_s / 60:.1f} min; load average (1/5/15 min) at the end: "
        f"{load or 'n/a'}."
    )
    return "\n".join(lines) + "\n"
