"""A check's result and the report, in the manner of ``linkerd check``: the checks grouped, one
line each marked passed, failed or skipped, what was seen under it and, for a failure, what to
change; the last line says whether everything passed."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum


class Status(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"

    @property
    def mark(self) -> str:
        return {"passed": "✓", "failed": "✗", "skipped": "-"}[self.value]


class Group(StrEnum):
    """The report's groups, in the order they are printed."""

    CLUSTER = "Cluster and nodes"
    SERVING = "Serving"
    TELEMETRY = "Telemetry"
    LOADTEST = "Load test"


@dataclass(frozen=True)
class Result:
    """One check: ``detail`` is what was seen (or, skipped, why); ``fix`` what to change."""

    group: Group
    title: str
    status: Status
    detail: str = ""
    fix: str = ""

    @classmethod
    def passed(cls, group: Group, title: str, detail: str = "") -> Result:
        return cls(group, title, Status.PASSED, detail)

    @classmethod
    def failed(cls, group: Group, title: str, detail: str, fix: str) -> Result:
        return cls(group, title, Status.FAILED, detail, fix)

    @classmethod
    def skipped(cls, group: Group, title: str, why: str) -> Result:
        return cls(group, title, Status.SKIPPED, why)


def skip_all(group: Group, titles: Iterable[str], why: str) -> list[Result]:
    """Every check of ``titles`` skipped for one reason (a group that cannot run here, or the
    checks after one whose failure makes them meaningless)."""
    return [Result.skipped(group, title, why) for title in titles]


def failed(results: Iterable[Result]) -> bool:
    return any(result.status is Status.FAILED for result in results)


def exit_code(results: Iterable[Result]) -> int:
    """0 when nothing failed (skips included), 1 otherwise."""
    return 1 if failed(results) else 0


INDENT = "    "


def _lines(result: Result) -> list[str]:
    lines = [f"{result.status.mark} {result.title}"]
    if result.detail:
        prefix = "skipped: " if result.status is Status.SKIPPED else ""
        lines += [f"{INDENT}{prefix}{line}" for line in result.detail.splitlines()]
    if result.fix:
        lines += [f"{INDENT}fix: {line}" for line in result.fix.splitlines()]
    return lines


def render(results: Sequence[Result]) -> str:
    """The report: each group that has results, its checks in order, then the verdict."""
    blocks = []
    for group in Group:
        members = [result for result in results if result.group is group]
        if not members:
            continue
        lines = [group.value, "-" * len(group.value)]
        for result in members:
            lines += _lines(result)
        blocks.append("\n".join(lines))
    counts = {status: sum(r.status is status for r in results) for status in Status}
    verdict = Status.FAILED if counts[Status.FAILED] else Status.PASSED
    summary = ", ".join(f"{counts[status]} {status.value}" for status in Status)
    blocks.append(f"Status check results are {verdict.mark} ({summary})")
    return "\n\n".join(blocks) + "\n"
