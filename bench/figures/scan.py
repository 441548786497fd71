"""Find measured-looking figures in README.md and docs/*.md that no record renders.

What looks measured: a speedup (``3.20x``), a duration in minutes (``7 min 0 s``), a ``±``,
an interval (``[2.38, 4.09]``) anywhere; a time or a percentage on a line that says
"measured", "took", "median" or names a percentile. Fenced code, inline code and rendered
regions are not scanned. Every other hit must be in ``docs/records/quoted.md``, each figure
with its source: a figure quoted from a publication, a goal, or a historical measurement
quoted from the commit that published it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from bench.figures.records import RECORDS_DIR, ROOT
from bench.figures.regions import REGION

QUOTED = RECORDS_DIR / "quoted.md"

ALWAYS = re.compile(
    r"(?<![\w.])\d+(?:\.\d+)?x(?!\w)"  # a speedup
    r"|\b\d+ min(?: \d+ s)?\b"  # a duration in minutes
    r"|±"
    r"|\[-?\d+(?:\.\d+)?, -?\d+(?:\.\d+)?\]"  # an interval
)
NEAR_MEASURED = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?: ?%| ms\b| s\b)")
# words that say a figure beside them was timed or counted on a run
MEASURED = re.compile(r"measur|\btook\b|\btakes?\b|\bmedian\b|\bp50\b|\bp90\b|\bp99\b", re.I)
FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"`[^`]*`")  # a setting's value or a command, not a figure


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


def _blank_regions(text: str) -> str:
    # Keep the line count (hits report line numbers), drop what the regions hold.
    return REGION.sub(lambda m: re.sub(r"[^\n]", " ", m[0]), text)


def find_figures(path: Path, text: str, root: Path = ROOT) -> list[Hit]:
    name = path.relative_to(root).as_posix()
    hits = []
    in_fence = False
    for number, line in enumerate(_blank_regions(text).splitlines(), start=1):
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        prose = CODE_SPAN.sub(lambda m: " " * len(m[0]), line)
        found = [m[0] for m in ALWAYS.finditer(prose)]
        if MEASURED.search(prose):
            rest = ALWAYS.sub(lambda m: " " * len(m[0]), prose)  # "14 s" of "11 min 14 s"
            found += [m[0].lstrip("+-") for m in NEAR_MEASURED.finditer(rest)]
        hits += [Hit(name, number, figure, line) for figure in found]
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
