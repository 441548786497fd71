"""The guardrails drill: the rules on real parts. Two real vLLM servers (CPU, the generated
pair), the real Envoy gateway and a real Prometheus evaluating the rendered rule file, with a
fast scrape (1 s), evaluation (2 s) and window (16 s), and no pending time.

- healthy tiered traffic (structured prompts with the structured header, open-ended ones
  without): nothing fires;
- drift: open-ended prompts sent with the structured header, so the speculative arm's
  acceptance falls (the miniature accepts ~0.69 of structured drafts and ~0.14 of open-ended
  ones, docs/records/local-tiered.json; the floor is set midway, 0.4):
  SpecDecodeAcceptanceBelowFloor fires;
- the speculative server is killed: SpecDecodeArmMetricsMissing fires.

Each fault must fire within two windows of its start. ``run_drill`` is what
``python -m bench.figures measure guardrails-drill`` records too.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from experiment import build_config
from experiment.config import Arm, ExperimentConfig
from experiment.loading import context_from_pairs
from loadtest.prompts import load_prompts
from local_run.arms import arm_servers
from local_run.gateway import local_gateway
from local_run.guardrails import AlertLog, LocalPrometheus
from local_run.models import ensure_models
from local_run.servers import LocalServers, free_port, sigterm_raises

pytestmark = [pytest.mark.integration, pytest.mark.process, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
FLOOR = 0.4  # between the miniature's open-ended (~0.14) and structured (~0.69) acceptance
WINDOW_S = 16
DRILL = [
    "guardrails.live.scrape_interval_s=1",
    "guardrails.live.evaluation_interval_s=2",
    f"guardrails.live.window_s={WINDOW_S}",
    "guardrails.live.pending_s=0",
    f"routing.acceptance_floors.structured={FLOOR}",
    "local.tiered=true",
    "local.guardrails=true",
]
MAX_TOKENS = 32
HEALTHY_S = 3 * WINDOW_S


def drill_config(tmp: Path) -> ExperimentConfig:
    ports = [free_port() for _ in range(3)]
    while len(set(ports)) < 3:
        ports = [free_port() for _ in range(3)]
    pairs = [
        *DRILL,
        f"local.baseline_port={ports[0]}",
        f"local.speculative_port={ports[1]}",
        f"local.gateway_port={ports[2]}",
        f"local.runs_dir={tmp}",
    ]
    return build_config(context_from_pairs(pairs))


@dataclass
class Traffic:
    """Requests through the gateway on a thread, one at a time: (prompt, class header)."""

    url: str
    model: str
    header: str
    sends: list[tuple[str, str | None]]
    stopped: threading.Event = field(default_factory=threading.Event)
    failed: list[str] = field(default_factory=list)
    sent: int = 0

    def _run(self) -> None:
        import urllib.request

        for prompt, value in itertools.cycle(self.sends):
            if self.stopped.is_set():
                return
            body = json.dumps(
                # As the load test sends them: every request generates MAX_TOKENS.
                {"model": self.model, "prompt": prompt, "max_tokens": MAX_TOKENS,
                 "temperature": 0, "ignore_eos": True}
            ).encode()  # fmt: skip
            headers = {"Content-Type": "application/json"}
            if value is not None:
                headers[self.header] = value
            request = urllib.request.Request(f"{self.url}/v1/completions", body, headers)
            try:
                with urllib.request.urlopen(request, timeout=120) as reply:
                    reply.read()
                self.sent += 1
            except OSError as error:
                self.failed.append(str(error))

    def __enter__(self) -> Traffic:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stopped.set()
        self.thread.join(timeout=180)


def _fire_time(watch: AlertLog, name: str, since: float, limit_s: float) -> float | None:
    """Seconds from ``since`` until ``name`` is seen firing, or None within ``limit_s``."""
    while time.monotonic() - since < limit_s:
        if any(alert.name == name for alert in watch.poll()):
            return time.monotonic() - since
        time.sleep(0.5)
    return None


@dataclass
class DrillResult:
    healthy_alerts: list[str]
    healthy_requests: int
    time_to_fire_s: dict[str, float | None]
    acceptance: dict[str, float | None]
    token_time_ratio: dict[str, float | None]
    window_s: int = WINDOW_S
    floor: float = FLOOR


def _value(prom: LocalPrometheus, expr: str) -> float | None:
    result = prom.query(expr)
    return float(result[0]["value"][1]) if result else None


@pytest.fixture(scope="module")
def drill(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DrillResult]:
    tmp = tmp_path_factory.mktemp("drill")
    config = drill_config(tmp)
    pair = ensure_models(config.local)
    servers = arm_servers(config, pair.target_dir, pair.draft_dir, tmp / "servers")
    local = config.local
    prompts = load_prompts([str(ROOT / f) for f in local.extra_prompt_files])
    by_class = {
        name: [p.text for p in prompts if p.prompt_class == name]
        for name in ("structured", "open_ended")
    }
    header = config.routing.class_header
    healthy = [(text, "structured") for text in by_class["structured"]]
    healthy += [(text, None) for text in by_class["open_ended"]]
    healthy.sort(key=lambda item: hash(item[0]) % 7)  # interleave the classes
    drifted = [(text, "structured") for text in by_class["open_ended"]]
    fired: dict[str, float | None] = {}
    acceptance: dict[str, float | None] = {}
    ratio: dict[str, float | None] = {}
    with (
        sigterm_raises(),
        LocalServers(servers, local.startup_timeout_s, print) as running,
        local_gateway(config, tmp / "gateway") as gateway,
    ):
        urls = {Arm(s.name): s.url for s in running.servers}
        model = running.servers[0].served_model_name
        with LocalPrometheus(config, urls, gateway.admin_url, tmp / "guardrails") as prom:
            watch = AlertLog(prom)
            sd = '{arm="speculative"}'
            with Traffic(gateway.url, model, header, healthy) as traffic:
                time.sleep(HEALTHY_S)
                watch.poll()
                acceptance["healthy"] = _value(prom, f"specdecode:acceptance:ratio{sd}")
                ratio["healthy"] = _value(
                    prom, "specdecode:time_per_output_token:speculative_over_baseline"
                )
            healthy_alerts = [alert.text for alert in watch.fired.values()]
            healthy_requests = traffic.sent
            assert not traffic.failed, traffic.failed
            with Traffic(gateway.url, model, header, drifted):
                start = time.monotonic()
                fired["acceptance_below_floor"] = _fire_time(
                    watch, "SpecDecodeAcceptanceBelowFloor", start, 3 * WINDOW_S
                )
                acceptance["drifted"] = _value(prom, f"specdecode:acceptance:ratio{sd}")
            speculative = running["speculative"]
            assert speculative.process is not None
            start = time.monotonic()
            os.killpg(speculative.process.pid, signal.SIGKILL)
            fired["arm_metrics_missing"] = _fire_time(
                watch, "SpecDecodeArmMetricsMissing", start, 3 * WINDOW_S
            )
    print(f"drill: healthy {healthy_alerts} over {healthy_requests} requests; fired {fired}; "
          f"acceptance {acceptance}; sd/baseline per-token time {ratio}")  # fmt: skip
    yield DrillResult(healthy_alerts, healthy_requests, fired, acceptance, ratio)


def test_a_healthy_tiered_run_fires_nothing(drill: DrillResult) -> None:
    assert drill.healthy_requests > 0
    assert drill.healthy_alerts == []
    assert drill.acceptance["healthy"] is not None and drill.acceptance["healthy"] > FLOOR


def test_a_drifted_mix_fires_the_acceptance_floor_within_two_windows(drill: DrillResult) -> None:
    seconds = drill.time_to_fire_s["acceptance_below_floor"]
    assert seconds is not None and seconds <= 2 * WINDOW_S, drill
    assert drill.acceptance["drifted"] is not None and drill.acceptance["drifted"] < FLOOR


def test_a_killed_speculative_server_fires_missing_metrics_within_two_windows(
    drill: DrillResult,
) -> None:
    seconds = drill.time_to_fire_s["arm_metrics_missing"]
    assert seconds is not None and seconds <= 2 * WINDOW_S, drill
