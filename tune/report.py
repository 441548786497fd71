"""Write a sweep's outputs: tune.json (typed), tune.md and the PNG plots."""

from __future__ import annotations

from pathlib import Path

from tune.render.markdown import render_markdown
from tune.render.plots import (
    ACCEPTANCE_PLOT,
    BREAK_EVEN_PLOT,
    SPEEDUP_PLOT,
    plot_acceptance,
    plot_break_even,
    plot_speedup_vs_k,
)
from tune.results import TuneResult

TUNE_JSON = "tune.json"
TUNE_MD = "tune.md"


def write_outputs(result: TuneResult, out_dir: Path) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / TUNE_JSON, "markdown": out_dir / TUNE_MD}
    paths["json"].write_text(result.model_dump_json(indent=1))
    plots = []
    for name, plot in (
        (SPEEDUP_PLOT, plot_speedup_vs_k),
        (ACCEPTANCE_PLOT, plot_acceptance),
        (BREAK_EVEN_PLOT, plot_break_even),
    ):
        if plot(result, out_dir / name):
            plots.append(name)
            paths[name] = out_dir / name
    paths["markdown"].write_text(render_markdown(result, plots))
    return paths


def read_result(out_dir: Path) -> TuneResult:
    return TuneResult.model_validate_json((out_dir / TUNE_JSON).read_text())
