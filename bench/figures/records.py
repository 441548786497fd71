"""Figure records: the measured figures the README and docs quote, one typed JSON file each.

A record says what was measured (``figures``), when (``date``), on what (``machine``), with
which command (``command``), how to measure it again (``remeasure``) and where it came from
(``provenance``: measured by that command, or transcribed from the commit that first
published the figures when the run's own outputs were never checked in).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from loadtest.render.headline import CLASS_PROBE
from loadtest.results import GatewayCost
from local_run.machine import Machine

ROOT = Path(__file__).resolve().parents[2]
RECORDS_DIR = ROOT / "docs" / "records"
# The bench writes its own results files (python -m bench): they are records as they stand,
# with the command that measures each again.
# `make bench` runs the first command after its install step; the record runs it as is, so
# a re-measure never reinstalls the venv.
BENCH_RESULT_FILES: dict[str, tuple[str, str]] = {
    "bench": ("bench/results.json", ".venv/bin/python -m bench"),
    "bench-workers": (
        "bench/results_workers.json",
        ".venv/bin/python -m bench --levels 64,256 --processes 1,2,4 --transports '' --no-vllm "
        "--no-aiperf --repeat 3 --results bench/results_workers.json --no-readme "
        "--out runs/bench-workers",
    ),
}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RecordMachine(_Model):
    cpu: str
    cores: int
    load_average_start: float | None = None  # 1-minute load average
    load_average_end: float | None = None
    # One core's copy bandwidth (local_run.machine); None: records from before it was taken.
    memory_bandwidth_gbs: float | None = None

    @classmethod
    def of(cls, machine: Machine) -> RecordMachine:
        end = machine.load_average_end
        return cls(
            cpu=machine.cpu,
            cores=machine.cores,
            load_average_start=machine.load_average_start[0],
            load_average_end=end[0] if end else None,
            memory_bandwidth_gbs=machine.memory_bandwidth_gbs,
        )

    def text(self) -> str:
        load = ""
        if self.load_average_start is not None:
            load = f", load average {self.load_average_start:.1f}"
            if self.load_average_end is not None:
                load += f" to {self.load_average_end:.1f}"
        bandwidth = ""
        if self.memory_bandwidth_gbs is not None:
            bandwidth = f", {self.memory_bandwidth_gbs:.1f} GB/s memory bandwidth on one core"
        return f"{self.cpu}, {self.cores} cores{load}{bandwidth}"


class Provenance(_Model):
    kind: Literal["measured", "transcribed-from-commit"]
    commit: str | None = None
    note: str = ""

    @model_validator(mode="after")
    def _commit_for_transcriptions(self) -> Provenance:
        if self.kind == "transcribed-from-commit" and not self.commit:
            raise ValueError("provenance.commit: a transcribed record names the commit it is from")
        return self

    def text(self) -> str:
        if self.kind == "measured":
            # commit: the tree measured (HEAD, "+" when the work tree had changes)
            return f"measured at commit {self.commit}" if self.commit else "measured"
        return f"transcribed from commit {self.commit}"


class Interval(_Model):
    """A point estimate with its 95% paired bootstrap interval and the pairs behind it."""

    estimate: float
    low: float | None = None
    high: float | None = None
    n: int


class HostClassFigures(_Model):
    """One class's step costs in a local run and the E2E speedup they predict
    (loadtest.expected), next to the measured one in the record's e2e_speedup."""

    baseline_step_ms: float
    speculative_step_ms: float
    draft_cost_per_step_ms: float
    step_ratio: float  # a speculative step in plain steps: the host's part of the speedup
    tokens_per_step: float  # the models' part (vLLM's counters, the class probed alone)
    baseline_ttft_ms: float
    speculative_ttft_ms: float
    output_tokens: float
    predicted: Interval  # what the run's own step costs explain (not a prediction)
    agrees: bool | None  # the measured estimate inside that interval
    # Issue 40: predicted before the load from a calibration of each arm's step cost
    # (loadtest.expected.calibrate); None: a run from before the calibration.
    predicted_before_load: float | None = None
    calibrated_step_ratio: float | None = None
    prediction_holds: bool | None = None  # inside the measured interval (False: missed)


class HostRun(_Model):
    """One default local run (``make local``) in the hosts' list: where, when, what it gave."""

    record: str  # the record it came from (make-local, make-local-fresh) or where reported
    source: Literal["measured", "reported"]
    note: str = ""  # reported: who ran it and where the figures are published
    date: str
    commit: str | None
    machine: RecordMachine
    e2e_speedup: dict[str, Interval]  # by prompt class
    acceptance_by_class: dict[str, float]
    host_expectation: dict[str, HostClassFigures] | None = None  # None: not kept by then


class LocalHostsFigures(_Model):
    """Every default local run recorded, one per measurement, so the README's expected
    figures are a range over hosts rather than one draw (issue 33). ``python -m
    bench.figures measure make-local`` (or make-local-fresh) appends its run."""

    kind: Literal["local-hosts"] = "local-hosts"
    runs: list[HostRun]


class BindingRun(_Model):
    """One cached default local run of ``python -m bench.binding_spread``."""

    binding: str  # local.cpu_binding: apart, isolated or shared
    turn: int  # its place in the interleaved sequence (0: first)
    ok: bool  # the local run's own checks passed (exit 0)
    wall_s: float
    e2e_speedup: dict[str, Interval]  # by prompt class
    host_expectation: dict[str, HostClassFigures]  # the step costs and their prediction
    memory_bandwidth_gbs: float | None = None


class BindingSpreadFigures(_Model):
    """The default local run under each ``local.cpu_binding``: how far the core placement
    alone moves the step ratio and the speedups (issue 33)."""

    kind: Literal["binding-spread"] = "binding-spread"
    runs: list[BindingRun]

    def bindings(self) -> list[str]:
        return list(dict.fromkeys(run.binding for run in self.runs))


class TieredClassFigures(_Model):
    """The tiered arm (the gateway) in one prompt class against both serving arms."""

    prompt_class: str
    routed_to: str  # the serving arm the routing sends the class to
    vs_baseline: Interval  # baseline / tiered mean E2E, paired: > 1 means tiered is faster
    vs_speculative: Interval  # SD / tiered mean E2E, paired
    speculative_vs_baseline: Interval | None = None  # SD's own E2E speedup in the class
    held: bool | None  # tiered matches the arm it is routed to, within the intervals


class TieredFigures(_Model):
    by_class: list[TieredClassFigures]
    lossless_exact_matches: int
    lossless_prompts: int
    failed_requests: int
    requests: int
    # The gateway's own CPU and added latency per request during the tiered arm, and its cores
    # against the servers' (the run summary's model; None: not measured in this record)
    gateway: GatewayCost | None = None


class LocalRunFigures(_Model):
    kind: Literal["local-run"] = "local-run"
    fresh_clone: bool
    wall_s: float
    # install (make's venv step, whatever precedes local_run), models, server_startup,
    # load_test, acceptance_by_class; transcriptions may split models into target and draft.
    phases_s: dict[str, float]
    e2e_speedup: dict[str, Interval]  # by prompt class
    ttft_speedup: dict[str, Interval]
    acceptance_by_class: dict[str, float]
    # Where it came from (loadtest.render.headline): each measured request's figures, or
    # probed one class at a time after the window (every record before the former existed).
    acceptance_by_class_source: str = CLASS_PROBE
    lossless_exact_matches: int
    lossless_prompts: int
    max_tokens: int
    burst_gap_fraction: dict[str, float | None]  # by arm
    drafter: str = "draft-model"  # local.drafter of the run
    k: int | None = None  # the speculative arm's window (None: records from before it)
    # The speculative arm's per-position acceptance over the measured window (vLLM's
    # spec_decode per-position counters; None: not recorded)
    acceptance_per_position: list[float] | None = None
    failed_requests: dict[str, int] = {}  # by arm, the tiered arm too when driven
    # How long the drafter took to generate when it was made (its manifest's
    # generation_seconds; cached afterwards, so a cached run's phases do not show it)
    drafter_generation_s: float | None = None
    tiered: TieredFigures | None = None  # local.tiered: the gateway as a third arm
    # Per class: the step costs and what they predict (None: records from before 2026-11-27)
    host_expectation: dict[str, HostClassFigures] | None = None


class SlowTest(_Model):
    test: str  # pytest's node id: tests/x/test_y.py::test_z[param]
    seconds: float  # setup, call and teardown (the JUnit XML's time of the test case)


class TestSuiteFigures(_Model):
    kind: Literal["test-suite"] = "test-suite"
    fresh_clone: bool
    wall_s: float
    passed: int | None  # None: the publication did not state it
    # The slowest tests, slowest first, and every test's time summed, from pytest's JUnit XML
    # (issue 40); None: a record from before, or a suite measured without it.
    slowest: list[SlowTest] | None = None
    tests_s: float | None = None


class HeldOutPoint(_Model):
    draft: str
    prompt_class: str
    k: int
    predicted: float
    measured: Interval
    relative_error: float
    within_tolerance: bool
    # tokens per step and step cost (ms), predicted / measured, when the sweep split them
    tau: tuple[float, float] | None = None
    step_ms: tuple[float, float] | None = None


class TuneRecommendation(_Model):
    scope: str
    draft: str
    k: int
    predicted: float
    measured: Interval | None = None


class BreakEven(_Model):
    prompt_class: str
    draft: str
    k: int
    speedup_by_concurrency: dict[int, float]
    break_even_concurrency: float | None  # None: pays at every level measured


class LoadCostPoint(_Model):
    usd_per_million_output_tokens: float | None
    output_throughput_tok_s: float | None


class ArmCostFigures(_Model):
    arm: str  # "baseline" or "<draft> k=<k>"
    by_concurrency: dict[int, LoadCostPoint]
    optimal_concurrency: int | None


class TuneCost(_Model):
    instance_type: str
    arm_usd_per_hour: float
    nominal: bool
    arms: list[ArmCostFigures]


class DrafterFit(_Model):
    """One fitted (draft, prompt class) of the sweep: what its drafter accepts per position
    and what a speculative step costs over a baseline step (measured at concurrency 1)."""

    draft: str
    drafter: str
    prompt_class: str
    per_position_rate: list[float]
    acceptance_from_k: int
    draft_cost_ms: dict[int, float]  # by k: speculative step - baseline step, medians
    relative_step: dict[int, float]  # by k: speculative step / baseline step


class DrafterChoiceFigures(_Model):
    """The drafter chosen for a scope and its margin over the best other one."""

    scope: str
    drafter: str
    draft: str
    k: int
    predicted: float
    runner_up_drafter: str | None = None
    runner_up_draft: str | None = None
    runner_up_k: int | None = None
    runner_up_predicted: float | None = None
    # E2E runner-up / winner, paired on the same prompts (> 1: the winner is faster)
    margin: Interval | None = None


class TuneFigures(_Model):
    kind: Literal["tune-sweep"] = "tune-sweep"
    wall_s: float
    server_starts: int
    tolerance: float
    held_out: list[HeldOutPoint]
    recommendations: list[TuneRecommendation]
    break_even: list[BreakEven] = []
    cost: TuneCost | None = None
    fits: list[DrafterFit] = []  # empty: a record from before the drafter comparison
    drafter_choices: list[DrafterChoiceFigures] = []


class StatsSpeedFigures(_Model):
    kind: Literal["stats-speed"] = "stats-speed"
    requests_per_arm: int
    resamples: int
    paired_statistics_s: list[float]
    summarize_s: list[float]


class MiniatureFigures(_Model):
    """``python -m bench.miniature``: step costs of the generated models (PyTorch)."""

    kind: Literal["miniature"] = "miniature"
    k: int
    draft: str
    # case -> ms: target_step_1, target_verify_<k+1>, draft_step_1, trained_target_step_1
    median_ms: dict[str, float]
    p90_ms: dict[str, float]
    weight_mib: dict[str, float]  # read per step: target, draft, trained_target
    implied_read_gb_per_s: float


class BenchReported(_Model):
    """What an instrument gave per request, read from its own output (medians over the
    matched requests; bench/accuracy.py ``reported``)."""

    chunk_times: float  # chunk arrival times per request (the truth sends one per chunk)
    itl_values: float  # ITL values per request: one per chunk gap, or 1 (a request's mean)
    chunk_tokens: bool  # whether it counted the tokens each chunk carried


class ArmsSpreadRun(_Model):
    """One cached local run of ``python -m bench.arms_spread``."""

    mode: str  # local.arms_mode: sequential or alternating
    turn: int  # its place in the interleaved sequence (0: first)
    ok: bool  # the local run's own checks passed (exit 0)
    wall_s: float
    e2e_speedup: dict[str, Interval]  # by prompt class
    load_test_s: float | None = None  # the load test's wall time (both arms)
    # The arms' Locust processes' wall time minus their measured windows: start-up and
    # shutdown, once per arm (sequential) or once per block (alternating).
    locust_overhead_s: float | None = None


class ArmsSpreadFigures(_Model):
    """``python -m bench.arms_spread``: repeated identical cached local runs per arms mode,
    interleaved, and how far their E2E speedups spread (issue 25's local goal)."""

    kind: Literal["arms-spread"] = "arms-spread"
    block_requests: int  # loadtest.alternating_block_requests of the alternating runs
    runs: list[ArmsSpreadRun]

    def modes(self) -> list[str]:
        return list(dict.fromkeys(run.mode for run in self.runs))

    def estimates(self, mode: str, prompt_class: str) -> list[float]:
        return [r.e2e_speedup[prompt_class].estimate for r in self.runs if r.mode == mode]

    def spread(self, mode: str, prompt_class: str) -> float:
        """max - min of the mode's E2E speedup estimates for the class."""
        values = self.estimates(mode, prompt_class)
        return max(values) - min(values) if values else float("nan")

    def chosen(self, candidate: str, reference: str, classes: tuple[str, ...]) -> str:
        """``candidate`` when its spread is smaller than ``reference``'s for every class,
        else ``reference`` (the goal: tighter for structured and open-ended alike)."""
        tighter = all(self.spread(candidate, c) < self.spread(reference, c) for c in classes)
        return candidate if tighter else reference


class BenchPoint(_Model):
    """Signed error p50 / p99 (ms) of one instrument at one concurrency level."""

    level: int
    instrument: str
    label: str
    ttft_ms: tuple[float, float]
    itl_token_ms: tuple[float, float]
    # p99 of each repetition (the figures above are their medians)
    ttft_p99_by_repetition: list[float] = []
    itl_token_p99_by_repetition: list[float] = []
    token_count_mismatches: int | None = None  # None: the instrument reported no counts
    chunk_gap_ms: tuple[float, float] | None = None
    e2e_ms: tuple[float, float] | None = None
    tokens_per_s: float | None = None
    client_cpu_cores: float | None = None
    server_cpu_cores: float | None = None
    reported: BenchReported | None = None  # None: results from before the bench measured it


class BenchFigures(_Model):
    kind: Literal["bench"] = "bench"
    repetitions: int
    duration_s: float | None = None
    points: list[BenchPoint]

    def point(self, level: int, instrument: str) -> BenchPoint:
        for point in self.points:
            if (point.level, point.instrument) == (level, instrument):
                return point
        raise KeyError(f"bench results have no {instrument} at {level} streams")


class DrillSweepPoint(_Model):
    streams: int
    requests: int
    sd_over_baseline_time_per_token: float | None
    slower_than_baseline_fired: bool


class GuardrailsDrillFigures(_Model):
    """``python -m bench.guardrails_drill``: the guardrail rules on real vLLM, Envoy and
    Prometheus: alerts on healthy runs, time to fire per fault, the concurrency sweep."""

    kind: Literal["guardrails-drill"] = "guardrails-drill"
    window_s: int
    evaluation_interval_s: int
    floor: float
    healthy_alerts: list[list[str]]  # per healthy run
    healthy_requests: list[int]
    failed_requests: int
    acceptance_healthy: float | None
    acceptance_drifted: float | None
    sd_over_baseline_healthy: float | None
    sweep: list[DrillSweepPoint]
    time_to_fire_s: dict[str, float | None]
    series_scraped: dict[str, int]
    # Through the cluster's rollback analysis (local_run/guardrails.py LiveAnalysis); absent
    # from records measured before the drill judged faults that way.
    time_to_abort_s: dict[str, float | None] | None = None
    healthy_analysis: list[str] | None = None
    late_start_analysis: str | None = None


class LifecycleTimeline(_Model):
    """One timeline of guardrails/lifecycle.py and how the analysis ended on it."""

    timeline: str
    kind: Literal["healthy", "fault", "query-error"]
    description: str
    aborted: bool
    phase: str
    abort_at_s: float | None
    fault_at_s: float | None
    windows_to_abort: float | None
    decided_by: str | None
    message: str


class GuardrailsLifecycleFigures(_Model):
    """``python -m guardrails.lifecycle``: the canary's life through promtool (the rendered
    rules) and Argo's analysis semantics (the rendered analysis)."""

    kind: Literal["guardrails-lifecycle"] = "guardrails-lifecycle"
    profile: str
    window_s: int
    scrape_interval_s: int
    evaluation_interval_s: int
    timelines: list[LifecycleTimeline]
    # The first deploy analysed from the Rollout's first step with the raw alert expressions:
    # the analysis as rendered before the start gate.
    as_rendered_before: LifecycleTimeline


class ReplayLevel(_Model):
    """Replay timing error (ms) at one level: each request's kernel receive time behind its
    recorded offset, relative to the median request (bench/replay_accuracy.py)."""

    streams: int  # requests in flight the trace was made to keep (Little's law)
    workers: int  # loadtest.workers: Locust processes sending
    users: int  # loadtest.concurrency (the in-flight cap, above streams)
    n: int  # requests matched to a receive stamp
    unmatched: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    min_ms: float
    mean_in_flight: float
    peak_in_flight: int
    load_generator_cpu: float | None = None
    worker_cpu: dict[str, float | None] = {}  # share of a core per worker (distributed)
    worker_p50_ms: dict[str, float] = {}  # p50 error of each worker's requests
    # One Locust process: receive - (its window start + offset x time scale), no origin
    absolute_p50_ms: float | None = None
    absolute_p99_ms: float | None = None
    # Requests alone at their offset vs those in a burst (sharing one); None: older records
    alone_p99_ms: float | None = None
    burst_p99_ms: float | None = None
    largest_burst: int = 0
    stopped_by: str


# Issue 31's goal for the trace replay: p99 send error by streams (256: two workers) on a
# 2-core machine; here, not in bench/replay_accuracy.py, so rendering needs no load test.
P99_GOAL_MS = {64: 2.0, 256: 5.0}
# The replay side by side (bench/replay_peers.py): the load test's lone requests (alone at
# their offset) within the same p99 bound, and its burst members' p99 no later than the best
# peer's on the same trace.
LONE_P99_GOAL_MS = P99_GOAL_MS


class ReplayAccuracyFigures(_Model):
    """``python -m bench.replay_accuracy``: a synthetic trace replayed by the load test
    against the truth server's kernel receive log (issue 31's replay-accuracy goal)."""

    kind: Literal["replay-accuracy"] = "replay-accuracy"
    method: str
    time_scale: float
    service_s: float
    burst_every_s: float
    burst_share: float
    # A burst's requests written together (loadtest.traffic.burst_writes); False: each in
    # its own sender's turn, one after another (every record before that setting).
    burst_writes: bool = False
    levels: list[ReplayLevel]

    def level(self, streams: int) -> ReplayLevel:
        for level in self.levels:
            if level.streams == streams:
                return level
        raise KeyError(f"replay-accuracy has no level at {streams} streams")


class SendErrors(_Model):
    """p50, p99 and max send error (ms) of a group of requests (bench/replay_peers.py)."""

    n: int
    p50_ms: float
    p99_ms: float
    max_ms: float


class ReplayPeerRun(_Model):
    """One tool replaying one level's trace, each repetition against a fresh truth server:
    every figure the median over the repetitions that replayed."""

    tool: Literal["loadtest", "loadtest-turns", "aiperf", "vllm"]
    # loadtest-turns: the load test with loadtest.traffic.burst_writes false
    label: str
    streams: int
    workers: int | None  # the load test's Locust processes; None: a peer
    requests: int
    matched: int
    unmatched: int  # the most of any repetition
    lone: SendErrors | None  # requests alone at their offset
    burst: SendErrors | None  # requests sharing their offset with others
    largest_burst: int
    wall_s: float | None = None
    error: str | None = None  # every repetition failed: why (no errors then)
    repetitions: int = 1  # that replayed
    failures: list[str] = []  # the reasons of the repetitions that failed
    load_average_1m: list[float] = []  # at each repetition's start
    lone_p99_ms_by_repetition: list[float] = []
    burst_p99_ms_by_repetition: list[float] = []


class ReplayPeersFigures(_Model):
    """``python -m bench.replay_peers``: the same trace replayed by the load test, AIPerf's
    fixed schedule and vllm bench serve's timed_trace, against the truth server's kernel
    receive log, lone requests and burst members apart."""

    kind: Literal["replay-peers"] = "replay-peers"
    method: str
    time_scale: float
    service_s: float
    burst_every_s: float
    burst_share: float
    repetitions: int = 1  # interleaved: tool after tool, level after level, then again
    versions: dict[str, str]
    runs: list[ReplayPeerRun]

    def levels(self) -> list[int]:
        return sorted({run.streams for run in self.runs})

    def run(self, streams: int, tool: str) -> ReplayPeerRun | None:
        for found in self.runs:
            if found.streams == streams and found.tool == tool:
                return found
        return None


class AdaptiveKLevel(_Model):
    """One concurrency level of ``python -m bench.adaptive_k``: the baseline, the best fixed
    k and the speculation schedule run in interleaved blocks on the same requests, every
    speedup paired by request (the load test's bootstrap) over the requests all three
    served."""

    concurrency: int
    fit: bool  # a tuning.concurrency level: the schedule's step costs were measured here
    schedule_k: int  # the schedule's k at this batch size
    requests: int  # measured requests per policy
    failed: dict[str, int]  # by policy: baseline, fixed, schedule
    fixed_speedup: Interval  # mean E2E baseline / mean E2E fixed k
    schedule_speedup: Interval  # mean E2E baseline / mean E2E schedule
    schedule_over_fixed: Interval  # mean E2E fixed k / mean E2E schedule
    # tune/schedule.py's BatchPrediction at this batch size, for the schedule's k (k = 0: the
    # baseline itself, 1 without an interval) and for the fixed k; None: not predicted
    predicted_schedule: Interval | None
    predicted_fixed: Interval | None
    # vLLM's spec-decode counters over the level's measured blocks, by speculative policy:
    # speculative steps and tokens drafted in them (None: not scraped)
    drafts: dict[str, float | None] = {}
    draft_tokens: dict[str, float | None] = {}
    load_average_1m: float | None = None  # at the level's start
    wall_s: float


class AdaptiveKFigures(_Model):
    """``python -m bench.adaptive_k``: the tuning sweep's best fixed k and speculation
    schedule, then both against the baseline at every concurrency on real vLLM."""

    kind: Literal["adaptive-k"] = "adaptive-k"
    draft: str
    drafter: str
    fixed_k: int
    schedule: list[tuple[int, int, int]]  # [first, last, k] as served
    schedule_max_k: int  # the schedule server's num_speculative_tokens
    max_num_seqs: int
    fit_levels: list[int]  # tuning.concurrency of the tuning sweep
    max_tokens: int
    prompts: int
    requests_per_prompt: int
    block_requests: int
    tolerance: float  # the prediction goal on held-out levels
    wall_s: float  # the whole measurement: tuning, start-up, sweep
    tuning_wall_s: float
    tuning_server_starts: int
    startup_s: float  # the three servers of the sweep, started together
    sweep_wall_s: float
    levels: list[AdaptiveKLevel]
    notes: list[str] = []

    def held_out(self) -> list[AdaptiveKLevel]:
        return [level for level in self.levels if not level.fit]


Figures = Annotated[
    LocalRunFigures
    | TestSuiteFigures
    | TuneFigures
    | StatsSpeedFigures
    | MiniatureFigures
    | BenchFigures
    | ArmsSpreadFigures
    | GuardrailsDrillFigures
    | GuardrailsLifecycleFigures
    | ReplayAccuracyFigures
    | ReplayPeersFigures
    | LocalHostsFigures
    | BindingSpreadFigures
    | AdaptiveKFigures,
    Field(discriminator="kind"),
]


class FigureRecord(_Model):
    """docs/records/<name>.json."""

    schema_version: Literal[1] = 1
    name: str
    date: str  # ISO 8601, UTC
    machine: RecordMachine
    command: str  # what was measured, exactly as run
    remeasure: str  # the one command that measures it again and rewrites this record
    provenance: Provenance
    figures: Figures

    @property
    def day(self) -> str:
        return self.date[:10]

    def source_line(self) -> str:
        return (
            f"record `{self.name}`: {self.day}, {self.machine.text()}, `{self.command}`, "
            f"{self.provenance.text()}"
        )


def record_path(name: str, records_dir: Path = RECORDS_DIR) -> Path:
    return records_dir / f"{name}.json"


def write_record(record: FigureRecord, records_dir: Path = RECORDS_DIR) -> Path:
    path = record_path(record.name, records_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(record.model_dump_json(indent=1) + "\n")
    return path


def bench_record(name: str, results: dict[str, Any]) -> FigureRecord:
    """A results file of the bench (``python -m bench`` writes it) as a figure record."""
    machine = results["machine"]
    load_start, load_end = results.get("loadavg_start"), results.get("loadavg_end")
    points = [
        BenchPoint(
            level=r["level"],
            instrument=r["instrument"],
            label=r["label"],
            ttft_ms=(r["ttft_ms"]["p50"], r["ttft_ms"]["p99"]),
            itl_token_ms=(r["itl_token_ms"]["p50"], r["itl_token_ms"]["p99"]),
            # per_repetition keeps [p50, p99] of each (bench/repeat.py)
            ttft_p99_by_repetition=[rep["ttft_ms"][1] for rep in r.get("per_repetition", [])],
            itl_token_p99_by_repetition=[
                rep["itl_token_ms"][1] for rep in r.get("per_repetition", [])
            ],
            chunk_gap_ms=(r["chunk_gap_ms"]["p50"], r["chunk_gap_ms"]["p99"]),
            e2e_ms=(r["e2e_ms"]["p50"], r["e2e_ms"]["p99"]),
            tokens_per_s=r["load"]["tokens_per_s"],
            client_cpu_cores=r.get("client_cpu_cores"),
            server_cpu_cores=r.get("server_cpu_cores"),
            token_count_mismatches=(
                r["token_count"]["mismatched_requests"]
                if r["token_count"]["requests_with_count"]
                else None
            ),
            reported=_reported(r.get("reported")),
        )
        for r in results["results"]
        if "error" not in r
    ]
    return FigureRecord(
        name=name,
        date=results["started_at"],
        machine=RecordMachine(
            cpu=machine.get("cpu") or machine.get("platform") or "unknown",
            cores=machine["cpus"],
            load_average_start=load_start[0] if load_start else None,
            load_average_end=load_end[0] if load_end else None,
        ),
        command=results["command"].strip(),
        remeasure=f"python -m bench.figures measure {name}",
        # commit: the tree the bench ran (results from before it recorded one have none)
        provenance=Provenance(
            kind="measured", commit=results.get("commit"), note=BENCH_RESULT_FILES[name][0]
        ),
        figures=BenchFigures(
            repetitions=results.get("repetitions", 1),
            duration_s=results.get("duration_s"),
            points=points,
        ),
    )


def _reported(shown: dict[str, Any] | None) -> BenchReported | None:
    if not shown or shown.get("chunk_times") is None or shown.get("chunk_tokens") is None:
        return None
    return BenchReported.model_validate(shown)


def load_records(records_dir: Path = RECORDS_DIR, root: Path = ROOT) -> dict[str, FigureRecord]:
    """Every record by name: docs/records/*.json, and the bench's results files."""
    records: dict[str, FigureRecord] = {}
    for path in sorted(records_dir.glob("*.json")):
        try:
            record = FigureRecord.model_validate_json(path.read_text())
        except ValueError as err:
            raise ValueError(f"{path.name}: not a figure record: {err}") from err
        if record.name != path.stem:
            raise ValueError(f"{path.name}: its name is {record.name!r}; rename one of them")
        records[record.name] = record
    for name, (file, _) in BENCH_RESULT_FILES.items():
        if (root / file).is_file():
            records[name] = bench_record(name, json.loads((root / file).read_text()))
    return records
