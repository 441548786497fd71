"""Alternating arms without processes: the order of blocks, the slices of the schedule, a
block's plan, the arm's files combined from its blocks, the acceptance counters summed over
the blocks, the window without the other arm's blocks, and the report's lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiment import build_config
from experiment.config import Arm, ArmsMode, LoadTestConfig
from guardrails import vllm_metrics
from loadtest.alternating import (
    _Block,
    block_order,
    block_plan,
    block_slices,
    merge_arm,
    sum_counters,
)
from loadtest.arms import arms_timing
from loadtest.metrics import arm_metrics
from loadtest.plan import build_plan
from loadtest.records import RequestRecord, read_records
from loadtest.render.tables import arms_lines
from loadtest.results import ArmsTiming
from loadtest.server_latency import Histogram, ServerScrape, arm_server_latency
from loadtest.summary import scrape_windows
from loadtest.window import BlockWindow, WindowMeta


def test_two_arms_take_turns_in_abba_order() -> None:
    assert block_order(2, 3) == [(0, 0), (1, 0), (1, 1), (0, 1), (0, 2), (1, 2)]
    # Each arm's mean turn is the same over every pair of rounds: a linear drift cancels.
    order = block_order(2, 4)
    turns = {arm: [t for t, (a, _) in enumerate(order) if a == arm] for arm in (0, 1)}
    assert sum(turns[0]) == sum(turns[1])


def test_a_third_arm_fits_the_mirrored_rounds() -> None:
    letters = "".join("ABC"[arm] for arm, _ in block_order(3, 4))
    assert letters == "ABCCBAABCCBA"
    blocks = block_order(3, 4)
    for arm in range(3):  # every block of every arm once, in its own order
        assert [b for a, b in blocks if a == arm] == [0, 1, 2, 3]
    assert block_order(2, 0) == []
    with pytest.raises(ValueError, match="at least one arm"):
        block_order(0, 2)


def test_slices_cover_the_measured_schedule_once() -> None:
    assert block_slices(10, 4) == [range(0, 4), range(4, 8), range(8, 10)]
    assert block_slices(8, 8) == [range(0, 8)]
    assert block_slices(0, 8) == []
    positions = [p for s in block_slices(37, 5) for p in s]
    assert positions == list(range(37))
    with pytest.raises(ValueError, match="at least 1"):
        block_slices(8, 0)


def test_a_block_plan_is_its_slice_with_the_warmup_in_the_first_block_only(tmp_path) -> None:
    config = build_config({"loadtest.request_rate": "2", "loadtest.warmup_requests": "2"})
    plan = build_plan(config, Arm.BASELINE, "http://a", tmp_path)
    first = block_plan(plan, 0, range(0, 4), tmp_path, 100.0)
    second = block_plan(plan, 1, range(4, 8), tmp_path, 42.0)
    assert sum(item.warmup for item in first.schedule) == 2
    assert not any(item.warmup for item in second.schedule)
    assert [i.index for i in second.measured] == [i.index for i in plan.measured[4:8]]
    # Open loop: arrivals from the block's own start, their spacing kept.
    arrivals = [i.arrival_s for i in plan.measured[4:8]]
    assert [i.arrival_s for i in second.measured] == pytest.approx(
        [a - arrivals[0] for a in arrivals]  # type: ignore[operator]
    )
    assert (
        second.shape.max_duration_s == 42.0 and second.shape.concurrency == plan.shape.concurrency
    )
    assert Path(second.records_path) == tmp_path / "blocks" / "records_baseline_1.jsonl"
    assert Path(second.meta_path) == tmp_path / "blocks" / "window_baseline_1.json"
    assert plan.records_path == str(tmp_path / "records_baseline.jsonl")  # untouched


def test_alternating_arms_reuse_one_master_port() -> None:
    config = LoadTestConfig(arms_mode=ArmsMode.ALTERNATING, master_port=5557)
    assert [config.master_port_of(arm) for arm in Arm] == [5557, 5557]


def _record(arm: str, index: int, start: float, e2e: float, warmup: bool = False) -> RequestRecord:
    return RequestRecord(
        arm=arm, index=index, prompt_id=f"p{index}", prompt_class="c", warmup=warmup,
        wall_start=start, start=start, ttft_s=0.01, e2e_s=e2e, output_tokens=4, max_tokens=4,
        chunk_times=[0.01, e2e], chunk_tokens=[2, 2], chunk_texts=["a", "b"], http_status=200,
        finish_reason="length",
    )  # fmt: skip


def _tpot_scrape(count: int, total: float) -> ServerScrape:
    edges = [0.01, 0.025]
    tpot = Histogram(edges=edges, cumulative=[0.0, float(count)], sum=total, count=count)
    return ServerScrape(histograms={vllm_metrics.TIME_PER_OUTPUT_TOKEN: tpot})


def _write_block(block: _Block, records: list[RequestRecord], meta: WindowMeta) -> None:
    Path(block.plan.records_path).parent.mkdir(parents=True, exist_ok=True)
    Path(block.plan.records_path).write_text("".join(r.to_json() + "\n" for r in records))
    meta.write(block.plan.meta_path)


def test_the_arm_files_combine_its_blocks(tmp_path) -> None:
    config = build_config({"loadtest.warmup_requests": "1"})
    plan = build_plan(config, Arm.SPECULATIVE, "http://a", tmp_path, max_requests=6)
    slices = block_slices(6, 2)
    blocks = [_Block(turn, b, block_plan(plan, b, slices[b], tmp_path, 60)) for turn, b in
              ((1, 0), (2, 1))]  # fmt: skip
    counters = [
        ({"num_drafts": 10.0, "num_draft_tokens": 40.0, "num_accepted_tokens": 20.0},
         {"num_drafts": 14.0, "num_draft_tokens": 56.0, "num_accepted_tokens": 26.0}),
        # Between the blocks another arm's requests moved the counters by 100 drafts.
        ({"num_drafts": 114.0, "num_draft_tokens": 456.0, "num_accepted_tokens": 226.0},
         {"num_drafts": 120.0, "num_draft_tokens": 480.0, "num_accepted_tokens": 235.0}),
    ]  # fmt: skip
    # TPOT histograms (one 10 ms bucket): 2 requests of 20 ms in each block, and 50 requests
    # of another arm through the same server between the blocks.
    histograms = [
        (_tpot_scrape(0, 0.0), _tpot_scrape(2, 0.04)),
        (_tpot_scrape(52, 1.04), _tpot_scrape(54, 1.08)),
    ]
    for n, block in enumerate(blocks):
        indices = [item.index for item in block.plan.measured]
        records = [_record("speculative", -1, 99.0, 0.5, warmup=True)] if n == 0 else []
        records += [_record("speculative", i, 100.0 + 10 * n + k, 0.5) for k, i in
                    enumerate(indices)]  # fmt: skip
        meta = WindowMeta(
            arm="speculative", stopped_by="schedule_done", window_s=2.0 + n,
            load_generator_cpu=0.1 if n == 0 else 0.4, launched_wall=90.0 + 10 * n,
            elapsed_s=5.0, first_request_wall=100.0 + 10 * n,
            metrics_before=counters[n][0], metrics_after=counters[n][1],
            histograms_before=histograms[n][0], histograms_after=histograms[n][1],
        )  # fmt: skip
        _write_block(block, records, meta)
    merged = merge_arm(plan, blocks, slices, None)
    assert merged == WindowMeta.read(plan.meta_path, plan.arm)
    records = read_records(Path(plan.records_path))
    assert [r.index for r in records if not r.warmup] == [i.index for i in plan.measured[:4]]
    assert sum(r.warmup for r in records) == 1
    assert merged.stopped_by == "schedule_done"  # its last block may still run
    assert merged.window_s == 5.0 and merged.elapsed_s == 10.0
    assert merged.load_generator_cpu == pytest.approx((0.1 * 2 + 0.4 * 3) / 5)
    assert merged.not_started_requests == 2 and merged.first_request_wall == 100.0
    assert [(b.block, b.turn, b.first_index) for b in merged.blocks] == [
        (0, 1, plan.measured[0].index), (1, 2, plan.measured[2].index)
    ]  # fmt: skip
    # The acceptance counts the arm's own blocks: 4 + 6 drafts, not the 100 in between.
    after = merged.metrics_after
    assert after is not None and merged.metrics_before == counters[0][0]
    assert after["num_drafts"] - counters[0][0]["num_drafts"] == 10.0
    assert after["num_accepted_tokens"] - counters[0][0]["num_accepted_tokens"] == 15.0
    # The latency histograms stay per block, so the summary reads each block's own window
    # (4 requests of 20 ms, not the 50 in between), and each block's classes.
    assert [b.histograms_after for b in merged.blocks] == [h[1] for h in histograms]
    server, _ = arm_server_latency(scrape_windows(merged), records)
    assert server.overall is not None and server.overall.tpot_ms is not None
    assert server.overall.tpot_ms.count == 4 and server.overall.windows == 2
    assert server.overall.tpot_ms.mean == pytest.approx(20.0)
    # Its remaining block will not run: why says the cause.
    assert merge_arm(plan, blocks, slices, "cancelled").stopped_by == "cancelled"
    assert merge_arm(plan, [], slices, "cancelled").stopped_by == "not_run"


def test_counters_sum_per_position_and_a_missing_scrape_makes_them_unavailable() -> None:
    first = {"num_drafts": 1.0, "num_accepted_tokens_per_pos": {"0": 1.0, "1": 0.0}}
    windows = [
        (first, {"num_drafts": 3.0, "num_accepted_tokens_per_pos": {"0": 2.0, "1": 1.0}}),
        ({"num_drafts": 50.0, "num_accepted_tokens_per_pos": {0: 40.0, 1: 30.0}},
         {"num_drafts": 51.0, "num_accepted_tokens_per_pos": {0: 41.0, 1: 30.0}}),
    ]  # fmt: skip
    before, after = sum_counters(windows)
    assert before == first
    assert after == {"num_drafts": 4.0, "num_accepted_tokens_per_pos": {0: 3.0, 1: 1.0}}
    assert sum_counters([(first, None), windows[1]]) == (first, None)
    assert sum_counters([]) == (None, None)
    assert sum_counters([({}, {}), ({}, {})]) == ({}, {})  # no counters: the estimate


def test_the_window_leaves_out_the_time_between_the_arms_blocks() -> None:
    slo = {"ttft_ms": 1e9, "tpot_ms": 1e9, "e2e_ms": 1e9}
    records = [_record("baseline", i, 100.0 + i, 1.0) for i in range(2)]
    records += [_record("baseline", i, 200.0 + i, 1.0) for i in range(2, 4)]
    assert arm_metrics(records, slo).window_s == pytest.approx(104.0)
    assert arm_metrics(records, slo, [(0, 1), (2, 3)]).window_s == pytest.approx(4.0)


def _blocks(arm: str, turns: list[int]) -> WindowMeta:
    blocks = [
        BlockWindow(block=b, turn=t, first_index=b, last_index=b, stopped_by="schedule_done",
                    launched_wall=100.0 + 10 * t, elapsed_s=8.0, window_s=5.0)
        for b, t in enumerate(turns)
    ]  # fmt: skip
    return WindowMeta(arm=arm, launched_wall=100.0 + 10 * turns[0], elapsed_s=16.0, blocks=blocks)


def test_timing_lists_the_blocks_in_order_and_their_start_up_cost() -> None:
    metas = {"baseline": _blocks("baseline", [0, 3]), "speculative": _blocks("speculative", [1, 2])}
    timing = arms_timing("alternating", metas, 8)
    assert timing is not None
    assert timing.block_order == ["baseline", "speculative", "speculative", "baseline"]
    assert timing.block_requests == 8 and timing.block_overhead_s == pytest.approx(4 * 3.0)
    # From the first launch to the last block's end, not the first block's launch + 16 s.
    assert timing.run_elapsed_s == pytest.approx(38.0)
    plain = arms_timing("sequential", {"baseline": WindowMeta(arm="baseline", launched_wall=1.0,
                                                              elapsed_s=2.0)}, 8)  # fmt: skip
    assert plain is not None and plain.block_order == [] and plain.block_requests is None


def test_the_report_states_the_blocks_and_the_pairing(fake_run_dir) -> None:
    from loadtest.summary import summarize

    summary = summarize(fake_run_dir)
    summary.run.arms_mode = "alternating"
    summary.arms_timing = ArmsTiming(
        mode="alternating", first_request_wall={}, start_spread_s=None, arms_elapsed_s={},
        run_elapsed_s=120.0, wall_saved_s=0.0,
        block_order=["baseline", "speculative", "speculative", "baseline"], block_requests=8,
        block_overhead_s=14.0,
    )  # fmt: skip
    text = " ".join(arms_lines(summary))
    assert "Arms: alternating, the arms taking turns in blocks of 8 requests in ABBA order" in text
    assert "neighbouring blocks" in text
    labels = [summary.arms[arm].label for arm in ("baseline", "speculative")]
    assert f"blocks {labels[0]} {labels[1]} {labels[1]} {labels[0]};" in text
    assert "the run took 120 s, 14 s of it starting and stopping" in text
    assert json.loads(summary.model_dump_json())["arms_timing"]["block_overhead_s"] == 14.0


def test_alternating_arms_with_worker_pods_are_refused_with_the_config() -> None:
    # A worker pod serves one master per arm for the whole run, not one master per block:
    # refused when the config is built, before anything is deployed or run.
    with pytest.raises(ValueError, match=r"alternating .*set loadtest\.workers=1"):
        build_config({"loadtest.workers": "2", "loadtest.arms_mode": "alternating"})
