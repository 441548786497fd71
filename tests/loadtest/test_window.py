"""The window file (loadtest/window.py): one typed model for both Locust writers, the runner
and the summary."""

from __future__ import annotations

import json

import pytest

from loadtest.results import ArrivalStampCounts
from loadtest.summary import summarize
from loadtest.window import NOT_RUN, WindowMeta


def test_both_writers_key_sets_round_trip(tmp_path) -> None:
    single = WindowMeta(
        arm="baseline", stopped_by="schedule_done", window_start=1.0, window_end=3.5,
        window_start_wall=100.0, window_s=2.5, load_generator_cpu=0.2,
        metrics_before={"num_drafts": 1.0, "num_accepted_tokens_per_pos": {0: 1.0}},
    )  # fmt: skip
    master = WindowMeta(
        arm="speculative", stopped_by="worker_lost", window_start_wall=100.0,
        window_end_wall=104.0, workers=2, worker_cpu={"0": 0.4, "1": None},
        worker_stopped_by={"0": "schedule_done", "1": "worker_lost"}, lost_workers=[1],
        clock_skew_ms=0.5, clock_skew_uncertainty_ms=0.1,
    )  # fmt: skip
    for meta in (single, master):
        path = tmp_path / f"window_{meta.arm}.json"
        meta.write(path)
        again = WindowMeta.read(path, meta.arm)
        assert again.model_dump(exclude={"metrics_before"}) == meta.model_dump(
            exclude={"metrics_before"}
        )
    # JSON object keys are strings: the per-position counters come back keyed "0".
    read = WindowMeta.read(tmp_path / "window_baseline.json", "baseline")
    assert read.metrics_before == {"num_drafts": 1.0, "num_accepted_tokens_per_pos": {"0": 1.0}}


def test_a_missing_file_is_an_arm_that_never_ran_and_a_typo_is_an_error(tmp_path) -> None:
    assert WindowMeta.read(tmp_path / "absent.json", "baseline").stopped_by == NOT_RUN
    path = tmp_path / "window_baseline.json"
    path.write_text(json.dumps({"arm": "baseline", "stoped_by": "schedule_done"}))
    with pytest.raises(ValueError, match=r"window_baseline.json is not a window file.*stoped_by"):
        WindowMeta.read(path, "baseline")


def test_the_summary_reads_the_typed_window(fake_run_dir) -> None:
    WindowMeta(
        arm="speculative", stopped_by="time_limit", unfinished_requests=2,
        not_started_requests=5, arrival_stamps=ArrivalStampCounts(kernel=9, user=1),
    ).write(fake_run_dir / "window_speculative.json")  # fmt: skip
    arm = summarize(fake_run_dir).arms["speculative"]
    assert (arm.stopped_by, arm.unfinished_requests, arm.not_started_requests) == (
        "time_limit",
        2,
        5,
    )
    assert arm.arrival_stamps is not None and arm.arrival_stamps.kernel == 9
    (fake_run_dir / "window_speculative.json").unlink()
    assert summarize(fake_run_dir).arms["speculative"].stopped_by == NOT_RUN
