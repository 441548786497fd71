"""Prompt suites and the shared schedule."""

from __future__ import annotations

import pytest

from experiment import build_config
from loadtest.prompts import build_schedule, load_prompt_file, load_prompts


def test_bundled_suites_cover_both_classes_and_structured_kinds() -> None:
    prompts = load_prompts(build_config({}).loadtest.prompts.files)
    classes = {p.prompt_class for p in prompts}
    assert classes == {"structured", "open_ended"}
    kinds = {p.kind for p in prompts if p.prompt_class == "structured"}
    assert {"repeat", "count", "json", "code", "list"} <= kinds


def test_schedule_is_identical_for_the_same_seed_and_differs_otherwise() -> None:
    prompts = load_prompts(build_config({}).loadtest.prompts.files)
    a = build_schedule(prompts, requests_per_prompt=3, seed=1, warmup_requests=2)
    b = build_schedule(prompts, requests_per_prompt=3, seed=1, warmup_requests=2)
    c = build_schedule(prompts, requests_per_prompt=3, seed=2, warmup_requests=2)
    assert a == b and a != c
    assert [i.warmup for i in a[:3]] == [True, True, False]
    assert len([i for i in a if not i.warmup]) == 3 * len(prompts)
    capped = build_schedule(prompts, requests_per_prompt=3, seed=1, max_requests=5)
    assert len(capped) == 5


def test_open_loop_arrivals_are_poisson_at_the_rate() -> None:
    prompts = load_prompts(build_config({}).loadtest.prompts.files)
    items = build_schedule(prompts, requests_per_prompt=200, seed=0, request_rate=4.0)
    arrivals = [i.arrival_s for i in items]
    assert arrivals[0] == 0.0 and arrivals == sorted(arrivals)
    assert len(items) / arrivals[-1] == pytest.approx(4.0, rel=0.1)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"id": "a", "class": "x"}\n', "missing"),
        ("not json\n", "not JSON"),
        ("\n", "holds no prompts"),
    ],
)
def test_bad_prompt_files_say_what_to_fix(tmp_path, content, message) -> None:
    path = tmp_path / "mine.jsonl"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        load_prompt_file(path)


def test_duplicate_ids_and_missing_files_are_rejected(tmp_path) -> None:
    path = tmp_path / "dup.jsonl"
    path.write_text('{"id": "a", "class": "x", "prompt": "p"}\n' * 2)
    with pytest.raises(ValueError, match="appears twice"):
        load_prompts([path])
    with pytest.raises(ValueError, match="does not exist"):
        load_prompts([tmp_path / "absent.jsonl"])


def test_time_bound_covers_the_whole_comparison() -> None:
    from loadtest.plan import arm_time_budget

    config = build_config({})
    total = config.loadtest.max_duration_s  # also the cluster Job's activeDeadlineSeconds
    per_arm = arm_time_budget(total)
    assert 2 * per_arm + 120 <= total
    assert arm_time_budget(10) == pytest.approx(4.5)
    assert arm_time_budget(0.5) == 1.0
