"""Measured figures of README.md and docs/*.md, rendered from checked-in records.

``python -m bench.figures render`` rewrites every marked region and docs/records/README.md;
``check`` fails when a document differs from a fresh render; ``measure NAME`` runs what a
record measures and rewrites it (then renders). See docs/records/README.md.
"""

from __future__ import annotations

from pathlib import Path

from bench.figures.records import (
    BENCH_RESULT_FILES,
    RECORDS_DIR,
    ROOT,
    FigureRecord,
    TestSuiteFigures,
    load_records,
)
from bench.figures.regions import PLOTS, Records, render_document, rendered_documents

INDEX = RECORDS_DIR / "README.md"


def render_index(records: Records) -> str:
    lines = [
        "# Figure records",
        "",
        "Every measured figure of the project's own runs in README.md and docs/*.md is rendered",
        "from one of these records by `python -m bench.figures render` (between",
        "`<!-- figures:NAME -->` markers); `tests/bench/test_figures.py` fails when a document",
        "differs from a fresh render, and when a measured-looking figure stands outside a",
        "rendered region without a source in [quoted.md](quoted.md). Re-measuring is one command",
        "per record (it runs the measurement, rewrites the record and renders the documents).",
        "This page is rendered too.",
        "",
        "| record | date | machine | command measured | provenance | re-measure |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, record in sorted(records.items()):
        bench = BENCH_RESULT_FILES.get(name)
        file = f"../../{bench[0]}" if bench else f"{name}.json"
        provenance = record.provenance.text()
        if record.provenance.note:
            provenance += f": {record.provenance.note}"
        lines.append(
            f"| [{name}]({file}) | {record.date} | {record.machine.text()} | "
            f"`{record.command}` | {provenance} | `{record.remeasure}` |"
        )
    for name, record in sorted(records.items()):
        lines += _slowest_tests(name, record)
    return "\n".join(lines) + "\n"


def _slowest_tests(name: str, record: FigureRecord) -> list[str]:
    """A test-suite record's slowest tests (pytest's JUnit XML), where it kept them."""
    suite = record.figures
    if not isinstance(suite, TestSuiteFigures) or not suite.slowest:
        return []
    taken = sum(test.seconds for test in suite.slowest)
    whole = suite.tests_s
    of_all = f" ({taken / whole:.0%} of the {whole:.0f} s all its tests took)" if whole else ""
    return [
        "",
        f"## The slowest tests of {name}",
        "",
        f"The {len(suite.slowest)} slowest tests of [{name}]({name}.json) ({record.date}, "
        f"{record.provenance.text()}) took {taken:.0f} s{of_all}, each with its setup and "
        f"teardown; the whole command took {suite.wall_s:.0f} s.",
        "",
        "| test | seconds |",
        "| --- | ---: |",
        *(f"| `{test.test}` | {test.seconds:.1f} |" for test in suite.slowest),
    ]


def rendered(root: Path = ROOT, records: Records | None = None) -> dict[Path, str]:
    """Every rendered file and its fresh text (only the files that have regions, and the
    index)."""
    records = load_records() if records is None else records
    out: dict[Path, str] = {}
    for path in rendered_documents(root):
        text = path.read_text()
        fresh = render_document(path, text, records)
        if fresh != text or "<!-- figures:" in text:
            out[path] = fresh
    out[INDEX] = render_index(records)
    for name, plot in PLOTS.items():  # plots drawn from the records, as SVG text
        out[root / name] = plot(records)
    return out


def stale(root: Path = ROOT) -> list[Path]:
    """Files whose text differs from a fresh render."""
    return [
        path
        for path, text in rendered(root).items()
        if not path.is_file() or path.read_text() != text
    ]


__all__ = ["FigureRecord", "load_records", "render_index", "rendered", "stale"]
