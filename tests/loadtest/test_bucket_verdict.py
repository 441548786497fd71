"""The verdict on two axes: per prompt class and input-length bucket, with the same paired
statistics and cost as per class, and the flip of a class's verdict across buckets."""

from __future__ import annotations

import random

import pytest

from experiment import build_config
from experiment.config import StatisticsConfig
from loadtest.cost import cost_summary, price_basis
from loadtest.records import RequestRecord
from loadtest.render.decision import bucket_flips_text, bucket_verdict_rows
from loadtest.results import ClassVerdict, Decision, Interval, RunSummary
from loadtest.stats import paired_statistics
from loadtest.verdict import bucket_verdicts, verdict_flips

SETTINGS = StatisticsConfig(resamples=400)
EDGES = [128]
INPUT_TOKENS = {"0-127": 60, "128+": 300}  # a recorded input length in each bucket of EDGES
PAIRS = 24


def _record(arm: str, index: int, cls: str, bucket: str, e2e: float) -> RequestRecord:
    chunks = 8
    return RequestRecord(
        arm=arm,
        index=index,
        prompt_id=f"r{index}",
        prompt_class=cls,
        input_tokens=INPUT_TOKENS[bucket],
        max_tokens=chunks,
        ttft_s=e2e / chunks,
        e2e_s=e2e,
        chunk_times=[e2e * (i + 1) / chunks for i in range(chunks)],
        chunk_tokens=[1] * chunks,
        chunk_texts=["w"] * chunks,
        output_tokens=chunks,
    )


def _records() -> dict[str, list[RequestRecord]]:
    """structured: SD twice as fast on short inputs, twice as slow on long ones; open_ended:
    the same either way (noise only)."""
    rng = random.Random(1)
    cells = {
        ("structured", "0-127"): 0.5,
        ("structured", "128+"): 2.0,
        ("open_ended", "0-127"): 1.0,
        ("open_ended", "128+"): 1.0,
    }
    records: dict[str, list[RequestRecord]] = {"baseline": [], "speculative": []}
    index = 0
    for (cls, bucket), factor in cells.items():
        for _ in range(PAIRS):
            base = rng.uniform(0.5, 1.5)
            noise = rng.uniform(0.97, 1.03) if factor == 1.0 else rng.uniform(0.95, 1.05)
            records["baseline"].append(_record("baseline", index, cls, bucket, base))
            sd = base * factor * noise
            records["speculative"].append(_record("speculative", index, cls, bucket, sd))
            index += 1
    return records


def test_each_class_and_bucket_gets_its_own_statistics_cost_and_verdict():
    records = _records()
    statistics = paired_statistics(
        records["baseline"],
        records["speculative"],
        num_speculative_tokens=4,
        settings=SETTINGS,
        length_buckets=EDGES,
    )
    assert {c: sorted(b) for c, b in statistics.by_bucket.items()} == {
        "open_ended": ["0-127", "128+"],
        "structured": ["0-127", "128+"],
    }
    assert all(s.pairs == PAIRS for b in statistics.by_bucket.values() for s in b.values())
    assert statistics.by_class["structured"].pairs == 2 * PAIRS
    cells = {
        (c, b): s.busy_rate_ratio for c, bs in statistics.by_bucket.items() for b, s in bs.items()
    }
    classes = {name: s.busy_rate_ratio for name, s in statistics.by_class.items()}
    windows = {arm: sum(r.e2e_s or 0 for r in rs) for arm, rs in records.items()}
    cost = cost_summary(
        price_basis(build_config({}), local=True),
        records,
        windows,
        {None: statistics.overall.busy_rate_ratio, **classes},
        bucket_ratios=cells,
        length_buckets=EDGES,
    )
    short = cost.by_bucket["structured"]["0-127"].ratio
    long = cost.by_bucket["structured"]["128+"].ratio
    assert short.high is not None and short.high < 1 and long.low is not None and long.low > 1
    rows = bucket_verdicts(statistics, cost, {("open_ended", "128+"): 1}, SETTINGS)
    decided = {(r.prompt_class, r.input_bucket): r.decision for r in rows}
    assert decided[("structured", "0-127")] is Decision.USE_SD
    assert decided[("structured", "128+")] is Decision.DONT
    assert decided[("open_ended", "128+")] is Decision.DONT  # its lossless mismatch
    assert [r.input_bucket for r in rows[:2]] == ["0-127", "128+"]  # length order
    # the same cost either way, within +-3% noise: inside the default equivalence margin
    assert decided[("open_ended", "0-127")] is Decision.NO_GAIN
    # open_ended: "no gain" beside "don't" is no flip (both keep the baseline); structured
    # flips.
    assert verdict_flips(rows) == [
        "structured: the verdict flips with input length (0-127: use SD, 128+: don't)"
    ]
    # The report's table (one row per cell) and its flip line.
    summary = RunSummary.model_construct(
        verdict_by_bucket=rows, bucket_flips=verdict_flips(rows), statistics=statistics
    )
    header, table = bucket_verdict_rows(summary)
    assert header[:3] == ["prompt class", "input tokens", "verdict"] and len(table) == 4
    assert table[0][:3] == ["open_ended", "0-127", "no gain"]
    note = bucket_flips_text(summary)
    # open_ended 128+ (its lossless mismatch) is outside the Holm family of the other three
    assert note.startswith("Multiple comparisons: Holm's step-down over 3 cells, family-wise 95%")
    assert "1 cell outside the family" in note
    assert note.splitlines()[-1].startswith("Flips: structured")
    assert "No class" in bucket_flips_text(RunSummary.model_construct(bucket_flips=[]))
    # Can't tell does not count as a flip.
    calm = [r for r in rows if r.prompt_class == "structured"][:1]
    assert verdict_flips(calm) == []


def test_the_buckets_follow_the_edges_given_when_the_statistics_are_computed():
    records = _records()
    one = paired_statistics(
        records["baseline"],
        records["speculative"],
        num_speculative_tokens=4,
        settings=SETTINGS,
        length_buckets=[500],  # both recorded lengths (60, 300) below the one edge
    )
    assert {c: sorted(b) for c, b in one.by_bucket.items()} == {
        "open_ended": ["0-499"],
        "structured": ["0-499"],
    }
    assert one.by_bucket["structured"]["0-499"].pairs == 2 * PAIRS
    none = paired_statistics(
        records["baseline"], records["speculative"], num_speculative_tokens=4, settings=SETTINGS
    )
    assert none.by_bucket == {}  # no edges: no trace buckets


def _cell(bucket: str, decision: Decision) -> ClassVerdict:
    ratio = Interval(estimate=1.0, low=0.9, high=1.1, n=20, confidence=0.95)
    return ClassVerdict(
        prompt_class="open_ended",
        decision=decision,
        reason="",
        pairs=20,
        cost_ratio=ratio,
        input_bucket=bucket,
    )


@pytest.mark.parametrize(
    ("short", "long", "flips"),
    [
        (Decision.USE_SD, Decision.NO_GAIN, True),  # SD for one bucket, the baseline for the other
        (Decision.USE_SD, Decision.DONT, True),
        (Decision.DONT, Decision.NO_GAIN, False),  # both keep the baseline
        (Decision.USE_SD, Decision.CANT_TELL, False),  # can't tell routes nothing by itself
    ],
)
def test_a_flip_is_two_buckets_routed_to_different_arms(short, long, flips) -> None:
    found = verdict_flips([_cell("0-127", short), _cell("128+", long)])
    assert bool(found) is flips
    if flips:
        assert found == [
            f"open_ended: the verdict flips with input length (0-127: {short.value}, "
            f"128+: {long.value})"
        ]


def test_a_trace_points_no_setting_for_more_pairs() -> None:
    """A replayed trace's requests are the trace's: "can't tell" must not advise
    requests_per_prompt, which the trace ignores (the local trace replay's table did)."""
    from experiment import build_config
    from loadtest.analysis import analysis_info

    plain = build_config({})
    assert analysis_info(plain, local=True).pairs_setting == "local.requests_per_prompt"
    assert analysis_info(plain).pairs_setting == "loadtest.requests_per_prompt"
    local_trace = build_config({"experiment.local.traffic": "true"})
    assert analysis_info(local_trace, local=True).pairs_setting is None
    cluster_trace = build_config({"experiment.loadtest.traffic.file": "traffic.jsonl"})
    info = analysis_info(cluster_trace)
    assert info.pairs_setting is None and info.requests_per_prompt is None
