"""``python -m bench.guardrails_drill``: the guardrail rules on real parts, faults included.

Two real vLLM servers (CPU, the generated pair), the real Envoy gateway of the tiered local
run and a real Prometheus evaluating the rendered rule file (local_run/guardrails.py), with a
fast scrape (1 s), evaluation (2 s), window (16 s) and pending time (4 s). In order:

- healthy tiered traffic (structured prompts with the structured class header, open-ended
  ones without), ``--healthy-runs`` times one after the other: which alerts fire (none
  expected);
- the load sweep: the same healthy mix at each ``--concurrency`` (that many requests in
  flight) and the speculative / baseline time per output token over the window. Under tiered
  routing the arms serve different classes, so this ratio describes the load, it judges
  nothing: the like-with-like check (SpecDecodeSlowerThanBaseline, on the probe's per-class
  pairs) needs the probe, which the local run has not, so it never fires here;
- drift: open-ended prompts sent with the structured header, so the speculative arm's
  acceptance falls below the structured floor (``FLOOR``, between the miniature's open-ended
  and structured acceptance): seconds until SpecDecodeAcceptanceBelowFloor fires;
- the speculative server killed (its process group, no grace): seconds until
  SpecDecodeArmMetricsMissing fires;
- then started again, late, under traffic (a new revision): the analysis started once it is
  available must not abort.

Each fault is also judged by the cluster's rollback analysis itself (local_run/guardrails.py
``LiveAnalysis``: the rendered AnalysisTemplate's queries against the local Prometheus with
Argo's semantics, guardrails/argo.py), started before the fault and past its first
measurement: seconds until it aborts. Healthy runs report what it decided (no abort).

Every request is sent as the load test sends it (temperature 0, ``ignore_eos``, MAX_TOKENS).
Writes JSON (``--out``): tests/local_run/test_guardrails_drill.py runs the same drill once
and ``python -m bench.figures measure guardrails-drill`` records it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from experiment import build_config
from experiment.config import Arm, ExperimentConfig
from experiment.loading import PROJECT_ROOT, context_from_pairs
from guardrails.analysis import first_measurement_s
from guardrails.argo import Outcome
from loadtest.client import RequestParams, stream_request
from loadtest.processes import stop_groups
from loadtest.prompts import load_prompts
from loadtest.records import RequestRecord
from loadtest.transport import StreamSession
from local_run.arms import arm_servers
from local_run.gateway import local_gateway
from local_run.guardrails import AlertLog, LiveAnalysis, LocalPrometheus, analysis_text
from local_run.machine import Machine
from local_run.models import ensure_models
from local_run.servers import LocalServers, free_port, sigterm_raises

FLOOR = 0.4  # between the miniature's open-ended (~0.14) and structured (~0.69) acceptance
WINDOW_S = 16
DRILL = [
    "guardrails.live.scrape_interval_s=1",
    "guardrails.live.evaluation_interval_s=2",
    f"guardrails.live.window_s={WINDOW_S}",
    # Two evaluations: a scrape that times out under load (1 s scrapes on 2 cores) is a blip
    # the alert must hold through, as the cluster's pending_s does, not a fault.
    "guardrails.live.pending_s=4",
    f"routing.acceptance_floors.structured={FLOOR}",
    "local.tiered=true",
    "local.guardrails=true",
]
MAX_TOKENS = 32
HEALTHY_S = 3 * WINDOW_S
LATE_START_S = 3 * WINDOW_S  # the restarted speculative server, analysed from its start
SWEEP_S = 1.5 * WINDOW_S
REQUEST_TIMEOUT_S = 120
SD = '{arm="speculative"}'
RATIO = "specdecode:time_per_output_token:speculative_over_baseline"


def drill_config(runs_dir: Path) -> ExperimentConfig:
    ports = [free_port() for _ in range(3)]
    while len(set(ports)) < 3:
        ports = [free_port() for _ in range(3)]
    pairs = [
        *DRILL,
        f"local.baseline_port={ports[0]}",
        f"local.speculative_port={ports[1]}",
        f"local.gateway_port={ports[2]}",
        f"local.runs_dir={runs_dir}",
    ]
    return build_config(context_from_pairs(pairs))


Send = tuple[str, str | None]  # a prompt and its class header (None: no header)


@dataclass
class Traffic:
    """``streams`` threads sending (prompt, class header) pairs through the gateway in turn,
    one request at a time each, until stopped."""

    url: str
    model: str
    header: str
    sends: list[Send]
    streams: int = 1
    stopped: threading.Event = field(default_factory=threading.Event)
    failed: list[str] = field(default_factory=list)
    sent: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _send(self, session: StreamSession, prompt: str, value: str | None) -> None:
        """One request as the load test sends it (loadtest.client: streaming, temperature 0,
        ignore_eos), its class in the class header or none; a failure is counted, never
        raised."""
        params = RequestParams(
            model=self.model,
            max_tokens=MAX_TOKENS,
            api="completions",
            timeout_s=REQUEST_TIMEOUT_S,
            class_header=self.header,
        )
        record = RequestRecord(arm="drill", index=0, prompt_id="", prompt_class=value or "")
        stream_request(session, self.url, prompt, params, record)
        with self._lock:
            if record.error:
                self.failed.append(record.error)
            else:
                self.sent += 1

    def _run(self, offset: int) -> None:
        session = StreamSession()
        index = offset
        try:
            while not self.stopped.is_set():
                # Read each time: a phase may switch the mix under running streams.
                prompt, value = self.sends[index % len(self.sends)]
                index += 1
                self._send(session, prompt, value)
        finally:
            session.close()

    def __enter__(self) -> Traffic:
        self.threads = [
            threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(self.streams)
        ]
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stopped.set()
        for thread in self.threads:
            thread.join(timeout=REQUEST_TIMEOUT_S + 10)


def _fire_time(watch: AlertLog, name: str, since: float, limit_s: float) -> float | None:
    """Seconds from ``since`` until ``name`` is seen firing, or None within ``limit_s``."""
    while time.monotonic() - since < limit_s:
        if any(alert.name == name for alert in watch.poll()):
            return time.monotonic() - since
        time.sleep(0.5)
    return None


def _abort_time(analysis: LiveAnalysis, since: float, limit_s: float) -> float | None:
    """Seconds from ``since`` until the analysis aborts, or None within ``limit_s``."""
    outcome = analysis.run_for(limit_s - (time.monotonic() - since))
    return time.monotonic() - since if outcome.aborts else None


def _armed(prom: LocalPrometheus) -> LiveAnalysis:
    """An analysis started now, past its first measurement before it returns: the fault that
    follows is measured from a running analysis, as on a canary that lives. The drill arms one
    right after its drifted mix, so that measurement must see only what came after the start
    (guardrails/analysis.py first_measurement_s)."""
    analysis = LiveAnalysis(prom)
    outcome: Outcome = analysis.run_for(first_measurement_s(prom.config) + 1)
    assert not outcome.aborts, f"the analysis aborted on healthy traffic: {outcome}"
    return analysis


def _value(prom: LocalPrometheus, expr: str) -> float | None:
    result = prom.query(expr)
    return float(result[0]["value"][1]) if result else None


@dataclass
class SweepPoint:
    streams: int
    requests: int
    sd_over_baseline_time_per_token: float | None
    slower_than_baseline_fired: bool


@dataclass
class DrillResult:
    window_s: int
    evaluation_interval_s: int
    floor: float
    healthy_alerts: list[list[str]]  # per healthy run, the alerts that fired
    healthy_requests: list[int]
    failed_requests: int
    acceptance_healthy: float | None
    acceptance_drifted: float | None
    sd_over_baseline_healthy: float | None
    sweep: list[SweepPoint]
    time_to_fire_s: dict[str, float | None]  # fault -> seconds from its start
    # Through the cluster's rollback analysis (local_run/guardrails.py LiveAnalysis, Argo's
    # semantics): fault -> seconds from its start to the abort (None: none within 3 windows).
    time_to_abort_s: dict[str, float | None]
    healthy_analysis: list[str]  # per healthy run, what the analysis decided
    late_start_analysis: str  # the speculative server restarted late: what it decided
    series_scraped: dict[str, int]  # job -> series the local Prometheus holds at the end
    machine: dict[str, object]


def run_drill(
    work_dir: Path,
    healthy_runs: int = 1,
    concurrencies: Sequence[int] = (),
    *,
    healthy_s: float = HEALTHY_S,
    late_start_s: float = LATE_START_S,
) -> DrillResult:
    """``healthy_s``, ``late_start_s``: how long a healthy run and the restarted server are
    analysed (the record's three windows; the test suite's drill takes two of each: the
    analysis' initial delay, a window and an evaluation interval, then its measurements)."""
    config = drill_config(work_dir / "runs")
    host = Machine.at_start()
    pair = ensure_models(config.local)
    servers = arm_servers(config, pair.target_dir, pair.draft_dir, work_dir / "servers")
    local = config.local
    prompts = load_prompts([str(PROJECT_ROOT / f) for f in local.extra_prompt_files])
    by_class = {
        name: [p.text for p in prompts if p.prompt_class == name]
        for name in ("structured", "open_ended")
    }
    header = config.routing.class_header
    # Healthy: each class routed as configured, the classes alternating; drifted: open-ended
    # prompts labelled structured.
    routed: list[Send] = [(text, "structured") for text in by_class["structured"]]
    plain: list[Send] = [(text, None) for text in by_class["open_ended"]]
    healthy = [item for both in itertools.zip_longest(routed, plain) for item in both if item]
    drifted: list[Send] = [(text, "structured") for text in by_class["open_ended"]]
    acceptance_healthy = ratio_healthy = None
    fired: dict[str, float | None] = {}
    healthy_alerts: list[list[str]] = []
    healthy_requests: list[int] = []
    failed = 0
    sweep: list[SweepPoint] = []
    with (
        sigterm_raises(),
        LocalServers(servers, local.startup_timeout_s, print) as running,
        local_gateway(config, work_dir / "gateway") as gateway,
    ):
        urls = {Arm(s.name): s.url for s in running.servers}
        model = running.servers[0].served_model_name
        with LocalPrometheus(config, urls, gateway.admin_url, work_dir / "guardrails") as prom:
            watch = AlertLog(prom)
            healthy_analysis: list[str] = []
            for _ in range(healthy_runs):
                watch.fired.clear()
                with Traffic(gateway.url, model, header, healthy) as traffic:
                    analysis = LiveAnalysis(prom)
                    healthy_analysis.append(analysis_text(analysis.run_for(healthy_s)))
                    watch.poll()
                    acceptance_healthy = _value(prom, f"specdecode:acceptance:ratio{SD}")
                    ratio_healthy = _value(prom, RATIO)
                healthy_alerts.append([alert.text for alert in watch.fired.values()])
                healthy_requests.append(traffic.sent)
                failed += len(traffic.failed)
            for streams in concurrencies:
                watch.fired.clear()
                with Traffic(gateway.url, model, header, healthy, streams) as traffic:
                    time.sleep(SWEEP_S)
                    watch.poll()
                    ratio = _value(prom, RATIO)
                slower = any(a.name == "SpecDecodeSlowerThanBaseline" for a in watch.fired.values())
                sweep.append(SweepPoint(streams, traffic.sent, ratio, slower))
                failed += len(traffic.failed)
            watch.fired.clear()
            aborted: dict[str, float | None] = {}
            with Traffic(gateway.url, model, header, healthy) as traffic:
                analysis = _armed(prom)
                traffic.sends = drifted  # the same streams now send the drifted mix
                start = time.monotonic()
                aborted["acceptance_below_floor"] = _abort_time(analysis, start, 3 * WINDOW_S)
                fired["acceptance_below_floor"] = _fire_time(
                    watch, "SpecDecodeAcceptanceBelowFloor", start, 3 * WINDOW_S
                )
                acceptance_drifted = _value(prom, f"specdecode:acceptance:ratio{SD}")
            failed += len(traffic.failed)
            speculative = running["speculative"]
            assert speculative.process is not None
            with Traffic(gateway.url, model, header, healthy) as traffic:
                analysis = _armed(prom)
                start = time.monotonic()
                stop_groups([speculative.process], grace_s=0)  # its group, killed at once
                aborted["arm_metrics_missing"] = _abort_time(analysis, start, 3 * WINDOW_S)
                fired["arm_metrics_missing"] = _fire_time(
                    watch, "SpecDecodeArmMetricsMissing", start, 3 * WINDOW_S
                )
                # A new revision: the speculative server starts again, late, under traffic
                # (its route falls back meanwhile). The analysis starts once it is available,
                # as the Rollout's does after its startingStep, and must not abort.
                speculative.stop(grace_s=0)
                speculative.start()
                speculative.wait_ready(local.startup_timeout_s, print)
                late = LiveAnalysis(prom)
                late_start = analysis_text(late.run_for(late_start_s))
            # Not counted in failed_requests: streams in flight when the server is killed are
            # cut by design (the gateway retries only requests that have not started).
            series = {
                row["metric"]["job"]: int(float(row["value"][1]))
                for row in prom.query('count by (job) ({job=~".+"})')
            }
    host.finish()
    return DrillResult(
        window_s=WINDOW_S,
        evaluation_interval_s=config.guardrails.live.evaluation_interval_s,
        floor=FLOOR,
        healthy_alerts=healthy_alerts,
        healthy_requests=healthy_requests,
        failed_requests=failed,
        acceptance_healthy=acceptance_healthy,
        acceptance_drifted=acceptance_drifted,
        sd_over_baseline_healthy=ratio_healthy,
        sweep=sweep,
        time_to_fire_s=fired,
        time_to_abort_s=aborted,
        healthy_analysis=healthy_analysis,
        late_start_analysis=late_start,
        series_scraped=series,
        machine=asdict(host),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.guardrails_drill", description=__doc__)
    parser.add_argument("--out", help="JSON file (default: stdout)")
    parser.add_argument("--healthy-runs", type=int, default=3)
    parser.add_argument(
        "--concurrency", default="1,2,4,8", help="streams of the sweep, comma-separated"
    )
    options = parser.parse_args(argv)
    concurrencies = [int(c) for c in options.concurrency.split(",") if c.strip()]
    with tempfile.TemporaryDirectory(prefix="drill-") as tmp:
        result = run_drill(Path(tmp), options.healthy_runs, concurrencies)
    text = json.dumps(asdict(result), indent=1)
    if options.out:
        Path(options.out).write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
