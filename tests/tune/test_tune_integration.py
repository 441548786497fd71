"""Integration tier: a tiny sweep on real vLLM (CPU) servers of the local miniature.

Quick mode: the baseline at concurrency 1 and 2, the draft at k=1 and k=3 (the fit), the
recommended setting again at concurrency 2; 16 output tokens, one request per prompt.
Checks that every piece is real: servers started and stopped, counters read per class,
the model fitted from them, predictions made, outputs written.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from experiment import build_config
from local_run.servers import port_is_free
from runtime.spec import Generation
from runtime.validate import check_speculation_schedule
from tune.local import run_local_sweep
from tune.report import read_result, write_outputs
from tune.results import Setting

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

PORT = 8621  # inside the tune range (8601-8640), away from a CLI sweep on 8601


def test_quick_sweep_on_real_vllm(tmp_path: Path) -> None:
    config = build_config(
        {
            "experiment.tuning.port": PORT,
            "experiment.tuning.concurrency": "[1, 2]",
            "experiment.tuning.budget_s": 540,  # under the 600 s test timeout
        }
    )
    lines: list[str] = []
    result = run_local_sweep(config, tmp_path, quick=True, log=lines.append)
    assert port_is_free("127.0.0.1", PORT), "a server was left running"
    assert any(line.startswith("plan (local)") for line in lines), "plan not printed first"
    assert lines.index(next(x for x in lines if x.startswith("plan (local)"))) < next(
        i for i, x in enumerate(lines) if x.startswith("[1/")
    )
    measured = {(r.setting.label, r.concurrency) for r in result.runs}
    drafts = sorted(config.local.generator.drafts)
    assert {("baseline", 1), ("baseline", 2)} <= measured
    for draft in drafts:
        assert {(f"{draft} k=1", 1), (f"{draft} k=3", 1)} <= measured
    for run in result.runs:
        for name, block in run.classes.items():
            assert block.failed == 0, (run.setting.label, name, block.samples[0].error)
    classes = sorted(result.runs[0].classes)
    assert sorted((m.draft, m.prompt_class) for m in result.models) == [
        (d, c) for d in drafts for c in classes
    ]
    for model in result.models:
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
    assert overall.draft in drafts
    assert result.overrides == (
        "-c experiment.local.drafter=draft-model "
        f"-c experiment.local.generator.draft={overall.draft} "
        f"-c experiment.local.num_speculative_tokens={overall.k}"
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
