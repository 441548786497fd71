"""The canary's life on timelines: the rendered rules evaluated by Prometheus' own rule engine
(``promtool test rules``, Debian's ``prometheus`` package) over hours of series, and the
rendered analysis' queries judged with Argo's semantics (guardrails/argo.py).

A timeline says, scrape by scrape, what each target exports: the two arms' vLLM pods, the
gateway's Envoy and the probe's Pushgateway, with the shipped defaults' scrape interval
(``guardrails.live``). ``evaluate`` writes the series and the rule file, asks promtool for
every analysis query at every time Argo would measure it (a query expected to be 0; promtool
prints what it got where it is not), and runs the AnalysisRun from the time the Rollout starts
it (``analysis_start_s``: after its ``startingStep``, charts/rollout.py) to the timeline's
end. What comes out is the run's phase: Running (no abort), or Failed/Error with when and why.

Timeline values follow what Prometheus stores: a pod still starting is a target with ``up``
0 and none of vLLM's series (it does not listen yet); a pod that is gone leaves stale series
(``stale``, then nothing); a missed scrape is one ``up`` 0 with the target's series stale for
that scrape. Traffic is the healthy figures of tests/guardrails (2 requests/s per arm,
acceptance 0.75); a speculative route whose arm is not ready falls back to the baseline
(Envoy's retry), as the gateway's statistics then show.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from experiment.config import Arm, ExperimentConfig
from experiment.loading import add_config_arguments, config_from_arguments
from guardrails import rules
from guardrails.analysis import live_checks, live_metrics
from guardrails.argo import AnalysisRun, Metric, Outcome, duration_s

STALE = "stale"
MISSING = "_"


@dataclass(frozen=True)
class PodState:
    """What one vLLM pod exports at a scrape: ``starting`` (up 0, no series), ``serving``,
    ``idle`` (up 1, counters flat), ``blip`` (one failed scrape), ``gone`` (stale series)."""

    state: str
    acceptance: float = 0.75


@dataclass
class Timeline:
    """``pods(step)``: instance -> (arm, PodState) at each scrape; ``gateway(step)``: up or
    not, and the speculative route's retried and 5xx shares; ``probe_runs``: the seconds at
    which the probe pushed, with the agreement and the class's token-time ratio it pushed."""

    name: str
    kind: str  # healthy, fault, query-error
    description: str
    duration_s: int
    analysis_start_s: float
    pods: Callable[[float], dict[str, tuple[Arm, PodState]]]
    gateway_up: Callable[[float], bool] = lambda t: True
    route_failed_share: Callable[[float], float] = lambda t: 0.0
    probe_runs: Sequence[tuple[float, float, float]] = ()  # (at, agreement, sd/base ratio)
    fault_at_s: float | None = None
    query_error: Callable[[float], bool] | None = None  # the query cannot be signed or sent


@dataclass
class Result:
    timeline: str
    kind: str
    description: str
    outcome: Outcome
    fault_at_s: float | None
    window_s: int
    firing: dict[str, list[float]] = field(default_factory=dict)  # metric -> times it fired

    @property
    def aborted(self) -> bool:
        return self.outcome.aborts

    @property
    def windows_to_abort(self) -> float | None:
        if not self.aborted or self.outcome.at_s is None or self.fault_at_s is None:
            return None
        return (self.outcome.at_s - self.fault_at_s) / self.window_s

    def as_record(self) -> dict[str, Any]:
        return {
            "timeline": self.timeline,
            "kind": self.kind,
            "description": self.description,
            "aborted": self.aborted,
            "phase": self.outcome.phase.value,
            "abort_at_s": self.outcome.at_s if self.aborted else None,
            "fault_at_s": self.fault_at_s,
            "windows_to_abort": self.windows_to_abort,
            "decided_by": self.outcome.metric,
            "message": self.outcome.message,
        }


def _duration(seconds: float) -> str:
    return f"{int(seconds)}s"


class SeriesWriter:
    """Builds each series' per-scrape values for promtool (explicit lists)."""

    def __init__(self, config: ExperimentConfig, timeline: Timeline) -> None:
        self.config = config
        self.timeline = timeline
        self.step_s = config.guardrails.live.scrape_interval_s
        self.steps = timeline.duration_s // self.step_s + 1
        self.served = rules.SERVED_METRICS[config.serving.generation]
        self.jobs = rules.jobs(config)
        self.values: dict[str, list[str]] = {}

    def _put(self, series: str, step: int, value: str) -> None:
        values = self.values.setdefault(series, [MISSING] * self.steps)
        values[step] = value

    def _labels(self, **labels: str) -> str:
        return "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}"

    def build(self) -> dict[str, str]:
        counters: dict[str, float] = {}
        previous: dict[str, str] = {}
        for step in range(self.steps):
            t = step * self.step_s
            pods = self.timeline.pods(t)
            for instance, (arm, pod) in pods.items():
                self._pod(step, instance, arm, pod, counters, previous)
            self._gateway(step, t, pods, counters)
            self._probe(step, t)
        return {name: " ".join(values) for name, values in self.values.items()}

    def _pod(
        self,
        step: int,
        instance: str,
        arm: Arm,
        pod: PodState,
        counters: dict[str, float],
        previous: dict[str, str],
    ) -> None:
        base = {"job": self.jobs["vllm"], "instance": instance, rules.ARM: arm.value}
        up = "up" + self._labels(**base)
        served = self.served
        names = [served.finished, served.generated, served.running, served.token_time_sum,
                 served.token_time_count]  # fmt: skip
        if arm is Arm.SPECULATIVE:
            names += [n for n in (served.drafts, served.draft_tokens, served.accepted) if n]
        state = pod.state
        if state == "gone":
            mark = STALE if previous.get(instance) != "gone" else MISSING
            self._put(up, step, mark)
            for name in names:
                self._put(name + self._labels(**base), step, mark)
            previous[instance] = state
            return
        if state in ("starting", "blip"):
            self._put(up, step, "0")
            mark = STALE if previous.get(instance) in ("serving", "idle") else MISSING
            for name in names:
                self._put(name + self._labels(**base), step, mark)
            previous[instance] = state
            return
        self._put(up, step, "1")
        per_s = {name: 0.0 for name in names}
        if state == "serving":
            per_s[served.finished] = 2.0
            per_s[served.generated] = 100.0
            per_s[served.token_time_count] = 100.0
            per_s[served.token_time_sum] = 100 * (0.04 if arm is Arm.SPECULATIVE else 0.05)
            if served.drafts and served.draft_tokens and served.accepted:
                per_s[served.drafts] = 3.0
                per_s[served.draft_tokens] = 12.0
                per_s[served.accepted] = 12.0 * pod.acceptance
        for name in names:
            key = name + self._labels(**base)
            if name == served.running:
                self._put(key, step, "3" if state == "serving" else "0")
                continue
            counters[key] = counters.get(key, 1000.0) + per_s[name] * self.step_s
            self._put(key, step, f"{counters[key]:g}")
        previous[instance] = state

    def _gateway(
        self,
        step: int,
        t: float,
        pods: dict[str, tuple[Arm, PodState]],
        counters: dict[str, float],
    ) -> None:
        job = self.jobs["gateway"]
        up = "up" + self._labels(job=job, instance="envoy:19001")
        route = self.config.routing.rule_name(self.config.routing.speculative_classes[0])
        labels = {"job": job, "instance": "envoy:19001", "envoy_cluster_name": route,
                  rules.ROUTE: route}  # fmt: skip
        names = {
            "attempts": rules.GATEWAY_REQUESTS + self._labels(**labels),
            "retries": rules.GATEWAY_RETRIES + self._labels(**labels),
            "failed": rules.GATEWAY_RESPONSES
            + self._labels(**labels, envoy_response_code_class="5"),
        }
        if not self.timeline.gateway_up(t):
            was_up = step > 0 and self.timeline.gateway_up(t - self.step_s)
            mark = STALE if was_up else MISSING
            for key in (up, *names.values()):
                self._put(key, step, mark)
            return
        self._put(up, step, "1")
        # A missed scrape is Prometheus' failure, not the pod's: Envoy still reaches it.
        sd_ready = any(
            arm is Arm.SPECULATIVE and pod.state in ("serving", "idle", "blip")
            for arm, pod in pods.values()
        )
        requests = 10.0
        # With no ready speculative endpoint every request is retried on the baseline.
        retried = 0.0 if sd_ready else requests
        failed = requests * self.timeline.route_failed_share(t)
        for kind, per_s in (("attempts", requests + retried), ("retries", retried),
                            ("failed", failed)):  # fmt: skip
            key = names[kind]
            counters[key] = counters.get(key, 0.0) + per_s * self.step_s
            self._put(key, step, f"{counters[key]:g}")

    def _probe(self, step: int, t: float) -> None:
        runs = [run for run in self.timeline.probe_runs if run[0] <= t]
        if not runs:
            return
        at, agreement, ratio = runs[-1]
        probe = self.jobs["probe"]
        name = self.config.routing.speculative_classes[0]
        base_time = 0.05
        values = {
            rules.PROBE_LAST_SUCCESS + self._labels(job=probe): f"{at:g}",
            rules.PROBE_AGREEMENT + self._labels(job=probe): f"{agreement:g}",
            rules.PROBE_ACCEPTANCE + self._labels(job=probe, **{rules.CLASS: name}): "0.75",
        }
        for arm, seconds in ((Arm.SPECULATIVE, base_time * ratio), (Arm.BASELINE, base_time)):
            labels = self._labels(job=probe, **{rules.CLASS: name, rules.ARM: arm.value})
            values[rules.PROBE_TOKEN_TIME + labels] = f"{seconds:g}"
        for key, value in values.items():
            self._put(key, step, value)


_FAILED = re.compile(
    r'expr: "(?P<expr>(?:[^"\\]|\\.)*)", time: (?P<time>[0-9hms.]+),\s*'
    r"exp: [^\n]*\n\s*got: \{\} (?P<got>\S+)",
    re.S,
)


def promtool_binary() -> str:
    found = shutil.which("promtool")
    if found is None:
        raise RuntimeError(
            "promtool is missing: the lifecycle drill runs Prometheus' rule engine through "
            "it. Debian/Ubuntu: apt-get install prometheus (make test installs it)"
        )
    return found


def query_values(
    config: ExperimentConfig,
    timeline: Timeline,
    queries: dict[str, str],
    times: Sequence[float],
    work_dir: Path,
) -> dict[tuple[str, float], float]:
    """Each query's value at each time, evaluated by promtool over the timeline's series and
    the rendered rule file (rule_set for the cluster's V1 servers)."""
    rule_file = rules.rule_set(config, config.serving.generation).prometheus()
    (work_dir / "rules.yml").write_text(yaml.safe_dump(rule_file, sort_keys=False))
    series = SeriesWriter(config, timeline).build()
    test = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": f"{config.guardrails.live.evaluation_interval_s}s",
        "tests": [
            {
                "interval": f"{config.guardrails.live.scrape_interval_s}s",
                "input_series": [{"series": k, "values": v} for k, v in sorted(series.items())],
                "promql_expr_test": [
                    {
                        "expr": query,
                        "eval_time": _duration(t),
                        "exp_samples": [{"labels": "{}", "value": 0}],
                    }
                    for query in queries.values()
                    for t in times
                ],
            }
        ],
    }
    path = work_dir / "lifecycle_test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False, width=200))
    done = subprocess.run(
        [promtool_binary(), "test", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=work_dir,
    )
    values = {(name, t): 0.0 for name in queries for t in times}
    by_query = {query: name for name, query in queries.items()}
    found = 0
    for match in _FAILED.finditer(done.stdout + done.stderr):
        expr = match["expr"].encode().decode("unicode_escape")
        t = duration_s(match["time"])
        values[(by_query[expr], t)] = float(match["got"])
        found += 1
    if done.returncode != 0 and found == 0:
        output = (done.stdout + done.stderr)[-3000:]
        raise RuntimeError(f"promtool failed without query results:\n{output}")
    if done.returncode == 0 and found:
        raise RuntimeError("promtool passed but printed query results: its format changed")
    return values


def evaluate(
    config: ExperimentConfig,
    timeline: Timeline,
    template: dict[str, Any],
    work_dir: Path | None = None,
) -> Result:
    """Run the timeline through promtool and the AnalysisRun of ``template`` (the rendered
    AnalysisTemplate)."""
    metrics = [Metric.from_template(m) for m in template["spec"]["metrics"]]
    queries = {m.name: m.query for m in metrics if m.query is not None}
    interval = min(m.interval_s or 10.0 for m in metrics)
    # Every time Argo could measure without errors: the start, then every interval.
    times, t = [], timeline.analysis_start_s
    while t <= timeline.duration_s:
        times.append(t)
        t += interval
    with tempfile.TemporaryDirectory() as scratch:
        directory = work_dir or Path(scratch)
        directory.mkdir(parents=True, exist_ok=True)
        values = query_values(config, timeline, queries, times, directory)

    def measure(metric: Metric, at: float) -> list[float]:
        if timeline.query_error and timeline.query_error(at):
            raise ConnectionError("the query could not be signed or sent")
        key = (metric.name, at)
        if key not in values:  # a retry after an error, off the interval grid
            previous = max((x for x in times if x <= at), default=times[0])
            key = (metric.name, previous)
        return [values[key]]

    run = AnalysisRun(metrics, timeline.analysis_start_s)
    outcome = run.run(measure, float(timeline.duration_s))
    firing: dict[str, list[float]] = {}
    for (name, at), value in sorted(values.items(), key=lambda kv: kv[0][1]):
        if value > 0:
            firing.setdefault(name, []).append(at)
    return Result(
        timeline.name,
        timeline.kind,
        timeline.description,
        outcome,
        timeline.fault_at_s,
        config.guardrails.live.window_s,
        firing,
    )


def as_rendered_before(template: dict[str, Any], config: ExperimentConfig) -> dict[str, Any]:
    """The analysis as it was rendered before its queries read ``ALERTS``: each metric
    queries its alert's raw expression (``count(<expr>) or vector(0)``), so the rule's
    ``for`` never applies; everything else as rendered now."""
    exprs = {check.name: check.alert.expr for check in live_checks(config)}
    metrics = []
    for metric in template["spec"]["metrics"]:
        changed = {**metric, "provider": {"prometheus": dict(metric["provider"]["prometheus"])}}
        changed["provider"]["prometheus"]["query"] = f"count({exprs[metric['name']]}) or vector(0)"
        metrics.append(changed)
    return {**template, "spec": {"metrics": metrics}}


# -- the timelines ---------------------------------------------------------------------------

HOUR = 3600


def timelines(config: ExperimentConfig) -> list[Timeline]:
    """The healthy, fault and query-error timelines of the drill, with the shipped defaults'
    probe schedule (every ``15`` minutes from the first run on) and a probe run right after
    the speculative pod is available (the Rollout's start step)."""
    period = 15 * 60

    def pods_of(sd: Callable[[float], str], replicas: int = 1, **more: Any) -> Any:
        acceptance = more.get("acceptance", lambda t: 0.75)
        sd_b = more.get("sd_b")
        state_of = more.get("state", lambda t: "serving")

        def pods(t: float) -> dict[str, tuple[Arm, PodState]]:
            found = {
                f"baseline-{i}:8000": (Arm.BASELINE, PodState(state_of(t))) for i in range(replicas)
            }
            found["speculative-0:8000"] = (
                Arm.SPECULATIVE,
                PodState(sd(t) if sd(t) != "serving" else state_of(t), acceptance(t)),
            )
            if replicas > 1:
                second = sd_b(t) if sd_b else "serving"
                second = state_of(t) if second == "serving" else second
                found["speculative-1:8000"] = (Arm.SPECULATIVE, PodState(second, acceptance(t)))
            return found

        return pods

    def probes(first: float, end: float, **changes: Any) -> list[tuple[float, float, float]]:
        runs, t = [], first
        while t <= end:
            agreement = changes.get("agreement", lambda at: 1.0)(t)
            runs.append((t, agreement, 0.8))
            t = (t // period + 1) * period
        return runs

    precompile = 2 * HOUR
    ready = precompile + 60
    start = ready + 120  # the start probe's run (a Job) took two minutes
    end = start + 2 * HOUR
    fault = start + HOUR
    probe_fault = (fault // period + 1) * period  # a probe run
    found = [
        Timeline(
            "first deploy",
            "healthy",
            "the speculative pod precompiles for 2 h (up 0, its route falls back), becomes "
            "available, the probe runs once, then 2 h of traffic",
            end,
            start,
            pods_of(lambda t: "starting" if t < ready else "serving"),
            probe_runs=probes(start, end),
        ),
        Timeline(
            "restart with cached artifacts",
            "healthy",
            "a later revision: the speculative pod starts in 8 min from cached artifacts "
            "while the aborted revision's pod served until just before",
            HOUR + 600,
            600 + 120,
            pods_of(lambda t: "serving" if t < 60 else ("starting" if t < 540 else "serving")),
            probe_runs=probes(600, HOUR + 600),
        ),
        Timeline(
            "one-scrape blips",
            "healthy",
            "the speculative pod misses one scrape twice, one hour apart",
            3 * HOUR,
            120,
            pods_of(lambda t: "blip" if t in (HOUR, 2 * HOUR) else "serving"),
            probe_runs=probes(60, 3 * HOUR),
        ),
        Timeline(
            "pod restart, 2 replicas",
            "healthy",
            "one of two speculative pods restarts (10 min gone, 5 min starting)",
            2 * HOUR,
            120,
            pods_of(
                lambda t: "serving",
                replicas=2,
                sd_b=lambda t: (
                    "gone"
                    if HOUR <= t < HOUR + 600
                    else ("starting" if HOUR + 600 <= t < HOUR + 900 else "serving")
                ),
            ),
            probe_runs=probes(60, 2 * HOUR),
        ),
        Timeline(
            "idle night",
            "healthy",
            "8 h without traffic: both arms scraped, counters flat",
            9 * HOUR,
            120,
            pods_of(lambda t: "serving", state=lambda t: "serving" if t < HOUR else "idle"),
            probe_runs=probes(60, 9 * HOUR),
        ),
        Timeline(
            "killed arm",
            "fault",
            "the speculative pod is gone one hour into the canary",
            fault + HOUR,
            start,
            pods_of(lambda t: "starting" if t < ready else ("serving" if t < fault else "gone")),
            probe_runs=probes(start, fault),
            fault_at_s=fault,
        ),
        Timeline(
            "acceptance drift",
            "fault",
            "the speculative arm's acceptance falls from 0.75 to 0.2 (floor "
            f"{config.guardrails.min_acceptance_rate})",
            fault + HOUR,
            start,
            pods_of(
                lambda t: "starting" if t < ready else "serving",
                acceptance=lambda t: 0.75 if t < fault else 0.2,
            ),
            probe_runs=probes(start, fault + HOUR),
            fault_at_s=fault,
        ),
        Timeline(
            # The probe is the only observer of lossless output: a fault shows at its next run
            # (up to one probe period after the output turned lossy); timed from that run.
            "lossy output",
            "fault",
            "the probe's prefix agreement is 0.5 from its run one hour into the canary",
            probe_fault + HOUR,
            start,
            pods_of(lambda t: "starting" if t < ready else "serving"),
            probe_runs=probes(
                start, probe_fault + HOUR, agreement=lambda at: 1.0 if at < probe_fault else 0.5
            ),
            fault_at_s=probe_fault,
        ),
        Timeline(
            "gateway statistics gone",
            "fault",
            "the gateway's Envoy stops being scraped",
            fault + HOUR,
            start,
            pods_of(lambda t: "starting" if t < ready else "serving"),
            gateway_up=lambda t: t < fault,
            probe_runs=probes(start, fault + HOUR),
            fault_at_s=fault,
        ),
        Timeline(
            "failing speculative route",
            "fault",
            "5 % of the speculative route's requests fail at the gateway",
            fault + HOUR,
            start,
            pods_of(lambda t: "starting" if t < ready else "serving"),
            route_failed_share=lambda t: 0.05 if t >= fault else 0.0,
            probe_runs=probes(start, fault + HOUR),
            fault_at_s=fault,
        ),
        Timeline(
            "no credentials",
            "query-error",
            "every query fails to be signed (the controller's SDK finds no credentials)",
            start + HOUR,
            start,
            pods_of(lambda t: "starting" if t < ready else "serving"),
            probe_runs=probes(start, start + HOUR),
            fault_at_s=start,
            query_error=lambda t: True,
        ),
        Timeline(
            "workspace unreachable 30 s",
            "query-error",
            "queries fail for 30 s one hour into the canary, then answer again",
            fault + HOUR,
            start,
            pods_of(lambda t: "starting" if t < ready else "serving"),
            probe_runs=probes(start, fault + HOUR),
            query_error=lambda t: fault <= t < fault + 30,
        ),
    ]
    return found


def run_all(config: ExperimentConfig) -> dict[str, Any]:
    """Every timeline, and the first deploy as the analysis was rendered before (raw alert
    expressions, measured from the Rollout's first step), as the record keeps them."""
    template = {"spec": {"metrics": live_metrics(config, AMP_EXAMPLE)}}
    found = timelines(config)
    first = next(t for t in found if t.name == "first deploy")
    before = dataclasses.replace(
        first, name="first deploy, as rendered before", analysis_start_s=0.0
    )
    live = config.guardrails.live
    return {
        "profile": config.serving.profile.value,
        "window_s": live.window_s,
        "scrape_interval_s": live.scrape_interval_s,
        "evaluation_interval_s": live.evaluation_interval_s,
        "timelines": [evaluate(config, t, template).as_record() for t in found],
        "as_rendered_before": evaluate(
            config, before, as_rendered_before(template, config)
        ).as_record(),
    }


def goals_met(results: dict[str, Any]) -> bool:
    """No healthy timeline aborts; every fault aborts within two windows."""
    rows = results["timelines"]
    healthy = all(not r["aborted"] for r in rows if r["kind"] == "healthy")
    faults = all(
        r["aborted"] and r["windows_to_abort"] is not None and r["windows_to_abort"] <= 2
        for r in rows
        if r["kind"] == "fault"
    )
    return healthy and faults


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m guardrails.lifecycle [--out FILE] [-c ...]``: every timeline on the
    configured rendering, as JSON; exit 1 when a goal is missed."""
    parser = argparse.ArgumentParser(prog="python -m guardrails.lifecycle", description=__doc__)
    parser.add_argument("--out", type=Path, help="write the results here (JSON)")
    add_config_arguments(parser)
    args = parser.parse_args(argv)
    results = run_all(config_from_arguments(args))
    text = json.dumps(results, indent=1) + "\n"
    if args.out:
        args.out.write_text(text)
    print(text, end="")
    return 0 if goals_met(results) else 1


AMP_EXAMPLE = "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-example/"


if __name__ == "__main__":
    raise SystemExit(main())
