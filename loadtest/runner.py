"""Run both arms (at once or in turn: ``loadtest.arms_mode``, loadtest/arms.py) and turn the
run directory into a summary.

With a tiered URL (the gateway routing each prompt class, docs/routing.md) a third arm,
``tiered``, runs the same plan after the two, in the same mode and alone: run beside them it
would add its requests to the servers they measure.

Locust runs in subprocesses: importing Locust monkey-patches the whole interpreter with
gevent, which must not happen inside a caller such as the local run. Each arm gets the same
plan except for its URL; a hard wall-clock timeout backs up Locust's own ``-t``. With
``workers`` N > 1 each arm is a Locust master and N workers (loadtest/launch.py,
loadtest/distributed.py); the run directory and summary have the same shape either way.

A cancel (``handle_signals``: SIGINT or SIGTERM) stops the running arms' processes within
seconds, keeps every record measured, skips the arms not started yet and still writes the
summary and report, marked ``cancelled_by``.

Run directory layout::

    run.json                      what was run (config excerpt, URLs, load shape, api, cap)
    plan_<arm>.json               the exact schedule and request parameters of each arm
    records_<arm>.jsonl           raw per-request records (warm-up included, flagged; with
                                  workers: every worker's, written by the master)
    window_<arm>.json             measured window, stop cause, /metrics before and after,
                                  workers' CPU shares and clock skew, launch and first
                                  measured request times
    gateway_tiered.json           the gateway's own cost during the tiered arm, when the
                                  caller measured it (GatewayMeter: the local run's Envoy)
    ready_<arm>.json              concurrent arms: when the arm's warm-up was done
                                  (<arm>: baseline, speculative, and tiered when driven)
    blocks/                       alternating arms: each block's plan, records, window
                                  file and Locust outputs (records_<arm>.jsonl and
                                  window_<arm>.json combine them)
    locust/<arm>_stats.csv, locust/<arm>.html, locust/<arm>.log   Locust's own outputs
    summary.json                  (loadtest.summary: the typed RunSummary, loadtest.results)
    summary.csv, report.md, report.html, *.png                   (loadtest.report)
"""

from __future__ import annotations

import json
import logging
import signal
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict
from pathlib import Path
from typing import Protocol

from experiment.config import TIERED_ARM, Arm, ArmsMode, ExperimentConfig, LoadTestConfig
from loadtest.alternating import run_alternating
from loadtest.analysis import analysis_info
from loadtest.arms import (
    check_ports_free,
    finish_arm,
    ready_file,
    run_together,
    start_arm,
    start_bound,
)
from loadtest.launch import LOCUSTFILE, stop_arm, wait_ready
from loadtest.plan import RunPlan, build_plan
from loadtest.processes import signals_raise
from loadtest.report import write_report
from loadtest.results import (
    GatewayCost,
    LoadShapeInfo,
    RequestInfo,
    RunInfo,
    RunSummary,
    SloInfo,
    TieredRouting,
)
from loadtest.summary import GATEWAY_JSON, RUN_JSON, summarize, write_summary
from loadtest.window import WindowMeta

__all__ = ["Cancelled", "NotReady", "run_arm", "run_arms", "run_comparison", "summarize"]

LOG = logging.getLogger("loadtest")


class Cancelled(Exception):
    """The run got SIGINT or SIGTERM."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class NotReady(RuntimeError):
    """A service did not report healthy within the readiness wait."""


class GatewayMeter(Protocol):
    """Measures the tiered arm's gateway itself (the local run's Envoy): ``begin`` right
    before the tiered arm, ``end`` right after it returns what the gateway cost meanwhile."""

    def begin(self) -> None: ...

    def end(self) -> GatewayCost: ...


def _cancel_on_signals() -> AbstractContextManager[None]:
    """SIGINT and SIGTERM raise Cancelled in the main thread while the run is under way;
    a second signal while the load is being stopped is ignored (the stop is bounded)."""
    return signals_raise((signal.SIGINT, signal.SIGTERM), Cancelled, once=True)


def run_arm(
    plan: RunPlan,
    run_dir: Path,
    locustfile: Path = LOCUSTFILE,
    *,
    workers: int = 1,
    local_workers: bool = True,
    master_port: int = LoadTestConfig().master_port,
    workers_connect_timeout_s: int = LoadTestConfig().workers_connect_timeout_s,
) -> WindowMeta:
    """Run one arm's Locust processes; returns its window file (loadtest.window).

    ``locustfile`` is for the bench's transport comparisons (a file that reuses this one's
    user with another HTTP client); the comparison always runs the default.
    ``local_workers``: start the ``workers`` here (False: they run elsewhere, e.g. pods,
    and connect to ``master_port``). Raises Cancelled after stopping the processes."""
    arm = start_arm(
        plan, run_dir, locustfile, workers=workers, local_workers=local_workers,
        master_port=master_port, workers_connect_timeout_s=workers_connect_timeout_s,
    )  # fmt: skip
    return run_together([arm], on_cancel=_log_cancel)[0]


def _log_cancel(cancel: BaseException) -> None:
    LOG.warning("%s: stopping the load", cancel)


def run_comparison(
    config: ExperimentConfig,
    baseline_url: str,
    speculative_url: str,
    out_dir: Path,
    *,
    max_requests: int | None = None,
    api: str = "chat",
    local: bool = False,
    publish_cloudwatch: bool = False,
    workers: int | None = None,
    local_workers: bool = True,
    wait_ready_s: float | None = None,
    handle_signals: bool = False,
    served_models: str | None = None,
    tiered_url: str | None = None,
    gateway_meter: GatewayMeter | None = None,
) -> RunSummary:
    """Run both arms with identical load (``config.loadtest``), at once or in turn
    (``loadtest.arms_mode``), write the run directory and its report.

    ``max_requests``, ``api``: as ``build_plan``. ``local``: the arms are the local run's
    CPU servers, so the analysis prices the local machine and takes the local k (the caller
    knows what it started; a URL does not: a port-forwarded trn2 service may listen on any
    port). ``workers``: Locust workers per arm (default ``loadtest.workers``); ``local_workers``:
    start them here, else wait for them to connect (cluster). ``wait_ready_s``: first wait
    at most this long for both services' /health (NotReady when one never answers).
    ``handle_signals``: SIGINT/SIGTERM cancel the run (summary.cancelled_by), for a CLI;
    a caller with its own handlers (the local run) leaves it off. ``served_models``: what
    the servers really serve when the model name requests carry is only an alias (the
    report's run header says it). ``tiered_url``: the tiered gateway, driven as a third
    arm after the two (summary.tiered compares it per class with both). ``gateway_meter``:
    measures that gateway's own cost around the tiered arm (summary.tiered.gateway)."""
    out_dir = Path(out_dir)
    workers = workers or config.loadtest.workers
    urls: dict[str, str] = {Arm.BASELINE: baseline_url, Arm.SPECULATIVE: speculative_url}
    if tiered_url is not None:
        urls[TIERED_ARM] = tiered_url
    tiered = tiered_url is not None
    plans = {
        arm: build_plan(
            config,
            arm,
            url,
            out_dir,
            max_requests=max_requests,
            api=api,
            tiered=tiered,
            max_model_len=config.local.max_model_len if local else None,
        )
        for arm, url in urls.items()
    }
    serving = [plans[Arm.BASELINE], plans[Arm.SPECULATIVE]]
    concurrency = plans[Arm.BASELINE].shape.concurrency
    if workers > concurrency:  # the config refuses this too; a caller's workers or scale may not
        raise ValueError(
            f"{workers} workers for concurrency {concurrency}: every Locust worker needs at "
            "least one user; lower loadtest.workers or raise the concurrency"
        )
    mode = config.loadtest.arms_mode
    ports = [config.loadtest.master_port_of(arm) for arm in (Arm.BASELINE, Arm.SPECULATIVE)]
    if workers > 1 and not local_workers and workers != config.loadtest.workers:
        # The worker pods (charts/loadtest_job.py) are loadtest.workers per arm: a master
        # expecting another count would wait for workers that never come.
        raise ValueError(
            f"{workers} workers per arm, but the worker pods are loadtest.workers "
            f"({config.loadtest.workers}): set loadtest.workers instead of passing workers"
        )
    if workers > 1 and mode is ArmsMode.CONCURRENT:
        check_ports_free(ports)
    if wait_ready_s:
        LOG.info("waiting up to %.0f s for the services to report healthy", wait_ready_s)
        not_ready = wait_ready([plan.base_url for plan in plans.values()], wait_ready_s)
        if not_ready:
            raise NotReady(
                f"not healthy after {wait_ready_s:g} s: {', '.join(not_ready)} (is the "
                "service still compiling? raise --wait-ready / loadtest.wait_ready_s)"
            )
    out_dir.mkdir(parents=True, exist_ok=True)  # only once the input is known to be good
    reference = plans[Arm.BASELINE]
    run_info = RunInfo(
        started_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        model=reference.params.model,
        served_models=served_models,
        urls={str(arm): plan.base_url for arm, plan in plans.items()},
        variant_labels={str(arm): plan.variant_label for arm, plan in plans.items()},
        request=RequestInfo.model_validate(asdict(reference.params)),
        load_shape=LoadShapeInfo.model_validate(asdict(reference.shape)),  # per arm
        max_duration_s=config.loadtest.max_duration_s,
        measured_requests=len(reference.measured),
        warmup_requests=len(reference.schedule) - len(reference.measured),
        seed=config.loadtest.seed,
        prompt_files=(
            [config.loadtest.traffic.file]
            if config.loadtest.traffic.file is not None
            else list(config.loadtest.prompts.files)
        ),
        slo=SloInfo.model_validate(config.loadtest.slo.model_dump()),
        # What the run set besides the configuration (loadtest_config holds that).
        overrides={"api": api, **({"max_requests": max_requests} if max_requests else {})},
        loadtest_config=config.loadtest.model_dump(mode="json"),
        analysis=analysis_info(config, local=local),
        arms_mode=mode.value,
        tiered=TieredRouting(
            class_header=config.routing.class_header,
            speculative_classes=list(config.routing.speculative_classes),
        )
        if tiered
        else None,
    )
    run_json = json.dumps(run_info.model_dump(mode="json"), indent=1)
    (out_dir / RUN_JSON).write_text(run_json)
    cancelled: Cancelled | None = None
    with _cancel_on_signals() if handle_signals else nullcontext():
        try:
            run_arms(serving, out_dir, ports, workers=workers,
                     local_workers=local_workers, config=config.loadtest)  # fmt: skip
            if tiered:
                LOG.info("tiered: the gateway, after the serving arms, in the same mode")
                if gateway_meter is not None:
                    gateway_meter.begin()
                run_arms([plans[TIERED_ARM]], out_dir, ports[:1], workers=workers,
                         local_workers=local_workers, config=config.loadtest)  # fmt: skip
                if gateway_meter is not None:
                    cost = gateway_meter.end()
                    (out_dir / GATEWAY_JSON).write_text(cost.model_dump_json(indent=1))
        except Cancelled as cancel:
            cancelled = cancel
            LOG.warning("cancelled by %s: writing the report of the partial run", cancel)
    summary = summarize(out_dir)
    if cancelled is not None:
        summary.cancelled_by = str(cancelled)
        summary.warnings.insert(0, f"cancelled by {cancelled}: a partial run")
        write_summary(summary, out_dir)
    if publish_cloudwatch:
        from loadtest.cloudwatch import publish_run  # boto3 only when publishing

        summary.cloudwatch = publish_run(config, out_dir, summary)
        write_summary(summary, out_dir)
    write_report(summary, out_dir)
    return summary


def run_arms(
    plans: list[RunPlan],
    out_dir: Path,
    ports: list[int],
    *,
    workers: int,
    local_workers: bool,
    config: LoadTestConfig,
) -> None:
    """Run the arms as ``config.arms_mode`` says. Sequential: each arm whole, in turn.
    Alternating: the arms take turns in blocks of the schedule, in ABBA order
    (loadtest/alternating.py). Concurrent: their processes launched together, their windows
    opened at one instant (loadtest/arms.py) and their waits bounded together. Raises
    Cancelled after stopping what runs."""
    if config.arms_mode is ArmsMode.ALTERNATING:
        run_alternating(
            plans, out_dir, ports[0], workers=workers, local_workers=local_workers,
            workers_connect_timeout_s=config.workers_connect_timeout_s,
            block_requests=config.alternating_block_requests, on_cancel=_log_cancel,
        )  # fmt: skip
        return
    if config.arms_mode is ArmsMode.SEQUENTIAL:
        for plan, port in zip(plans, ports, strict=True):
            run_arm(
                plan, out_dir, workers=workers, local_workers=local_workers, master_port=port,
                workers_connect_timeout_s=config.workers_connect_timeout_s,
            )  # fmt: skip
        return
    ready = [str(ready_file(out_dir, plan.arm)) for plan in plans]
    for path in ready:
        Path(path).unlink(missing_ok=True)  # a rerun into the same directory starts afresh
    latest = start_bound(plans, workers, config.workers_connect_timeout_s)
    started = []
    try:
        for plan, port in zip(plans, ports, strict=True):
            plan.ready_files, plan.start_at_wall = ready, latest
            arm = start_arm(
                plan, out_dir, workers=workers, local_workers=local_workers,
                master_port=port, workers_connect_timeout_s=config.workers_connect_timeout_s,
            )  # fmt: skip
            started.append(arm)
    except BaseException:  # a cancel between the launches: stop what already runs
        for arm in started:
            stop_arm(arm.processes)
            finish_arm(arm, None, cancelled=True)
        raise
    run_together(started, on_cancel=_log_cancel)


def exit_code(summary: RunSummary, max_failure_share: float) -> int:
    """Like Locust's --exit-code-on-error: 1 when an arm has no successful measured request
    or more than ``max_failure_share`` of its measured requests failed; 128 + signal number
    for a cancelled run (130 SIGINT, 143 SIGTERM); else 0."""
    if summary.cancelled_by:
        return 128 + signal.Signals[summary.cancelled_by].value
    for arm in summary.arms.values():
        overall = arm.overall
        if overall.succeeded == 0:
            return 1
        if overall.requests and overall.failed / overall.requests > max_failure_share:
            return 1
    return 0
