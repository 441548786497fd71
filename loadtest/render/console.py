"""The side-by-side summary table for the terminal (fixed-width plain text)."""

from __future__ import annotations

from loadtest.render.tables import summary_rows
from loadtest.results import RunSummary


def render_summary_table(summary: RunSummary) -> str:
    """Both arms and the speedups, one metric per line."""
    header, rows = summary_rows(summary)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(
            cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(r)
        )
        for r in [header, *rows]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
