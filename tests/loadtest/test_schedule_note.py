"""The verdict note names the k the run served: a schedule by batch size when one was set."""

from __future__ import annotations

from experiment import build_config
from loadtest.analysis import analysis_info, served_schedule


def test_a_served_schedule_is_recorded_and_one_k_is_not() -> None:
    assert served_schedule(build_config({}), local=True) is None
    config = build_config({
        "experiment.local.num_speculative_tokens": "3",
        "experiment.serving.speculation_schedule": "[[1, 1, 3], [2, 4, 0]]",
    })  # fmt: skip
    info = analysis_info(config, local=True)
    assert info.speculation_schedule == [(1, 1, 3), (2, 4, 0)]
    assert info.num_speculative_tokens == 3
