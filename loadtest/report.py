"""The report of a run: summary.csv, report.md, report.html and PNG plots (both arms on each).

Everything is rendered from the typed summary (loadtest.results) and the run directory's
records, so ``python -m loadtest report RUN_DIR`` reproduces it without rerunning the load.
One module per format under loadtest/render/.
"""

from __future__ import annotations

from pathlib import Path

from loadtest.render.csv import write_csv
from loadtest.render.html import render_html
from loadtest.render.markdown import render_markdown
from loadtest.render.plots import (
    ACCEPTANCE_PLOT,
    CDF_PLOT,
    CLASS_PLOT,
    TIMESERIES_PLOT,
    plot_acceptance,
    plot_cdfs,
    plot_per_class,
    plot_timeseries,
)
from loadtest.results import RunSummary


def write_report(summary: RunSummary, run_dir: Path) -> dict[str, Path]:
    """Write summary.csv, the plots, report.md and report.html into the run directory."""
    paths = {
        "csv": run_dir / "summary.csv",
        "markdown": run_dir / "report.md",
        "html": run_dir / "report.html",
        "cdf_plot": run_dir / CDF_PLOT,
        "class_plot": run_dir / CLASS_PLOT,
        "timeseries_plot": run_dir / TIMESERIES_PLOT,
    }
    write_csv(summary, paths["csv"])
    plot_cdfs(summary, run_dir, paths["cdf_plot"])
    plot_per_class(summary, paths["class_plot"])
    plot_timeseries(summary, run_dir, paths["timeseries_plot"])
    plots = [TIMESERIES_PLOT, CLASS_PLOT, CDF_PLOT]
    if plot_acceptance(summary, run_dir / ACCEPTANCE_PLOT):
        plots.append(ACCEPTANCE_PLOT)
        paths["acceptance_plot"] = run_dir / ACCEPTANCE_PLOT
    paths["markdown"].write_text(render_markdown(summary, plots))
    paths["html"].write_text(
        render_html(summary, {name: (run_dir / name).read_bytes() for name in plots})
    )
    return paths
