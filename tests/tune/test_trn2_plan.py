"""The trn2 plan: compiles (deduplicated by fingerprint), node-hours and cost from config."""

from __future__ import annotations

import pytest

from experiment import build_config
from experiment.loading import ConfigError
from tune.trn2 import fingerprints, trn2_plan, trn2_plan_text


def test_default_plan_counts_compiles_node_hours_and_cost() -> None:
    config = build_config({})
    plan = trn2_plan(config)
    # 2 drafts x 4 measured k + the baseline, all different graphs.
    assert len(plan.candidates) == 8
    assert plan.compiles == 9
    assert plan.arms_per_node == 2  # 8 of the 16 devices each
    # (9 compiles x 2 h + 9 arms x 0.5 h) / 2 arms per node = 11.25 node-hours at 40 USD/h.
    assert plan.node_hours == pytest.approx(11.25)
    assert plan.cost_usd == pytest.approx(450.0)
    assert plan.predicted_k == [1, 3, 5, 7, 9, 10]
    text = trn2_plan_text(plan, config)
    assert "compiles: 9" in text
    assert "NOMINAL" in text
    assert "OVER BUDGET" not in text


def test_already_compiled_fingerprints_are_not_compiled_again() -> None:
    config = build_config({})
    prints = fingerprints(config)
    assert len(set(prints.values())) == len(prints)
    plan = trn2_plan(config, already_compiled={prints["baseline"], prints["Qwen/Qwen3-1.7B k=2"]})
    assert plan.compiles == 7
    assert plan.already_compiled == 2


def test_plan_over_budget_says_what_to_change() -> None:
    config = build_config({"experiment.tuning.budget_node_hours": "5"})
    assert "OVER BUDGET" in trn2_plan_text(trn2_plan(config), config)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"experiment.tuning.fit_k": "[4]"}, "two values of k"),
        ({"experiment.tuning.holdout_k": "[2]"}, "overlaps fit_k"),
        ({"experiment.tuning.holdout_k": "[9]"}, "below the largest"),
        ({"experiment.tuning.fit_k": "[2, 16]"}, "between 1 and 15"),
        ({"experiment.tuning.concurrency": "[0, 2]"}, "levels of 1 or more"),
    ],
)
def test_bad_tuning_config_is_rejected_with_what_to_change(override, message) -> None:
    with pytest.raises(ConfigError, match=message):
        build_config(override)


def test_the_plan_follows_the_new_deployment_profile() -> None:
    config = build_config({"experiment.serving.profile": "new-deployment"})
    plan = trn2_plan(config)
    drafter = "RedHatAI/Qwen3-32B-speculator.eagle3"
    assert [(s.draft, s.k) for s in plan.candidates] == [(drafter, k) for k in range(3, 8)]
    assert plan.compiles == 6  # 5 candidates + the baseline
    # (6 compiles x 2 h + 6 arms x 0.5 h) / 2 arms per node.
    assert plan.node_hours == pytest.approx(7.5)
    assert plan.predicted_k == []  # nothing outside the profile's 3-7 is predicted
    text = trn2_plan_text(plan, config)
    assert "profile new-deployment" in text
    assert "neuron-plugin" in text and config.serving.image in text
    assert "not yet run on trn2" in text  # what is open about the drafter is said up front
    assert "spec_decode" in text and "target + draft graphs" in text
    assert "none, every k in range is measured" in text


def test_the_default_plan_is_for_the_reproduction() -> None:
    config = build_config({})
    text = trn2_plan_text(trn2_plan(config), config)
    assert "profile reproduce" in text and "neuron-fork" in text
    assert "client-side" in text and "fused target+draft" in text
