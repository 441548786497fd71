"""The split of the schedule across Locust workers and the master's combination of windows."""

from __future__ import annotations

import pytest

from loadtest.distributed import (
    ClockSample,
    WorkerWindow,
    clock_skew,
    combine_windows,
    warmup_share,
    worker_share,
)
from loadtest.prompts import Prompt, build_schedule

PROMPTS = [Prompt(id=f"p{i}", prompt_class="c", text=f"text {i}") for i in range(7)]


def _schedule(warmup: int = 3, rate: float | None = None):
    return build_schedule(
        PROMPTS, requests_per_prompt=5, seed=11, warmup_requests=warmup, request_rate=rate
    )


@pytest.mark.parametrize("workers", [1, 2, 3, 8])
def test_every_measured_item_is_executed_exactly_once(workers: int) -> None:
    schedule = _schedule()
    measured = [item.index for item in schedule if not item.warmup]
    shares = [worker_share(schedule, i, workers) for i in range(workers)]
    executed = sorted(item.index for share in shares for item in share)
    assert executed == sorted(measured)
    assert len(set(executed)) == len(executed)
    for share in shares:  # each worker keeps the schedule's order
        positions = [measured.index(item.index) for item in share]
        assert positions == sorted(positions)
    # balanced to within one item
    assert max(map(len, shares)) - min(map(len, shares)) <= 1


def test_split_is_the_same_for_both_arms_and_fixed_by_index() -> None:
    first, second = _schedule(rate=4.0), _schedule(rate=4.0)
    for index in range(3):
        a = worker_share(first, index, 3)
        b = worker_share(second, index, 3)
        assert [(i.index, i.prompt.id, i.arrival_s) for i in a] == [
            (i.index, i.prompt.id, i.arrival_s) for i in b
        ]
        assert all(item.index % 3 == index for item in a)


def test_warmup_runs_once_on_worker_zero() -> None:
    schedule = _schedule(warmup=3)
    assert [i.warmup for i in warmup_share(schedule, 0)] == [True] * 3
    assert warmup_share(schedule, 1) == []
    assert all(not i.warmup for i in worker_share(schedule, 0, 2))


def test_bad_worker_index_is_refused() -> None:
    with pytest.raises(ValueError, match=r"outside 0\.\.1"):
        worker_share(_schedule(), 2, 2)


def test_clock_offset_and_skew() -> None:
    # worker 0 runs 2 ms ahead, worker 1 3 ms behind; each probe takes 1 ms round trip.
    samples = {
        0: ClockSample(sent_wall=100.0, worker_wall=100.0025, received_wall=100.001),
        1: ClockSample(sent_wall=100.0, worker_wall=99.9975, received_wall=100.001),
    }
    skew = clock_skew(samples)
    assert skew is not None
    assert skew.offsets_ms[0] == pytest.approx(2.0)
    assert skew.offsets_ms[1] == pytest.approx(-3.0)
    assert skew.skew_ms == pytest.approx(5.0)
    assert skew.uncertainty_ms == pytest.approx(0.5)
    assert clock_skew({}) is None


def test_combined_window_counts_a_lost_workers_missing_requests() -> None:
    windows = [
        WorkerWindow(index=0, window_start_wall=10.0, window_end_wall=20.0, cpu_share=0.4),
        WorkerWindow(index=1, lost=True),
        WorkerWindow(
            index=2,
            window_start_wall=10.1,
            window_end_wall=21.0,
            cpu_share=0.7,
            unfinished_requests=1,
            not_started_requests=2,
        ),
    ]
    combined = combine_windows(windows, share_sizes={0: 5, 1: 5, 2: 5}, received={1: 3})
    assert combined.window_start_wall == 10.0
    assert combined.window_end_wall == 21.0
    assert combined.load_generator_cpu == 0.7
    assert combined.worker_cpu == {0: 0.4, 1: None, 2: 0.7}
    assert combined.lost_workers == [1]
    assert combined.not_started_requests == 2 + 2  # worker 2's own + worker 1's unreceived
    assert combined.unfinished_requests == 1
