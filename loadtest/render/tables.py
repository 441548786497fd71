"""The content of the report as rows of strings, shared by the console, Markdown and HTML.

Each function turns part of a ``RunSummary`` into a ``Table`` (header, rows); ``sections``
lists the report's sections in order. Missing values read ``n/a`` (never 0).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from experiment.config import TIERED_ARM, Arm
from loadtest.metrics import ALL_CLASSES, DISTRIBUTIONS, PERCENTILES
from loadtest.render.decision import (
    NOT_AVAILABLE,
    Table,
    bucket_flips_text,
    bucket_verdict_rows,
    cost_rows,
    interval_rows,
    interval_text,
    price_text,
    verdict_note,
    verdict_rows,
    verdict_text,
)
from loadtest.render.load_generator import load_generator_rows
from loadtest.render.per_token import has_server_latency, per_token_rows, per_token_text
from loadtest.render.plot_files import KEY_PLOTS
from loadtest.render.tiered import tiered_rows, tiered_text
from loadtest.results import (
    Acceptance,
    AcceptanceSource,
    ArmSummary,
    Distribution,
    Lossless,
    MetricBlock,
    RunSummary,
    Speedups,
)

STATS = ("mean", *(f"p{p}" for p in PERCENTILES))
COUNT = "count"  # the "ok / sent" cell instead of a format


@dataclass(frozen=True)
class Row:
    """One metric of the side-by-side table: its value per arm, its speedup, its format."""

    label: str
    value: Callable[[ArmSummary], float | int | None]
    speedup: Callable[[Speedups], float | None] | None
    fmt: str


ROWS: list[Row] = [
    Row("requests ok / sent", lambda a: a.overall.succeeded, None, COUNT),
    Row("TTFT p50 (ms)", lambda a: a.overall.ttft_ms.p50, lambda s: s.ttft_ms.p50, "{:.1f}"),
    Row("TTFT p99 (ms)", lambda a: a.overall.ttft_ms.p99, lambda s: s.ttft_ms.p99, "{:.1f}"),
    Row("TPOT mean (ms)", lambda a: a.overall.tpot_ms.mean, lambda s: s.tpot_ms.mean, "{:.2f}"),
    Row(
        "ITL per token mean (ms)",
        lambda a: a.overall.itl_ms.mean,
        lambda s: s.itl_ms.mean,
        "{:.2f}",
    ),
    Row("ITL per token p50 (ms)", lambda a: a.overall.itl_ms.p50, lambda s: s.itl_ms.p50, "{:.2f}"),
    Row("ITL per token p99 (ms)", lambda a: a.overall.itl_ms.p99, lambda s: s.itl_ms.p99, "{:.2f}"),
    Row(
        "chunk gap p50 (ms)",
        lambda a: a.overall.chunk_gap_ms.p50,
        lambda s: s.chunk_gap_ms.p50,
        "{:.2f}",
    ),
    Row("tokens per chunk mean", lambda a: a.overall.tokens_per_chunk.mean, None, "{:.2f}"),
    Row("E2E p50 (ms)", lambda a: a.overall.e2e_ms.p50, lambda s: s.e2e_ms.p50, "{:.0f}"),
    Row("E2E p99 (ms)", lambda a: a.overall.e2e_ms.p99, lambda s: s.e2e_ms.p99, "{:.0f}"),
    Row(
        "output tok/s per request",
        lambda a: a.overall.output_tokens_per_s.mean,
        lambda s: s.output_tokens_per_s.mean,
        "{:.1f}",
    ),
    Row(
        "output tok/s (run)",
        lambda a: a.overall.output_throughput_tok_s,
        lambda s: s.output_throughput_tok_s,
        "{:.1f}",
    ),
    Row(
        "requests/s",
        lambda a: a.overall.request_throughput_rps,
        lambda s: s.request_throughput_rps,
        "{:.3f}",
    ),
    Row(
        "goodput (req/s in SLO)",
        lambda a: a.overall.goodput_rps,
        lambda s: s.goodput_rps,
        "{:.3f}",
    ),
    Row("failed requests", lambda a: a.overall.failed, None, "{}"),
    Row("length mismatches", lambda a: a.overall.length_mismatches, None, "{}"),
    Row("acceptance rate", lambda a: a.acceptance.acceptance_rate, None, "{:.3f}"),
    Row("mean acceptance length", lambda a: a.acceptance.mean_acceptance_length, None, "{:.2f}"),
]


def fmt(value: float | int | None, pattern: str) -> str:
    return NOT_AVAILABLE if value is None else pattern.format(value)


def summary_rows(summary: RunSummary) -> Table:
    """Both arms side by side with the speedups (the console table and "Both arms")."""
    base, sd = summary.arm(Arm.BASELINE), summary.arm(Arm.SPECULATIVE)
    header = ["metric", base.label, sd.label, "speedup (SD vs base)"]
    overall = summary.speedup.overall
    rows = []
    for row in ROWS:
        if row.fmt == COUNT:
            cells = [f"{a.overall.succeeded} / {a.overall.requests}" for a in (base, sd)]
        else:
            cells = [fmt(row.value(a), row.fmt) for a in (base, sd)]
        speedup = row.speedup(overall) if row.speedup and overall else None
        rows.append([row.label, *cells, f"{speedup:.2f}x" if speedup is not None else ""])
    lossless = summary.lossless
    rate = lossless.exact_match_rate
    rows.append(
        [
            "lossless exact-match rate",
            "",
            ""
            if rate is None
            else f"{rate:.0%} ({lossless.exact_matches}/{lossless.prompts_compared})",
            "",
        ]
    )
    rows.append(
        ["lossless prefix agreement", "", fmt(lossless.prefix_agreement_rate, "{:.1%}"), ""]
    )
    reasons = sorted({reason for a in (base, sd) for reason in a.overall.failures_by_reason})
    for reason in reasons:
        counts = [str(a.overall.failures_by_reason.get(reason, 0)) for a in (base, sd)]
        rows.append([f"  failed: {reason}", *counts, ""])
    return header, rows


def _class_row(
    cls: str, arm_name: str, label: str, block: MetricBlock, e2e_mean: float | None
) -> list[str]:
    def cell(distribution: Distribution, stat: str, pattern: str = "{:.1f}") -> str:
        return fmt(distribution.stat(stat), pattern)

    return [
        cls,
        label,
        f"{block.succeeded}/{block.requests}",
        cell(block.ttft_ms, "p50"),
        cell(block.ttft_ms, "p99"),
        cell(block.tpot_ms, "mean", "{:.2f}"),
        cell(block.itl_ms, "mean", "{:.2f}"),
        cell(block.itl_ms, "p99", "{:.2f}"),
        cell(block.chunk_gap_ms, "p50", "{:.2f}"),
        cell(block.e2e_ms, "p50", "{:.0f}"),
        cell(block.e2e_ms, "p99", "{:.0f}"),
        cell(block.output_tokens_per_s, "mean"),
        str(block.failed),
        "" if arm_name == Arm.BASELINE.value or e2e_mean is None else f"{e2e_mean:.2f}x",
    ]


def class_rows(summary: RunSummary) -> Table:
    header = [
        "class",
        "arm",
        "ok/sent",
        "TTFT p50",
        "TTFT p99",
        "TPOT mean",
        "ITL mean",
        "ITL p99",
        "chunk gap p50",
        "E2E p50",
        "E2E p99",
        "tok/s/req",
        "failed",
        "speedup E2E mean",
    ]
    rows = [
        _class_row(cls, arm_name, arm.label, block, _e2e_speedup(summary, arm_name, cls))
        for arm_name, arm in summary.arms.items()
        for cls, block in arm.by_class.items()
    ]
    return header, rows


def _e2e_speedup(summary: RunSummary, arm: str, prompt_class: str) -> float | None:
    """The arm's mean E2E speedup over the baseline in the class: SD's from the per-arm
    means, the tiered arm's paired one (loadtest/tiered.py)."""
    if arm == TIERED_ARM:
        check = summary.tiered.by_class.get(prompt_class) if summary.tiered else None
        return check.vs_baseline.estimate if check else None
    speedup = summary.speedup.by_class.get(prompt_class)
    return speedup.e2e_ms.mean if speedup else None


def distribution_rows(summary: RunSummary) -> Table:
    header = ["metric", "arm", "count", *STATS, "max"]
    rows = []
    for name in DISTRIBUTIONS:
        for arm in summary.arms.values():
            stats = arm.overall.distribution(name)
            rows.append(
                [
                    name,
                    arm.label,
                    str(stats.count),
                    *(fmt(stats.stat(key), "{:.2f}") for key in (*STATS, "max")),
                ]
            )
    return header, rows


def failure_rows(summary: RunSummary) -> Table:
    header = ["arm", "reason", "count"]
    rows = [
        [arm.label, reason, str(count)]
        for arm in summary.arms.values()
        for reason, count in arm.overall.failures_by_reason.items()
    ]
    return header, rows


def acceptance_rows(summary: RunSummary) -> Table:
    """Each arm's acceptance from its best source; beside a per-request figure, the same
    window's counters (their reconciliation is under the per-class table)."""
    header = ["arm", "acceptance rate", "mean acceptance length", "per position", "note", "source"]
    rows = []
    for name, arm in summary.arms.items():
        rows.append(_acceptance_row(summary, name, arm.label, arm.acceptance))
        per_request = arm.request_acceptance
        if per_request is not None and arm.acceptance.source is AcceptanceSource.PER_REQUEST:
            label = f"{arm.label} (counters)"
            rows.append(_acceptance_row(summary, name, label, per_request.counters))
    return header, rows


def _acceptance_row(summary: RunSummary, name: str, label: str, acc: Acceptance) -> list[str]:
    if acc.available:
        return [
            label,
            fmt(acc.acceptance_rate, "{:.3f}"),
            fmt(acc.mean_acceptance_length, "{:.2f}"),
            ", ".join(f"{v:.2f}" for v in acc.per_position_rate or []),
            "",
            acc.source.value,
        ]
    note = acc.reason or ""
    # The estimate stands in only where the server has no counters, never for frozen ones.
    estimated = acc.source is AcceptanceSource.ESTIMATED and name == Arm.SPECULATIVE
    estimate = _client_acceptance_note(summary) if estimated else ""
    return [label, "not available", "not available", "", note + estimate, acc.source.value]


def request_acceptance_rows(summary: RunSummary) -> Table:
    """Each arm's per-request figures (vLLM --per-request-spec-decode-metrics), all classes
    then each prompt class, whatever the classes' mix in the window; empty without any."""
    header = [
        "arm",
        "prompt class",
        "acceptance rate",
        "mean acceptance length",
        "per position",
        "verify steps",
        "drafted",
        "accepted",
        "requests with figures",
    ]
    rows = []
    for arm in summary.arms.values():
        per_request = arm.request_acceptance
        if per_request is None:
            continue
        for scope, block in {ALL_CLASSES: per_request.overall, **per_request.by_class}.items():
            missing = f" ({block.missing} missing)" if block.missing else ""
            rows.append(
                [
                    arm.label,
                    scope,
                    fmt(block.acceptance_rate, "{:.3f}"),
                    fmt(block.mean_acceptance_length, "{:.2f}"),
                    ", ".join(f"{v:.2f}" for v in block.per_position_rate or []),
                    str(block.spec_steps),
                    str(block.draft_tokens),
                    str(block.accepted_tokens),
                    f"{block.with_figures} of {block.requests}{missing}",
                ]
            )
    return header, rows


def request_acceptance_text(summary: RunSummary) -> str | None:
    """Per arm: whether the per-request sums agree with the same window's counters, or why
    they were not compared; None without per-request figures."""
    lines = []
    for arm in summary.arms.values():
        per_request = arm.request_acceptance
        if per_request is None:
            continue
        found = per_request.reconciliation
        if found is not None:
            verdict = "agree" if found.agrees else "DISAGREE"
            lines.append(
                f"{arm.label}: per-request sums and /metrics counters {verdict}: {found.reason}."
            )
        else:
            counters = per_request.counters
            lines.append(
                f"{arm.label}: not reconciled, the counters are {counters.source.value} "
                f"({counters.reason or 'no reason recorded'})."
            )
        if per_request.overall.missing:
            lines.append(
                f"{arm.label}: per-request figures missing on {per_request.overall.missing} of "
                f"{per_request.overall.requests} requests; the rows above cover only the others."
            )
    return " ".join(lines) if lines else None


def _client_acceptance_note(summary: RunSummary) -> str:
    """Without server counters (the Neuron fork), point at the client-side estimate the
    statistics carry, so the acceptance block does not read as "unknown" when it is estimated."""
    stats = summary.statistics
    if stats is None or stats.overall.acceptance_rate_estimate.estimate is None:
        return ""
    interval = stats.overall.acceptance_rate_estimate
    return (
        f"; client-side estimate {interval_text(interval, unit='')}, n={interval.n} pairs "
        "(from tokens per chunk, see the statistics table)"
    )


def lossless_rows(
    summary: RunSummary, lossless: Lossless | None = None, other: str = "SD"
) -> Table:
    """The mismatches of ``lossless`` (default: SD's) against the baseline's outputs."""
    header = ["prompt", "class", "first differing token", "agreement", "baseline", other]
    rows = [
        [
            m.prompt_id,
            m.prompt_class,
            f"{m.first_diff_token} of {m.compared_tokens}",
            fmt(m.agreement, "{:.1%}"),
            repr(m.baseline_context),
            repr(m.speculative_context),
        ]
        for m in (lossless or summary.lossless).mismatches
    ]
    return header, rows


def length_mismatch_rows(arm: ArmSummary) -> Table:
    header = ["request", "prompt", "requested", "got"]
    rows = [
        [str(m.index), m.prompt_id, str(m.requested), str(m.got)]
        for m in arm.length_mismatch_examples
    ]
    return header, rows


def run_text(summary: RunSummary) -> str:
    run = summary.run
    shape = run.load_shape
    load = (
        f"open loop at {shape.request_rate} req/s (<= {shape.concurrency} in flight)"
        if shape.request_rate
        else f"closed loop at concurrency {shape.concurrency}"
    )
    served = f" (served: {run.served_models})" if run.served_models else ""
    return (
        f"Model `{run.model}`{served}, {run.measured_requests} measured requests per arm "
        f"(+{run.warmup_requests} warm-up, excluded), {load}, max_tokens "
        f"{run.request.max_tokens}, temperature {run.request.temperature}, "
        f"ignore_eos {run.request.ignore_eos}, seed {run.seed}, API "
        f"`{run.request.api}`. Started {run.started_at}. Speedup > 1 means SD is "
        "better (latency: base/SD; throughput: SD/base)."
    ) + "".join(f" {line}" for line in arms_lines(summary))


def arms_lines(summary: RunSummary) -> list[str]:
    """How the arms shared the run's time and what a pair is (loadtest.arms_mode); nothing
    for runs from before the setting."""
    mode = summary.run.arms_mode
    if mode is None:
        return []
    timing = summary.arms_timing
    if mode == "concurrent":
        lines = [
            "Arms: concurrent, both measured at the same time from one start instant. "
            "Pairs: the same prompt in the same schedule slot, sent to both arms together."
        ]
        if timing is not None:
            spread = (
                "" if timing.start_spread_s is None
                else f"first measured requests {timing.start_spread_s:.2f} s apart; "
            )  # fmt: skip
            lines.append(
                f"Timing: {spread}the run took {timing.run_elapsed_s:.0f} s, "
                f"{timing.wall_saved_s:.0f} s less than the arms one after the other "
                f"({sum(timing.arms_elapsed_s.values()):.0f} s)."
            )
        return lines
    if mode == "alternating":
        return alternating_lines(summary)
    lines = [
        f"Arms: {mode}, one arm whole, then the other. Pairs: the same prompt in the "
        "same schedule slot, measured at different times (a drift between the two halves "
        "falls on one arm only)."
    ]
    if timing is not None:
        lines.append(f"Timing: the run took {timing.run_elapsed_s:.0f} s.")
    return lines


def alternating_lines(summary: RunSummary) -> list[str]:
    """The alternating arms' blocks (loadtest/alternating.py): their order and cost."""
    timing = summary.arms_timing
    size = "" if timing is None or timing.block_requests is None else (
        f" of {timing.block_requests} requests"
    )  # fmt: skip
    lines = [
        f"Arms: alternating, the arms taking turns in blocks{size} in ABBA order, each block "
        "on one arm alone, so a slow drift of the machine falls on both arms alike. Pairs: "
        "the same prompt in the same schedule slot, measured in neighbouring blocks."
    ]
    if timing is not None:
        labels = {arm: block.label for arm, block in summary.arms.items()}
        order = " ".join(labels.get(arm, arm) for arm in timing.block_order)
        overhead = timing.block_overhead_s
        cost = "" if overhead is None else (
            f", {overhead:.0f} s of it starting and stopping the blocks' Locust processes"
        )  # fmt: skip
        lines.append(f"Timing: blocks {order}; the run took {timing.run_elapsed_s:.0f} s{cost}.")
    return lines


def lossless_text(summary: RunSummary) -> str:
    lossless = summary.lossless
    rate = lossless.exact_match_rate
    text = (
        "not computable (no prompt succeeded on both arms)"
        if rate is None
        else f"exact-match rate {rate:.0%} ({lossless.exact_matches}/"
        f"{lossless.prompts_compared} prompts)"
    )
    if lossless.prefix_agreement_rate is not None:
        text += (
            f"; prefix agreement {lossless.prefix_agreement_rate:.1%} of "
            f"{lossless.tokens_compared} tokens (output before each first divergence)"
        )
    if lossless.baseline_self_consistency is not None:
        text += (
            f"; the baseline agrees with itself on "
            f"{lossless.baseline_self_consistency:.0%} of repeated prompts"
        )
    if lossless.note:
        text += f" ({lossless.note})"
    return text


# A section's body: prose, a table, or the file names of plots.
Body = str | Table | list[str]


@dataclass(frozen=True)
class Section:
    title: str
    body: Body
    folded: bool = False
    """Detail a reader opens on demand (<details> in HTML and Markdown)."""
    note: str | None = None
    """A line after the body (the verdict's routing override)."""


def sections(summary: RunSummary, plots: list[str]) -> list[Section]:
    """The report's sections in reading order (the Markdown and HTML renderers write these).

    Top-down, as a reader decides: the verdict; the plots of E2E and per-token latency by
    prompt class over the run (KEY_PLOTS); the table per class; warnings; then the run, both
    arms, cost, acceptance and lossless; the other plots; and folded, the full statistics and
    per-request detail."""
    verdict = verdict_rows(summary)
    key_plots = [name for name in KEY_PLOTS if name in plots]
    more_plots = [name for name in plots if name not in KEY_PLOTS]
    result = [
        Section(
            "Verdict: use speculative decoding?",
            verdict if verdict[1] else verdict_text(summary),
            note=verdict_note(summary),
        )
    ]
    if summary.verdict_by_bucket:
        result.append(
            Section(
                "Verdict by prompt class and input length (replayed trace)",
                bucket_verdict_rows(summary),
                note=bucket_flips_text(summary),
            )
        )
    if key_plots:
        result.append(Section("Latency by prompt class, over the run", key_plots))
    result.append(Section("Per prompt class", class_rows(summary)))
    if has_server_latency(summary):
        result.append(
            Section(
                "Per-token latency: client stream and server histograms",
                per_token_rows(summary),
                note=per_token_text(summary),
            )
        )
    tiered = tiered_text(summary)
    if tiered is not None:
        result.append(
            Section("Tiered arm: per class vs baseline and SD", tiered_rows(summary), note=tiered)
        )
    if summary.warnings:
        result.append(Section("Warnings", "\n".join(f"- {w}" for w in summary.warnings)))
    result += [
        Section("Run", run_text(summary)),
        Section("Both arms", summary_rows(summary)),
        Section(
            "Load generator (Locust workers, their CPU and clocks)", load_generator_rows(summary)
        ),
        Section("Cost per 1M output tokens", price_text(summary)),
    ]
    if summary.cost is not None:
        result.append(Section("Cost by scope", cost_rows(summary)))
    result.append(Section("Speculative acceptance (best source per arm)", acceptance_rows(summary)))
    per_request = request_acceptance_rows(summary)
    if per_request[1]:
        result.append(
            Section(
                "Acceptance per prompt class (each request's own figures)",
                per_request,
                note=request_acceptance_text(summary),
            )
        )
    result.append(Section("Lossless check", lossless_text(summary)))
    failures = failure_rows(summary)
    result.append(Section("Failures by reason", failures if failures[1] else "No failed requests."))
    if more_plots:
        result.append(Section("More plots", more_plots))
    if summary.statistics is not None:
        result.append(
            Section(
                "Confidence intervals (paired bootstrap, expanded percentile, "
                f"{summary.statistics.resamples} resamples, seed {summary.statistics.seed}; "
                f"{summary.statistics.unpaired} requests unpaired)",
                interval_rows(summary),
                folded=True,
            )
        )
    result.append(
        Section(
            "All statistics (overall; ms, tok/s, tokens per chunk)",
            distribution_rows(summary),
            folded=True,
        )
    )
    if summary.lossless.mismatches:
        result.append(Section("Lossless mismatches", lossless_rows(summary), folded=True))
    if summary.tiered is not None and summary.tiered.lossless.mismatches:
        result.append(
            Section(
                "Lossless mismatches (tiered vs baseline)",
                lossless_rows(summary, summary.tiered.lossless, summary.arm(TIERED_ARM).label),
                folded=True,
            )
        )
    for arm in summary.arms.values():
        if arm.length_mismatch_examples:
            result.append(
                Section(
                    f"Output-length mismatches ({arm.label})",
                    length_mismatch_rows(arm),
                    folded=True,
                )
            )
    return result
