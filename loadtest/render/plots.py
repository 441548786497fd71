"""PNG plots of a run: latency CDFs, per-class bars and per-request time series of both arms,
acceptance per position.

The CDFs and time series need every sample, so they read the run's records; the bars read
the summary.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: no display in containers or CI
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from experiment.config import Arm
from loadtest.metrics import per_token_itl_s, tpot_s
from loadtest.records import RequestRecord, read_records
from loadtest.render.plot_files import (  # noqa: F401  (re-exported for report.py)
    ACCEPTANCE_PLOT,
    CDF_PLOT,
    CLASS_PLOT,
    TIMESERIES_PLOT,
)
from loadtest.results import AcceptanceSource, RunSummary

COLORS = {Arm.BASELINE: "#1f77b4", Arm.SPECULATIVE: "#d62728"}
MARKERS = {Arm.BASELINE: "o", Arm.SPECULATIVE: "^"}  # told apart without colour too
POINT_SIZE = 14
DPI = 90


def _records(run_dir: Path, arm: Arm) -> list[RequestRecord]:
    path = run_dir / f"records_{arm.value}.jsonl"
    records = read_records(path) if path.is_file() else []
    return [r for r in records if not r.warmup and r.ok]


def _cdf(axis: Axes, values: list[float], label: str, color: str) -> None:
    if not values:
        return
    ordered = np.sort(np.asarray(values))
    axis.step(
        ordered,
        np.arange(1, ordered.size + 1) / ordered.size,
        where="post",
        label=f"{label} (n={ordered.size})",
        color=color,
    )


def plot_cdfs(summary: RunSummary, run_dir: Path, path: Path) -> None:
    panels: list[tuple[str, Callable[[RequestRecord], list[float]]]] = [
        ("TTFT (ms)", lambda r: [r.ttft_s * 1000] if r.ttft_s is not None else []),
        ("inter-token latency per token (ms)", lambda r: [v * 1000 for v in per_token_itl_s(r)]),
        ("TPOT (ms)", lambda r: [t * 1000] if (t := tpot_s(r)) is not None else []),
        ("end-to-end latency (ms)", lambda r: [(r.e2e_s or 0.0) * 1000]),
    ]
    figure, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    for axis, (title, extract) in zip(axes.flat, panels, strict=True):
        for arm in Arm:
            values = [v for r in _records(run_dir, arm) for v in extract(r)]
            _cdf(axis, values, summary.arm(arm).label, COLORS[arm])
        axis.set_title(title)
        axis.set_ylabel("fraction of samples")
        axis.set_ylim(0, 1.02)
        axis.grid(alpha=0.3)
        if axis.lines:
            axis.legend(loc="lower right", fontsize=8)
        else:
            axis.text(0.5, 0.5, "no data", ha="center", va="center", transform=axis.transAxes)
    figure.suptitle("Latency CDFs, both arms (measured requests only)")
    figure.tight_layout()
    figure.savefig(path, dpi=DPI)
    plt.close(figure)


def plot_per_class(summary: RunSummary, path: Path) -> None:
    panels = [
        ("TTFT p50 (ms)", "ttft_ms", "p50"),
        ("ITL per token mean (ms)", "itl_ms", "mean"),
        ("E2E p50 (ms)", "e2e_ms", "p50"),
        ("output tokens/s per request (mean)", "output_tokens_per_s", "mean"),
    ]
    classes = sorted({c for arm in summary.arms.values() for c in arm.by_class})
    figure, axes = plt.subplots(1, len(panels), figsize=(14, 4))
    positions = np.arange(max(len(classes), 1))
    width = 0.38
    for axis, (title, metric, stat) in zip(axes, panels, strict=True):
        for offset, arm in zip((-width / 2, width / 2), Arm, strict=True):
            block = summary.arm(arm)
            values = [
                block.by_class[c].distribution(metric).stat(stat) if c in block.by_class else None
                for c in classes
            ]
            axis.bar(
                positions + offset,
                [v or 0.0 for v in values],
                width,
                label=block.label,
                color=COLORS[arm],
            )
        axis.set_xticks(positions, classes or ["(none)"], rotation=15)
        axis.set_title(title, fontsize=10)
        axis.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=8)
    figure.suptitle("Per prompt class, both arms")
    figure.tight_layout()
    figure.savefig(path, dpi=DPI)
    plt.close(figure)


def plot_acceptance(summary: RunSummary, path: Path) -> bool:
    """The SD arm's acceptance per draft position, from its best source; with per-request
    figures, each prompt class's bars beside the whole run's. False (no file) when not
    available."""
    sd = summary.arm(Arm.SPECULATIVE)
    acceptance = sd.acceptance
    rates = acceptance.per_position_rate
    if not rates or acceptance.acceptance_rate is None:
        return False
    series: dict[str, list[float]] = {"all": rates}
    per_request = sd.request_acceptance
    if per_request is not None and acceptance.source is AcceptanceSource.PER_REQUEST:
        for name, block in per_request.by_class.items():
            if block.per_position_rate:
                missing = f", {block.missing} missing" if block.missing else ""
                series[f"{name} (n={block.with_figures}{missing})"] = block.per_position_rate
    figure, axis = plt.subplots(figsize=(7, 3.5))
    width = 0.8 / len(series)
    for offset, (label, values) in enumerate(series.items()):
        axis.bar(
            [position + offset * width for position in range(len(values))],
            values,
            width,
            label=label,
            color=COLORS[Arm.SPECULATIVE] if offset == 0 else None,
        )
    if len(series) > 1:
        axis.legend(fontsize="small")
    axis.set_xlabel("draft position")
    axis.set_ylabel("accepted / drafts")
    axis.set_ylim(0, 1.05)
    axis.set_title(
        f"Acceptance per position, {acceptance.source.value} (rate "
        f"{acceptance.acceptance_rate:.2f}, mean length "
        f"{acceptance.mean_acceptance_length or 0.0:.2f})"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=DPI)
    plt.close(figure)
    return True


def _start_offsets_s(records: list[RequestRecord]) -> list[float]:
    """Each request's start relative to the arm's measured window start, on the same clock
    as ``loadtest.metrics.window_s``: wall clock (several workers share no monotonic clock),
    falling back to ``start`` when a record has no wall-clock start."""
    wall = all(r.wall_start > 0 for r in records)
    starts = [r.wall_start if wall else r.start for r in records]
    origin = min(starts, default=0.0)
    return [s - origin for s in starts]


def _mean_itl_ms(record: RequestRecord) -> float | None:
    values = per_token_itl_s(record)
    return 1000 * sum(values) / len(values) if values else None


TimeseriesMetric = tuple[str, Callable[[RequestRecord], float | None]]
TIMESERIES_METRICS: list[TimeseriesMetric] = [
    ("E2E latency (ms)", lambda r: r.e2e_s * 1000 if r.e2e_s is not None else None),
    ("ITL per token, mean per request (ms)", _mean_itl_ms),
]


def _series(
    records: list[RequestRecord],
    prompt_class: str,
    extract: Callable[[RequestRecord], float | None],
) -> tuple[list[float], list[float]]:
    """(start offset s, value) of one class's requests in start order; offsets are taken over
    the whole arm so every class shares the arm's window origin."""
    points = [
        (offset, value)
        for offset, record in zip(_start_offsets_s(records), records, strict=True)
        if record.prompt_class == prompt_class and (value := extract(record)) is not None
    ]
    points.sort()
    return [p[0] for p in points], [p[1] for p in points]


def plot_timeseries(summary: RunSummary, run_dir: Path, path: Path) -> Figure:
    """The published figure's shape: per-request E2E and mean per-token ITL against the
    request's start in its arm's measured window, one point per request; rows = metric,
    columns = prompt class, both arms in every panel, so "SD stays below the baseline
    throughout" is visible or visibly false."""
    classes = sorted({c for arm in summary.arms.values() for c in arm.by_class}) or ["(none)"]
    records = {arm: _records(run_dir, arm) for arm in Arm}
    figure, axes = plt.subplots(
        len(TIMESERIES_METRICS),
        len(classes),
        figsize=(5.5 * len(classes), 3.5 * len(TIMESERIES_METRICS)),
        squeeze=False,
    )
    for row, (title, extract) in enumerate(TIMESERIES_METRICS):
        for column, prompt_class in enumerate(classes):
            axis = axes[row][column]
            for arm in Arm:
                xs, ys = _series(records[arm], prompt_class, extract)
                # One point per request, no line: consecutive requests carry different
                # prompts, so a line between them would zig-zag between prompts, not time.
                axis.scatter(
                    xs,
                    ys,
                    s=POINT_SIZE,
                    marker=MARKERS[arm],
                    alpha=0.8,
                    label=f"{summary.arm(arm).label} (n={len(xs)})",
                    color=COLORS[arm],
                )
            axis.set_title(f"{title}: {prompt_class}", fontsize=10)
            axis.set_xlabel("request start in the arm's window (s)")
            axis.grid(alpha=0.3)
            axis.legend(fontsize=8)
    figure.suptitle("Per request over the run, both arms (measured requests only)")
    figure.tight_layout()
    figure.savefig(path, dpi=DPI)
    plt.close(figure)
    return figure
