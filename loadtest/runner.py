"""Run both arms (one Locust process each, in turn) and turn the run directory into a summary.

Locust runs in a subprocess: importing Locust monkey-patches the whole interpreter with
gevent, which must not happen inside a caller such as the local run. Each arm gets the same
plan except for its URL; a hard wall-clock timeout backs up Locust's own ``-t``.

Run directory layout::

    run.json                      what was run (config excerpt, URLs, load shape, overrides)
    plan_<arm>.json               the exact schedule and request parameters of each arm
    records_<arm>.jsonl           raw per-request records (warm-up included, flagged)
    window_<arm>.json             measured window, stop cause, /metrics before and after
    locust/<arm>_stats.csv, locust/<arm>.html, locust/<arm>.log   Locust's own outputs
    summary.json                  (loadtest.summary: the typed RunSummary, loadtest.results)
    summary.csv, report.md, report.html, *.png                   (loadtest.report)
"""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from experiment.config import Arm, ExperimentConfig
from loadtest.analysis import analysis_info
from loadtest.plan import Overrides, RunPlan, build_plan
from loadtest.report import write_report
from loadtest.results import LoadShapeInfo, RequestInfo, RunInfo, RunSummary, SloInfo
from loadtest.summary import RUN_JSON, summarize, write_summary

LOG = logging.getLogger("loadtest")
PROJECT_ROOT = Path(__file__).resolve().parent.parent
LOCUSTFILE = Path(__file__).resolve().parent / "locustfile.py"
STOP_TIMEOUT_S = 3
KILL_MARGIN_S = 60


def run_arm(plan: RunPlan, run_dir: Path, locustfile: Path = LOCUSTFILE) -> dict[str, Any]:
    """Run one arm in a Locust subprocess; returns its window metadata.

    ``locustfile`` is for the bench's transport comparisons (a file that reuses this one's
    user with another HTTP client); the comparison always runs the default."""
    locust_dir = run_dir / "locust"
    locust_dir.mkdir(parents=True, exist_ok=True)
    plan_path = run_dir / f"plan_{plan.arm}.json"
    plan_path.write_text(plan.to_json())
    users = plan.shape.concurrency
    run_time = max(1, math.ceil(plan.shape.max_duration_s))
    command = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(locustfile),
        "--headless",
        "-u",
        str(users),
        "-r",
        str(users),
        "-t",
        f"{run_time}s",
        "--stop-timeout",
        str(STOP_TIMEOUT_S),
        "--loadtest-plan",
        str(plan_path),
        "--csv",
        str(locust_dir / plan.arm),
        "--html",
        str(locust_dir / f"{plan.arm}.html"),
        "--only-summary",
        "--exit-code-on-error",
        "0",
        "--loglevel",
        "WARNING",
    ]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
    LOG.info(
        "%s: %d measured requests at concurrency %d against %s (at most %ss)",
        plan.arm,
        len(plan.measured),
        users,
        plan.base_url,
        run_time,
    )
    log_path = locust_dir / f"{plan.arm}.log"
    started = time.monotonic()
    with log_path.open("w") as log:
        try:
            result = subprocess.run(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=PROJECT_ROOT,
                timeout=run_time + STOP_TIMEOUT_S + KILL_MARGIN_S + plan.params.timeout_s,
                check=False,
            )
            returncode: int | None = result.returncode
        except subprocess.TimeoutExpired:
            returncode = None
    meta_path = Path(plan.meta_path)
    if meta_path.is_file():
        meta = json.loads(meta_path.read_text())
    else:
        meta = {
            "arm": plan.arm,
            "stopped_by": "killed" if returncode is None else "crashed",
            "metrics_before": None,
            "metrics_after": None,
        }
        meta_path.write_text(json.dumps(meta, indent=1))
    meta["locust_returncode"] = returncode
    meta["elapsed_s"] = time.monotonic() - started
    meta_path.write_text(json.dumps(meta, indent=1))
    if returncode not in (0, None) or meta["stopped_by"] in ("killed", "crashed"):
        LOG.warning(
            "%s: Locust ended with %s (%s); see %s",
            plan.arm,
            returncode,
            meta["stopped_by"],
            log_path,
        )
    return meta


def run_comparison(
    config: ExperimentConfig,
    baseline_url: str,
    speculative_url: str,
    out_dir: Path,
    *,
    overrides: Overrides | None = None,
    publish_cloudwatch: bool = False,
) -> RunSummary:
    """Run both arms with identical load, write the run directory and its report."""
    out_dir = Path(out_dir)
    overrides = overrides or Overrides()
    urls = {Arm.BASELINE: baseline_url, Arm.SPECULATIVE: speculative_url}
    plans = {arm: build_plan(config, arm, url, out_dir, overrides) for arm, url in urls.items()}
    out_dir.mkdir(parents=True, exist_ok=True)  # only once the input is known to be good
    reference = plans[Arm.BASELINE]
    run_info = RunInfo(
        started_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        model=reference.params.model,
        urls={arm.value: plan.base_url for arm, plan in plans.items()},
        variant_labels={arm.value: label for arm, label in config.loadtest.variant_labels.items()},
        request=RequestInfo.model_validate(asdict(reference.params)),
        load_shape=LoadShapeInfo.model_validate(asdict(reference.shape)),  # per arm
        max_duration_s=overrides.max_duration_s or config.loadtest.max_duration_s,
        measured_requests=len(reference.measured),
        warmup_requests=len(reference.schedule) - len(reference.measured),
        seed=config.loadtest.seed,
        prompt_files=list(overrides.prompt_files or config.loadtest.prompts.files),
        slo=SloInfo.model_validate(config.loadtest.slo.model_dump()),
        overrides={k: v for k, v in asdict(overrides).items() if v is not None},
        loadtest_config=config.loadtest.model_dump(mode="json"),
        analysis=analysis_info(config, {arm.value: plan.base_url for arm, plan in plans.items()}),
    )
    run_json = json.dumps(run_info.model_dump(mode="json"), indent=1)
    (out_dir / RUN_JSON).write_text(run_json)
    for plan in plans.values():
        run_arm(plan, out_dir)
    summary = summarize(out_dir)
    if publish_cloudwatch:
        from loadtest.cloudwatch import publish_run  # boto3 only when publishing

        summary.cloudwatch = publish_run(config, out_dir, summary)
        write_summary(summary, out_dir)
    write_report(summary, out_dir)
    return summary
