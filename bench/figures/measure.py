"""One command per record: run what the record measures, extract its figures, write it.

``python -m bench.figures measure NAME`` runs the record's command (in this checkout, or in
a fresh clone of its HEAD), times it, notes the machine around it, reads the figures from the
outputs the command itself writes (local_run.json and summary.json, tune.json,
stats_speed.json, pytest's summary line and JUnit XML) and rewrites
``docs/records/NAME.json``.
A run made by hand is not a record: its wall time and its machine were not taken.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from bench.figures.records import (
    BENCH_RESULT_FILES,
    ROOT,
    AdaptiveKFigures,
    ArmCostFigures,
    ArmsSpreadFigures,
    BindingSpreadFigures,
    BreakEven,
    DrafterChoiceFigures,
    DrafterFit,
    FigureRecord,
    Figures,
    GuardrailsDrillFigures,
    GuardrailsLifecycleFigures,
    HeldOutPoint,
    HostClassFigures,
    HostRun,
    Interval,
    LoadCostPoint,
    LocalHostsFigures,
    LocalRunFigures,
    MiniatureFigures,
    Provenance,
    RecordMachine,
    ReplayAccuracyFigures,
    ReplayLevel,
    ReplayPeersFigures,
    SlowTest,
    StatsSpeedFigures,
    TestSuiteFigures,
    TieredClassFigures,
    TieredFigures,
    TuneCost,
    TuneFigures,
    TuneRecommendation,
)
from experiment.config import TIERED_ARM, Arm
from loadtest.render.headline import CLASS_PROBE
from loadtest.results import HostExpectation, RunSummary
from loadtest.results import Interval as SummaryInterval
from local_run.eagle3 import EAGLE3_KIND as EAGLE3_DRAFTER
from local_run.machine import Machine

CLASSES = ("structured", "open_ended")
# The local run's own timings (local_run/run.py): what make spent before it is the install.
LOCAL_RUN_PHASES = ("models", "server_startup", "load_test", "acceptance_by_class")


class MeasureError(RuntimeError):
    pass


@dataclass(frozen=True)
class Outcome:
    """What a measured command left: where it ran, how long it took, what it printed."""

    workdir: Path
    wall_s: float
    output: str
    started: float  # epoch seconds


@dataclass(frozen=True)
class Measurement:
    name: str
    command: str  # run with bash -c in the work directory
    extract: Callable[[Outcome], Figures]
    fresh_clone: bool = False
    env: dict[str, str] = field(default_factory=dict)

    def shown_command(self) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        run = f"{env} {self.command}".strip()
        return f"git clone <repo> fresh && cd fresh && {run}" if self.fresh_clone else run


def _interval(found: SummaryInterval) -> Interval:
    if found.estimate is None:
        raise MeasureError("summary.json has a speedup without an estimate")
    return Interval(estimate=found.estimate, low=found.low, high=found.high, n=found.n)


def newest(workdir: Path, pattern: str, since: float) -> Path:
    found = [p for p in workdir.glob(pattern) if p.stat().st_mtime >= since - 1]
    if not found:
        raise MeasureError(f"no {pattern} under {workdir} written by the measured command")
    return max(found, key=lambda p: p.stat().st_mtime)


def local_run_figures(outcome: Outcome, fresh_clone: bool) -> LocalRunFigures:
    local = newest(outcome.workdir, "runs/*/local_run.json", outcome.started)
    data = json.loads(local.read_text())
    summary = RunSummary.model_validate_json((local.parent / "summary.json").read_text())
    if summary.statistics is None:
        raise MeasureError(f"{local.parent}/summary.json has no paired statistics")
    by_class = summary.statistics.by_class
    timings = data["timings_s"]
    phases = {k: timings[k] for k in LOCAL_RUN_PHASES if k in timings}
    # make's install step (and the interpreter's start) is the wall time local_run did not see
    phases = {"install": max(outcome.wall_s - timings["total"], 0.0), **phases}
    by_class_acceptance = data["headline"].get("acceptance_by_class") or {}
    if any(by_class_acceptance.get(c) is None for c in CLASSES):
        raise MeasureError(f"{local} has no per-class acceptance for {CLASSES}: not recordable")
    speculative = summary.arms.get(Arm.SPECULATIVE)
    return LocalRunFigures(
        fresh_clone=fresh_clone,
        wall_s=outcome.wall_s,
        phases_s=phases,
        e2e_speedup={c: _interval(by_class[c].speedup["e2e_ms"]["mean"]) for c in CLASSES},
        ttft_speedup={c: _interval(by_class[c].speedup["ttft_ms"]["mean"]) for c in CLASSES},
        acceptance_by_class={c: by_class_acceptance[c] for c in CLASSES},
        acceptance_by_class_source=data["headline"].get("acceptance_by_class_source", CLASS_PROBE),
        lossless_exact_matches=summary.lossless.exact_matches,
        lossless_prompts=summary.lossless.prompts_compared,
        max_tokens=summary.run.request.max_tokens,
        burst_gap_fraction={
            arm: block.overall.burst_gap_fraction for arm, block in summary.arms.items()
        },
        drafter=_drafter(data),
        drafter_generation_s=data.get("models", {}).get("draft", {}).get("generation_seconds"),
        k=summary.run.analysis.num_speculative_tokens if summary.run.analysis else None,
        acceptance_per_position=speculative.acceptance.per_position_rate if speculative else None,
        failed_requests={arm: block.overall.failed for arm, block in summary.arms.items()},
        tiered=_tiered(summary),
        host_expectation=host_expectation_figures(data["headline"].get("host_expectation") or []),
    )


def host_expectation_figures(kept: list[dict[str, Any]]) -> dict[str, HostClassFigures] | None:
    """The headline's per-class prediction from step costs (loadtest.expected), if kept."""
    if not kept:
        return None
    out = {}
    for block in kept:
        expectation = HostExpectation.model_validate(block)
        predicted = expectation.predicted_e2e_speedup
        if predicted.estimate is None:
            continue
        calibrated = expectation.calibration
        out[expectation.prompt_class] = HostClassFigures(
            **expectation.costs.model_dump(),  # the derived step ratio and draft cost too
            predicted=_interval(predicted),
            agrees=expectation.agrees,
            predicted_before_load=expectation.predicted_before_load,
            calibrated_step_ratio=None if calibrated is None else calibrated.step_ratio,
            prediction_holds=expectation.prediction_holds,
        )
    return out or None


# The default local run's records: each measurement of one is also a run in `local-hosts`.
HOST_RUN_RECORDS = ("make-local", "make-local-fresh")
LOCAL_HOSTS = "local-hosts"


def host_run(record: FigureRecord) -> HostRun:
    figures = record.figures
    if not isinstance(figures, LocalRunFigures):
        raise MeasureError(f"record {record.name} is not a local run")
    return HostRun(
        record=record.name,
        source="measured",
        date=record.date,
        commit=record.provenance.commit,
        machine=record.machine,
        e2e_speedup=figures.e2e_speedup,
        acceptance_by_class=figures.acceptance_by_class,
        host_expectation=figures.host_expectation,
    )


def add_host_run(record: FigureRecord, hosts: FigureRecord) -> FigureRecord:
    """``hosts`` with ``record``'s run appended (the same record and date only once)."""
    if not isinstance(hosts.figures, LocalHostsFigures):
        raise MeasureError(f"record {hosts.name} is not the hosts' list")
    run = host_run(record)
    kept = [r for r in hosts.figures.runs if (r.record, r.date) != (run.record, run.date)]
    # The list's own date, machine and commit are its newest run's.
    return hosts.model_copy(
        update={
            "date": record.date,
            "machine": record.machine,
            "provenance": record.provenance,
            "figures": LocalHostsFigures(runs=[*kept, run]),
        }
    )


def _drafter(local_run: dict[str, Any]) -> str:
    """local.drafter of the run, from the drafter's manifest that local_run.json carries."""
    kind = local_run.get("models", {}).get("draft", {}).get("kind")
    return EAGLE3_DRAFTER if kind == EAGLE3_DRAFTER else "draft-model"


def _tiered(summary: RunSummary) -> TieredFigures | None:
    """The tiered arm of a run that drove the gateway (local.tiered), else None."""
    comparison, arm = summary.tiered, summary.arms.get(TIERED_ARM)
    if comparison is None or arm is None:
        return None
    return TieredFigures(
        by_class=[
            TieredClassFigures(
                prompt_class=c.prompt_class,
                routed_to=c.routed_to,
                vs_baseline=_interval(c.vs_baseline),
                vs_speculative=_interval(c.vs_speculative),
                speculative_vs_baseline=(
                    _interval(c.speculative_vs_baseline) if c.speculative_vs_baseline else None
                ),
                held=c.held,
            )
            for c in comparison.by_class.values()
        ],
        lossless_exact_matches=comparison.lossless.exact_matches,
        lossless_prompts=comparison.lossless.prompts_compared,
        failed_requests=arm.overall.failed,
        requests=arm.overall.requests,
        gateway=comparison.gateway,
    )


# pytest's closing line, "== 646 passed, 2 deselected in 713.2s ==" (or without the = in -q)
PASSED = re.compile(r"^=*\s*(\d+) passed\b", re.M)


def lint_figures(outcome: Outcome) -> TestSuiteFigures:
    # ruff prints no pytest line: the wall time of a fresh clone's `make lint` is the figure.
    return TestSuiteFigures(fresh_clone=True, wall_s=outcome.wall_s, passed=None)


# pytest's JUnit XML of a measured suite, relative to where it runs (pytest makes the folder),
# asked for through pytest's own environment variable so the suite's command stays as a
# reader runs it; xunit1: each test case names its file, so the record can name the test as
# pytest does.
JUNIT_XML = "runs/figures/junit.xml"
JUNIT_ENV = {"PYTEST_ADDOPTS": f"--junitxml={JUNIT_XML} -o junit_family=xunit1"}
SLOWEST_TESTS = 20


def _node_id(case: ElementTree.Element) -> str:
    """pytest's node id of a JUnit XML (xunit1) test case: file, classes, name."""
    file, classname, name = case.get("file"), case.get("classname", ""), case.get("name", "")
    if not file:
        raise MeasureError(
            "the JUnit XML's test cases name no file: run pytest with -o junit_family=xunit1"
        )
    module = file.removesuffix(".py").replace("/", ".")
    classes = classname.removeprefix(module).removeprefix(".")
    return "::".join([file, *(classes.split(".") if classes else []), name])


def slowest_tests(junit: Path, count: int = SLOWEST_TESTS) -> tuple[list[SlowTest], float]:
    """The ``count`` slowest tests of pytest's JUnit XML, slowest first (setup, call and
    teardown each), and every test's time summed."""
    try:
        cases = list(ElementTree.parse(junit).getroot().iter("testcase"))
        tests = [SlowTest(test=_node_id(c), seconds=float(c.get("time", "0"))) for c in cases]
    except (ElementTree.ParseError, ValueError) as err:
        raise MeasureError(f"{junit} is not pytest's JUnit XML: {err}") from None
    if not tests:
        raise MeasureError(f"{junit} holds no test case")
    ranked = sorted(tests, key=lambda t: (-t.seconds, t.test))
    return ranked[:count], round(sum(t.seconds for t in tests), 3)


def suite_figures(
    outcome: Outcome, fresh_clone: bool, junit: str | None = None
) -> TestSuiteFigures:
    """``junit``: where the command had pytest write its JUnit XML (``JUNIT_ENV``): the
    slowest tests come from it, and a run that wrote none is not recordable."""
    # make test may run pytest more than once (tiers): every summary line counts.
    passed = [int(n) for n in PASSED.findall(outcome.output)]
    if not passed:
        raise MeasureError("the test command printed no pytest summary ('N passed')")
    slowest = tests_s = None
    if junit is not None:
        slowest, tests_s = slowest_tests(newest(outcome.workdir, junit, outcome.started))
    return TestSuiteFigures(
        fresh_clone=fresh_clone,
        wall_s=outcome.wall_s,
        passed=sum(passed),
        slowest=slowest,
        tests_s=tests_s,
    )


class _Loose(BaseModel):
    # tune.json is tune's (bench may not import tune): read only the fields rendered.
    model_config = ConfigDict(extra="ignore")


class _Measured(_Loose):
    e2e_speedup: SummaryInterval


class _Component(_Loose):
    name: str
    predicted: float
    measured: float | None


class _Check(_Loose):
    draft: str
    prompt_class: str
    k: int
    predicted_speedup: float
    measured: _Measured
    relative_error: float
    within_tolerance: bool
    components: list[_Component] = []


class _Recommendation(_Loose):
    scope: str
    draft: str
    k: int
    predicted_speedup: float
    measured: _Measured | None = None


class _Setting(_Loose):
    draft: str | None = None
    k: int = 0


class _BreakEven(_Loose):
    prompt_class: str
    setting: _Setting
    points: list[tuple[int, _Measured]]
    break_even_concurrency: float | None


class _Basis(_Loose):
    instance_type: str
    arm_usd_per_hour: float
    nominal: bool


class _LoadCost(_Loose):
    concurrency: int
    output_throughput_tok_s: float | None
    usd_per_million_output_tokens: float | None


class _Optimal(_Loose):
    concurrency: int


class _ArmCost(_Loose):
    setting: _Setting
    points: list[_LoadCost]
    optimal: _Optimal | None


class _CostAtLoad(_Loose):
    basis: _Basis
    arms: list[_ArmCost]


class _Plan(_Loose):
    server_starts: int = 0


class _Acceptance(_Loose):
    per_position_rate: list[float]


class _Step(_Loose):
    k: int
    step_ms: float
    baseline_step_ms: float


class _ClassModel(_Loose):
    draft: str
    drafter: str = "draft-model"
    prompt_class: str
    acceptance: _Acceptance
    acceptance_from_k: int
    steps: list[_Step] = []


class _DrafterChoice(_Loose):
    scope: str
    drafter: str
    draft: str
    k: int
    predicted_speedup: float
    runner_up_drafter: str | None = None
    runner_up_draft: str | None = None
    runner_up_k: int | None = None
    runner_up_predicted_speedup: float | None = None
    margin: SummaryInterval | None = None


class _Tune(_Loose):
    tolerance: float
    plan: _Plan | None = None
    checks: list[_Check]
    recommendations: list[_Recommendation]
    break_even: list[_BreakEven] = []
    cost: _CostAtLoad | None = None
    models: list[_ClassModel] = []
    drafter_choices: list[_DrafterChoice] = []


def _arm_name(setting: _Setting) -> str:
    return f"{setting.draft} k={setting.k}" if setting.draft else "baseline"


def _cost(cost: _CostAtLoad | None) -> TuneCost | None:
    if cost is None:
        return None
    return TuneCost(
        instance_type=cost.basis.instance_type,
        arm_usd_per_hour=cost.basis.arm_usd_per_hour,
        nominal=cost.basis.nominal,
        arms=[
            ArmCostFigures(
                arm=_arm_name(arm.setting),
                by_concurrency={
                    p.concurrency: LoadCostPoint(
                        usd_per_million_output_tokens=p.usd_per_million_output_tokens,
                        output_throughput_tok_s=p.output_throughput_tok_s,
                    )
                    for p in arm.points
                },
                optimal_concurrency=arm.optimal.concurrency if arm.optimal else None,
            )
            for arm in cost.arms
        ],
    )


def _pair(components: list[_Component], name: str) -> tuple[float, float] | None:
    for c in components:
        if c.name == name and c.measured is not None:
            return (c.predicted, c.measured)
    return None


def tune_figures(outcome: Outcome) -> TuneFigures:
    tune = _Tune.model_validate_json(
        newest(outcome.workdir, "runs/figures/tune/tune.json", outcome.started).read_text()
    )
    return TuneFigures(
        wall_s=outcome.wall_s,
        server_starts=tune.plan.server_starts if tune.plan else 0,
        tolerance=tune.tolerance,
        held_out=[
            HeldOutPoint(
                draft=c.draft,
                prompt_class=c.prompt_class,
                k=c.k,
                predicted=c.predicted_speedup,
                measured=_interval(c.measured.e2e_speedup),
                relative_error=c.relative_error,
                within_tolerance=c.within_tolerance,
                tau=_pair(c.components, "tokens_per_step"),
                step_ms=_pair(c.components, "step_ms"),
            )
            for c in tune.checks
        ],
        recommendations=[
            TuneRecommendation(
                scope=r.scope,
                draft=r.draft,
                k=r.k,
                predicted=r.predicted_speedup,
                measured=_interval(r.measured.e2e_speedup) if r.measured else None,
            )
            for r in tune.recommendations
        ],
        break_even=[
            BreakEven(
                prompt_class=b.prompt_class,
                draft=b.setting.draft or "none",
                k=b.setting.k,
                speedup_by_concurrency={
                    level: _interval(m.e2e_speedup).estimate for level, m in b.points
                },
                break_even_concurrency=b.break_even_concurrency,
            )
            for b in tune.break_even
        ],
        cost=_cost(tune.cost),
        fits=[
            DrafterFit(
                draft=m.draft,
                drafter=m.drafter,
                prompt_class=m.prompt_class,
                per_position_rate=m.acceptance.per_position_rate,
                acceptance_from_k=m.acceptance_from_k,
                draft_cost_ms={st.k: st.step_ms - st.baseline_step_ms for st in m.steps},
                relative_step={st.k: st.step_ms / st.baseline_step_ms for st in m.steps},
            )
            for m in tune.models
        ],
        drafter_choices=[
            DrafterChoiceFigures(
                scope=d.scope,
                drafter=d.drafter,
                draft=d.draft,
                k=d.k,
                predicted=d.predicted_speedup,
                runner_up_drafter=d.runner_up_drafter,
                runner_up_draft=d.runner_up_draft,
                runner_up_k=d.runner_up_k,
                runner_up_predicted=d.runner_up_predicted_speedup,
                margin=_interval(d.margin) if d.margin and d.margin.estimate else None,
            )
            for d in tune.drafter_choices
        ],
    )


def stats_speed_figures(outcome: Outcome) -> StatsSpeedFigures:
    data: dict[str, Any] = json.loads((outcome.workdir / "bench/stats_speed.json").read_text())
    return StatsSpeedFigures(
        requests_per_arm=data["requests_per_arm"],
        resamples=data["resamples"],
        paired_statistics_s=data["paired_statistics_s"],
        summarize_s=data["summarize_s"],
    )


MINIATURE_OUT = "runs/figures/miniature.json"
DRILL_OUT = "runs/figures/guardrails-drill.json"


LIFECYCLE_OUT = "runs/figures/guardrails-lifecycle.json"


def lifecycle_figures(outcome: Outcome) -> GuardrailsLifecycleFigures:
    data: dict[str, Any] = json.loads((outcome.workdir / LIFECYCLE_OUT).read_text())
    return GuardrailsLifecycleFigures(**data)


def drill_figures(outcome: Outcome) -> GuardrailsDrillFigures:
    data: dict[str, Any] = json.loads((outcome.workdir / DRILL_OUT).read_text())
    data.pop("machine", None)  # the record's own machine block holds it
    return GuardrailsDrillFigures(**data)


REPLAY_OUT = "runs/figures/replay-accuracy.json"


def replay_figures(outcome: Outcome) -> ReplayAccuracyFigures:
    data: dict[str, Any] = json.loads((outcome.workdir / REPLAY_OUT).read_text())
    fields = set(ReplayLevel.model_fields)
    return ReplayAccuracyFigures(
        method=data["method"],
        time_scale=data["time_scale"],
        service_s=data["service_s"],
        burst_every_s=data["burst_every_s"],
        burst_share=data["burst_share"],
        burst_writes=data.get("burst_writes", False),
        levels=[
            ReplayLevel(**{k: v for k, v in level.items() if k in fields})
            for level in data["levels"]
        ],
    )


REPLAY_PEERS_OUT = "runs/figures/replay-peers.json"


def replay_peers_figures(outcome: Outcome) -> ReplayPeersFigures:
    return ReplayPeersFigures.model_validate_json((outcome.workdir / REPLAY_PEERS_OUT).read_text())


ADAPTIVE_K_OUT = "runs/figures/adaptive-k.json"


def adaptive_k_figures(outcome: Outcome) -> AdaptiveKFigures:
    return AdaptiveKFigures.model_validate_json((outcome.workdir / ADAPTIVE_K_OUT).read_text())


ARMS_SPREAD_OUT = "runs/figures/arms-spread.json"


def arms_spread_figures(outcome: Outcome) -> ArmsSpreadFigures:
    return ArmsSpreadFigures.model_validate_json((outcome.workdir / ARMS_SPREAD_OUT).read_text())


BINDING_SPREAD_OUT = "runs/figures/binding-spread.json"


def binding_spread_figures(outcome: Outcome) -> BindingSpreadFigures:
    return BindingSpreadFigures.model_validate_json(
        (outcome.workdir / BINDING_SPREAD_OUT).read_text()
    )


def miniature_figures(outcome: Outcome) -> MiniatureFigures:
    data: dict[str, Any] = json.loads((outcome.workdir / MINIATURE_OUT).read_text())
    return MiniatureFigures(
        k=data["k"],
        # the draft's directory is <name>-<cache key> (local_run/models.py)
        draft=Path(data["draft"]).name.rsplit("-", 1)[0],
        median_ms=data["median_ms"],
        p90_ms=data["p90_ms"],
        weight_mib={k: v / 2**20 for k, v in data["weight_bytes_per_step"].items()},
        implied_read_gb_per_s=data["implied_read_gb_per_s"],
    )


NO_CACHES = {"PIP_NO_CACHE_DIR": "1", "UV_NO_CACHE": "1"}
MEASUREMENTS: dict[str, Measurement] = {
    m.name: m
    for m in [
        Measurement(
            "make-local-fresh",
            "make local",
            lambda o: local_run_figures(o, fresh_clone=True),
            fresh_clone=True,
            env=NO_CACHES,
        ),
        Measurement("make-local", "make local", lambda o: local_run_figures(o, False)),
        Measurement(
            "make-test", "make test", lambda o: suite_figures(o, False, JUNIT_XML), env=JUNIT_ENV
        ),
        Measurement(
            "ci-run",
            ".ci/run",
            lambda o: suite_figures(o, True, JUNIT_XML),
            fresh_clone=True,
            env=JUNIT_ENV,
        ),
        # The light tiers: a fresh clone installs only the lint/test extras (issue 22's goal).
        Measurement("make-lint-fresh", "make lint", lint_figures, fresh_clone=True, env=NO_CACHES),
        Measurement(
            "make-test-fast-fresh",
            "make test-fast",
            lambda o: suite_figures(o, True),
            fresh_clone=True,
            env=NO_CACHES,
        ),
        # The sweep of both local drafters (the draft models and the EAGLE3 head, issue 26).
        Measurement(
            "tune-sweep",
            ".venv/bin/python -m tune --out runs/figures/tune "
            "-c 'experiment.tuning.drafters=[draft-model,eagle3]' "
            "-c experiment.tuning.budget_s=2400",
            tune_figures,
        ),
        # The local run with the EAGLE3 head as the drafter, models cached (issue 26).
        Measurement(
            "local-eagle3",
            ".venv/bin/python -m local_run -c experiment.local.drafter=eagle3",
            lambda o: local_run_figures(o, False),
        ),
        # The local run with the gateway driven as the third arm, models cached (issue 24).
        Measurement(
            "local-tiered",
            ".venv/bin/python -m local_run -c experiment.local.tiered=true",
            lambda o: local_run_figures(o, False),
        ),
        Measurement(
            "miniature",
            f"mkdir -p runs/figures && .venv/bin/python -m bench.miniature --out {MINIATURE_OUT}",
            miniature_figures,
        ),
        # Six cached local runs, interleaved by arms mode (issue 25's local goal).
        Measurement(
            "arms-spread",
            f".venv/bin/python -m bench.arms_spread --out {ARMS_SPREAD_OUT}",
            arms_spread_figures,
        ),
        # The cached default run under each local.cpu_binding, interleaved (issue 33).
        Measurement(
            "binding-spread",
            f".venv/bin/python -m bench.binding_spread --runs 2 --out {BINDING_SPREAD_OUT}",
            binding_spread_figures,
        ),
        # The guardrail rules on real parts: 3 healthy runs, the sweep, two faults (issue 30).
        Measurement(
            "guardrails-drill",
            "mkdir -p runs/figures && "
            f".venv/bin/python -m bench.guardrails_drill --out {DRILL_OUT}",
            drill_figures,
        ),
        # The tuning's best fixed k and schedule (64 tokens), then the three on real vLLM at
        # concurrency 1-16, interleaved (issue 38 item 3).
        Measurement(
            "adaptive-k",
            f".venv/bin/python -m bench.adaptive_k --out {ADAPTIVE_K_OUT}",
            adaptive_k_figures,
        ),
        # The canary's life: timelines through promtool and Argo's semantics (issue 39).
        Measurement(
            "guardrails-lifecycle",
            "mkdir -p runs/figures && .venv/bin/python -m guardrails.lifecycle "
            f"-c experiment.serving.profile=new-deployment --out {LIFECYCLE_OUT}",
            lifecycle_figures,
        ),
        # The trace replay's send times against the truth server's kernel receive log, 64
        # streams on one Locust process and 256 on two workers (issue 31's goal).
        Measurement(
            "replay-accuracy",
            "mkdir -p runs/figures && "
            f".venv/bin/python -m bench.replay_accuracy --out {REPLAY_OUT}",
            replay_figures,
        ),
        # The same trace replayed by the load test, AIPerf's fixed schedule and vllm bench
        # serve's timed_trace, lone requests and burst members apart (make bench runs it).
        Measurement(
            "replay-peers",
            f".venv/bin/python -m bench.replay_peers --out {REPLAY_PEERS_OUT}",
            replay_peers_figures,
        ),
        Measurement(
            "stats-speed",
            ".venv/bin/python -m bench.stats_speed --out bench/stats_speed.json",
            stats_speed_figures,
        ),
    ]
}


def remeasure_command(name: str) -> str:
    return f"python -m bench.figures measure {name}"


def run(measurement: Measurement, root: Path = ROOT, keep_clone: bool = False) -> FigureRecord:
    """Run ``measurement``'s command, time it and build its record."""
    machine = Machine.at_start()
    started = time.time()
    commit = head_commit(root)  # the tree measured (a fresh clone takes HEAD now)
    scratch = None
    if measurement.fresh_clone:
        (root / "runs").mkdir(exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix="figures-", dir=root / "runs"))
    try:
        workdir = root
        if scratch is not None:
            workdir = scratch / "fresh"
            # HEAD as committed: what a reader's clone gets
            subprocess.run(["git", "clone", "--quiet", str(root), str(workdir)], check=True)
        env = {**os.environ, **measurement.env}
        began = time.monotonic()
        returncode, output = _tee(["bash", "-c", measurement.command], workdir, env)
        wall_s = time.monotonic() - began
        if returncode != 0:
            raise MeasureError(
                f"`{measurement.command}` exited with {returncode}: no record written"
            )
        machine.finish()
        figures = measurement.extract(Outcome(workdir, wall_s, output, started))
    finally:
        if scratch is not None and not keep_clone:
            shutil.rmtree(scratch, ignore_errors=True)
    return FigureRecord(
        name=measurement.name,
        date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        machine=RecordMachine.of(machine),
        command=measurement.shown_command(),
        remeasure=remeasure_command(measurement.name),
        provenance=Provenance(kind="measured", commit=commit),
        figures=figures,
    )


def _tee(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """Run ``argv``, showing its output as it comes (a make local takes minutes) and keeping
    it for the extraction (pytest's count)."""
    lines = []
    with subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as proc:
        assert proc.stdout is not None  # stdout=PIPE
        for line in proc.stdout:
            sys.stdout.write(line)
            lines.append(line)
    return proc.returncode, "".join(lines)


def head_commit(root: Path) -> str | None:
    """HEAD's short hash, with "+" when tracked files differ from it (None: not a git tree)."""

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)

    head = git("rev-parse", "--short", "HEAD")
    if head.returncode != 0:
        return None
    dirty = git("diff", "--quiet", "HEAD").returncode != 0
    return head.stdout.strip() + ("+" if dirty else "")


def run_bench(name: str, root: Path = ROOT) -> None:
    """Measure a bench results file again: the bench writes the record itself."""
    command = BENCH_RESULT_FILES[name][1]
    proc = subprocess.run(["bash", "-c", command], cwd=root)
    if proc.returncode != 0:
        raise MeasureError(f"`{command}` exited with {proc.returncode}")
