"""The embedded default, end to end: models -> both servers -> comparison -> report -> stop.

``run_local`` generates or reuses the tiny model pair, starts the baseline and speculative
vLLM servers (commands rendered by ``runtime/``), runs ``loadtest.run_comparison`` at the
local scale, prints the summary table and the headline (acceptance rate, speedups,
lossless match rate), and writes everything to ``config.local.runs_dir/<timestamp>/``.
With ``local.tiered`` the Envoy gateway starts in front of both servers and the comparison
drives it as a third arm, ``tiered``, after the two (loadtest/runner.py). With
``local.guardrails`` a real Prometheus scrapes both servers and the gateway and evaluates the
guardrail rules during the run (local_run/guardrails.py); the report lists what fired.
The servers are stopped on every path out, including Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from experiment.config import Arm, ExperimentConfig
from experiment.loading import PROJECT_ROOT
from loadtest.acceptance import measured_class_acceptance
from loadtest.expected import calibrate_suite, run_expectation
from loadtest.render.headline import (
    CLASS_PER_REQUEST,
    CLASS_PROBE,
    Headline,
    headline,
    headline_text,
)
from loadtest.render.tiered import tiered_lines
from loadtest.results import ClassAcceptance, RequestAcceptance, RunSummary
from local_run.arms import arm_servers, write_commands
from local_run.gateway import EnvoyGateway, EnvoyMeter, local_gateway
from local_run.guardrails import AlertLog, LiveAnalysis, LocalPrometheus, analysis_text
from local_run.machine import Machine
from local_run.models import ModelPair, describe_pair, ensure_models
from local_run.progress import Log
from local_run.servers import LocalServers, ServerError, sigterm_raises
from local_run.smoke import acceptance_by_class, request_params, smoke_check, smoke_problems

SERVER_LOGS = "servers"
LOCAL_RUN_JSON = "local_run.json"
LOCAL_RUN_MD = "local_run.md"


@dataclass
class LocalRunResult:
    run_dir: Path
    ok: bool
    headline: Headline | None = None
    problems: list[str] = field(default_factory=list)
    gateway_url: str | None = None  # the tiered gateway's, when local.tiered
    alerts: list[str] | None = None  # what fired during the run, when local.guardrails


def runs_root(config: ExperimentConfig) -> Path:
    path = Path(config.local.runs_dir)
    return path if path.is_absolute() else PROJECT_ROOT / path


def new_run_dir(config: ExperimentConfig) -> Path:
    root = runs_root(config)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_dir = root / stamp
    suffix = 1
    while run_dir.exists():  # two runs within a second
        run_dir = root / f"{stamp}-{suffix}"
        suffix += 1
    run_dir.mkdir(parents=True)
    return run_dir


def _problems(summary: RunSummary) -> list[str]:
    problems = []
    for name, arm in summary.arms.items():  # the tiered arm too, when driven
        overall = arm.overall
        if overall.failed or overall.succeeded != overall.requests:
            problems.append(
                f"{name}: {overall.succeeded} of {overall.requests} requests "
                f"succeeded ({overall.failures_by_reason})"
            )
    checks = [("lossless", summary.lossless)]
    if summary.tiered is not None:
        checks.append(("tiered lossless", summary.tiered.lossless))
    for label, lossless in checks:
        if lossless.applicable and lossless.exact_matches != lossless.prompts_compared:
            # The local CPU servers are bit-exact: 100% exact match is the local bar.
            problems.append(
                f"{label}: {lossless.exact_matches} of {lossless.prompts_compared} prompts "
                "exact; the local run is bit-exact and must match every prompt"
            )
    return problems


def _write_local_report(
    run_dir: Path,
    pair: ModelPair,
    served: str,
    servers: LocalServers,
    timings: dict[str, float],
    host: Machine,
    numbers: Headline,
    table: str,
    problems: list[str],
    gateway_url: str | None = None,
    tiered: list[str] | None = None,
    alerts: list[str] | None = None,
) -> None:
    data = {
        "headline": numbers.model_dump(mode="json"),
        "gateway_url": gateway_url,
        **({"tiered": tiered} if tiered else {}),
        **({"guardrail_alerts": alerts} if alerts is not None else {}),
        "problems": problems,
        "timings_s": {k: round(v, 1) for k, v in timings.items()},
        "server_ready_after_s": {s.name: s.ready_after_s for s in servers.servers},
        "machine": asdict(host),
        "models": {"path": str(pair.root), **pair.manifest},
    }
    (run_dir / LOCAL_RUN_JSON).write_text(json.dumps(data, indent=1))
    evaluation = pair.manifest.get("evaluation", {})
    offline = ", ".join(
        f"{kind} {block['greedy_agreement']:.0%}" for kind, block in sorted(evaluation.items())
    )
    text = [
        "# Local run: baseline vs speculative decoding on vLLM (CPU)",
        "",
        f"Served: {served} The numbers show the shape of the effect (where "
        "speculation wins and where it does not); they say nothing about trn2 latencies.",
        "",
        f"Machine: {host.text()} (the miniature's figures move with the machine: "
        "docs/local-run.md).",
        "",
        "## Headline",
        "",
        *(f"- {line.strip()}" for line in headline_text(numbers).splitlines()),
        *(f"- {line}" for line in tiered or []),
        "",
        "## Summary",
        "",
        "```",
        table,
        "```",
        "",
        "Full load-test report: [report.md](report.md). Server logs: `servers/`. Exact "
        "commands: `commands.json`.",
        "",
        "## Models and timings",
        "",
        f"- models: `{pair.root}`; parameters {pair.manifest.get('parameter_counts')}; offline "
        f"draft/target greedy agreement {offline}",
        "- timings (s): " + ", ".join(f"{k} {v:.0f}" for k, v in timings.items()),
    ]
    if alerts is not None:
        text += [
            "",
            "## Guardrail alerts",
            "",
            "A local Prometheus evaluated the guardrail rules (guardrails/rules.py) during the "
            "load test; its rule file and configuration are in `guardrails/`.",
            "",
            *([f"- {alert}" for alert in alerts] or ["- none fired"]),
        ]
    if problems:
        text += ["", "## Problems", "", *(f"- {p}" for p in problems)]
    (run_dir / LOCAL_RUN_MD).write_text("\n".join(text) + "\n")


class _Watching:
    """Polls the alerts on a thread while the load test runs, so an alert that fires and
    resolves between two looks is still seen (every evaluation interval)."""

    def __init__(self, watch: AlertLog, every_s: float, analysis: LiveAnalysis | None) -> None:
        self.watch = watch
        self.every_s = every_s
        self.analysis = analysis
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="guardrails", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped.wait(self.every_s):
            with contextlib.suppress(ServerError):
                self.watch.poll()
                if self.analysis is not None:
                    self.analysis.advance()

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join()


def _start_watching(watch: AlertLog | None, analysis: LiveAnalysis | None) -> _Watching | None:
    if watch is None:
        return None
    live = watch.prometheus.config.guardrails.live
    # Polled at least every second: the analysis measures when each metric is due.
    return _Watching(watch, min(1.0, live.evaluation_interval_s), analysis)


def _watch_until_evaluated(
    config: ExperimentConfig, watch: AlertLog, watching: _Watching | None
) -> None:
    """After the load test: one more evaluation, so the last window is judged too."""
    if watching is not None:
        watching.stop()
    time.sleep(config.guardrails.live.evaluation_interval_s)
    watch.poll()
    if watching is not None and watching.analysis is not None:
        watching.analysis.advance()


def _meter(
    config: ExperimentConfig, gateway: EnvoyGateway | None, servers: LocalServers
) -> EnvoyMeter | None:
    """The gateway's own cost around the tiered arm, with the cores each process may use."""
    if gateway is None:
        return None
    cores = {
        s.name: sorted(os.sched_getaffinity(s.process.pid))
        for s in servers.servers
        if s.process is not None
    }
    return EnvoyMeter(gateway, cores, sorted(os.sched_getaffinity(0)), config.local.server_binding)


def run_local(
    config: ExperimentConfig, *, smoke_only: bool = False, log: Log = print
) -> LocalRunResult:
    from loadtest import local_scale, render_summary_table, run_comparison
    from local_run.traffic import import_trace, replay_config

    started = time.monotonic()
    timings: dict[str, float] = {}
    host = Machine.at_start()
    # Both models first, on every core, then both servers at once: generation on two
    # threads beside a starting server would make the threads wait on each other.
    pair = ensure_models(config.local, log=log)
    timings["models"] = time.monotonic() - started
    run_dir = new_run_dir(config)
    log(f"local run: writing to {run_dir}")
    servers = arm_servers(config, pair.target_dir, pair.draft_dir, run_dir / SERVER_LOGS)
    write_commands(servers, run_dir / "commands.json")
    # local.tiered: Envoy in front of both servers, rendered from `routing`; the comparison
    # drives it as the tiered arm.
    tiered: contextlib.AbstractContextManager[EnvoyGateway | None] = (
        local_gateway(config, run_dir / SERVER_LOGS / "gateway")
        if config.local.tiered
        else contextlib.nullcontext()
    )
    watch: AlertLog | None = None
    analysis: LiveAnalysis | None = None
    with contextlib.ExitStack() as stack:
        stack.enter_context(sigterm_raises())
        running = stack.enter_context(LocalServers(servers, config.local.startup_timeout_s, log))
        gateway = stack.enter_context(tiered)
        timings["server_startup"] = running.startup_seconds or 0.0
        urls = {Arm(s.name): s.url for s in running.servers}
        gateway_url = gateway.url if gateway is not None else None
        if gateway_url:
            log(f"local run: tiered gateway (Envoy) at {gateway_url}")
        if config.local.guardrails and gateway is not None:  # the config requires tiered
            prometheus = stack.enter_context(
                LocalPrometheus(config, urls, gateway.admin_url, run_dir / "guardrails")
            )
            watch = AlertLog(prometheus)
            # Both servers are available: the Rollout's background analysis would start now.
            analysis = LiveAnalysis(prometheus)
            log(f"local run: Prometheus evaluating the guardrail rules at {prometheus.url}")
        if smoke_only:
            checks = smoke_check(config, urls)
            result = {arm.value: check.to_dict() for arm, check in checks.items()}
            (run_dir / "smoke.json").write_text(json.dumps(result, indent=1))
            problems = smoke_problems(checks)
            for arm, check in checks.items():
                log(
                    f"smoke {arm.value}: {check.record.output_tokens} tokens in "
                    f"{len(check.record.chunk_tokens)} chunks: {check.record.text[:80]!r}"
                )
            for problem in problems:
                log(f"smoke problem: {problem}")
            return LocalRunResult(run_dir, not problems, problems=problems, gateway_url=gateway_url)
        served = describe_pair(pair)  # the headers of report.md and local_run.md
        # Before the load, from nothing it measures: each class's step costs on each arm
        # (loadtest.expected.calibrate); a replayed trace's classes are not the suite's.
        calibrated = time.monotonic()
        calibration = (
            {}
            if config.local.traffic
            else calibrate_suite(config.loadtest.prompts.files, urls, request_params(config))
        )
        timings["calibration"] = time.monotonic() - calibrated
        loadtest_started = time.monotonic()
        watching = _start_watching(watch, analysis)
        load = local_scale(config)
        if config.local.traffic:  # the generated mixed trace instead of the prompt suite
            traffic = import_trace(config, run_dir, pair.target_dir)
            log(f"local run: replaying the generated trace {traffic}")
            load = replay_config(load, traffic)
        summary = run_comparison(
            load,
            urls[Arm.BASELINE],
            urls[Arm.SPECULATIVE],
            run_dir,
            local=True,
            served_models=served,
            tiered_url=gateway_url,
            gateway_meter=_meter(config, gateway, running),
        )
        timings["load_test"] = time.monotonic() - loadtest_started
        if watch is not None:
            _watch_until_evaluated(config, watch, watching)
        # Per class from the measured requests' own figures (vLLM returns them); else probed
        # one class at a time outside the window (the counters cannot tell classes apart).
        probe_started = time.monotonic()
        measured = measured_class_acceptance(summary)
        per_class: Mapping[str, ClassAcceptance | RequestAcceptance]
        if measured is not None:
            per_class, per_class_source = measured, CLASS_PER_REQUEST
        else:
            per_class = acceptance_by_class(config, urls[Arm.SPECULATIVE])
            per_class_source = CLASS_PROBE
        timings["acceptance_by_class"] = time.monotonic() - probe_started
    timings["total"] = time.monotonic() - started
    host.finish()
    table = render_summary_table(summary)
    # A replayed trace's acceptance differs from the prompt suite's that the probe measured:
    # no prediction from it.
    expected = (
        [] if config.local.traffic else run_expectation(run_dir, summary, per_class, calibration)
    )
    rates = {name: block.acceptance_rate for name, block in per_class.items()}
    numbers = headline(summary, rates, expected, acceptance_by_class_source=per_class_source)
    problems = _problems(summary)
    tiered_checks = tiered_lines(summary)
    alerts = None if watch is None else [alert.text for alert in watch.fired.values()]
    if alerts is not None and analysis is not None:
        alerts.append(analysis_text(analysis.advance()))
    _write_local_report(
        run_dir, pair, served, running, timings, host, numbers, table, problems, gateway_url,
        tiered_checks, alerts,
    )  # fmt: skip
    log("")
    log(table)
    log("")
    log(headline_text(numbers))
    for line in tiered_checks:
        log(line)
    for warning in summary.warnings:
        log(f"warning: {warning}")
    for alert in alerts or []:
        log(f"guardrail alert: {alert}")
    for problem in problems:
        log(f"problem: {problem}")
    log(
        f"report: {run_dir / LOCAL_RUN_MD} and {run_dir / 'report.md'} "
        f"({timings['total']:.0f}s in total)"
    )
    return LocalRunResult(run_dir, not problems, numbers, problems, gateway_url, alerts)
