"""Formatting of figures: one way per kind of figure, so a re-render never changes the style
(the regions and the per-record renderers share it)."""

from __future__ import annotations

from bench.figures.records import Interval


def dur(seconds: float) -> str:
    whole = round(seconds)
    return f"{whole // 60} min {whole % 60} s" if whole >= 60 else f"{whole} s"


def secs(seconds: float) -> str:
    return f"{round(seconds)} s"


def x(value: float) -> str:
    return f"{value:.2f}x"


def ci(interval: Interval) -> str:
    if interval.low is None or interval.high is None:
        return "[no interval]"
    return f"[{interval.low:.2f}, {interval.high:.2f}]"


def pct(share: float) -> str:
    return f"{share * 100:.1f}%"


def ms(value: float) -> str:
    return f"{value:.2f} ms"
