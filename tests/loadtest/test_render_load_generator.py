"""The load generator's section: Locust workers, each worker's CPU share, lost workers, the
workers' clock skew with its warning, and which clock stamped arrivals; in every format."""

from __future__ import annotations

import json

from loadtest.render.console import render_summary_table
from loadtest.render.html import render_html
from loadtest.render.load_generator import load_generator_rows
from loadtest.render.markdown import render_markdown
from loadtest.summary import summarize

DISTRIBUTED = {
    "arm": "speculative",
    "stopped_by": "worker_lost",
    "workers": 3,
    "worker_cpu": {"0": 0.42, "1": 0.91, "2": None},
    "lost_workers": [2],
    "clock_skew_ms": 12.5,
    "load_generator_cpu": 0.91,
    "arrival_stamps": {"kernel": 995, "user": 5},
}


def _summary(fake_run_dir, speculative: dict, baseline: dict | None = None):
    (fake_run_dir / "window_speculative.json").write_text(json.dumps(speculative))
    if baseline is not None:
        (fake_run_dir / "window_baseline.json").write_text(json.dumps(baseline))
    return summarize(fake_run_dir)


def _rows(summary) -> dict[str, list[str]]:
    header, rows = load_generator_rows(summary)
    assert header == ["load generator", "Base", "SD"]
    return {row[0]: row[1:] for row in rows}


def test_workers_cpu_lost_skew_and_stamps_per_arm(fake_run_dir) -> None:
    single = {"arm": "baseline", "stopped_by": "schedule_done", "load_generator_cpu": 0.3}
    rows = _rows(_summary(fake_run_dir, DISTRIBUTED, single))
    assert rows["Locust workers"] == ["1 (one process)", "3"]
    assert rows["CPU share of a core, per worker"] == ["30%", "#0 42%, #1 91% (busy), #2 n/a"]
    assert rows["lost workers"] == ["none", "#2"]
    base_skew, sd_skew = rows["wall-clock skew between workers"]
    assert base_skew == "n/a (one process)"
    assert sd_skew.startswith("12.5 ms (over 5 ms")  # the default warning bound
    assert rows["arrivals stamped by the kernel"] == ["n/a (not recorded)", "99.5% of 1000 reads"]


def test_skew_under_the_bound_is_not_flagged(fake_run_dir) -> None:
    rows = _rows(_summary(fake_run_dir, {**DISTRIBUTED, "clock_skew_ms": 0.4}))
    assert rows["wall-clock skew between workers"][1] == "0.4 ms"


def test_every_format_shows_the_section(fake_run_dir) -> None:
    summary = _summary(fake_run_dir, DISTRIBUTED)
    console = render_summary_table(summary)
    markdown = render_markdown(summary, [])
    page = render_html(summary, [])
    for text in (console, markdown, page):
        assert "Locust workers" in text
        assert "#1 91% (busy)" in text
        assert "12.5 ms (over 5 ms" in text
        assert "99.5% of 1000 reads" in text
    assert "## Load generator" in markdown
    assert "<h2>Load generator" in page
