"""summary.csv: every statistic of every arm and scope, one value per row (long format)."""

from __future__ import annotations

import csv
from pathlib import Path

from loadtest.metrics import ALL_CLASSES, DISTRIBUTIONS, RATES
from loadtest.render.tables import STATS
from loadtest.results import ArmSummary, Interval, RunSummary

HEADER = ["arm", "variant", "prompt_class", "metric", "stat", "value"]
# Scalar fields of a MetricBlock written as (metric, "value", value).
SCALARS = (*RATES, "requests", "succeeded", "failed", "length_mismatches", "slo_attainment")
ACCEPTANCE = ("acceptance_rate", "mean_acceptance_length")


def write_csv(summary: RunSummary, path: Path) -> None:
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(HEADER)
        for arm, block in summary.arms.items():
            scopes = {ALL_CLASSES: block.overall, **block.by_class}
            for scope, metrics in scopes.items():
                for name in DISTRIBUTIONS:
                    distribution = metrics.distribution(name)
                    for stat in ("count", *STATS):
                        value = distribution.count if stat == "count" else distribution.stat(stat)
                        writer.writerow([arm, block.label, scope, name, stat, value])
                for name in SCALARS:
                    writer.writerow(
                        [arm, block.label, scope, name, "value", getattr(metrics, name)]
                    )
                for reason, count in metrics.failures_by_reason.items():
                    writer.writerow([arm, block.label, scope, f"failed_{reason}", "count", count])
            for name in ACCEPTANCE:
                value = getattr(block.acceptance, name)
                writer.writerow([arm, block.label, ALL_CLASSES, name, "value", value])
            source = block.acceptance.source.value
            writer.writerow([arm, block.label, ALL_CLASSES, "acceptance_source", "value", source])
            writer.writerows(_request_acceptance_rows(arm, block))
        writer.writerows(_comparison_rows(summary))
        writer.writerows(_tiered_rows(summary))


# Per scope, from each request's own figures (metric "request_<field>", stat "value").
REQUEST_ACCEPTANCE = (
    "acceptance_rate",
    "mean_acceptance_length",
    "spec_steps",
    "draft_tokens",
    "accepted_tokens",
    "requests",
    "with_figures",
    "missing",
)


def _request_acceptance_rows(arm: str, block: ArmSummary) -> list[list[object]]:
    """The arm's per-request acceptance per scope, and whether the counters agree."""
    per_request = block.request_acceptance
    if per_request is None:
        return []
    rows: list[list[object]] = []
    for scope, figures in {ALL_CLASSES: per_request.overall, **per_request.by_class}.items():
        for name in REQUEST_ACCEPTANCE:
            value = getattr(figures, name)
            rows.append([arm, block.label, scope, f"request_{name}", "value", value])
    if per_request.reconciliation is not None:
        agrees = per_request.reconciliation.agrees
        rows.append([arm, block.label, ALL_CLASSES, "request_counters_agree", "value", agrees])
    return rows


COMPARISON = "comparison"  # the arm column of SD-vs-baseline figures
TIERED_VS_BASE = "tiered vs baseline"
TIERED_VS_SD = "tiered vs SD"
TIERED_VS_ROUTED = "tiered vs its routed arm"
INTERVAL_STATS = ("estimate", "low", "high", "n")


def _interval_rows(
    scope: str, metric: str, interval: Interval, variant: str = "SD vs baseline"
) -> list[list[object]]:
    return [
        [COMPARISON, variant, scope, metric, stat, getattr(interval, stat)]
        for stat in INTERVAL_STATS
    ]


def _tiered_rows(summary: RunSummary) -> list[list[object]]:
    """The tiered arm's paired E2E speedups per class (> 1: tiered faster) and its check."""
    if summary.tiered is None:
        return []
    rows: list[list[object]] = []
    for scope, check in sorted(summary.tiered.by_class.items()):
        rows += _interval_rows(scope, "speedup_e2e_ms_mean", check.vs_baseline, TIERED_VS_BASE)
        rows += _interval_rows(scope, "speedup_e2e_ms_mean", check.vs_speculative, TIERED_VS_SD)
        rows.append([COMPARISON, TIERED_VS_ROUTED, scope, "held", "value", check.held])
    lossless = summary.tiered.lossless
    rows.append(
        [COMPARISON, TIERED_VS_BASE, ALL_CLASSES, "lossless_exact_match_rate", "value",
         lossless.exact_match_rate]
    )  # fmt: skip
    return rows


def _comparison_rows(summary: RunSummary) -> list[list[object]]:
    """Cost per 1M output tokens per arm, and every paired interval (estimate, low, high, n)."""
    rows: list[list[object]] = []
    if summary.cost is not None:
        scopes = {ALL_CLASSES: summary.cost.overall, **summary.cost.by_class}
        for scope, cost in scopes.items():
            for arm, usd in cost.usd_per_million_output_tokens.items():
                label = summary.arms[arm].label if arm in summary.arms else arm
                rows.append([arm, label, scope, "usd_per_million_output_tokens", "value", usd])
            rows += _interval_rows(scope, "cost_ratio", cost.ratio)
    if summary.statistics is not None:
        stats = {ALL_CLASSES: summary.statistics.overall, **summary.statistics.by_class}
        for scope, scope_stats in stats.items():
            for metric, by_stat in scope_stats.speedup.items():
                for stat, interval in by_stat.items():
                    rows += _interval_rows(scope, f"speedup_{metric}_{stat}", interval)
            rows += _interval_rows(scope, "busy_rate_ratio", scope_stats.busy_rate_ratio)
            rows += _interval_rows(
                scope, "acceptance_rate_estimate", scope_stats.acceptance_rate_estimate
            )
    # The verdict per class ("use SD", "don't", "no gain", "can't tell") and the equivalence
    # bounds its "no gain" was tested against.
    for verdict in summary.verdict:
        scope = verdict.prompt_class
        rows.append(
            [COMPARISON, "SD vs baseline", scope, "verdict", "value", verdict.decision.value]
        )
        for stat, bound in zip(("low", "high"), verdict.equivalence_bounds or (), strict=False):
            rows.append([COMPARISON, "SD vs baseline", scope, "equivalence_bounds", stat, bound])
    return rows
