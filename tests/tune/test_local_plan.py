"""The local sweep's plan and the CLI's plan-only path (no server is started)."""

from __future__ import annotations

import pytest

from experiment import build_config
from loadtest.step_model import PredictionError
from tune.__main__ import main
from tune.local import concurrency_levels, local_plan, plan_text


def test_plan_lists_every_server_and_what_is_predicted() -> None:
    config = build_config({})
    plan = local_plan(config, ["small", "large"], prompts=16, quick=False)
    # baseline + 2 drafts x (2 fit + 2 held-out) + the recommended one for break-even.
    assert plan.server_starts == 10
    roles = [role for _, role, _ in plan.runs]
    assert roles.count("fit") == 4
    assert roles.count("holdout") == 4
    # The fit k at every level (their step costs by batch size make the schedule).
    assert all(levels == [1, 2, 4] for _, role, levels in plan.runs if role == "fit")
    # Requests: (3 baseline levels + 4 fit candidates x 3 levels + 4 held out + 2 break-even
    # levels) x 16 prompts x 1.
    assert plan.requests == (3 + 4 * 3 + 4 + 2) * 16 * 1
    assert plan.predicted_k == [1, 3, 5, 7, 9, 10]
    text = plan_text(plan)
    assert "small k=8" in text
    assert "budget 20 min" in text


def test_quick_plan_is_small() -> None:
    config = build_config({"experiment.tuning.concurrency": "[1]"})
    plan = local_plan(config, ["draft"], prompts=16, quick=True)
    assert plan.server_starts == 3
    assert plan.requests == 3 * 16
    assert plan.predicted_k == [2, 4]


def test_concurrency_above_max_num_seqs_says_what_to_change() -> None:
    config = build_config({"experiment.tuning.concurrency": "[1, 8]"})
    with pytest.raises(PredictionError, match=r"exceeds local\.max_num_seqs 4"):
        concurrency_levels(config)


def test_cli_plan_only_and_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--plan-only", "-c", "tuning.fit_k=[3,9]"]) == 0
    assert "small k=9" in capsys.readouterr().out
    assert main(["-c", "tuning.holdout_k=[3]", "-c", "tuning.fit_k=[3,9]"]) == 2
    assert "overlaps fit_k" in capsys.readouterr().err
    assert main(["--plan-only", "-c", "tuning.concurrency=[16]"]) == 2
    assert "max_num_seqs" in capsys.readouterr().err
