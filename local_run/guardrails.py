"""The guardrail rules on the local run: a real Prometheus scraping both vLLM servers and the
local Envoy, evaluating the same rule file the cluster's workspace evaluates.

``LocalPrometheus`` writes the rule file (``guardrails.rules.rule_set`` for ``local-cpu``
servers) and the scrape configuration (``guardrails.scrape.local_scrape_config``) into its
directory, starts Debian's ``prometheus`` (2.42) on a free loopback port with its own data
directory there, waits until it is ready and always stops it. ``alerts`` and ``query`` read
its HTTP API (prometheus docs/querying/api.md: ``/api/v1/alerts``, ``/api/v1/query``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml

from experiment.config import Arm, ExperimentConfig
from guardrails.analysis import live_metrics
from guardrails.argo import AnalysisRun, Metric, Outcome
from guardrails.rules import rule_set
from guardrails.scrape import local_scrape_config
from loadtest.processes import BackgroundProcess, http_get, poll_until, start_group
from local_run.servers import POLL_INTERVAL_S, ServerError, free_port
from runtime.spec import Generation

RULE_FILE = "guardrail-rules.yml"
CONFIG_FILE = "prometheus.yml"
READY_TIMEOUT_S = 30.0


def prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found is None:
        raise ServerError(
            "local.guardrails needs Prometheus: install Debian's prometheus package "
            "(apt-get install prometheus), or set -c experiment.local.guardrails=false"
        )
    return found


def without_probe(config: ExperimentConfig) -> ExperimentConfig:
    """``config`` with the probe off: no probe runs locally (the bench measures per class
    itself), so its rules would fire as missing; the rules are otherwise the cluster's."""
    guard = config.guardrails
    probe = guard.probe.model_copy(update={"enabled": False})
    return config.model_copy(update={"guardrails": guard.model_copy(update={"probe": probe})})


def _host_port(url: str) -> str:
    return urllib.parse.urlsplit(url).netloc


@dataclass(frozen=True)
class FiredAlert:
    """One alert Prometheus reported firing, and when it first saw it active."""

    name: str
    labels: dict[str, str]
    active_at: str

    @property
    def text(self) -> str:
        shown = {k: v for k, v in sorted(self.labels.items()) if k not in ("alertname",)}
        return f"{self.name} {shown} (active since {self.active_at})"


@dataclass
class LocalPrometheus(BackgroundProcess):
    """A Prometheus process watching ``servers`` (arm -> URL) and the gateway's admin URL."""

    config: ExperimentConfig
    servers: dict[Arm, str]
    gateway_admin_url: str | None
    work_dir: Path
    host: str = "127.0.0.1"
    ready_timeout_s: float = READY_TIMEOUT_S
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def rule_path(self) -> Path:
        return self.work_dir / RULE_FILE

    @property
    def config_path(self) -> Path:
        return self.work_dir / CONFIG_FILE

    @property
    def log_path(self) -> Path:
        return self.work_dir / "prometheus.log"

    def write_files(self) -> None:
        """The rule file and the scrape configuration, as Prometheus reads them."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        rules = rule_set(without_probe(self.config), Generation.LOCAL_CPU).prometheus()
        self.rule_path.write_text(yaml.safe_dump(rules, sort_keys=False))
        scrape = local_scrape_config(
            self.config,
            servers={arm: _host_port(url) for arm, url in self.servers.items()},
            gateway=_host_port(self.gateway_admin_url) if self.gateway_admin_url else None,
            pushgateway=None,  # no probe runs locally (without_probe)
            rule_file=RULE_FILE,  # relative to the configuration file (prometheus docs)
        )
        self.config_path.write_text(yaml.safe_dump(scrape, sort_keys=False))

    def start(self) -> None:
        binary = prometheus_binary()
        self.write_files()
        self.port = free_port()
        self._log = self.log_path.open("wb")
        # prometheus --help (2.42): --config.file, --storage.tsdb.path, --web.listen-address;
        # the data directory is the run's own, so two runs never share a database.
        argv = [
            binary,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.work_dir / 'data'}",
            f"--web.listen-address={self.host}:{self.port}",
            "--log.level=warn",
        ]
        self.process = start_group(argv, self._log)
        process = self.process

        def ready() -> bool:
            if process.poll() is not None:
                raise ServerError(
                    f"guardrails: Prometheus exited with {process.returncode}; see "
                    f"{self.log_path}:\n" + self.log_path.read_text(errors="replace")[-3000:]
                )
            # prometheus docs/management_api.md: GET /-/ready answers 200 once it serves.
            return http_get(f"{self.url}/-/ready", timeout_s=2.0)[0]

        if not poll_until(ready, time.monotonic() + self.ready_timeout_s, POLL_INTERVAL_S):
            self.stop()
            raise ServerError(
                f"guardrails: Prometheus not ready after {self.ready_timeout_s:.0f}s; see "
                f"{self.log_path}"
            )
        self._settle()

    def _settle(self) -> None:
        """Until every target has been scraped, the rules see no ``up`` and the missing-data
        alerts fire by design: wait for one successful scrape of each, then one evaluation
        of the rules over it, so what fires afterwards is about the servers, not the start."""
        expected = len(self.servers) + (1 if self.gateway_admin_url else 0)

        def scraped() -> bool:
            up = self.targets_up()
            return len(up) == expected and all(up.values())

        # Prometheus scrapes a new target first at an offset within its interval (prometheus
        # scrape/target.go, Target.offset: a hash of the target), so a 30 s interval can take
        # up to 30 s before the first scrape.
        first_scrape_s = self.config.guardrails.live.scrape_interval_s
        deadline = time.monotonic() + self.ready_timeout_s + first_scrape_s
        if not poll_until(scraped, deadline, POLL_INTERVAL_S):
            up = self.targets_up()
            self.stop()
            raise ServerError(f"guardrails: Prometheus cannot scrape every target: {up}")
        time.sleep(self.config.guardrails.live.evaluation_interval_s + POLL_INTERVAL_S)

    def _api(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        ok, body = http_get(f"{self.url}/api/v1/{path}{query}")
        if not ok:
            raise ServerError(f"guardrails: Prometheus answered no 200 to /api/v1/{path}")
        reply = json.loads(body)
        if reply.get("status") != "success":
            raise ServerError(f"guardrails: /api/v1/{path} failed: {reply}")
        return reply["data"]

    def alerts(self, state: str | None = "firing") -> list[FiredAlert]:
        """The alerts Prometheus holds now (``state``: firing, pending, or None for both)."""
        found = []
        for alert in self._api("alerts")["alerts"]:
            if state is None or alert["state"] == state:
                labels = dict(alert["labels"])
                found.append(FiredAlert(labels["alertname"], labels, alert.get("activeAt", "")))
        return found

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's vector result: ``[{"metric": {...}, "value": [t, "v"]}]``."""
        data = self._api("query", query=expr)
        result: list[dict[str, Any]] = data["result"] if data["resultType"] == "vector" else []
        return result

    def targets_up(self) -> dict[str, bool]:
        """Each scrape target (its URL) and whether its last scrape succeeded."""
        active = self._api("targets", state="active")["activeTargets"]
        return {t["scrapeUrl"]: t["health"] == "up" for t in active}


class AlertLog:
    """Every alert seen firing while polled (``poll``), first time each: what a run reports."""

    def __init__(self, prometheus: LocalPrometheus) -> None:
        self.prometheus = prometheus
        self.fired: dict[tuple[str, tuple[tuple[str, str], ...]], FiredAlert] = {}

    def poll(self) -> list[FiredAlert]:
        new = []
        for alert in self.prometheus.alerts():
            key = (alert.name, tuple(sorted(alert.labels.items())))
            if key not in self.fired:
                self.fired[key] = alert
                new.append(alert)
        return new


def analysis_metrics(config: ExperimentConfig, address: str) -> list[Metric]:
    """The rollback analysis the cluster renders (guardrails.analysis ``live_metrics``: query,
    interval, initialDelay, limits, conditions), for the local run's servers and rules (no
    probe locally), querying ``address``."""
    local = without_probe(config)
    return [
        Metric.from_template(metric)
        for metric in live_metrics(local, address, Generation.LOCAL_CPU)
    ]


class LiveAnalysis:
    """The cluster's rollback analysis run in real time against the local Prometheus, with
    Argo's semantics (guardrails/argo.py): the local run decides its rollback the way the
    Rollout's background analysis does. Created when the speculative server is available
    (the Rollout's startingStep); ``at_s`` of what it returns counts from then."""

    def __init__(self, prometheus: LocalPrometheus, clock: Callable[[], float] = time.monotonic):
        self.prometheus = prometheus
        self.clock = clock
        self.started = clock()
        self.run = AnalysisRun(analysis_metrics(prometheus.config, prometheus.url), 0.0)
        self.outcome: Outcome | None = None

    def _measure(self, metric: Metric, at_s: float) -> list[float]:
        assert metric.query is not None
        return [float(row["value"][1]) for row in self.prometheus.query(metric.query)]

    def advance(self) -> Outcome:
        """Take every measurement due by now; the run's state so far."""
        if self.outcome is None or not self.outcome.phase.completed:
            self.outcome = self.run.run(self._measure, self.clock() - self.started)
        return self.outcome

    def run_for(self, seconds: float, poll_s: float = POLL_INTERVAL_S) -> Outcome:
        """Measure in real time for ``seconds`` or until the run ends (an abort)."""
        end = self.clock() + seconds
        while True:
            outcome = self.advance()
            if outcome.phase.completed or self.clock() >= end:
                return outcome
            due = self.run.next_due()
            wait = poll_s if due is None else due[0] - (self.clock() - self.started)
            time.sleep(max(0.0, min(wait, end - self.clock(), 1.0)))


def analysis_text(outcome: Outcome) -> str:
    """One line of the report: what the rollback analysis decided, and why."""
    if outcome.aborts:
        return (
            f"rollback analysis: {outcome.phase.value} at {outcome.at_s:.0f}s by "
            f"{outcome.metric} ({outcome.message}): the cluster would abort the speculative "
            "revision"
        )
    taken = sum(len(m) for m in outcome.measurements.values())
    return f"rollback analysis: {outcome.phase.value}, no abort ({taken} measurements)"
