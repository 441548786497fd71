"""A k per batch-size range (vLLM's num_speculative_tokens_per_batch_size): rendered into the
local CPU profile's speculative config, refused by the generations that cannot serve it, and
every malformed schedule refused with the setting named (runtime/validate.py)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from experiment import build_config
from experiment.config import Arm
from runtime.render import render
from runtime.spec import Generation, ServingSpec
from runtime.validate import SCHEDULE_KEY, SCHEDULE_REFUSED, SpecError, check_speculation_schedule

SCHEDULE = ((1, 2, 3), (3, 4, 0))


def local_spec(schedule: tuple[tuple[int, int, int], ...] | None = SCHEDULE) -> ServingSpec:
    spec = build_config({}).local_serving_spec(Arm.SPECULATIVE, "/target", "/draft")
    return dataclasses.replace(spec, num_speculative_tokens=3, speculation_schedule=schedule)


def speculative_config(spec: ServingSpec) -> dict[str, object]:
    flag = render(spec).flags()["--speculative-config"]
    assert flag is not None
    return dict(json.loads(flag))


def test_the_local_profile_renders_the_schedule_as_vllms_key() -> None:
    config = speculative_config(local_spec())
    # vllm/config/speculative.py: a list of [first, last, k]; num_speculative_tokens stays the
    # largest k the drafter is started with.
    assert config[SCHEDULE_KEY] == [[1, 2, 3], [3, 4, 0]]
    assert config["num_speculative_tokens"] == 3
    assert SCHEDULE_KEY == "num_speculative_tokens_per_batch_size"


def test_without_a_schedule_the_key_is_absent() -> None:
    assert SCHEDULE_KEY not in speculative_config(local_spec(None))


def test_the_schedule_survives_the_spec_json() -> None:
    spec = local_spec()
    again = ServingSpec.from_json(spec.to_json())
    assert again == spec
    assert render(again) == render(spec)


def test_the_baseline_cannot_carry_a_schedule() -> None:
    baseline = build_config({}).local_serving_spec(Arm.BASELINE, "/target", "/draft")
    with pytest.raises(SpecError, match="speculation_schedule are set but draft_model is not"):
        render(dataclasses.replace(baseline, speculation_schedule=SCHEDULE))


@pytest.mark.parametrize("generation", sorted(SCHEDULE_REFUSED))
def test_generations_that_cannot_serve_it_refuse_it_with_the_reason(
    generation: Generation,
) -> None:
    profile = "new-deployment" if generation == Generation.NEURON_PLUGIN else "reproduce"
    spec = build_config({"experiment.serving.profile": profile}).serving_spec(Arm.SPECULATIVE)
    assert spec.generation == generation
    k = spec.num_speculative_tokens
    assert k is not None
    with pytest.raises(SpecError) as error:
        render(dataclasses.replace(spec, speculation_schedule=((1, spec.max_num_seqs, k),)))
    message = str(error.value)
    assert f"{spec.service_name}: speculation_schedule is set" in message
    assert SCHEDULE_REFUSED[generation] in message
    assert error.value.field == "speculation_schedule"


@pytest.mark.parametrize(
    ("schedule", "words"),
    [
        (((1, 2, 3), (2, 4, 0)), "overlaps or precedes"),
        (((3, 4, 0), (1, 2, 3)), "is not sorted by batch size"),
        (((1, 1, 3), (3, 4, 0)), "leaves batch size 2 without a k"),
        (((2, 4, 3),), "leaves batch size 1 without a k"),
        (((1, 2, 3), (4, 3, 0)), "ends before it starts"),
        (((1, 2, 4), (3, 4, 0)), "k=4, outside 0-3"),
        (((1, 2, -1), (3, 4, 3)), "k=-1, outside 0-3"),
        (((1, 2, 3), (3, 5, 0)), "reaches batch size 5, beyond serving.max_num_seqs 4"),
        (((1, 4, 0),), "k=0 in every range"),
        ((), "is empty"),
    ],
)
def test_malformed_schedules_are_refused_naming_the_setting(schedule, words: str) -> None:
    with pytest.raises(SpecError, match=words) as error:
        check_speculation_schedule(
            Generation.LOCAL_CPU, schedule, 3, 4, lambda field: f"serving.{field}"
        )
    assert str(error.value).startswith("serving.speculation_schedule")
    assert error.value.field == "speculation_schedule"


def test_a_schedule_of_sorted_contiguous_ranges_within_the_limits_is_accepted() -> None:
    for schedule in (((1, 4, 3),), ((1, 1, 3), (2, 2, 1), (3, 4, 0)), ((1, 2, 0), (3, 3, 2))):
        check_speculation_schedule(Generation.LOCAL_CPU, schedule, 3, 4)
