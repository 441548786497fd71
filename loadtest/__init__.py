"""Locust comparative load test of the two arms (baseline vs speculative decoding).

Python API (in-process; Locust itself runs in a subprocess, so gevent never patches you)::

    from pathlib import Path
    from experiment import build_config
    from loadtest import local_scale, run_comparison, render_summary_table

    config = build_config({"loadtest.max_tokens": "128"})   # the load is configuration
    summary = run_comparison(
        local_scale(config), "http://127.0.0.1:8101", "http://127.0.0.1:8102",
        Path("runs/local"), local=True, publish_cloudwatch=False,
    )
    print(render_summary_table(summary))
    summary.speedup_of("e2e_ms", "mean")   # > 1: SD is faster; None when not computable
    summary.arm("speculative").acceptance  # typed: loadtest.results.RunSummary = summary.json

``run_comparison(config, baseline_url, speculative_url, out_dir, *, max_requests=None,
api="chat", local=False, publish_cloudwatch=False, workers=None, local_workers=True,
wait_ready_s=None, handle_signals=False) -> RunSummary`` runs both arms in turn with the
same prompts, order, seed and load shape (``config.loadtest``; each on ``workers`` Locust
workers, default ``loadtest.workers``), and writes the run directory (records,
summary.json/csv, report.md/html, PNG plots). Requests use ``config.serving.target_model``
as the model name. ``local``: the arms are the local run's CPU servers (their price and k in
the analysis). ``local_scale(config)`` is the configuration at the local run's small scale
(``config.local``). ``summarize(run_dir)`` recomputes the summary from records;
``loadtest.report.write_report(summary, run_dir)`` re-renders the report (renderers:
loadtest/render/, one module per format).

Command line: ``python -m loadtest run --baseline URL --speculative URL`` and
``python -m loadtest report RUN_DIR``; ``python -m loadtest schema`` writes the JSON
Schema of summary.json (docs/schemas/summary.schema.json); Locust directly:
``locust -f loadtest/locustfile.py``.

The names below are imported on first use: a Locust worker or ``tune`` importing
``loadtest.stats`` does not load the runner, the report renderers or matplotlib.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loadtest.plan import local_scale
    from loadtest.render.console import render_summary_table
    from loadtest.results import RunSummary
    from loadtest.runner import run_comparison
    from loadtest.summary import summarize

_EXPORTS = {
    "RunSummary": "loadtest.results",
    "local_scale": "loadtest.plan",
    "render_summary_table": "loadtest.render.console",
    "run_comparison": "loadtest.runner",
    "summarize": "loadtest.summary",
}
__all__ = ["RunSummary", "local_scale", "render_summary_table", "run_comparison", "summarize"]


def __getattr__(name: str) -> Any:
    """PEP 562: each public name is imported from its module when first asked for."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'loadtest' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
