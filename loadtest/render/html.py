"""report.html: the report's sections as one self-contained HTML page.

The plots are embedded as ``data:`` URIs, so the one file can be mailed or attached to a
ticket and opens complete; folded sections are ``<details>`` (no script)."""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Mapping

from loadtest.render.markdown import TITLE
from loadtest.render.tables import Body, sections
from loadtest.results import RunSummary

STYLE = (
    "body{font-family:sans-serif;max-width:1200px;margin:auto;padding:0 8px}"
    "table{border-collapse:collapse;margin:8px 0}"
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
    "td{white-space:nowrap}"
    ".scroll{overflow-x:auto}"
    "td:first-child,th:first-child{text-align:left}"
    "section[id^=verdict] td:nth-child(2){font-weight:bold}"
    "section[id^=verdict] td:last-child,section[id^=verdict] th:last-child"
    "{text-align:left;white-space:normal}"
    "img{max-width:100%;height:auto}"
    "summary h2{display:inline;cursor:pointer}"
    "details{margin:16px 0}"
)


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def _image(name: str, data: bytes) -> str:
    encoded = base64.b64encode(data).decode("ascii")
    return (
        f"<p><img src='data:image/png;base64,{encoded}' alt='{html.escape(name)}' "
        f"title='{html.escape(name)}'></p>"
    )


def _body(body: Body, images: Mapping[str, bytes]) -> list[str]:
    if isinstance(body, tuple):
        header, rows = body
        header_row = "".join(f"<th>{html.escape(h)}</th>" for h in header)
        # A wide table scrolls inside its box instead of pushing the page sideways.
        out = [f"<div class='scroll'><table><tr>{header_row}</tr>"]
        out += [
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows
        ]
        out.append("</table></div>")
        return out
    if isinstance(body, list):
        return [_image(name, images[name]) for name in body]
    return ["<p>" + html.escape(body).replace("\n", "<br>") + "</p>"]


def render_html(summary: RunSummary, images: Mapping[str, bytes]) -> str:
    """The page; ``images``: each plot's PNG bytes by file name, in the order produced."""
    out = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        "<title>Speculative decoding load test</title><style>",
        STYLE,
        f"</style></head><body><h1>{TITLE}</h1>",
    ]
    for section in sections(summary, list(images)):
        title = html.escape(section.title)
        out.append(f"<section id='{_slug(section.title)}'>")
        if section.folded:
            out.append(f"<details><summary><h2>{title}</h2></summary>")
        else:
            out.append(f"<h2>{title}</h2>")
        out += _body(section.body, images)
        if section.note is not None:
            out += _body(section.note, images)
        if section.folded:
            out.append("</details>")
        out.append("</section>")
    out.append("</body></html>")
    return "\n".join(out)
