"""The side-by-side summary table for the terminal (fixed-width plain text)."""

from __future__ import annotations

from loadtest.render.decision import cost_rows, price_text, verdict_note, verdict_rows
from loadtest.render.load_generator import load_generator_rows
from loadtest.render.tables import (
    request_acceptance_rows,
    request_acceptance_text,
    summary_rows,
)
from loadtest.render.tiered import tiered_rows, tiered_text
from loadtest.results import RunSummary


def fixed_width(header: list[str], rows: list[list[str]]) -> str:
    """A plain-text table: first column left-aligned, the others right-aligned."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(
            cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(r)
        )
        for r in [header, *rows]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def render_summary_table(summary: RunSummary) -> str:
    """Both arms and the speedups, one metric per line; the acceptance per prompt class from
    each request's own figures when the server returned them, with their reconciliation; the
    load generator (workers, CPU, clock skew); then the cost per 1M output tokens and the
    verdict per prompt class when the run has them; then the tiered arm per class when the
    run drove it."""
    parts = [fixed_width(*summary_rows(summary))]
    per_request = request_acceptance_rows(summary)
    if per_request[1]:
        parts.append(fixed_width(*per_request))
        note = request_acceptance_text(summary)
        if note is not None:
            parts.append(note)
    parts.append(fixed_width(*load_generator_rows(summary)))
    costs = cost_rows(summary)
    if costs[1]:
        parts += [fixed_width(*costs), price_text(summary)]
    verdict = verdict_rows(summary)
    if verdict[1]:
        parts.append(fixed_width(*verdict))
    note = verdict_note(summary)
    if note is not None:
        parts.append(note)
    tiered = tiered_text(summary)
    if tiered is not None:
        parts += [fixed_width(*tiered_rows(summary)), tiered]
    return "\n\n".join(parts)
