"""The headline keeps TTFT/TPOT speedups out when an arm's chunks arrived in bursts."""

from __future__ import annotations

from pathlib import Path

from loadtest.records import read_records, write_records
from loadtest.render.headline import headline, headline_text
from loadtest.summary import summarize


def _burst_pairs(run_dir: Path, arm: str) -> None:
    """Every second chunk of ``arm`` arrives together with the one before (gap 0)."""
    path = run_dir / f"records_{arm}.jsonl"
    records = read_records(path)
    for record in records:
        record.chunk_times = [record.chunk_times[i - i % 2] for i in range(len(record.chunk_times))]
    write_records(path, records)


def test_smooth_arrivals_keep_every_speedup(fake_run_dir: Path) -> None:
    numbers = headline(summarize(fake_run_dir))
    assert numbers.speedup_note is None
    assert numbers.speedup_ttft_mean is not None and numbers.speedup_tpot_mean is not None
    assert all(block.tpot_mean is not None for block in numbers.speedup_by_class.values())
    assert all(block.ttft_mean is not None for block in numbers.speedup_by_class.values())


def test_bursts_on_one_side_keep_ttft_and_tpot_out_and_name_that_side(
    fake_run_dir: Path,
) -> None:
    _burst_pairs(fake_run_dir, "baseline")
    summary = summarize(fake_run_dir)
    assert any("baseline" in w and "bursts" in w for w in summary.warnings)

    numbers = headline(summary)

    assert numbers.speedup_ttft_mean is None and numbers.speedup_tpot_mean is None
    assert numbers.speedup_by_class
    assert all(block.tpot_mean is None for block in numbers.speedup_by_class.values())
    assert all(block.ttft_mean is None for block in numbers.speedup_by_class.values())
    assert all(block.e2e_mean is not None for block in numbers.speedup_by_class.values())
    assert numbers.speedup_e2e_mean is not None  # E2E ends with the stream: still stated
    note = numbers.speedup_note or ""
    assert "baseline" in note and "speculative" not in note
    assert note in headline_text(numbers)
