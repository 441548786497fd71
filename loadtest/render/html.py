"""report.html: the report's sections as one self-contained HTML page (plots linked)."""

from __future__ import annotations

import html

from loadtest.render.markdown import TITLE
from loadtest.render.tables import sections
from loadtest.results import RunSummary

STYLE = (
    "body{font-family:sans-serif;max-width:1200px;margin:auto}"
    "table{border-collapse:collapse;margin:8px 0}"
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
    "td:first-child,th:first-child{text-align:left}"
)


def render_html(summary: RunSummary, plots: list[str]) -> str:
    out = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        "<title>Speculative decoding load test</title><style>",
        STYLE,
        f"</style></head><body><h1>{TITLE}</h1>",
    ]
    for title, body in sections(summary, plots):
        out.append(f"<h2>{html.escape(title)}</h2>")
        if isinstance(body, tuple):
            header, rows = body
            out.append(
                "<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>"
            )
            out += [
                "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
                for row in rows
            ]
            out.append("</table>")
        elif isinstance(body, list):
            out += [
                f"<p><img src='{html.escape(name)}' alt='{html.escape(name)}'></p>" for name in body
            ]
        else:
            out.append("<p>" + html.escape(body).replace("\n", "<br>") + "</p>")
    out.append("</body></html>")
    return "\n".join(out)
