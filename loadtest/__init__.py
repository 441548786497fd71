"""Locust comparative load test of the two arms (baseline vs speculative decoding).

Python API (in-process; Locust itself runs in a subprocess, so gevent never patches you)::

    from pathlib import Path
    from experiment import build_config
    from loadtest import Overrides, run_comparison, render_summary_table

    config = build_config()
    summary = run_comparison(
        config, "http://127.0.0.1:8101", "http://127.0.0.1:8102", Path("runs/local"),
        overrides=Overrides.local_scale(config),
        publish_cloudwatch=False,
    )
    print(render_summary_table(summary))
    summary.speedup_of("e2e_ms", "mean")   # > 1: SD is faster; None when not computable
    summary.arm("speculative").acceptance  # typed: loadtest.results.RunSummary = summary.json

``run_comparison(config, baseline_url, speculative_url, out_dir, *, overrides=None,
publish_cloudwatch=False, workers=None, local_workers=True, wait_ready_s=None,
handle_signals=False) -> RunSummary`` runs both arms in turn with the same prompts, order,
seed and load shape (each on ``workers`` Locust workers, default ``loadtest.workers``), and
writes the run directory (records, summary.json/csv, report.md/html, PNG plots). Requests
use ``config.serving.target_model`` as the model name. ``Overrides``
replaces ``config.loadtest`` values for one run (max_tokens, concurrency,
requests_per_prompt, request_rate, warmup_requests, max_duration_s, max_requests,
request_timeout_s, prompt_files, api). ``summarize(run_dir)`` recomputes the summary from
records; ``loadtest.report.write_report(summary, run_dir)`` re-renders the report
(renderers: loadtest/render/, one module per format).

Command line: ``python -m loadtest run --baseline URL --speculative URL`` and
``python -m loadtest report RUN_DIR``; ``python -m loadtest schema`` writes the JSON
Schema of summary.json (docs/schemas/summary.schema.json); Locust directly:
``locust -f loadtest/locustfile.py``.
"""

from loadtest.plan import Overrides
from loadtest.render.console import render_summary_table
from loadtest.results import RunSummary
from loadtest.runner import run_comparison
from loadtest.summary import summarize

__all__ = ["Overrides", "RunSummary", "render_summary_table", "run_comparison", "summarize"]
