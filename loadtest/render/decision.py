"""The decision part of the report as rows of strings: verdict, intervals, cost.

Shared by the console, Markdown and HTML renderers like ``tables``; every figure shows its
interval and n. Missing values read ``n/a`` (never 0).
"""

from __future__ import annotations

from experiment.config import Arm, RoutingConfig, routing_override_line
from loadtest.cost import margin_usd
from loadtest.metrics import ALL_CLASSES
from loadtest.results import (
    AcceptanceSource,
    ClassFloor,
    ClassVerdict,
    Interval,
    PilotFloors,
    RunSummary,
    ScopeCost,
    ScopeStatistics,
)
from loadtest.verdict import FLOOR_DECIMALS, correction_text

Table = tuple[list[str], list[list[str]]]
NOT_AVAILABLE = "n/a"
# (label, metric, stat) of the speedups with an interval, in report order.
SPEEDUPS = (
    ("TTFT mean", "ttft_ms", "mean"),
    ("TTFT p50", "ttft_ms", "p50"),
    ("TTFT p99", "ttft_ms", "p99"),
    ("TPOT mean", "tpot_ms", "mean"),
    ("TPOT p99", "tpot_ms", "p99"),
    ("ITL per token mean", "itl_ms", "mean"),
    ("chunk gap mean", "chunk_gap_ms", "mean"),
    ("E2E mean", "e2e_ms", "mean"),
    ("E2E p50", "e2e_ms", "p50"),
    ("E2E p90", "e2e_ms", "p90"),
    ("E2E p99", "e2e_ms", "p99"),
    ("output tok/s per request mean", "output_tokens_per_s", "mean"),
)


def interval_text(interval: Interval | None, pattern: str = "{:.3f}", unit: str = "x") -> str:
    """``1.234x [1.101, 1.352]``; the estimate alone when there is no interval."""
    if interval is None or interval.estimate is None:
        return NOT_AVAILABLE
    text = pattern.format(interval.estimate) + unit
    if interval.low is None or interval.high is None:
        return f"{text} (no interval)"
    return f"{text} [{pattern.format(interval.low)}, {pattern.format(interval.high)}]"


def _significance(interval: Interval) -> str:
    if interval.significant is None:
        return ""
    return "yes" if interval.significant else "no"


def verdict_rows(summary: RunSummary) -> Table:
    """One row per prompt class, then all classes: the decision and why."""
    level = f"{summary.statistics.confidence:.0%} CI" if summary.statistics else "CI"
    header = [
        "prompt class",
        "verdict",
        f"cost SD / base [{level}]",
        f"E2E speedup [{level}]",
        "acceptance (source)",
        "pairs",
        "why",
    ]
    rows = [
        [
            v.prompt_class,
            v.decision.value,
            interval_text(v.cost_ratio),
            interval_text(v.e2e_speedup),
            acceptance_cell(summary, v),
            str(v.pairs),
            v.reason,
        ]
        for v in summary.verdict
    ]
    return header, rows


PER_REQUEST_SOURCE = "per-request figures"
MEASURED_SOURCE = "server counters"
ESTIMATED_SOURCE = "client estimate"
SOURCE_LABELS = {
    AcceptanceSource.PER_REQUEST: PER_REQUEST_SOURCE,
    AcceptanceSource.MEASURED: MEASURED_SOURCE,
}


def acceptance_cell(summary: RunSummary, verdict: ClassVerdict) -> str:
    """The best acceptance the run has for the verdict's scope, with its source named: the
    SD server's figures of every request of the scope (per class too), else for all classes
    together its vllm:spec_decode_* counters over the window (they cannot tell classes
    apart), else the client-side estimate from tokens per chunk with its paired interval. A
    class whose per-request figures are incomplete gets the estimate, never a mix."""
    sd = summary.arms.get(Arm.SPECULATIVE.value)
    if sd is not None and verdict.prompt_class == ALL_CLASSES:
        acceptance = sd.acceptance
        if acceptance.source.from_server and acceptance.acceptance_rate is not None:
            return f"{acceptance.acceptance_rate:.3f} ({SOURCE_LABELS[acceptance.source]})"
    elif sd is not None and sd.request_acceptance is not None:
        scope = sd.request_acceptance.by_class.get(verdict.prompt_class)
        if scope is not None and scope.complete and scope.acceptance_rate is not None:
            return f"{scope.acceptance_rate:.3f} ({PER_REQUEST_SOURCE})"
    estimate = interval_text(verdict.acceptance_rate_estimate, unit="")
    return estimate if estimate == NOT_AVAILABLE else f"{estimate} ({ESTIMATED_SOURCE})"


def bucket_verdict_rows(summary: RunSummary) -> Table:
    """A replayed trace: one row per prompt class and input-length bucket (the routing line
    stays per class: the gateway routes on the class header, not on length)."""
    level = f"{summary.statistics.confidence:.0%} CI" if summary.statistics else "CI"
    header = [
        "prompt class",
        "input tokens",
        "verdict",
        f"cost SD / base [{level}]",
        f"E2E speedup [{level}]",
        "pairs",
        "why",
    ]
    rows = [
        [
            v.prompt_class,
            v.input_bucket or "",
            v.decision.value,
            interval_text(v.cost_ratio),
            interval_text(v.e2e_speedup),
            str(v.pairs),
            v.reason,
        ]
        for v in summary.verdict_by_bucket
    ]
    return header, rows


def bucket_flips_text(summary: RunSummary) -> str:
    """Whether a class's verdict flips across input lengths, after how the cells' family-wise
    error was controlled (loadtest.verdict.correction_text)."""
    confidence = summary.statistics.confidence if summary.statistics is not None else None
    correction = (
        correction_text(summary.verdict_by_bucket, confidence) if confidence is not None else ""
    )
    lead = f"{correction}\n" if correction else ""
    if not summary.bucket_flips:
        return lead + (
            "No class's verdict flips across input-length buckets (buckets that can't tell "
            "do not count)."
        )
    return lead + "\n".join(f"Flips: {flip}" for flip in summary.bucket_flips)


def floor_text(entry: ClassFloor, factor: float) -> str:
    """One routed class's proposed floor and how it was read off the run, or why none."""
    if entry.floor is None:
        return f"{entry.prompt_class}: no floor: {entry.reason}"
    interval = entry.acceptance
    assert interval is not None and interval.low is not None  # a floor needs its bound
    per_request = entry.acceptance_source is AcceptanceSource.PER_REQUEST
    source = (
        f"{PER_REQUEST_SOURCE}, n={interval.n} requests"
        if per_request
        else f"{ESTIMATED_SOURCE} from its tokens per chunk, n={interval.n} pairs"
    )
    return (
        f"{entry.prompt_class}: floor {entry.floor!r} = {factor:g} x the lower "
        f"{interval.confidence:.0%} bound of its acceptance "
        f"{interval_text(interval, unit='')} ({source}), rounded down to "
        f"{FLOOR_DECIMALS} decimals"
    )


def floors_text(floors: PilotFloors) -> str:
    """What the floors in the routing line are, class by class (docs/routing.md)."""
    measured = floors.measured_acceptance_rate
    source = SOURCE_LABELS.get(floors.source, floors.source.value)
    counters = (
        f"; the SD server measured {measured:.3f} over the whole run ({source})"
        if measured is not None
        else ""
    )
    head = (
        "Acceptance floors the run supports (routing.acceptance_floors; floor = "
        f"guardrails.live.pilot_floor_factor {floors.factor:g} x the lower bound of the "
        "class's acceptance interval, accepted / drafted tokens from the server's figures of "
        "each request where it returned them, else from its tokens per chunk"
        f"{counters}). A class without one keeps its configured floor, else "
        "guardrails.min_acceptance_rate:"
    )
    return "\n".join([head, *(f"- {floor_text(e, floors.factor)}" for e in floors.by_class)])


def routing_text(summary: RunSummary) -> str | None:
    """The ``-c`` line that enacts the verdict in the tiered gateway (docs/routing.md): the
    classes whose verdict is "use SD" to the speculative arm, every other class (including
    "no gain" and "can't tell") to the baseline, each routed class with the acceptance floor the run
    supports (summary.floors), then what each floor is or why a class has none. Written
    against the default allow-list, so it also allows a class that list lacks: the line is
    valid on its own. None without a per-class verdict."""
    classes = [v for v in summary.verdict if v.prompt_class != ALL_CLASSES]
    if not classes:
        return None
    chosen = [v.prompt_class for v in classes if v.decision.routes_to_sd]
    floors = summary.floors
    # Floors of classes this line routes only: summary.floors follows the same verdict.
    proposed = {
        name: value for name, value in (floors.floors() if floors else {}).items() if name in chosen
    }
    line = routing_override_line(RoutingConfig(), chosen, proposed)
    with_floors = ", with the acceptance floors the run supports" if proposed else ""
    text = (
        "Route by class (the classes where SD pays to the speculative arm, the rest to the "
        f"baseline{with_floors}; docs/routing.md): `{line}`"
    )
    if floors is not None and floors.by_class:
        text += "\n\n" + floors_text(floors)
    return text


def margin_text(summary: RunSummary) -> str | None:
    """What "no gain" means in money: the equivalence bounds of statistics.equivalence_margin
    read as USD per 1M output tokens at this run's measured baseline cost, overall and per
    class (loadtest.cost.margin_usd). None without a verdict, settings or cost."""
    analysis, cost = summary.run.analysis, summary.cost
    if not summary.verdict or analysis is None or cost is None:
        return None
    settings = analysis.statistics
    margin = settings.equivalence_margin
    alpha = (1 - settings.confidence) / 2
    scopes = [(ALL_CLASSES, cost.overall), *sorted(cost.by_class.items())]
    amounts = []
    for name, scope in scopes:
        base = scope.usd_per_million_output_tokens.get("baseline")
        if base is None:
            continue
        less, more = margin_usd(base, margin)
        amounts.append(
            f"{name} {base:,.4g} USD, so SD at most {more:,.4g} USD dearer or {less:,.4g} USD "
            "cheaper"
        )
    at_cost = (
        "At this run's measured baseline cost per 1M output tokens: " + "; ".join(amounts) + "."
        if amounts
        else "This run measured no baseline cost to express it in USD."
    )
    return (
        f'"No gain" (statistics.equivalence_margin={margin:g}): the whole '
        f"{settings.confidence:.0%} interval of SD / baseline cost per 1M output tokens lies "
        f"within [{1 / (1 + margin):.3f}, {1 + margin:.3f}], SD within ±{margin:.0%} (a factor "
        f"{1 + margin:g}) of the baseline's cost either way (two one-sided tests, "
        f"alpha={alpha:.3g} each); the class stays on the baseline. {at_cost}"
    )


def schedule_text(summary: RunSummary) -> str | None:
    """The k the verdicts were measured with: one k, or the schedule by batch size."""
    info = summary.run.analysis
    if info is None or not info.speculation_schedule:
        return None
    ranges = ", ".join(
        f"{first}-{last}: {'no speculation' if k == 0 else f'k={k}'}"
        for first, last, k in info.speculation_schedule
    )
    return (
        f"The speculative arm served a k per batch size (serving.speculation_schedule): "
        f"{ranges}; the verdicts are the schedule's, at the batch sizes this run's load made "
        f"(k={info.num_speculative_tokens} at most)."
    )


def verdict_note(summary: RunSummary) -> str | None:
    """The verdict section's note: the routing line, the k served, what the margin means."""
    parts = [
        text
        for text in (routing_text(summary), schedule_text(summary), margin_text(summary))
        if text
    ]
    return "\n\n".join(parts) or None


def verdict_text(summary: RunSummary) -> str:
    """Why there is no verdict table (None when there is one)."""
    if summary.run.analysis is None:
        return (
            "No verdict: this run directory predates the statistics (no analysis settings in "
            "run.json). Rerun the load test to get intervals, cost and a verdict."
        )
    return (
        "No verdict: no request succeeded on both arms, so nothing can be compared. See the "
        "failures below."
    )


def _scopes(summary: RunSummary) -> list[tuple[str, ScopeStatistics]]:
    if summary.statistics is None:
        return []
    return [(ALL_CLASSES, summary.statistics.overall), *sorted(summary.statistics.by_class.items())]


def interval_rows(summary: RunSummary) -> Table:
    """Every speedup (SD vs baseline, > 1 is better) with its interval, n and significance."""
    level = f"{summary.statistics.confidence:.0%}" if summary.statistics else ""
    header = [
        "scope",
        "figure",
        "estimate",
        f"{level} CI low",
        f"{level} CI high",
        "n",
        "excludes 1",
    ]
    rows: list[list[str]] = []

    def row(scope: str, label: str, interval: Interval | None, pattern: str = "{:.3f}") -> None:
        if interval is None:
            return
        cells = [
            NOT_AVAILABLE if value is None else pattern.format(value)
            for value in (interval.estimate, interval.low, interval.high)
        ]
        rows.append([scope, label, *cells, str(interval.n), _significance(interval)])

    for scope, stats in _scopes(summary):
        for label, metric, stat in SPEEDUPS:
            row(scope, f"{label} speedup", stats.speedup.get(metric, {}).get(stat))
        row(scope, "output tok per busy second (SD / base)", stats.busy_rate_ratio)
        row(scope, "acceptance rate (client-side estimate)", stats.acceptance_rate_estimate)
    return header, rows


def _cost_row(scope: str, cost: ScopeCost) -> list[str]:
    usd = cost.usd_per_million_output_tokens

    def money(arm: str) -> str:
        value = usd.get(arm)
        return NOT_AVAILABLE if value is None else f"{value:,.4g}"

    return [
        scope,
        money("baseline"),
        money("speculative"),
        interval_text(cost.ratio),
        str(cost.ratio.n),
        _significance(cost.ratio),
    ]


def cost_rows(summary: RunSummary) -> Table:
    currency = "USD"
    header = [
        "scope",
        f"baseline {currency} / 1M output tokens",
        f"SD {currency} / 1M output tokens",
        "SD / base [CI]",
        "pairs",
        "excludes 1",
    ]
    cost = summary.cost
    if cost is None:
        return header, []
    rows = [_cost_row(ALL_CLASSES, cost.overall)]
    rows += [_cost_row(name, scope) for name, scope in sorted(cost.by_class.items())]
    if cost.at_optimal_load:
        for arm, point in cost.at_optimal_load.items():
            value = point.usd_per_million_output_tokens
            rows.append(
                [
                    f"{arm} at its throughput-optimal concurrency {point.concurrency}",
                    NOT_AVAILABLE if value is None else f"{value:,.4g}",
                    "",
                    "",
                    "",
                    "",
                ]
            )
    return header, rows


def price_text(summary: RunSummary) -> str:
    """The price behind every cost figure, where it came from, and whether it is nominal."""
    if summary.cost is None:
        return "No cost: this run has no price (run directory from an older version)."
    basis = summary.cost.basis
    text = (
        f"Each arm pays {basis.arm_usd_per_hour:.4g} USD/h: {basis.instance_type} "
        f"({basis.capacity_type}) at {basis.instance_usd_per_hour:.4g} USD/h x "
        f"{basis.devices_claimed}/{basis.devices_per_instance} of its devices. Price source: "
        f"{basis.source} (as of {basis.as_of})."
    )
    if basis.nominal:
        text += (
            " NOMINAL price: the figures compare the arms, not your bill; set config.pricing to "
            "your own price."
        )
    if summary.cost.optimal_load_note:
        text += f" {summary.cost.optimal_load_note[0].upper()}{summary.cost.optimal_load_note[1:]}."
    return text
