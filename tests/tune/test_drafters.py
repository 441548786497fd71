"""The drafter comparison on synthetic servers: a draft model and an EAGLE3 head whose step
cost and acceptance are known exactly, each winning one class (synthetic_runs.py)."""

from __future__ import annotations

from pathlib import Path
from statistics import fmean

import pytest
from synthetic_runs import BASE_STEP, BOOT, C0, C1, E0, E1, make_run, sweep

from experiment import build_config
from local_run.models import ModelPair
from tune.analysis import fit_and_recommend
from tune.local import candidate_names, candidate_server, local_plan
from tune.render.markdown import render_markdown
from tune.render.text import summary_lines
from tune.results import DrafterChoice, Setting, TuneResult, drafter_of

BOTH = {"experiment.tuning.drafters": "[draft-model, eagle3]"}


def _result(drafts: tuple[str, ...] = ("d", "eagle3"), **slow: float) -> TuneResult:
    runs = sweep(drafts)
    for label, factor in slow.items():  # e.g. eagle3_4=1.5: that server 50 % slower
        draft, k = label.rsplit("_", 1)
        at = next(i for i, r in enumerate(runs) if r.setting == Setting(draft=draft, k=int(k)))
        runs[at] = make_run(runs[at].setting, runs[at].role, slow=factor)
    result = TuneResult(target="local", tolerance=0.15, plan=None, runs=runs)
    fit_and_recommend(result, {d: [2, 8] for d in drafts}, 10, BOOT)
    return result


def _choice(result: TuneResult, scope: str) -> DrafterChoice:
    return next(c for c in result.drafter_choices if c.scope == scope)


def test_each_drafter_gets_its_own_acceptance_and_measured_step_cost() -> None:
    result = _result()
    head = next(m for m in result.models if (m.draft, m.prompt_class) == ("eagle3", "structured"))
    draft = next(m for m in result.models if (m.draft, m.prompt_class) == ("d", "structured"))
    assert (head.drafter, draft.drafter) == ("eagle3", "draft-model")
    # The designed truths: the head's structured cycle [5, 7, 6, 7, 3, 4, 6, 7] at window 8.
    assert head.acceptance.per_position_rate[:3] == pytest.approx([1.0, 1.0, 1.0], abs=0.02)
    assert head.acceptance.per_position_rate[7] == pytest.approx(0.0, abs=0.02)
    assert draft.acceptance.per_position_rate[0] == pytest.approx(7 / 8, abs=0.03)
    # Draft cost per step, measured: SD step over the baseline step at every measured k.
    assert [s.k for s in head.steps] == [2, 4, 6, 8]
    for step in head.steps:
        assert step.relative == pytest.approx((E0 + E1 * step.k) / BASE_STEP)
        assert step.draft_cost_ms == pytest.approx((E0 + E1 * step.k - BASE_STEP) * 1e3)
    assert draft.steps[0].relative == pytest.approx((C0 + C1 * 2) / BASE_STEP)
    assert head.step_cost.per_k_ms == pytest.approx(E1 * 1e3)


def test_held_out_k_is_predicted_per_drafter_and_a_broken_head_fails_only_its_own() -> None:
    good = _result()
    assert {(c.draft, c.k) for c in good.checks} == {
        (d, k) for d in ("d", "eagle3") for k in (4, 6)
    }
    assert all(c.within_tolerance for c in good.checks)
    broken = _result(eagle3_4=1.5)
    failed = {(c.draft, c.prompt_class, c.k) for c in broken.checks if not c.within_tolerance}
    assert failed == {("eagle3", "structured", 4), ("eagle3", "open_ended", 4)}
    lines = summary_lines(broken)
    assert any(line.startswith("held-out eagle3: largest held-out error +") for line in lines)
    assert "held-out draft-model: largest held-out error" in "\n".join(lines)
    assert any("2 of 4 checks within 15%" in line for line in lines)


def test_each_class_gets_the_drafter_that_wins_it_with_its_measured_margin() -> None:
    result = _result()
    structured, open_ended = _choice(result, "structured"), _choice(result, "open_ended")
    # The head wins structured text, the draft model open-ended text.
    assert (structured.drafter, structured.runner_up_drafter) == ("eagle3", "draft-model")
    assert (open_ended.drafter, open_ended.runner_up_drafter) == ("draft-model", "eagle3")
    for choice in (structured, open_ended):
        rec = next(r for r in result.recommendations if r.scope == choice.scope)
        assert (choice.draft, choice.k) == (rec.draft, rec.k)
        assert choice.predicted_margin is not None and choice.predicted_margin > 1
        assert choice.margin is not None and choice.margin.low is not None
        assert choice.margin.low > 1 and choice.margin.n == 4
    # Measured head to head: the runner-up's mean E2E over the choice's, same prompts.
    runs = {(r.setting.draft, r.setting.k): r for r in result.runs}
    assert structured.measured_k is not None and structured.runner_up_measured_k is not None
    mine = runs[("eagle3", structured.measured_k)].classes["structured"].samples
    theirs = runs[("d", structured.runner_up_measured_k)].classes["structured"].samples
    expected = fmean(s.e2e_s or 0 for s in theirs) / fmean(s.e2e_s or 0 for s in mine)
    assert structured.margin is not None
    assert structured.margin.estimate == pytest.approx(expected)
    # k=7 was predicted, not measured: the head's best measured k (6: 4.35x, 8: 4.33x) stands
    # in for it.
    assert structured.k == 7 and structured.measured_k == 6
    assert structured.overrides == (
        "-c experiment.local.drafter=eagle3 -c experiment.local.num_speculative_tokens=7"
    )
    assert open_ended.overrides.startswith(
        "-c experiment.local.drafter=draft-model -c experiment.local.generator.draft=d "
    )
    overall = _choice(result, "all")
    assert overall.drafter == drafter_of(overall.draft)
    assert overall.margin is not None and overall.margin.n == 8


def test_with_one_drafter_the_runner_up_is_another_draft() -> None:
    result = _result(drafts=("d", "e"))
    for choice in result.drafter_choices:
        assert choice.drafter == choice.runner_up_drafter == "draft-model"
        assert {choice.draft, choice.runner_up_draft} == {"d", "e"}
        # Identical servers: the head to head cannot tell them apart.
        assert choice.margin is not None and choice.margin.estimate == pytest.approx(1.0)
    solo = _result(drafts=("d",))
    assert all(c.runner_up_draft is None and c.margin is None for c in solo.drafter_choices)
    assert "no other candidate fitted" in render_markdown(solo, [])


def test_report_shows_acceptance_cost_and_speedup_per_drafter_and_the_choice() -> None:
    result = _result()
    text = render_markdown(result, [])
    assert "## Drafter per class" in text and "## Drafters compared" in text
    structured = _choice(result, "structured")
    assert (
        f"| structured | eagle3 k=7 | {structured.predicted_speedup:.2f}x | beats draft-model d "
        "k=7 by" in text
    )
    assert "(faster, the interval excludes 1)" in text
    assert (
        "`-c experiment.local.drafter=eagle3 -c experiment.local.num_speculative_tokens=7`" in text
    )
    row = next(
        line for line in text.splitlines() if line.startswith("| eagle3 | eagle3 | structured |")
    )
    assert "1.00, 1.00, 1.00" in row and "(k=8, client_chunks)" in row
    assert "k=2: 1.20x (+2.00 ms)" in row  # 11 + 0.5 * 2 ms over the 10 ms baseline step
    assert "11.00 + 0.50 k (baseline 10.00)" in row
    # (30 ms + 400 x 10 ms) / (30 ms + 400 / 4.875 x 13 ms): at k=4 the head's steps keep
    # min(5, 7, 6, 7, 3, 4, 6, 7; 4) drafts, 4.875 tokens a step, 11 + 0.5 x 4 ms each
    assert "k=4: 3.68x [" in row
    assert "- eagle3: largest held-out error" in text
    lines = summary_lines(result)
    assert any(
        line.startswith("drafter (structured): eagle3 k=7 beats draft-model d k=7")
        for line in lines
    )


def test_the_local_sweep_plans_and_serves_every_drafter(tmp_path: Path) -> None:
    default = build_config({})
    assert candidate_names(default) == sorted(default.local.generator.drafts)
    both = build_config(BOTH)
    names = candidate_names(both)
    assert names == [*sorted(both.local.generator.drafts), "eagle3"]
    plan = local_plan(both, names, prompts=16, quick=False)
    assert Setting(draft="eagle3", k=8) in [s for s, _, _ in plan.runs]
    assert (
        plan.server_starts
        == local_plan(default, candidate_names(default), 16, False).server_starts + 4
    )
    pair = ModelPair(tmp_path, {}, "eagle3/head")
    head = candidate_server(both, pair, "eagle3", 3, tmp_path).command.argv(python="python")
    spec = head[head.index("--speculative-config") + 1]
    assert '"method":"eagle3"' in spec and '"num_speculative_tokens":3' in spec
    assert str(tmp_path / "eagle3" / "head") in spec
    small = candidate_server(both, pair, "small", 2, tmp_path).command.argv(python="python")
    assert '"method":"draft_model"' in small[small.index("--speculative-config") + 1]
    baseline = candidate_server(both, pair, None, 0, tmp_path).command.argv(python="python")
    assert "--speculative-config" not in baseline


def test_tuning_local_drafts_chooses_which_draft_models_the_sweep_measures() -> None:
    one = build_config({**BOTH, "experiment.tuning.local_drafts": "[large]"})
    assert candidate_names(one) == ["large", "eagle3"]
    plan = local_plan(one, candidate_names(one), prompts=16, quick=False)
    assert {s.draft for s, _, _ in plan.runs} == {None, "large", "eagle3", "(recommended)"}


def test_cli_plan_only_lists_the_head(capsys: pytest.CaptureFixture[str]) -> None:
    from tune.__main__ import main

    assert main(["--plan-only", "-c", "tuning.drafters=[draft-model, eagle3]"]) == 0
    out = capsys.readouterr().out
    assert "eagle3 k=8" in out and "small k=8" in out
    assert main(["--plan-only", "-c", "tuning.drafters=[eagle3]"]) == 0
    out = capsys.readouterr().out
    assert "eagle3 k=8" in out and "small k=8" not in out
