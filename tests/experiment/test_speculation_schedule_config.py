"""serving.speculation_schedule: the -c value form, where it is served (the local arm), where
it is refused at synth (the 0.9 fork, vllm-neuron 1.x) and every malformed schedule refused
with a message naming the setting (the rules: runtime/validate.py)."""

from __future__ import annotations

import shlex

import pytest

from experiment import ConfigError, build_config
from experiment.config import Arm
from experiment.loading import config_from_arguments, config_parser, context_from_pairs
from runtime.spec import Generation
from runtime.validate import SCHEDULE_REFUSED

KEY = "experiment.serving.speculation_schedule"


def test_unset_by_default_and_absent_from_both_trn2_arms() -> None:
    config = build_config({})
    assert config.serving.speculation_schedule is None
    assert all(config.serving_spec(arm).speculation_schedule is None for arm in Arm)


@pytest.mark.parametrize(
    "line",
    [
        f"-c '{KEY}=[[1,2,3],[3,4,0]]'",
        "-c 'serving.speculation_schedule=[[1, 2, 3], [3, 4, 0]]'",
    ],
)
def test_the_c_value_form_is_parsed_into_the_schedule(line: str) -> None:
    args = config_parser("test", None).parse_args(shlex.split(line))
    config = config_from_arguments(args)
    assert config.serving.speculation_schedule == [(1, 2, 3), (3, 4, 0)]


def test_the_local_speculative_arm_carries_it_and_the_baseline_does_not() -> None:
    config = build_config({KEY: "[[1,2,3],[3,4,0]]"})
    spec = config.local_serving_spec(Arm.SPECULATIVE, "/t", "/d")
    assert spec.speculation_schedule == ((1, 2, 3), (3, 4, 0))
    assert config.local_serving_spec(Arm.BASELINE, "/t", "/d").speculation_schedule is None


LOCAL_REJECTIONS = {
    "overlapping": ("[[1,2,3],[2,4,0]]", [], "overlaps or precedes the range before it"),
    "unsorted": ("[[3,4,0],[1,2,3]]", [], "is not sorted by batch size"),
    "beyond the local batch": (
        "[[1,2,3],[3,8,0]]",
        [],
        "reaches batch size 8, beyond local.max_num_seqs 4",
    ),
    "above the drafter's maximum": (
        "[[1,2,9],[3,4,0]]",
        [],
        "k=9, outside 0-7: the deployed drafter drafts at most serving.num_speculative_tokens",
    ),
    "above the local drafter's maximum": (
        "[[1,2,5],[3,4,0]]",
        ["local.num_speculative_tokens=4"],
        "k=5, outside 0-4: the deployed drafter drafts at most local.num_speculative_tokens",
    ),
}


@pytest.mark.parametrize("name", sorted(LOCAL_REJECTIONS))
def test_malformed_schedules_are_refused_naming_the_setting(name: str) -> None:
    schedule, more, words = LOCAL_REJECTIONS[name]
    with pytest.raises(ConfigError) as error:
        build_config(context_from_pairs([f"{KEY}={schedule}", *more]))
    message = str(error.value)
    assert "serving.speculation_schedule" in message
    assert words in message


@pytest.mark.parametrize(
    ("profile", "generation"),
    [("reproduce", Generation.NEURON_FORK), ("new-deployment", Generation.NEURON_PLUGIN)],
)
def test_synth_refuses_it_on_both_trn2_engines_with_the_reason(
    profile: str, generation: Generation
) -> None:
    context = context_from_pairs([f"serving.profile={profile}", f"{KEY}=[[1,2,3],[3,4,0]]"])
    build_config(context)  # outside the CDK app: the local arm serves it
    with pytest.raises(ConfigError) as error:
        build_config(context, for_eks=True)
    message = str(error.value)
    assert "serving.speculation_schedule is set, but generation" in message
    assert SCHEDULE_REFUSED[generation] in message


SPEEDUPS = "experiment.guardrails.live.schedule_predicted_speedups"


@pytest.mark.parametrize(
    "line",
    [
        f"-c '{KEY}=[[1,2,3],[3,4,1]]' -c '{SPEEDUPS}=[1.4,0.85]'",
        "-c 'serving.speculation_schedule=[[1, 2, 3], [3, 4, 1]]' "
        "-c 'guardrails.live.schedule_predicted_speedups=[1.4, 0.85]'",
    ],
)
def test_the_predicted_speedups_are_taken_in_the_c_value_form(line: str) -> None:
    config = config_from_arguments(config_parser("test", None).parse_args(shlex.split(line)))
    assert config.guardrails.live.schedule_predicted_speedups == [1.4, 0.85]


@pytest.mark.parametrize(
    ("pairs", "words"),
    [
        ([f"{SPEEDUPS}=[1.4]"], "serving.speculation_schedule is not"),
        ([f"{KEY}=[[1,2,3],[3,4,1]]", f"{SPEEDUPS}=[1.4]"], "1 values for the 2 ranges"),
        ([f"{KEY}=[[1,2,3],[3,4,1]]", f"{SPEEDUPS}=[1.4,0]"], "greater than 0"),
    ],
)
def test_predicted_speedups_that_do_not_fit_the_schedule_are_refused(
    pairs: list[str], words: str
) -> None:
    with pytest.raises(ConfigError) as error:
        build_config(context_from_pairs(pairs))
    assert "guardrails.live.schedule_predicted_speedups" in str(error.value)
    assert words in str(error.value)
