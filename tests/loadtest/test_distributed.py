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
    assert combined.arrival_stamps is None  # no worker reported any


def test_combined_window_sums_the_workers_arrival_stamps() -> None:
    windows = [
        WorkerWindow(index=0, arrival_stamps={"kernel": 40, "user": 2}),
        WorkerWindow(index=1, lost=True),  # lost before it reported
        WorkerWindow(index=2, arrival_stamps={"kernel": 37, "user": 0}),
    ]
    combined = combine_windows(windows, share_sizes={}, received={})
    assert combined.arrival_stamps == {"kernel": 77, "user": 2}


def test_window_uses_wall_clocks_across_workers() -> None:
    """Two workers' monotonic clocks share no origin (pods); their wall clocks do."""
    from loadtest.metrics import window_s
    from loadtest.records import RequestRecord

    def record(index: int, wall: float, mono: float) -> RequestRecord:
        return RequestRecord("baseline", index, "p", "c", wall_start=wall, start=mono, e2e_s=1.0)

    # worker 0 at monotonic ~100, worker 1 at ~5000; both started 0.5 s apart on the wall.
    records = [record(0, 1000.0, 100.0), record(1, 1000.5, 5000.0)]
    assert window_s(records) == pytest.approx(1.5)
    legacy = [record(0, 0.0, 100.0), record(1, 0.0, 100.5)]  # no wall clock: monotonic
    assert window_s(legacy) == pytest.approx(1.5)


def test_summary_reports_workers_and_warns_on_skew_and_lost_workers(fake_run_dir) -> None:
    import json

    from loadtest.summary import summarize

    window = {
        "arm": "speculative",
        "stopped_by": "worker_lost",
        "workers": 2,
        "worker_cpu": {"0": 0.3, "1": None},
        "lost_workers": [1],
        "clock_skew_ms": 12.5,
        "load_generator_cpu": 0.3,
    }
    (fake_run_dir / "window_speculative.json").write_text(json.dumps(window))
    summary = summarize(fake_run_dir)
    arm = summary.arms["speculative"]
    assert (arm.workers, arm.worker_cpu, arm.lost_workers) == (2, {"0": 0.3, "1": None}, [1])
    assert any("worker(s) [1] of 2 were lost" in w for w in summary.warnings)
    assert any("differ by 12.5 ms" in w for w in summary.warnings)  # default bound 5 ms
    assert arm.arrival_stamps is None  # a window file without stamp counts
    window["clock_skew_ms"] = 1.0
    window["arrival_stamps"] = {"kernel": 120, "user": 3}
    (fake_run_dir / "window_speculative.json").write_text(json.dumps(window))
    summary = summarize(fake_run_dir)
    assert not any("wall clocks" in w for w in summary.warnings)
    stamps = summary.arms["speculative"].arrival_stamps
    assert stamps is not None and (stamps.kernel, stamps.user) == (120, 3)
    assert not any("kernel receive timestamp" in w for w in summary.warnings)  # 2.4%


def test_summary_warns_when_reads_were_not_kernel_stamped(fake_run_dir) -> None:
    import json

    from loadtest.summary import summarize

    window = {"arm": "speculative", "stopped_by": "schedule_done", "workers": 1}
    window["arrival_stamps"] = {"kernel": 80, "user": 20}  # 20% unstamped
    (fake_run_dir / "window_speculative.json").write_text(json.dumps(window))
    warnings = summarize(fake_run_dir).warnings
    assert [w for w in warnings if "kernel receive timestamp" in w] == [
        "speculative: 20% of 100 reads had no usable kernel receive timestamp (the kernel "
        "attached none or an impossible one, which happens to part of the reads even over "
        "plain http on Linux; over TLS or off Linux every read): their arrival is when the "
        "client got to read them, so TTFT and ITL include the client's scheduling delay "
        "(keep streams per worker within the budget of bench/README.md)"
    ]


def test_config_refuses_more_workers_than_users() -> None:
    from experiment import ConfigError, build_config

    with pytest.raises(ConfigError, match=r"loadtest.workers \(5\) exceeds"):
        build_config({"experiment.loadtest.workers": "5", "experiment.loadtest.concurrency": "4"})
    assert build_config({"experiment.loadtest.workers": "4"}).loadtest.workers == 4


def test_cli_refuses_more_workers_than_concurrency(tmp_path, capsys) -> None:
    from loadtest.__main__ import main

    out = tmp_path / "never"
    args = ["run", "--baseline", "http://a", "--speculative", "http://b", "--out", str(out)]
    too_many = ["-c", "loadtest.workers=3", "-c", "loadtest.concurrency=2", "--no-cloudwatch"]
    assert main([*args, *too_many]) == 2
    assert "loadtest.workers (3) exceeds loadtest.concurrency" in capsys.readouterr().err
    # --local's scale (local.concurrency 1) with the cluster's workers: named, not a crash.
    assert main([*args, "--local", "-c", "loadtest.workers=2", "--no-cloudwatch"]) == 2
    assert "lower loadtest.workers" in capsys.readouterr().err
    assert not out.exists()


def test_the_master_waits_for_its_workers_as_long_as_the_config_says(tmp_path) -> None:
    from experiment import ConfigError, build_config
    from experiment.config import Arm
    from loadtest.launch import connect_wait_s, master_command
    from loadtest.plan import build_plan

    config = build_config({"experiment.loadtest.workers_connect_timeout_s": "42"})
    plan = build_plan(config, Arm.BASELINE, "http://127.0.0.1:1", tmp_path)

    def max_wait(command: list[str]) -> str | None:
        flag = "--expect-workers-max-wait"
        return command[command.index(flag) + 1] if flag in command else None

    command = master_command(
        plan, tmp_path / "plan.json", tmp_path, workers=2, master_port=5557,
        workers_connect_timeout_s=config.loadtest.workers_connect_timeout_s,
    )  # fmt: skip
    assert max_wait(command) == "42"
    default = master_command(plan, tmp_path / "plan.json", tmp_path, workers=2, master_port=1)
    assert max_wait(default) == str(build_config({}).loadtest.workers_connect_timeout_s)
    single = master_command(plan, tmp_path / "plan.json", tmp_path, workers=1, master_port=1)
    assert max_wait(single) is None  # one process waits for nobody
    assert (connect_wait_s(1, 42), connect_wait_s(2, 42)) == (0, 42)
    with pytest.raises(ConfigError, match="workers_connect_timeout_s"):
        build_config({"experiment.loadtest.workers_connect_timeout_s": "0"})
