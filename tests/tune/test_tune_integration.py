"""Integration tier: one tiny sweep on real vLLM (CPU) servers of the local miniature, shared
by the tests below (a sweep is several server starts; each test reads a different part of it).

Quick mode with both drafters: the baseline at concurrency 1 and 2, the small draft
(tuning.local_drafts) and the EAGLE3 head at k=1 and k=3 (the fit), the recommended setting
again at concurrency 2; 16 output tokens, one request per prompt. Checks that every piece is
real: servers started and stopped, counters read per class, the model fitted from them,
predictions made, outputs written; that the head is served as an EAGLE3 drafter, its
acceptance per position comes from vLLM's counters, its step cost is measured, and every class
gets a drafter with a measured margin over the other drafter.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

import pytest

from experiment import build_config
from experiment.config import ExperimentConfig
from local_run.servers import port_is_free
from runtime.spec import Generation
from runtime.validate import check_speculation_schedule
from tune.local import run_local_sweep
from tune.overrides import overrides_line
from tune.render.markdown import render_markdown
from tune.report import read_result, write_outputs
from tune.results import EAGLE3_CANDIDATE, Setting, TuneResult, drafter_of

pytestmark = [pytest.mark.integration, pytest.mark.process, pytest.mark.timeout(600)]

PORT = 8621  # inside the tune range (8601-8640), away from a CLI sweep on 8601


@dataclass(frozen=True)
class Sweep:
    config: ExperimentConfig
    result: TuneResult
    lines: list[str]
    out: Path


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Sweep:
    config = build_config(
        {
            "experiment.tuning.port": PORT,
            "experiment.tuning.drafters": "[draft-model, eagle3]",
            # One draft model against the head: a second draft model would add its generation
            # and two server starts (about 3 min of a clean clone's CI) and nothing the head
            # does not already check (tests/tune/test_drafters.py compares several drafts).
            "experiment.tuning.local_drafts": "[small]",
            "experiment.tuning.concurrency": "[1, 2]",
            "experiment.tuning.budget_s": 540,  # under the 600 s timeout
        }
    )
    out = tmp_path_factory.mktemp("sweep")
    lines: list[str] = []
    result = run_local_sweep(config, out, quick=True, log=lines.append)
    return Sweep(config, result, lines, out)


def test_the_sweep_stops_every_server_and_prints_its_plan_first(sweep: Sweep) -> None:
    assert port_is_free("127.0.0.1", PORT), "a server was left running"
    lines = sweep.lines
    assert any(line.startswith("plan (local)") for line in lines), "plan not printed first"
    assert lines.index(next(x for x in lines if x.startswith("plan (local)"))) < next(
        i for i, x in enumerate(lines) if x.startswith("[1/")
    )


def test_quick_sweep_on_real_vllm(sweep: Sweep) -> None:
    config, result, tmp_path = sweep.config, sweep.result, sweep.out
    measured = {(r.setting.label, r.concurrency) for r in result.runs}
    drafts = sorted(config.tuning.local_drafts or [])
    assert drafts == ["small"]
    assert {("baseline", 1), ("baseline", 2)} <= measured
    for draft in drafts:
        assert {(f"{draft} k=1", 1), (f"{draft} k=3", 1)} <= measured
    for run in result.runs:
        for name, block in run.classes.items():
            assert block.failed == 0, (run.setting.label, name, block.samples[0].error)
    classes = sorted(result.runs[0].classes)
    assert sorted((m.draft, m.prompt_class) for m in result.models) == sorted(
        (d, c) for d in [*drafts, EAGLE3_CANDIDATE] for c in classes
    )
    for model in (m for m in result.models if m.draft != EAGLE3_CANDIDATE):
        # vLLM CPU exports the spec-decode counters: acceptance per position from them.
        assert model.acceptance.source == "counters"
        rates = model.acceptance.per_position_rate
        assert len(rates) == 3
        assert all(0 <= b <= a <= 1 for a, b in itertools.pairwise(rates))
        assert model.step_cost.fit_k == [1, 3]
        assert [p.k for p in model.predictions] == [1, 2, 3, 4]
        assert model.prediction(4).extrapolated
        assert {m.k for m in model.measured} == {1, 3}
        # The greedy property: k=1's acceptance predicted from the k=3 run, checked
        # against what the k=1 server's chunks carried.
        at_1 = next(m for m in model.measured if m.k == 1)
        assert at_1.tokens_per_step is not None
        assert model.prediction(1).tokens_per_step == pytest.approx(at_1.tokens_per_step, rel=0.2)
    overall = next(r for r in result.recommendations if r.scope == "all")
    assert overall.k in (1, 2, 3)
    assert overall.draft in [*drafts, EAGLE3_CANDIDATE]
    k_line = f"-c experiment.local.num_speculative_tokens={overall.k}"
    assert result.overrides == (
        f"-c experiment.local.drafter=eagle3 {k_line}"
        if overall.draft == EAGLE3_CANDIDATE
        else "-c experiment.local.drafter=draft-model "
        f"-c experiment.local.generator.draft={overall.draft} {k_line}"
    )
    if result.break_even:
        assert result.break_even[0].setting == Setting(draft=overall.draft, k=overall.k)
        # cost per 1M output tokens at both levels, both arms, at the configured local price
        assert result.cost is not None
        assert result.cost.basis.instance_usd_per_hour == config.pricing.local.usd_per_hour
        for arm in result.cost.arms:
            assert [p.concurrency for p in arm.points] == [1, 2]
            assert all(p.usd_per_million_output_tokens for p in arm.points)
            assert arm.optimal is not None and arm.optimal.concurrency in (1, 2)
    # The fit k were measured at both levels: step costs at batch sizes 1 and 2, a schedule
    # over 1..local.max_num_seqs of the overall draft that the serving rules accept.
    schedule = result.schedule
    assert schedule is not None
    assert schedule.draft == overall.draft and schedule.batch_sizes == [1, 2]
    assert (schedule.ranges[0].first, schedule.ranges[-1].last) == (1, config.local.max_num_seqs)
    assert {(c.batch_size, c.prompt_class) for c in schedule.step_costs} == {
        (b, c) for b in (1, 2) for c in classes
    }
    if any(r.k for r in schedule.ranges):
        max_k = max(r.k for r in schedule.ranges)
        check_speculation_schedule(
            Generation.LOCAL_CPU, schedule.entries, max_k, config.local.max_num_seqs
        )
        assert schedule.overrides is not None and "speculation_schedule=" in schedule.overrides
    paths = write_outputs(result, tmp_path)
    assert read_result(tmp_path) == result
    assert paths["markdown"].read_text().startswith("# Tuning sweep (local)")
    assert result.load_average and result.elapsed_s > 0


def test_drafter_sweep_on_real_vllm(sweep: Sweep) -> None:
    config, result = sweep.config, sweep.result
    head_log = (sweep.out / "servers" / "eagle3-k3.log").read_text()
    assert '"method":"eagle3"' in head_log.splitlines()[0]  # the recorded command line
    candidates = [*sorted(config.tuning.local_drafts or []), EAGLE3_CANDIDATE]
    measured = {(r.setting.label, r.concurrency) for r in result.runs}
    assert {(f"{d} k={k}", 1) for d in candidates for k in (1, 3)} <= measured
    for run in result.runs:
        for name, block in run.classes.items():
            assert block.failed == 0, (run.setting.label, name, block.samples[0].error)
    classes = sorted(result.runs[0].classes)
    heads = [m for m in result.models if m.draft == EAGLE3_CANDIDATE]
    assert sorted(m.prompt_class for m in heads) == classes
    for model in heads:
        assert model.drafter == "eagle3"
        assert model.acceptance.source == "counters"  # vLLM's per-position counters
        rates = model.acceptance.per_position_rate
        assert len(rates) == 3 and all(0 <= b <= a <= 1 for a, b in itertools.pairwise(rates))
        assert [s.k for s in model.steps] == [1, 3]
        assert all(s.step_ms > 0 and s.baseline_step_ms > 0 for s in model.steps)
    scopes = [c.scope for c in result.drafter_choices]
    assert scopes == [*classes, "all"]
    for choice in result.drafter_choices:
        assert choice.drafter == drafter_of(choice.draft)
        assert choice.runner_up_drafter not in (None, choice.drafter)
        assert choice.margin is not None and choice.margin.n > 0
        assert choice.overrides == overrides_line("local", choice.draft, choice.k)
    text = render_markdown(result, [])
    assert "## Drafter per class" in text
    assert any(line.startswith("| eagle3 | eagle3 | ") for line in text.splitlines())
