"""Find figures in README.md and docs/*.md that no record renders.

A figure is any number with a unit: a speedup (``3.20x``), a percentage, a time (``ms``,
``s``, ``min``, ``h``), a size or a rate (``GB``, ``MiB``, ``GB/s``, ``tokens/s``), a price
(``$0.10``, ``USD``), a ``±`` or an interval (``[2.38, 4.09]``), wherever it stands: prose,
tables and fenced code alike, with no word beside it needed. Only rendered regions and
inline code (a setting's name or a command) are skipped. Every other figure must be in
``docs/records/quoted.md`` with a reason whose kind is checked (``check_reason``): a
historical figure must appear in the commit it names, a configured value must equal the
configuration's default, a "not the default" setting must differ from today's default.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from bench.figures.records import RECORDS_DIR, ROOT
from bench.figures.regions import REGION

QUOTED = RECORDS_DIR / "quoted.md"

_NUMBER = r"[-+]?\d[\d,]*(?:\.\d+)?"
_UNITS = r"ms|s|sec|min|h|GB/s|GB|GiB|MB|MiB|KiB|tokens/s|tok/s|req/s|USD"
FIGURE = re.compile(
    rf"(?<![\w.$/])(?:"
    # a number or a range (1.18-1.55 s) with its unit
    rf"{_NUMBER}(?:-{_NUMBER[5:]})?"
    rf"(?: min(?: \d+ s)?\b|x(?!\w)| ?%| ?(?:{_UNITS})(?![\w/]))"
    r"|\$\d[\d,]*(?:\.\d+)?"  # a price
    r"|\[-?\d+(?:\.\d+)?, -?\d+(?:\.\d+)?\]"  # an interval
    r")|±"
)
CODE_SPAN = re.compile(r"`[^`\n]*`")  # a setting's value or a command, not a figure

# What a quoted figure may be, by the first word(s) of its reason.
FREE_KINDS = ("published", "goal", "arithmetic", "definition", "example", "date")
# "untriaged <commit>": typed into the document by that commit and not yet sorted into one
# of the kinds above (checked as "historical" is); a debt to clear, listed as such.
CHECKED_KINDS = ("historical", "untriaged", "config", "not the default")


@dataclass(frozen=True)
class Hit:
    file: str  # relative to the repository root
    line: int
    figure: str
    text: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.figure!r} in {self.text.strip()[:100]!r}"


@dataclass(frozen=True)
class Quoted:
    file: str
    figure: str
    source: str


def _blank(match: re.Match[str]) -> str:
    return re.sub(r"[^\n]", " ", match[0])


def find_figures(path: Path, text: str, root: Path = ROOT) -> list[Hit]:
    name = path.relative_to(root).as_posix()
    hits = []
    # Keep the line count (hits report line numbers), drop what the regions hold.
    for number, line in enumerate(REGION.sub(_blank, text).splitlines(), start=1):
        prose = CODE_SPAN.sub(_blank, line)
        hits += [Hit(name, number, m[0].lstrip("+-"), line) for m in FIGURE.finditer(prose)]
    return hits


def read_quoted(path: Path = QUOTED) -> list[Quoted]:
    """The rows of the quoted-figures table: | file | figure | source |."""
    quoted = []
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not line.lstrip().startswith("|"):
            continue
        file, figure, source = cells
        if file in ("file", "---") or set(file) <= {"-"}:
            continue
        figure = figure.strip("`")
        if not source:
            raise ValueError(f"{path.name}: {file} {figure!r} has no source")
        quoted.append(Quoted(file.strip("`"), figure, source))
    return quoted


def unrendered(hits: list[Hit], quoted: list[Quoted]) -> tuple[list[Hit], list[Quoted]]:
    """(hits no quoted row covers, quoted rows no hit uses)."""
    allowed = {(q.file, q.figure) for q in quoted}
    used = {(h.file, h.figure) for h in hits}
    return (
        [h for h in hits if (h.file, h.figure) not in allowed],
        [q for q in quoted if (q.file, q.figure) not in used],
    )


@cache
def _commit_text(commit: str, root: Path) -> str | None:
    """The commit's message and patch, None when the repository has no such commit."""
    shown = subprocess.run(
        ["git", "-C", str(root), "show", "--no-color", "--format=%B", commit],
        capture_output=True,
        text=True,
        check=False,
    )
    return shown.stdout if shown.returncode == 0 else None


def config_default(path: str) -> Any:
    """The default of a dotted configuration path (a dict's key as a path element)."""
    from experiment.config import ExperimentConfig  # the scan alone needs no config

    value: Any = ExperimentConfig()
    for part in path.split("."):
        value = value[part] if isinstance(value, dict) else getattr(value, part)
    return getattr(value, "value", value)  # an enum's value


def _number(figure: str) -> float:
    return float(re.sub(r"[^\d.]", "", figure.split(" min")[0]) or "nan")


def check_reason(q: Quoted, root: Path = ROOT) -> str | None:
    """Why the quoted row's reason is not (or no longer) true, None when it holds.

    ``historical <commit>: ...``: the figure stands in that commit's message or patch;
    ``config <path>: ...``: the figure is the path's default (as is, as a percentage of a
    fraction, or in ms of seconds); ``not the default <path>=<value>: ...``: today's default
    differs; ``published``, ``goal``, ``arithmetic``, ``definition``, ``example``, ``date``
    say what the figure is and carry no measurement of this project.
    """
    head, _, rest = q.source.partition(":")
    where = f"{q.file} {q.figure!r}"
    if not rest.strip():
        return f"{where}: the reason says nothing after {head!r}:"
    if head in FREE_KINDS:
        return None
    words = head.split()
    if words and words[0] in ("historical", "untriaged") and len(words) == 2:
        shown = _commit_text(words[1], root)
        if shown is None:
            return f"{where}: no commit {words[1]} in the repository"
        if q.figure not in shown:
            return f"{where}: commit {words[1]} does not publish {q.figure!r}"
        return None
    if head.startswith("config") and len(words) == 2:
        default = config_default(words[1])
        figure = _number(q.figure)
        scaled = [float(default), float(default) * 100, float(default) * 1000]
        if not any(abs(figure - value) < 1e-9 for value in scaled):
            return f"{where}: {words[1]}'s default is {default}, not {q.figure}"
        return None
    if head.startswith("not the default ") and "=" in head:
        setting, _, value = head.removeprefix("not the default ").partition("=")
        if str(config_default(setting.strip())) == value.strip():
            return f"{where}: {value.strip()} is the default of {setting.strip()} now"
        return None
    kinds = ", ".join((*FREE_KINDS, "historical <commit>", "untriaged <commit>", "config <path>"))
    return f"{where}: a reason starts with one of {kinds}, not the default <path>=<value>"
