"""report.md: the report's sections as Markdown (plots linked beside it; folded sections as
<details>, which GitHub and most viewers render)."""

from __future__ import annotations

from loadtest.render.tables import sections
from loadtest.results import RunSummary

TITLE = "Speculative decoding load test: baseline vs SD"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += [
        "| " + " | ".join(cell.strip().replace("|", "\\|") or " " for cell in row) + " |"
        for row in rows
    ]
    return "\n".join(lines)


def render_markdown(summary: RunSummary, plots: list[str]) -> str:
    parts = [f"# {TITLE}"]
    for section in sections(summary, plots):
        # A blank line after <summary> lets the table inside render as Markdown.
        parts.append(
            f"<details><summary>{section.title}</summary>"
            if section.folded
            else f"## {section.title}"
        )
        body = section.body
        if isinstance(body, tuple):
            parts.append(markdown_table(*body))
        elif isinstance(body, list):
            parts.extend(f"![{name}]({name})" for name in body)
        else:
            parts.append(body)
        if section.note is not None:
            parts.append(section.note)
        if section.folded:
            parts.append("</details>")
    return "\n\n".join(parts) + "\n"
