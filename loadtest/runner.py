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
    summary.json, summary.csv, report.md, report.html, *.png      (loadtest.report)
"""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from experiment.config import Arm, ExperimentConfig
from loadtest.acceptance import acceptance_from_deltas
from loadtest.lossless import lossless_check
from loadtest.metrics import BURST_GAP_S, BURST_WARNING_FRACTION, arm_metrics, compare_arms
from loadtest.plan import Overrides, RunPlan, build_plan
from loadtest.records import read_records

LOG = logging.getLogger("loadtest")
PROJECT_ROOT = Path(__file__).resolve().parent.parent
LOCUSTFILE = Path(__file__).resolve().parent / "locustfile.py"
SCHEMA_VERSION = 1
STOP_TIMEOUT_S = 3
KILL_MARGIN_S = 60
LOAD_GENERATOR_CPU_WARNING = 0.8


@dataclass
class Summary:
    """The summary of a run: ``data`` is summary.json (schema in docs/loadtest.md)."""

    data: dict[str, Any]
    run_dir: Path

    def arm(self, arm: Arm | str) -> dict[str, Any]:
        return self.data["arms"][str(arm)]

    def speedup(
        self, metric: str = "e2e_ms", stat: str = "mean", prompt_class: str | None = None
    ) -> float | None:
        block = self.data.get("speedup") or {}
        block = (
            block.get("overall")
            if prompt_class is None
            else block.get("by_class", {}).get(prompt_class)
        )
        if not block or metric not in block:
            return None
        value = block[metric]
        return value.get(stat) if isinstance(value, dict) else value


def _burst_cause(load_generator_cpu: float | None) -> str:
    if load_generator_cpu is None:
        return "server or load generator CPU-starved?"
    if load_generator_cpu > LOAD_GENERATOR_CPU_WARNING:
        return "the load generator was busy: see the CPU warning"
    # The client reads each chunk within ~1 ms at this load (bench/README.md), so an idle
    # client means the server wrote them together.
    return (
        f"the Locust process used only {load_generator_cpu:.0%} of a core, so the server "
        "sent them together"
    )


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
) -> Summary:
    """Run both arms with identical load, write the run directory and its report."""
    from loadtest.report import write_report

    out_dir = Path(out_dir)
    overrides = overrides or Overrides()
    urls = {Arm.BASELINE: baseline_url, Arm.SPECULATIVE: speculative_url}
    plans = {arm: build_plan(config, arm, url, out_dir, overrides) for arm, url in urls.items()}
    out_dir.mkdir(parents=True, exist_ok=True)  # only once the input is known to be good
    reference = plans[Arm.BASELINE]
    run_info = {
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "model": reference.params.model,
        "urls": {arm.value: plan.base_url for arm, plan in plans.items()},
        "variant_labels": {
            arm.value: label for arm, label in config.loadtest.variant_labels.items()
        },
        "request": asdict(reference.params),
        "load_shape": asdict(reference.shape),  # max_duration_s: per arm
        "max_duration_s": overrides.max_duration_s or config.loadtest.max_duration_s,
        "measured_requests": len(reference.measured),
        "warmup_requests": len(reference.schedule) - len(reference.measured),
        "seed": config.loadtest.seed,
        "prompt_files": list(overrides.prompt_files or config.loadtest.prompts.files),
        "slo": config.loadtest.slo.model_dump(),
        "overrides": {k: v for k, v in asdict(overrides).items() if v is not None},
        "loadtest_config": config.loadtest.model_dump(mode="json"),
    }
    (out_dir / "run.json").write_text(json.dumps(run_info, indent=1))
    for plan in plans.values():
        run_arm(plan, out_dir)
    summary = summarize(out_dir)
    if publish_cloudwatch:
        from loadtest.cloudwatch import publish_run

        summary.data["cloudwatch"] = publish_run(config, out_dir, summary)
        (out_dir / "summary.json").write_text(json.dumps(summary.data, indent=1))
    write_report(summary)
    return summary


def summarize(run_dir: Path) -> Summary:
    """Compute summary.json from the records and window files of a run directory."""
    run_dir = Path(run_dir)
    run_file = run_dir / "run.json"
    if not run_file.is_file():
        raise ValueError(f"{run_dir} is not a load-test run directory (no run.json)")
    run_info = json.loads(run_file.read_text())
    slo = run_info["slo"]
    arms: dict[str, Any] = {}
    records_by_arm = {}
    warnings: list[str] = []
    for arm in Arm:
        path = run_dir / f"records_{arm.value}.jsonl"
        meta_path = run_dir / f"window_{arm.value}.json"
        records = read_records(path) if path.is_file() else []
        meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
        records_by_arm[arm.value] = records
        metrics = arm_metrics(records, slo)
        acceptance = acceptance_from_deltas(meta.get("metrics_before"), meta.get("metrics_after"))
        arms[arm.value] = {
            "label": run_info["variant_labels"][arm.value],
            "url": run_info["urls"][arm.value],
            "stopped_by": meta.get("stopped_by", "not_run"),
            "unfinished_requests": meta.get("unfinished_requests", 0),
            "load_generator_cpu": meta.get("load_generator_cpu"),
            "not_started_requests": meta.get("not_started_requests", 0),
            **metrics,
            "acceptance": acceptance,
        }
        overall = metrics["overall"]
        if arms[arm.value]["stopped_by"] != "schedule_done":
            warnings.append(
                f"{arm.value}: stopped by {arms[arm.value]['stopped_by']} with "
                f"{arms[arm.value]['unfinished_requests']} requests in flight and "
                f"{arms[arm.value]['not_started_requests']} not started"
            )
        if overall["length_mismatches"]:
            warnings.append(
                f"{arm.value}: {overall['length_mismatches']} responses differ from "
                f"max_tokens={run_info['request']['max_tokens']} (ignore_eos ignored?)"
            )
        burst = overall["burst_gap_fraction"]
        cpu = meta.get("load_generator_cpu")
        if burst is not None and burst > BURST_WARNING_FRACTION:
            warnings.append(
                f"{arm.value}: {burst:.0%} of chunk gaps are under {BURST_GAP_S * 1000:.1f} ms: "
                f"chunks arrived in bursts ({_burst_cause(cpu)}); ITL and TPOT describe "
                "arrival at the client, not generation"
            )
        if cpu is not None and cpu > LOAD_GENERATOR_CPU_WARNING:
            warnings.append(
                f"{arm.value}: the Locust process used {cpu:.0%} of a core: the load generator "
                "may be the bottleneck (lower concurrency or use a bigger machine)"
            )
        if overall["inexact_token_accounting"]:
            warnings.append(
                f"{arm.value}: {overall['inexact_token_accounting']} responses had no "
                "per-chunk usage; their tokens per chunk are counted as 1 (inexact)"
            )
        if overall["failed"]:
            warnings.append(
                f"{arm.value}: {overall['failed']} failed requests {overall['failures_by_reason']}"
            )
    data = {
        "schema_version": SCHEMA_VERSION,
        "run": run_info,
        "arms": arms,
        "speedup": compare_arms(arms),
        "lossless": lossless_check(
            records_by_arm["baseline"],
            records_by_arm["speculative"],
            run_info["request"]["temperature"],
        ),
        "warnings": warnings,
    }
    (run_dir / "summary.json").write_text(json.dumps(data, indent=1))
    return Summary(data=data, run_dir=run_dir)
