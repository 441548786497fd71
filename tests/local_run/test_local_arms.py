"""The local run's experiment: the trn2 prompt suite plus the local prompts, and load
defaults that meet the local run's goals (32 prompts of 128 tokens)."""

from __future__ import annotations

from collections import Counter

from experiment import build_config
from loadtest.prompts import load_prompts
from local_run.arms import local_experiment


def test_local_run_adds_its_prompts_to_the_trn2_suite_only() -> None:
    config = build_config({})
    local = local_experiment(config)
    assert local.loadtest.prompts.files == [
        *config.loadtest.prompts.files,
        *config.local.extra_prompt_files,
    ]
    assert config.loadtest.prompts.files == build_config({}).loadtest.prompts.files  # untouched
    assert local_experiment(local) == local  # applying it twice adds nothing
    assert local.model_copy(update={"loadtest": config.loadtest}) == config  # nothing else moved
    prompts = load_prompts(local.loadtest.prompts.files)
    assert len({p.id for p in prompts}) == len(prompts) >= 32
    assert Counter(p.prompt_class for p in prompts) == {"structured": 16, "open_ended": 16}


def test_no_extra_prompts_leaves_the_experiment_as_it_is() -> None:
    config = build_config({"experiment.local.extra_prompt_files": []})
    assert local_experiment(config) is config


def test_local_defaults_meet_the_lossless_goal_of_32_prompts_of_128_tokens() -> None:
    local = local_experiment(build_config({}))
    assert local.local.max_tokens >= 128
    assert len(load_prompts(local.loadtest.prompts.files)) >= 32
