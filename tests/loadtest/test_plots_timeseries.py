"""The per-request time series figure: rows = metric, columns = prompt class, both arms,
one point per request."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest.records import RequestRecord, read_records, write_records
from loadtest.render.plots import TIMESERIES_METRICS, plot_timeseries
from loadtest.summary import summarize

WALL_ORIGIN = 1_700_000_000.0  # a wall clock far from zero: offsets must be relative


def _shift_to_wall_clock(run_dir: Path, arm: str, origin: float) -> list[RequestRecord]:
    path = run_dir / f"records_{arm}.jsonl"
    records = read_records(path)
    for record in records:
        record.wall_start = origin + record.start
    write_records(path, records)
    return records


def test_one_column_per_class_with_both_arms_in_every_panel(fake_run_dir: Path) -> None:
    # The arms' windows start at different wall-clock times: each is plotted from its own start.
    baseline = _shift_to_wall_clock(fake_run_dir, "baseline", WALL_ORIGIN)
    _shift_to_wall_clock(fake_run_dir, "speculative", WALL_ORIGIN + 120.0)
    summary = summarize(fake_run_dir)
    path = fake_run_dir / "latency_over_time.png"

    figure = plot_timeseries(summary, fake_run_dir, path)

    assert path.is_file() and path.stat().st_size > 0
    axes = figure.axes
    assert len(axes) == len(TIMESERIES_METRICS) * 2  # rows = metrics, columns = 2 classes
    titles = [axis.get_title() for axis in axes]
    for column, prompt_class in enumerate(("open_ended", "structured")):
        for row in range(len(TIMESERIES_METRICS)):
            assert titles[row * 2 + column].endswith(prompt_class)
    for axis in axes:
        # One point per request: no line joins requests of different prompts.
        assert axis.get_lines() == []
        labels = [points.get_label() for points in axis.collections]
        assert len(labels) == 2
        assert labels[0].startswith("Base (n=5)") and labels[1].startswith("SD (n=5)")

    # E2E panel of "structured" (row 0, column 1): baseline points at the measured requests'
    # starts relative to the arm's first measured start, failed requests left out.
    base_points = axes[1].collections[0].get_offsets()
    expected = sorted(
        (r.start, r.e2e_s * 1000)
        for r in baseline
        if r.prompt_class == "structured" and r.ok and r.e2e_s is not None
    )
    assert list(base_points[:, 0]) == pytest.approx([x for x, _ in expected])
    assert list(base_points[:, 1]) == pytest.approx([y for _, y in expected])
    sd_points = axes[1].collections[1].get_offsets()
    assert min(sd_points[:, 0]) == pytest.approx(0.5)  # first structured SD request

    # ITL panel of "open_ended" (row 1, column 0): the fake SD arm sends 4 tokens per 40 ms
    # chunk (10 ms per token), the baseline 1 token per 20 ms chunk.
    base_itl, sd_itl = (points.get_offsets()[:, 1] for points in axes[2].collections)
    assert list(base_itl) == pytest.approx([20.0] * 5)
    assert list(sd_itl) == pytest.approx([10.0] * 5)
